"""The tuner against Optuna (TPE, GP) and random search on simulated landscapes, equal budgets.

Each landscape (``workbench.tuning.landscapes``: compute-bound, data-bound, memory-limited with an
OOM edge, cpu-contended, flat; 2-30% noise per burst) is searched by every method with the
same budget of bursts, from the same start (the default knobs). A method's *pick* is the
config it would hand the user: the tuner's ``best`` (highest median after confirmation),
Optuna's ``best_trial`` (highest single reading: what a study reports), random search's
highest reading. Each pick is judged by the landscape's noiseless truth:

- ``within_5pct_share``: share of landscapes where the pick's true throughput is within 5%
  of the true best fitting config (over the grid and every config any method measured);
- ``median_regret``: median of ``1 - true(pick) / true(best)`` (0 is the best; a pick that
  does not fit the memory limit counts as regret 1);
- ``bursts``: median bursts used (the tuner may stop early when it converges);
- ``within_5pct_of_grid_share``: the same share against the best *listed* config only. The
  tuner may measure batch sizes between the listed ones (it bisects to the memory edge), which
  raises the bar for every method on memory-limited landscapes; this one does not.

Optuna's samplers run with their defaults (as a user would; both start with 10 random
trials), on the index of each ordered knob's value (so GP sees the order); a config over the
memory limit or out of memory reads 0. Readings are deterministic, so a run is repeatable.

``workbench_short_screen`` (not in the default methods) is the successive-halving question
measured: the same tuner whose search moves run half-length bursts (noise x sqrt(2), half a
burst of the budget each: generous, since a real short burst keeps its whole warm-up) while
the start and the confirmation run full ones.

Usage: python benchmarks/tuner_landscapes.py [--landscapes N] [--budget B] [--methods ...]
       [--json]   (one JSON document on stdout: an object per method)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from workbench.core.knobs import Knobs
from workbench.tuning import tuner
from workbench.tuning.landscapes import KINDS, Bursts, Landscape, draw, grid
from workbench.tuning.search import Search, coordinate, guided
from workbench.tuning.tuner import tune_on

METHODS = ("workbench", "optuna_tpe", "optuna_gp", "random")
Pick = tuple[Knobs | None, int, list[Knobs]]  # the pick, bursts used, configs measured


def run_workbench(ls: Landscape, budget: int) -> Pick:
    bursts = Bursts(ls)
    t = tune_on(bursts, ls.space(), budget=budget, limit_mib=ls.limit_mib)
    return t.best, len(t.bursts), bursts.calls


class _ShortBursts(Bursts):
    """Bursts whose readings, while ``short`` is set, carry the noise of a half-length window
    (sqrt(2) times the landscape's: the SD of a mean falls with the root of its length)."""

    short = False

    def __call__(self, knobs: Knobs) -> Any:
        r = super().__call__(knobs)
        if self.short and r.samples_per_s:
            key = f"short|{self.landscape.seed}|{sorted(knobs.changes().items())}|{len(self.calls)}"
            seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
            r.samples_per_s *= math.exp(random.Random(seed).gauss(0.0, self.landscape.noise))
        return r


class _CostSearch(Search):
    """A Search whose budget counts a short burst as half a burst."""

    def __init__(self, bursts: _ShortBursts, **kw: Any) -> None:
        super().__init__(bursts, **kw)
        self.short_bursts, self.cost = bursts, 0.0

    @property
    def halted(self) -> bool:
        return self.stopped is not None or self.cost >= self.budget - self.reserve()

    def measure(self, knobs: Knobs, stage: str, *, again: bool = False) -> Any:
        if knobs in self.runs and not again:
            return self.measured(knobs)
        if self.halted:
            return None
        self.cost += 0.5 if self.short_bursts.short else 1.0
        self.bursts.append(result := self._run(knobs))
        self.runs.setdefault(knobs, []).append(result)
        return self.measured(knobs)


def run_short_screen(ls: Landscape, budget: int) -> Pick:
    """The tuner's moves on half-length bursts, its start and confirmation on full ones."""
    bursts, start = _ShortBursts(ls), Knobs()
    search = _CostSearch(bursts, space=ls.space(), budget=budget, limit_mib=ls.limit_mib,
                         device=torch.device("cpu"), workload=None,
                         cancel=threading.Event())  # fmt: skip
    search.reserve = lambda: tuner.confirmation_reserve(search, start)
    search.measure(start, "start")
    bursts.short = True
    best = coordinate(search, guided(search, start))
    bursts.short, search.reserve = False, (lambda: 0)
    tuner.confirm(search, start, best)
    ranked = search.ranked()
    return (ranked[0].knobs if ranked else None), len(search.bursts), bursts.calls


def run_random(ls: Landscape, budget: int) -> Pick:
    """Distinct configs drawn uniformly (the start first, as every method starts there)."""
    configs = [k for k in grid(ls.space()) if k != Knobs()]
    random.Random(ls.seed).shuffle(configs)
    bursts = Bursts(ls)
    chosen = [Knobs(), *configs[: budget - 1]]
    readings = [(_value(ls, bursts(k)), k) for k in chosen]
    return max(readings, key=lambda r: r[0])[1], len(chosen), bursts.calls


def run_optuna(sampler_name: str) -> Callable[[Landscape, int], Pick]:
    def run(ls: Landscape, budget: int) -> Pick:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        sampler = (optuna.samplers.TPESampler(seed=ls.seed) if sampler_name == "tpe"
                   else optuna.samplers.GPSampler(seed=ls.seed))  # fmt: skip
        study = optuna.create_study(direction="maximize", sampler=sampler)
        space, bursts = ls.space(), Bursts(ls)
        study.enqueue_trial({f"{n}_i": _index(space[n], getattr(Knobs(), n)) for n in space})
        study.optimize(lambda trial: _value(ls, bursts(_knobs(trial, space))), n_trials=budget)
        best = _knobs_from(study.best_trial.params, space)
        return (best if study.best_value > 0 else None), budget, bursts.calls

    return run


def _index(values: list[Any], value: Any) -> int:
    return values.index(value) if value in values else 0


def _knobs(trial: Any, space: dict[str, list[Any]]) -> Knobs:
    params = {f"{n}_i": trial.suggest_int(f"{n}_i", 0, len(v) - 1) for n, v in space.items()}
    return _knobs_from(params, space)


def _knobs_from(params: dict[str, int], space: dict[str, list[Any]]) -> Knobs:
    values = {n: space[n][params[f"{n}_i"]] for n in space}
    if values["num_workers"] == 0:
        values["prefetch_factor"] = None  # means nothing without workers
    return Knobs(**values)


def _value(ls: Landscape, r: Any) -> float:
    """What a black-box search sees: the reading, 0 for OOM or over the memory limit."""
    if not r.ok or (r.peak_mem_mib or 0) > ls.limit_mib:
        return 0.0
    return r.samples_per_s or 0.0


RUNNERS: dict[str, Callable[[Landscape, int], Pick]] = {
    "workbench": run_workbench,
    "optuna_tpe": run_optuna("tpe"),
    "optuna_gp": run_optuna("gp"),
    "random": run_random,
    "workbench_short_screen": run_short_screen,
}


def evaluate(
    n_landscapes: int, budget: int, methods: tuple[str, ...] = METHODS, first_seed: int = 0
) -> dict[str, Any]:
    """Every method on landscapes ``first_seed ..``; one summary per method, and by kind."""
    picks: dict[str, list[tuple[Landscape, Pick]]] = {m: [] for m in methods}
    seconds = dict.fromkeys(methods, 0.0)
    for seed in range(first_seed, first_seed + n_landscapes):
        ls = draw(seed)
        for m in methods:
            began = time.perf_counter()
            picks[m].append((ls, RUNNERS[m](ls, budget)))
            seconds[m] += time.perf_counter() - began
    doc: dict[str, Any] = {}
    for m in methods:
        doc[m] = _summary(picks[m], picks) | {"seconds": round(seconds[m], 2)}
    doc["landscapes"], doc["budget"] = n_landscapes, budget
    return doc


def _all_measured(picks: dict[str, list[tuple[Landscape, Pick]]], i: int) -> list[Knobs]:
    return [k for runs in picks.values() for k in runs[i][1][2]]


def _regret(ls: Landscape, pick: Knobs | None, others: list[Knobs]) -> float:
    best = ls.best_sps(others)
    if pick is None or not ls.fits(pick):
        return 1.0
    return max(0.0, 1.0 - (ls.true_sps(pick) or 0.0) / best)


def _summary(
    runs: list[tuple[Landscape, Pick]], picks: dict[str, list[tuple[Landscape, Pick]]]
) -> dict[str, Any]:
    regrets, grid_regrets, by_kind = [], [], {kind: [] for kind in KINDS}
    for i, (ls, (pick, _n, _calls)) in enumerate(runs):
        r = _regret(ls, pick, _all_measured(picks, i))
        regrets.append(r)
        grid_regrets.append(_regret(ls, pick, []))
        by_kind[ls.kind].append(r)
    return {
        "within_5pct_share": round(sum(r <= 0.05 for r in regrets) / len(regrets), 3),
        "within_5pct_of_grid_share": round(
            sum(r <= 0.05 for r in grid_regrets) / len(grid_regrets), 3
        ),
        "median_regret": round(statistics.median(regrets), 4),
        "mean_regret": round(statistics.fmean(regrets), 4),
        "bursts": statistics.median(n for _, (_p, n, _c) in runs),
        "within_5pct_by_kind": {
            kind: round(sum(r <= 0.05 for r in rs) / len(rs), 3)
            for kind, rs in by_kind.items()
            if rs
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--landscapes", type=int, default=200)
    p.add_argument("--budget", type=int, default=12)
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated, of " +
                   ", ".join(RUNNERS))  # fmt: skip
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = p.parse_args()
    methods = tuple(m for m in args.methods.split(",") if m)
    unknown = [m for m in methods if m not in RUNNERS]
    if unknown or args.landscapes < 1 or args.budget < 1:
        print(f"methods={unknown or methods} landscapes={args.landscapes} budget={args.budget}"
              f": methods of {', '.join(METHODS)}, counts >= 1", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    doc = evaluate(args.landscapes, args.budget, methods, args.first_seed)
    if args.json:
        print(json.dumps(doc))
        return
    print(f"{args.landscapes} landscapes, budget {args.budget} bursts")
    print(f"{'method':<11} {'within 5%':>9} {'of grid':>7} {'median regret':>13} "
          f"{'mean regret':>11} {'bursts':>6} {'seconds':>7}")  # fmt: skip
    for m in methods:
        d = doc[m]
        print(f"{m:<11} {d['within_5pct_share']:>9.1%} {d['within_5pct_of_grid_share']:>7.1%} "
              f"{d['median_regret']:>13.1%} {d['mean_regret']:>11.1%} {d['bursts']:>6} "
              f"{d['seconds']:>7.1f}")  # fmt: skip
    print("within 5% by kind: " + "; ".join(
        f"{m}: " + ", ".join(f"{k} {v:.0%}" for k, v in doc[m]["within_5pct_by_kind"].items())
        for m in methods))  # fmt: skip


if __name__ == "__main__":
    main()
