"""The tuner against Optuna (TPE, GP) and random search on simulated landscapes, equal budgets.

Two families of landscapes (``--family cpu|gpu|all``, default all):

- ``cpu``: ``proving_ground.landscapes`` (compute-bound, data-bound, memory-limited with an
  OOM edge, cpu-contended, flat; batch x workers x prefetch; 2-30% noise per burst), started
  from the default knobs;
- ``gpu``: ``proving_ground.gpu_landscapes`` (loader-capped, data-path, compute-bound,
  memory-edge; the space ``default_space`` gives on CUDA: batch x workers x prefetch x
  pin_memory x precision x channels_last and the data path; heavy-tailed noise and drift
  between bursts), started from PyTorch's defaults at the user's batch size.

Each landscape is searched by every method with the same budget of bursts, from the same
start. A method's *pick* is the
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
memory limit, out of memory or invalid (DALI with a predecoded copy) reads 0. Readings are
deterministic, so a run is repeatable.

Seeds: by default the development seeds (CPU 0.., the seeds the tuner's constants were tried
on; GPU ``gpu_landscapes.DEV_SEEDS``); ``--held-out`` judges on seeds never used while
developing (CPU 200-599, GPU ``gpu_landscapes.HELD_OUT_SEEDS``: 10000-10399);
``--first-seed`` picks any other start for both families. The JSON says which
(``seed_set``, ``seeds``).

``workbench_short_screen`` (not in the default methods) is the successive-halving question
measured: the same tuner whose search moves run half-length bursts (noise x sqrt(2), half a
burst of the budget each: generous, since a real short burst keeps its whole warm-up) while
the start and the confirmation run full ones.

Usage: python benchmarks/tuner_landscapes.py [--family cpu|gpu|all] [--landscapes N]
       [--budget B] [--methods ...] [--held-out | --first-seed S] [--json]
       (one JSON document on stdout: an object per method, each with ``by_family``;
       N landscapes per family)
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
from collections.abc import Callable, Sequence
from typing import Any

import torch
from proving_ground.gpu_landscapes import DEV_SEEDS, GPU_KINDS, HELD_OUT_SEEDS, draw_gpu
from proving_ground.landscapes import KINDS, Bursts, Proving, draw

from workbench.core.knobs import KnobError, Knobs
from workbench.tuning import tuner
from workbench.tuning.bottleneck import guided
from workbench.tuning.search import Search, coordinate
from workbench.tuning.tuner import tune_on

METHODS = ("workbench", "optuna_tpe", "optuna_gp", "random")
FAMILIES = ("cpu", "gpu")
DRAW: dict[str, Callable[[int], Proving]] = {"cpu": draw, "gpu": draw_gpu}
FIRST_SEED = {"development": {"cpu": 0, "gpu": DEV_SEEDS.start},
              "held-out": {"cpu": 200, "gpu": HELD_OUT_SEEDS.start}}  # fmt: skip
"""CPU: seeds 0-199 are those the tuner's constants were tried on, 200-599 the earlier
sessions' held-out check; GPU: gpu_landscapes.DEV_SEEDS and HELD_OUT_SEEDS."""
SEED_PROTOCOL = {
    "development": {"cpu": "0-199 (tuned on)", "gpu": f"{DEV_SEEDS.start}-{DEV_SEEDS.stop - 1} "
                    "(tuned on 0-199, checked on 200-399)"},
    "held-out": {"cpu": "200-599 (earlier sessions' check)",
                 "gpu": f"{HELD_OUT_SEEDS.start}-{HELD_OUT_SEEDS.stop - 1} (never run while "
                 "the search was developed)"},
}  # fmt: skip
"""Which seeds are which, written into every JSON document."""
Pick = tuple[Knobs | None, int, list[Knobs]]  # the pick, bursts used, configs measured


def run_workbench(ls: Proving, budget: int) -> Pick:
    bursts = Bursts(ls)
    t = tune_on(bursts, ls.space(), budget=budget, base=ls.start, limit_mib=ls.limit_mib,
                device=ls.device)  # fmt: skip
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


def run_short_screen(ls: Proving, budget: int) -> Pick:
    """The tuner's moves on half-length bursts, its start and confirmation on full ones."""
    bursts, start = _ShortBursts(ls), ls.start
    search = _CostSearch(bursts, space=ls.space(), budget=budget, limit_mib=ls.limit_mib,
                         device=torch.device(ls.device), workload=None,
                         cancel=threading.Event())  # fmt: skip
    search.reserve = lambda: tuner.confirmation_reserve(search, start)
    search.measure(start, "start")
    bursts.short = True
    best = coordinate(search, guided(search, start))
    bursts.short, search.reserve = False, (lambda: 0)
    tuner.confirm(search, start, best)
    ranked = search.ranked()
    return (ranked[0].knobs if ranked else None), len(search.bursts), bursts.calls


