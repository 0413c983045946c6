"""Which data path reaches the model: each available path's loader alone, measured, against
the model's own ceiling.

A data-bound diagnosis knows two numbers: what the loader delivers alone and what the model
trains on one resident batch (``loader="synthetic"``: the model's own speed). The question
the person has next is which way out reaches the second number, and the answer is measured,
never guessed: every available path of ``data_paths.available_paths`` is run with the loader
alone (``run_loader_burst``, the same measurement as the diagnosis's own loader ceiling, with
the same knobs but the path's), and the ranking names the first path, in the list's order of
least change, whose loader alone reaches ``REACH_SHARE`` of the model's ceiling. When none
does, it names the fastest with its gap. Unavailable paths are listed with their reason and
never run; a path whose knobs are the diagnosed ones reuses the diagnosis's own reading.

Time: each run is a short loader-only burst, its warm-up (worker start-up and the batches the
workers prefetch) then a window of at most ``PATH_SECONDS`` (2 s): at most four runs beside
the diagnosis's own, typically 10-30 s in all, and no run starts once ``PATHS_BUDGET_S`` (60 s)
have passed: the paths left are listed as not measured, with that reason.

On a CPU the same logic runs over the paths available there (the workers at the current and
the maximal count, predecoded data if built, DALI's CPU pipeline if installed): the ranking
is tested there, the GPU paths' numbers injected (``rank_paths``'s ``measure``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from workbench.analysis.advice import Suggestion
from workbench.analysis.data_paths import DataPath, available_paths
from workbench.analysis.loader_ceiling import LoaderResult, run_loader_burst
from workbench.core.knobs import Knobs
from workbench.core.results import readable as _num
from workbench.engine.window import BurstWindow
from workbench.engine.workloads import Workload

PATH_SECONDS = 2.0
"""The longest window of one path's loader-only run: loaders that differ by the margins that
matter here (a path at half the model's speed or at all of it) are told apart in far less."""
PATHS_BUDGET_S = 60.0
"""No path run starts after this many seconds of ranking."""
REACH_SHARE = 0.9
"""A path reaches the model when its loader alone delivers this share of the model's ceiling
or more: two short runs of one config differ by up to 10% on a busy machine (the diagnosis's
``ABOVE_CEILING_FLOOR``), so a loader read within 10% below the model may well keep up."""

Measure = Callable[[Knobs], LoaderResult]
"""The loader alone with these knobs: ``run_loader_burst``, or a test's recorded reading."""


@dataclass(frozen=True, slots=True)
class PathReading:
    """One path: its loader-alone samples/s, or why there is none."""

    path: DataPath
    status: str = "ok"
    """ok (measured), failed (ran, no reading), unavailable, or skipped (out of time, stopped)."""
    samples_per_s: float | None = None
    note: str = ""
    """Empty when measured; else why there is no reading."""
    workers: int | None = None
    """The loader's worker processes (DALI: threads) in the measured run."""
    reused: bool = False
    """The diagnosis's own loader-alone run (the path's knobs are the diagnosed ones)."""

    @property
    def measured(self) -> bool:
        return self.status == "ok" and self.samples_per_s is not None

    def per_worker(self) -> float | None:
        """Samples/s per worker where the torch loader's workers decode (decode=cpu)."""
        changes = self.path.changes
        on_cpu = changes.get("decode") == "cpu" and changes.get("loader") == "torch"
        if not self.measured or not on_cpu or not self.workers:
            return None
        return (self.samples_per_s or 0.0) / self.workers

    def to_dict(self) -> dict[str, Any]:
        return {**self.path.to_dict(), "status": self.status, "samples_per_s": self.samples_per_s,
                "note": self.note, "workers": self.workers, "per_worker": self.per_worker(),
                "reused": self.reused}  # fmt: skip


@dataclass(frozen=True, slots=True)
class PathRanking:
    """The paths against the model's ceiling: measured ones fastest first, then the rest."""

    base: Knobs
    ceiling_sps: float
    readings: tuple[PathReading, ...]
    winner: PathReading | None
    """The first path, in ``available_paths`` order, that reaches the model; None if none."""

    @property
    def best(self) -> PathReading | None:
        """The fastest measured path."""
        return next((r for r in self.readings if r.measured), None)

    def reaches(self, reading: PathReading) -> bool:
        return reaches(reading.samples_per_s, self.ceiling_sps)

    def share(self, reading: PathReading) -> float | None:
        sps = reading.samples_per_s
        return None if sps is None or not self.ceiling_sps else sps / self.ceiling_sps

    def headline(self) -> str:
        """One sentence: the path that reaches the model, or the fastest one and its gap."""
        model = f"the model's {_num(self.ceiling_sps)} samples/s"
        if self.winner is not None:
            w = self.winner
            return (f"{w.path.label} reaches {model}: {_num(w.samples_per_s)} from the loader "
                    f"alone ({self.share(w):.0%}){_set_hint(w.path, self.base)}")  # fmt: skip
        best = self.best
        if best is None:
            return f"no data path could be measured against {model}"
        gap = 1 - (self.share(best) or 0.0)
        return (f"no data path reaches {model}: the fastest, {best.path.label}, delivers "
                f"{_num(best.samples_per_s)} from the loader alone, {gap:.0%} short"
                f"{_set_hint(best.path, self.base)}")  # fmt: skip

    def lines(self) -> list[str]:
        """One line per path (the winner marked ``*``) and the headline, for a summary."""
        out = [f"Data paths, the loader alone on each against the model's own "
               f"{_num(self.ceiling_sps)} samples/s (one batch resident):"]  # fmt: skip
        width = max(len(r.path.label) for r in self.readings) if self.readings else 0
        for r in self.readings:
            mark = "*" if r is self.winner else " "
            out.append(f"  {mark} {r.path.label:<{width}}  {self._figure(r)}")
        out.append(f"  -> {self.headline()}")
        return out

    def _figure(self, r: PathReading) -> str:
        if not r.measured:
            return r.note
        said = f"{_num(r.samples_per_s):>10} samples/s  {self.share(r):.0%} of the model"
        each = r.per_worker()
        if each is not None:
            said += f", {_num(each)} per worker"
        return said + (" (the diagnosis's own run)" if r.reused else "")

    def suggestion(self) -> Suggestion | None:
        """The winner, else the fastest path, as the knob to set first (its other knobs named
        in the why); None when that path is the diagnosed config itself."""
        target = self.winner or self.best
        changed = target.path.changed(self.base) if target is not None else {}
        if target is None or not changed:
            return None
        (knob, value), *others = changed.items()
        also = ", ".join(f"{k}={v}" for k, v in others)
        why = (f"measured: the loader alone delivers {_num(target.samples_per_s)} samples/s "
               f"this way, {self.share(target):.0%} of the model's own "
               f"{_num(self.ceiling_sps)}")  # fmt: skip
        if target is not self.winner:
            why += " (the fastest data path, still short of it)"
        why += f"; {target.path.why}" + (f" (set {also} with it)" if also else "")
        return Suggestion(knob, value, why)

    def measured_knobs(self) -> set[str]:
        """The defining knob of every path run here: rule-based advice on those knobs is
        superseded by the measurement."""
        return {next(iter(r.path.changes)) for r in self.readings
                if r.status in ("ok", "failed") and not r.reused}  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "ceiling_samples_per_s": self.ceiling_sps,
            "reach_share": REACH_SHARE,
            "winner": self.winner.path.name if self.winner else None,
            "best": self.best.path.name if self.best else None,
            "headline": self.headline(),
            "paths": [r.to_dict() for r in self.readings],
        }