def run_random(ls: Proving, budget: int) -> Pick:
    """Distinct configs drawn uniformly (the start first, as every method starts there)."""
    configs = [c for c in ls.configs() if not _is_start(ls, c)]
    random.Random(ls.seed).shuffle(configs)
    bursts = Bursts(ls)
    chosen = [ls.start, *map(_as_knobs, configs[: budget - 1])]
    readings = [(_value(ls, bursts(k)), k) for k in chosen]
    return max(readings, key=lambda r: r[0])[1], len(chosen), bursts.calls


def run_optuna(sampler_name: str) -> Callable[[Proving, int], Pick]:
    def run(ls: Proving, budget: int) -> Pick:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        sampler = (optuna.samplers.TPESampler(seed=ls.seed) if sampler_name == "tpe"
                   else optuna.samplers.GPSampler(seed=ls.seed))  # fmt: skip
        study = optuna.create_study(direction="maximize", sampler=sampler)
        space, bursts = ls.space(), Bursts(ls)
        study.enqueue_trial({f"{n}_i": _index(space[n], getattr(ls.start, n)) for n in space})

        def objective(trial: Any) -> float:
            knobs = _knobs(trial, space)
            return 0.0 if knobs is None else _value(ls, bursts(knobs))

        study.optimize(objective, n_trials=budget)
        best = _knobs_from(study.best_trial.params, space)
        return (best if study.best_value > 0 else None), budget, bursts.calls

    return run


def _is_start(ls: Proving, config: Any) -> bool:
    if isinstance(config, Knobs):
        return config == ls.start
    return all(getattr(ls.start, name) == v for name, v in config._asdict().items())


def _as_knobs(config: Any) -> Knobs:
    return config if isinstance(config, Knobs) else config.knobs()


def _index(values: list[Any], value: Any) -> int:
    return values.index(value) if value in values else 0


def _knobs(trial: Any, space: dict[str, list[Any]]) -> Knobs | None:
    params = {f"{n}_i": trial.suggest_int(f"{n}_i", 0, len(v) - 1) for n, v in space.items()}
    return _knobs_from(params, space)


def _knobs_from(params: dict[str, int], space: dict[str, list[Any]]) -> Knobs | None:
    """The config a trial names; None for a combination Knobs refuses (it cannot run)."""
    values = {n: space[n][params[f"{n}_i"]] for n in space}
    if values["num_workers"] == 0:
        values["prefetch_factor"] = None  # means nothing without workers
    try:
        return Knobs(**values)
    except KnobError:
        return None


def _value(ls: Proving, r: Any) -> float:
    """What a black-box search sees: the reading, 0 for OOM or over the memory limit."""
    peak = max(r.peak_mem_mib or 0, r.peak_reserved_mib or 0)
    if not r.ok or peak > ls.limit_mib:
        return 0.0
    return r.samples_per_s or 0.0


RUNNERS: dict[str, Callable[[Proving, int], Pick]] = {
    "workbench": run_workbench,
    "optuna_tpe": run_optuna("tpe"),
    "optuna_gp": run_optuna("gp"),
    "random": run_random,
    "workbench_short_screen": run_short_screen,
}


def seeds(family: str, n: int, first_seed: int | None, held_out: bool) -> range:
    """The seeds a family is judged on (see ``FIRST_SEED``)."""
    if first_seed is None:
        first_seed = FIRST_SEED["held-out" if held_out else "development"][family]
    return range(first_seed, first_seed + n)


def evaluate(
    n_landscapes: int,
    budget: int,
    methods: tuple[str, ...] = METHODS,
    first_seed: int | None = None,
    family: str = "all",
    held_out: bool = False,
) -> dict[str, Any]:
    """Every method on ``n_landscapes`` landscapes of each family asked for; one summary per
    method (over them all, by kind and ``by_family``)."""
    families = FAMILIES if family == "all" else (family,)
    picks: dict[str, list[tuple[Proving, Pick]]] = {m: [] for m in methods}
    seconds = dict.fromkeys(methods, 0.0)
    used = {f: seeds(f, n_landscapes, first_seed, held_out) for f in families}
    for fam in families:
        for seed in used[fam]:
            ls = DRAW[fam](seed)
            for m in methods:
                began = time.perf_counter()
                picks[m].append((ls, RUNNERS[m](ls, budget)))
                seconds[m] += time.perf_counter() - began
    doc: dict[str, Any] = {}
    for m in methods:
        doc[m] = _summary(range(len(picks[m])), picks, m) | {"seconds": round(seconds[m], 2)}
        doc[m]["by_family"] = {
            fam: _summary([i for i, (ls, _) in enumerate(picks[m]) if _family(ls) == fam],
                          picks, m)
            for fam in families
        }  # fmt: skip
    doc["landscapes"], doc["budget"], doc["family"] = n_landscapes * len(families), budget, family
    doc["seed_set"] = ("chosen" if first_seed is not None
                       else "held-out" if held_out else "development")  # fmt: skip
    doc["seeds"] = {f: [r.start, r.stop - 1] for f, r in used.items()}
    doc["seed_protocol"] = SEED_PROTOCOL
    return doc


def _family(ls: Proving) -> str:
    return "gpu" if ls.kind in GPU_KINDS else "cpu"


def _all_measured(picks: dict[str, list[tuple[Proving, Pick]]], i: int) -> list[Knobs]:
    return [k for runs in picks.values() for k in runs[i][1][2]]


def _regret(ls: Proving, pick: Knobs | None, others: list[Knobs]) -> float:
    best = ls.best_sps(others)
    if pick is None or not ls.fits(pick):
        return 1.0
    return max(0.0, 1.0 - (ls.true_sps(pick) or 0.0) / best)


def _summary(
    which: Sequence[int], picks: dict[str, list[tuple[Proving, Pick]]], method: str
) -> dict[str, Any]:
    regrets, grid_regrets = [], []
    by_kind: dict[str, list[float]] = {kind: [] for kind in (*KINDS, *GPU_KINDS)}
    for i in which:
        ls, (pick, _n, _calls) = picks[method][i]
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
        "bursts": statistics.median(picks[method][i][1][1] for i in which),
        "within_5pct_by_kind": {
            kind: round(sum(r <= 0.05 for r in rs) / len(rs), 3)
            for kind, rs in by_kind.items()
            if rs
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", default="all", help="cpu, gpu or all (default)")
    p.add_argument("--landscapes", type=int, default=200, help="per family")
    p.add_argument("--budget", type=int, default=12)
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated, of " +
                   ", ".join(RUNNERS))  # fmt: skip
    seed_set = p.add_mutually_exclusive_group()
    seed_set.add_argument("--held-out", action="store_true",
                          help="the judging seeds (CPU 200.., GPU 10000..)")  # fmt: skip
    seed_set.add_argument("--first-seed", type=int, default=None,
                          help="both families from here (default: development seeds)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = p.parse_args()
    methods = tuple(m for m in args.methods.split(",") if m)
    unknown = [m for m in methods if m not in RUNNERS]
    if unknown or args.landscapes < 1 or args.budget < 1:
        print(f"methods={unknown or methods} landscapes={args.landscapes} budget={args.budget}"
              f": methods of {', '.join(METHODS)}, counts >= 1", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    if args.family not in (*FAMILIES, "all"):
        print(f"family={args.family}: one of cpu, gpu, all", file=sys.stderr)
        sys.exit(2)
    doc = evaluate(args.landscapes, args.budget, methods, args.first_seed, args.family,
                   args.held_out)  # fmt: skip
    if args.json:
        print(json.dumps(doc))
        return
    used = ", ".join(f"{f} {a}-{b}" for f, (a, b) in doc["seeds"].items())
    print(f"{doc['landscapes']} landscapes ({doc['seed_set']} seeds: {used}), "
          f"budget {args.budget} bursts")  # fmt: skip
    families = FAMILIES if args.family == "all" else (args.family,)
    for fam in families:
        print(f"\n{fam}:")
        _table({m: doc[m]["by_family"][fam] for m in methods} | {"seconds": doc})
    if len(families) > 1:
        print("\nall:")
        _table({m: doc[m] for m in methods} | {"seconds": doc})


def _table(rows: dict[str, Any]) -> None:
    seconds = rows.pop("seconds")
    print(f"{'method':<11} {'within 5%':>9} {'of grid':>7} {'median regret':>13} "
          f"{'mean regret':>11} {'bursts':>6} {'seconds':>7}")  # fmt: skip
    for m, d in rows.items():
        print(f"{m:<11} {d['within_5pct_share']:>9.1%} {d['within_5pct_of_grid_share']:>7.1%} "
              f"{d['median_regret']:>13.1%} {d['mean_regret']:>11.1%} {d['bursts']:>6} "
              f"{seconds[m]['seconds']:>7.1f}")  # fmt: skip
    print("within 5% by kind: " + "; ".join(
        f"{m}: " + ", ".join(f"{k} {v:.0%}" for k, v in d["within_5pct_by_kind"].items())
        for m, d in rows.items()))  # fmt: skip


if __name__ == "__main__":
    main()