def reaches(samples_per_s: float | None, ceiling_sps: float) -> bool:
    """Does a loader delivering ``samples_per_s`` alone keep up with the model?"""
    return samples_per_s is not None and samples_per_s >= REACH_SHARE * ceiling_sps


def rank_paths(
    paths: list[DataPath],
    base: Knobs,
    ceiling_sps: float,
    measure: Measure,
    *,
    known: Mapping[Knobs, LoaderResult] | None = None,
    budget_s: float = PATHS_BUDGET_S,
    cancel: threading.Event | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> PathRanking:
    """Measure each available path with ``measure`` (in ``paths``' order) and rank them.

    ``known``: readings already made (the diagnosis's loader-alone run, by its knobs): a path
    with those knobs reuses it. Unavailable paths are never measured; none is started once
    ``budget_s`` has passed or ``cancel`` is set."""
    known, stop, start = known or {}, cancel or threading.Event(), clock()
    readings = []
    for path in paths:
        if not path.available:
            readings.append(PathReading(path, "unavailable", note=f"not available: {path.why}"))
            continue
        knobs = path.knobs(base)
        if knobs in known:
            readings.append(_reading(path, known[knobs], reused=True))
        elif stop.is_set():
            said = "not measured: the diagnosis was stopped"
            readings.append(PathReading(path, "skipped", note=said))
        elif clock() - start >= budget_s:
            said = f"not measured: the ranking's {budget_s:.0f} s were spent"
            readings.append(PathReading(path, "skipped", note=said))
        else:
            readings.append(_reading(path, measure(knobs)))
    winner = next((r for r in readings if reaches(r.samples_per_s, ceiling_sps)), None)
    order = sorted(range(len(readings)), key=lambda i: _rank_key(readings[i], i))
    ranked = tuple(readings[i] for i in order)
    return PathRanking(base=base, ceiling_sps=ceiling_sps, readings=ranked, winner=winner)


def measure_paths(
    wl: Workload,
    knobs: Knobs,
    dev: torch.device,
    ceiling_sps: float,
    *,
    loader: LoaderResult | None = None,
    window: BurstWindow = BurstWindow(),  # noqa: B008 (frozen: one shared default is safe)
    cancel: threading.Event | None = None,
    progress: Callable[[str, LoaderResult], None] | None = None,
) -> PathRanking:
    """``rank_paths`` over ``available_paths`` here, each path's loader alone run with
    ``run_loader_burst`` in ``window`` shortened to ``PATH_SECONDS``; ``loader``: the
    diagnosis's own loader-alone run, reused for the path it measured. ``progress(stage,
    result)`` gets each run as it lands (stage ``"path NAME"``)."""
    short = replace(window, seconds=min(window.seconds, PATH_SECONDS))
    paths = available_paths(wl, knobs, dev)
    names = {p.knobs(knobs): p.name for p in paths if p.available}

    def measure(k: Knobs) -> LoaderResult:
        r = run_loader_burst(wl, k, window=short, device=dev, cancel=cancel)
        if progress is not None:
            progress(f"path {names.get(k, '?')}", r)
        return r

    known = {knobs: loader} if loader is not None and loader.ok else {}
    return rank_paths(paths, knobs, ceiling_sps, measure, known=known, cancel=cancel)


def _reading(path: DataPath, r: LoaderResult, *, reused: bool = False) -> PathReading:
    workers = r.knobs.num_workers
    if r.ok and r.samples_per_s:
        return PathReading(path, "ok", r.samples_per_s, workers=workers, reused=reused)
    return PathReading(path, "failed", note=f"failed ({r.status}: {r.error})", workers=workers)


def _rank_key(r: PathReading, i: int) -> tuple[int, float]:
    """Measured paths fastest first, then failed ones, then the rest, each in list order."""
    if r.measured:
        return (0, -(r.samples_per_s or 0.0))
    return (1 if r.status == "failed" else 2, float(i))


def _set_hint(path: DataPath, base: Knobs) -> str:
    changed = path.changed(base)
    if not changed:
        return " (the knobs as they are)"
    return " (set " + ", ".join(f"{k}={v}" for k, v in changed.items()) + ")"


__all__ = [
    "PATHS_BUDGET_S",
    "PATH_SECONDS",
    "REACH_SHARE",
    "PathRanking",
    "PathReading",
    "measure_paths",
    "rank_paths",
    "reaches",
]
