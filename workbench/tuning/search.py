"""The tuner's search: measured moves through a space of knobs, on a budget of bursts.

``tune`` (workbench/tuner.py) drives it; this module holds the state (every burst, the runs of
each config, the budget) and the moves. Why each move is what it is:

- **Coordinate rounds guided by the bottleneck.** One knob at a time, the others held at the
  best so far. The order comes from the current best burst's ``data_wait_pct``: a loop that
  waits for data gets its data knobs tried first, a busy model its compute knobs, so a small
  budget is spent where it can pay. Rounds repeat until one changes nothing (converged) or the
  budget runs out; a config already measured is never measured again during the rounds.
- **Ordered knobs climb, choices are tried.** For numbers (workers, prefetch, ...) the search
  walks from the current value to its neighbours and keeps going while the throughput is not
  clearly worse (``tune_noise.clearly_slower``: by more than the noise measured so far); it
  turns back only if going up found nothing. Choices
  (precision, compile, booleans) are few: each is measured.
- **The guided moves are in ``bottleneck.py``**: the loader from the data wait, the data
  path, the compute choices and the batch walk in the order the bottleneck asks for, before
  the rounds. This module holds what they and the rounds share.
- **A starved loop moves the loader only the way that feeds it.** While the loop waits for
  data ``DATA_FIRST_WAIT_PCT`` of its window, the rounds try more workers, a deeper queue and
  pinned memory (``FEEDING``), not fewer or shallower: those cannot feed a loop that waits.
- **Close calls are compared side by side** (``Search.prefer``). A reading drifts with the
  machine (an H200 read one config 11% lower four bursts later), so a knob's best value and
  the config it would replace are compared near in time: where the current config last ran
  more than ``NEAR_BURSTS`` bursts before its rival and the two read closer than that gap's
  drift could make them, the current config runs again beside the rival, and the rival is
  judged against the runs near it.
- **Batch size is OOM-safe and answers with a measured size.** It grows through the listed
  sizes until a burst runs out of memory, fails, peaks above the memory limit, reads
  clearly slower twice in a row, or the caller's ``stop`` says the loader now caps the
  curve (the guided walk then feeds the loader and walks on); throughput per sample rises
  with the batch to a plateau, so a larger size that is not clearly slower is where the walk
  goes on from. Which walked size
  it answers is read off a curve, not off the single luckiest burst: a parabola in
  ``log2(batch)`` fitted to every run of the walk (a line where the runs bend the wrong way),
  whose highest point among the measured sizes is the pick (``smoothed_batch``): five bursts
  of 10-20% noise each pin the curve better than any one of them. If the pick is the largest
  size that fit (throughput still rising at the edge), it bisects between that size and the
  first failure, starting at the size where a line through the walk's peaks meets the
  memory limit (``memory_edge``): an OOM past it costs a burst. A starting size that does
  not fit shrinks instead: down through the smaller sizes until one fits, then the same
  bisection. Every size it can
  return was measured, unlike a size extrapolated from a doubling search (Lightning #18426),
  and the limit is the tuner's margin below the device, not the device itself, so training
  does not OOM right after tuning (Lightning #8028).
- **Left-over budget steps two knobs at once.** Rounds of one-knob moves cannot see an
  interaction: on the 2-core test machine 2 workers with a deep queue (prefetch 8) were the
  grid's best while 2 workers alone and prefetch 8 alone were not better, so the rounds
  converged on the defaults with budget to spare. When the rounds converge early, the
  diagonal neighbours of the best (two ordered knobs of the same group, each one step) are
  measured; one that is better starts new rounds from there.
- **Failures are results.** An OOM, an error or a run over the memory limit ends that
  direction of a climb; it is recorded and never chosen.
"""

from __future__ import annotations

import itertools
import math
import statistics
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from workbench.core.knobs import SPECS, KnobError, Knobs, with_knob
from workbench.core.results import BurstResult
from workbench.engine.training import no_effect
from workbench.engine.workloads import Workload
from workbench.tuning import noise as tune_noise

CLIMB_PATIENCE = 1
"""How many clearly slower values in a row a climb over workers or prefetch depth steps past
before it stops. Those curves are not always single-peaked: on a machine with few cores one
worker can be slower than none (it competes with the training loop for a core and adds
inter-process copies) while two, with a deep queue, are the fastest (measured on the 2-core
test machine: 0 workers 293, 1 worker 248, 2 workers with prefetch 8 up to 333 samples/s).
Batch size is searched with no patience: its curve rises to a plateau or an OOM."""
BATCH_PATIENCE = 2
"""Clearly slower batch sizes in a row the batch walk steps past: one or two noisy bursts must
not end the walk below a plateau it was still climbing (a size past the edge costs one burst;
stopping short costs the user the plateau). On the simulated landscapes (seeds 0-199, 12
bursts, ``tune_noise.Z_STEP`` 1.5): 81.0% within 5% of the true best with 0, 89.5% with 1,
90.0% with 2."""
LOADER_WAIT_SHARE = 0.10
"""The loop is starved when it waited for data this share of the window or more: a batch
walk then fits the model's own speed (``smoothed_batch``), and the data path is tried
(``bottleneck.feed_path``)."""
DATA_FIRST_WAIT_PCT = 30.0
"""Data knobs go first when the loop waited for data this share of the window or more, and
only the way that feeds it (``FEEDING``)."""
NEAR_BURSTS = 3
"""Bursts apart that still count as measured side by side (``Search.prefer``)."""
DRIFT_PER_BURST = 0.03
"""Drift one burst may add between two readings: an H200 read one config 11% lower four
bursts later (4,306 -> 3,816 images/s)."""
MAX_DRIFT = 0.12
"""Drift between two readings, at most (``Search.prefer``)."""
PATH_KNOBS = ("decode", "data_format", "loader")
"""The data path's knobs (``analysis.data_paths.path_space`` puts them in a CUDA space):
first of the data group in the rounds, a bigger lever than a worker more or less."""
FEEDING: dict[str, Any] = {"num_workers": +1, "prefetch_factor": +1, "pin_memory": True}
"""The loader's own knobs and the way each feeds a starved loop: more workers, a deeper
queue, pinned memory. While the loop waits ``DATA_FIRST_WAIT_PCT`` the rounds move them only
that way (fewer workers cannot feed a loop that waits for them)."""
_GROUP_ORDER = {
    True: ("data", "compute", "memory", "dist"),
    False: ("compute", "data", "memory", "dist"),
}

Measure = Callable[[Knobs], BurstResult]
"""One burst of a config: the tuner's stored bursts, or a simulated landscape's."""


@dataclass(frozen=True, slots=True)
class Measured:
    """One config's runs, as the search ranks it."""

    knobs: Knobs
    runs: tuple[BurstResult, ...]
    samples_per_s: float | None  # median over ok runs
    fits: bool  # every run finished and peaked under the memory limit

    @property
    def score(self) -> float | None:
        """Median samples/s if the config ran and fits under the limit, else None."""
        return self.samples_per_s if self.fits else None


class Search:
    """Every burst of one tune; measurements cached per config; the budget enforced here."""

    def __init__(
        self,
        run: Measure,
        *,
        space: dict[str, list[Any]],
        budget: int,
        limit_mib: float | None,
        device: torch.device,
        workload: Workload | None,
        cancel: threading.Event,
        on_burst: Callable[[BurstResult, str], None] | None = None,
    ):
        self._run, self.space, self.budget = run, space, budget
        self.reserve: Callable[[], int] = lambda: 0
        """Bursts kept back from the moves for the confirmation (the tuner sizes it)."""
        self.limit_mib, self.device, self.workload = limit_mib, device, workload
        self.cancel, self.on_burst = cancel, on_burst
        self.bursts: list[BurstResult] = []
        self.runs: dict[Knobs, list[BurstResult]] = {}
        self.notes: list[str] = []
        self.knob: str | None = None  # the knob being searched now (None: start, re-measuring)
        self.stopped: str | None = None  # "cancelled", "interrupted"
        self.settled: set[str] = set()
        """Knobs the guided moves settled on a fitted curve: the rounds do not walk them
        again (a second walk measures more sizes once each, and the luckiest of them leads)."""

    # -- measuring -----------------------------------------------------------------------------

    @property
    def halted(self) -> bool:
        """No more bursts: the budget less the reserve is spent, or the search was stopped (a
        set cancel event is recorded here as ``stopped="cancelled"``)."""
        if self.cancel.is_set() and self.stopped is None:
            self.stopped = "cancelled"
        return self.stopped is not None or len(self.bursts) >= self.budget - self.reserve()

    def noise(self) -> tuple[float | None, int]:
        """Relative noise of one burst measured so far, and its degrees of freedom
        (``tune_noise.pooled_noise`` over every config's finished runs)."""
        groups = [[r.samples_per_s or 0.0 for r in runs if r.ok] for runs in self.runs.values()]
        return tune_noise.pooled_noise(groups)

    def noise_or_prior(self) -> float:
        """The measured noise, or ``tune_noise.PRIOR_NOISE`` until something ran twice."""
        noise, _ = self.noise()
        return tune_noise.PRIOR_NOISE if noise is None else noise

    def clearly_slower(self, m: Measured, than: Measured) -> bool:
        """``m`` reads below ``than`` by more than the noise allows (both must score)."""
        return tune_noise.clearly_slower(m.score or 0.0, _ok_runs(m), than.score or 0.0,
                                         _ok_runs(than), self.noise_or_prior())  # fmt: skip

    def clearly_faster(self, m: Measured, than: Measured) -> bool:
        return tune_noise.clearly_faster(m.score or 0.0, _ok_runs(m), than.score or 0.0,
                                         _ok_runs(than), self.noise_or_prior())  # fmt: skip

    def measure(self, knobs: Knobs, stage: str, *, again: bool = False) -> Measured | None:
        """The config's measurement, running a burst unless it has one (or ``again``).

        None when the budget (or a cancel) stops the search before a needed burst.
        """
        if knobs in self.runs and not again:
            return self.measured(knobs)
        if self.halted:
            return None
        result = self._run(knobs)
        self.bursts.append(result)
        if result.status != "cancelled":
            self.runs.setdefault(knobs, []).append(result)
        if self.on_burst is not None:
            self.on_burst(result, stage)
        if result.status == "cancelled":
            self.stopped = "cancelled"
            return None
        return self.measured(knobs)

    def measured(self, knobs: Knobs) -> Measured | None:
        runs = self.runs.get(knobs)
        if not runs:
            return None
        ok = [r.samples_per_s for r in runs if r.ok and r.samples_per_s]
        fits = bool(ok) and all(self.fits(r) for r in runs)  # one OOM or crash disqualifies
        sps = statistics.median(ok) if ok else None
        return Measured(knobs, tuple(runs), sps, fits)

    def score(self, knobs: Knobs) -> float | None:
        m = self.measured(knobs)
        return m.score if m else None

    def fits(self, r: BurstResult) -> bool:
        """Ran, and peaked under the limit (on CUDA, what the allocator reserved counts too:
        reserved-but-free blocks are what another process, or fragmentation, runs out of; on a
        CPU the peak is the PSS of the process tree, summed RSS only where PSS is unreadable)."""
        if not r.ok:
            return False
        peaks = [p for p in (r.peak_mem_mib, r.peak_reserved_mib) if p is not None]
        return self.limit_mib is None or not peaks or max(peaks) <= self.limit_mib

    def ranked(self) -> list[Measured]:
        """Configs that ran and fit, fastest (median) first."""
        found = [m for k in self.runs if (m := self.measured(k)) and m.score is not None]
        return sorted(found, key=lambda m: -(m.score or 0.0))

    def position(self, knobs: Knobs) -> int:
        """Where the latest run of ``knobs`` sits among the tune's bursts (-1: never ran)."""
        runs = self.runs.get(knobs, [])
        return max((i for i, r in enumerate(self.bursts) if any(r is x for x in runs)), default=-1)

    def near_score(self, knobs: Knobs, around: int) -> float | None:
        """The median of ``knobs``' fitting runs within ``NEAR_BURSTS`` of burst ``around``
        (all of its runs where none is that near)."""
        m = self.measured(knobs)
        if m is None or m.score is None:
            return None
        near = [r.samples_per_s or 0.0 for i, r in enumerate(self.bursts)
                if abs(i - around) <= NEAR_BURSTS and r.ok and r.samples_per_s
                and any(r is x for x in m.runs)]  # fmt: skip
        return statistics.median(near) if near else m.score

    def prefer(self, current: Knobs, rival: Knobs) -> Knobs:
        """``rival`` or ``current``, compared near in time: where ``current`` last ran more
        than ``NEAR_BURSTS`` bursts before ``rival`` and the two read closer than drift over
        that gap could make them (``DRIFT_PER_BURST``, at most ``MAX_DRIFT``), ``current`` is
        measured again beside ``rival`` first, and ``rival`` is judged against those runs."""
        if rival == current:
            return current
        r, c = self.measured(rival), self.measured(current)
        if r is None or r.score is None:
            return current
        if c is None or c.score is None:
            return rival
        at = self.position(rival)
        gap = at - self.position(current)
        allowance = min(MAX_DRIFT, DRIFT_PER_BURST * gap)
        if gap > NEAR_BURSTS and abs(math.log(r.score / c.score)) <= allowance:
            self.measure(current, "again: beside its rival (drift)", again=True)
        near = self.near_score(current, at + 1) or c.score
        return rival if r.score > near else current

    def best(self, *candidates: Knobs) -> Knobs:
        """The fastest fitting config among ``candidates`` (the first one if none fits)."""
        scored = [(self.score(k), i, k) for i, k in enumerate(candidates)]
        fitting = [(s, -i, k) for s, i, k in scored if s is not None]
        return max(fitting, key=lambda t: (t[0], t[1]))[2] if fitting else candidates[0]

    def compose(self, base: Knobs, name: str, value: Any) -> Knobs | None:
        """``base`` with one knob changed, or None where that config cannot be measured here:
        an invalid combination, or a value that would have no effect on this device."""
        try:
            knobs = with_knob(base, name, value)
        except KnobError:
            return None
        if self.workload is None:  # a simulated landscape (proving_ground): no workload
            return knobs
        if knobs != base and name in no_effect(knobs, self.device, self.workload):
            note = f"{name}={value}: no effect on {self.device.type}; not measured"
            if note not in self.notes:
                self.notes.append(note)
            return None
        return knobs


# -- the moves --------------------------------------------------------------------------------


def coordinate(search: Search, start: Knobs, max_rounds: int = 4) -> Knobs:
    """Rounds of one-knob moves from ``start`` until a round changes nothing."""
    current = start
    for _ in range(max_rounds):
        before = current
        for name in knob_order(search, current):
            current = tune_knob(search, current, name)
            if search.halted:
                return current
        if current == before:
            break
    return current


def joint_steps(search: Search, current: Knobs) -> Knobs:
    """Measure the diagonal neighbours of ``current``: every pair of ordered knobs of the
    same group (workers x prefetch depth, ...), each moved one step up or down its values.
    Returns the best of them if it beats ``current`` by more than the noise
    (``Search.clearly_faster``), else ``current``. A loop that waits for data moves the
    loader's knobs only the way that feeds it (``FEEDING``). Stops when the budget does."""
    ordered = [n for n in search.space if n != "batch_size" and _is_ordered(n)]
    best, top = current, search.measured(current)
    starved = wait_pct(top) >= DATA_FIRST_WAIT_PCT
    for a, b in itertools.combinations(ordered, 2):
        if SPECS[a].group != SPECS[b].group:
            continue
        for step_a, step_b in itertools.product((+1, -1), repeat=2):
            if starved and any(FEEDING.get(n, s) != s for n, s in ((a, step_a), (b, step_b))):
                continue
            knobs = _step(search, current, a, step_a)
            knobs = _step(search, knobs, b, step_b) if knobs is not None else None
            if knobs is None or knobs in search.runs:
                continue
            m = search.measure(knobs, f"{a} and {b} together")
            if m is None:
                return best
            if m.score is not None and (top is None or top.score is None
                                        or search.clearly_faster(m, top)):  # fmt: skip
                best, top = knobs, m
    return best


def _is_ordered(name: str) -> bool:
    return name in SPECS and SPECS[name].kind in ("int", "float", "optional_int")


def _step(search: Search, base: Knobs, name: str, step: int) -> Knobs | None:
    """``base`` with ``name`` one place up or down its sorted values (None past either end,
    or where the result cannot be measured here)."""
    line, at = _line(search.space[name], getattr(base, name), name)
    i = at + step if line[at][1] or step < 0 else at
    while 0 <= i < len(line) and line[i][1]:  # another spelling of the current value
        i += step
    if not 0 <= i < len(line):
        return None
    knobs = search.compose(base, name, line[i][0])
    return None if knobs == base else knobs


def knob_order(search: Search, current: Knobs) -> list[str]:
    """The space's knobs not yet settled, the bottleneck's group first (data when the loop
    waits for data)."""
    groups = _GROUP_ORDER[wait_pct(search.measured(current)) >= DATA_FIRST_WAIT_PCT]
    names = [n for n in search.space if n not in search.settled]
    return sorted(names, key=lambda n: (groups.index(_group(n)), n not in PATH_KNOBS))


def tune_knob(search: Search, current: Knobs, name: str) -> Knobs:
    search.knob, values = name, search.space[name]
    if name == "batch_size":
        return batch_search(search, current, values)
    feeding = name in FEEDING and wait_pct(search.measured(current)) >= DATA_FIRST_WAIT_PCT
    if _is_ordered(name):
        return climb(search, current, name, values, up_only=feeding)
    if feeding:
        values = [v for v in values if v == FEEDING[name]]
    return try_each(search, current, name, values)


def try_each(search: Search, current: Knobs, name: str, values: Sequence[Any]) -> Knobs:
    candidates = [current]
    for value in values:
        knobs = search.compose(current, name, value)
        if knobs is None or knobs == current:
            continue
        if search.measure(knobs, f"{name}={value}") is None:
            break
        candidates.append(knobs)
    others = candidates[1:]
    return search.prefer(current, search.best(*others)) if others else current


def climb(
    search: Search, current: Knobs, name: str, values: Sequence[Any], up_only: bool = False
) -> Knobs:
    """Walk up from the current value while not clearly worse; if that found nothing, down
    (unless ``up_only``)."""
    line, at = _line(values, getattr(current, name), name)
    best, before = current, set(search.runs)
    for step in (+1,) if up_only else (+1, -1):
        start = at + step if line[at][1] else (at if step > 0 else at - 1)
        best, _ = _walk(search, best, name, line, start, step, patience=CLIMB_PATIENCE)
        if best != current or search.halted:
            break
    if best == current:  # the closest of the values tried, against current measured beside it
        tried = [k for k in search.runs if k not in before and search.score(k) is not None]
        best = search.prefer(current, search.best(*tried)) if tried else current
    return best


def _line(values: Sequence[Any], current: Any, name: str) -> tuple[list[tuple[Any, bool]], int]:
    """Sorted values, and the index of the current value (or of the next one above it).

    Entries are ``(value, is_current)``; an unset prefetch factor sorts as torch's 2.
    """

    def key(v: Any) -> float:
        return 2.0 if v is None and name == "prefetch_factor" else float(v)

    ordered = sorted(dict.fromkeys(values), key=key)
    line = [(v, key(v) == key(current)) for v in ordered]
    for i, (v, same) in enumerate(line):
        if same or key(v) > key(current):
            return line, i
    return [*line, (current, True)], len(line)


def _walk(
    search: Search,
    best: Knobs,
    name: str,
    line: list[tuple[Any, bool]],
    i: int,
    step: int,
    patience: int = 0,
    onward: bool = False,
    stop: Callable[[Measured], bool] | None = None,
) -> tuple[Knobs, Any]:
    """Measure ``line[i], line[i + step], ...`` from ``best``; stop at a failure, after
    ``patience + 1`` clearly slower values in a row, or at a value ``stop`` says to stop at
    (which then is the best). The best is the fastest reading, or with
    ``onward`` the furthest value not clearly slower than it (a curve known to rise: a
    tie goes the way it rises). Returns the best config and the first value that failed
    (None when none did; ``STOPPED`` when ``stop`` said so)."""
    base, top = best, search.measured(best)
    slower_in_a_row = 0
    while 0 <= i < len(line):
        value = line[i][0]
        i += step
        knobs = search.compose(base, name, value)
        if knobs is None or knobs == base:
            continue
        m = search.measure(knobs, f"{name}={value}")
        if m is None:
            break
        if m.score is None:
            return best, value
        if top is not None and top.score is not None and search.clearly_slower(m, top):
            slower_in_a_row += 1
            if slower_in_a_row > patience:
                break
            continue
        slower_in_a_row = 0
        if top is None or top.score is None or onward or m.score > top.score:
            best, top = knobs, m
        if stop is not None and stop(m):
            return knobs, STOPPED
    return best, None


STOPPED = object()
"""What ``_walk`` returns as its failed value when its ``stop`` ended it."""


def batch_search(
    search: Search,
    current: Knobs,
    values: Sequence[Any],
    stop: Callable[[Measured], bool] | None = None,
    onward_only: bool = False,
) -> Knobs:
    """Walk up the sizes while not clearly slower (``BATCH_PATIENCE``), to the memory edge;
    down if going up found nothing (unless ``onward_only``: a walk resumed after the loader
    was fed, from a size already chosen); pick off the smoothed curve; bisect if still rising
    at the edge. A size ``stop`` stops at (the loader caps the curve there) is the answer."""
    line, at = _line(values, current.batch_size, "batch_size")
    if search.measured(current) and search.score(current) is None:
        return shrink(search, current, [v for v, _ in line[:at]])
    up = at + 1 if line[at][1] else at
    best, failed = _walk(search, current, "batch_size", line, up, +1, BATCH_PATIENCE, True,
                         stop)  # fmt: skip
    if failed is STOPPED:
        return best
    if best == current and onward_only:
        return current
    if best == current and not search.halted:
        best, _ = _walk(search, current, "batch_size", line, at - 1, -1)
    walked = [k for k in search.runs if k.replace(batch_size=current.batch_size) == current]
    best = smoothed_batch(search, walked) or best
    edge = max((k.batch_size for k in walked if search.score(k) is not None), default=0)
    if failed is not None and best.batch_size == edge and not search.halted:
        best = bisect(search, best, failed)
    return best


def smoothed_batch(search: Search, walked: Sequence[Knobs]) -> Knobs | None:
    """The walked size at the top of a parabola in log2(batch) fitted by least squares to
    the log of every run's samples/s (a line if the parabola opens upwards: noise, not a
    valley). None with fewer than three sizes that fit: two points are no curve.

    Where the loop waited for data (``LOADER_WAIT_SHARE``) and more workers are listed, a
    run counts at the model's own speed, ``sps / (1 - wait)``: the loader is fed next
    (``feed_loader``), so the size worth keeping is the one the *model* runs fastest at, not
    the one a starved loader happened to serve best (on the simulated data-bound landscapes
    the raw fit kept small batches the loader then could not lift: 90% -> 97.5% within 5%).
    """
    fitting = [k for k in walked if search.score(k) is not None]
    if len(fitting) < 3:
        return None
    workers = search.space.get("num_workers", [])
    fed_next = bool(workers) and fitting[0].num_workers < max(workers)
    points = [(math.log2(k.batch_size), math.log(_model_sps(r) if fed_next else r.samples_per_s))
              for k in fitting for r in search.runs[k] if r.ok and r.samples_per_s]  # fmt: skip
    x, y = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    coeffs = np.polyfit(x, y, 2)
    if coeffs[0] > 0:
        coeffs = np.polyfit(x, y, 1)
    return max(fitting, key=lambda k: float(np.polyval(coeffs, math.log2(k.batch_size))))


def _model_sps(r: BurstResult) -> float:
    """What the model alone would run at: the reading less the share spent waiting for data
    (the reading itself below ``LOADER_WAIT_SHARE``: a little wait is no starved loader)."""
    wait = (r.data_wait_pct or 0.0) / 100.0
    sps = r.samples_per_s or 0.0
    return sps / max(1.0 - wait, 0.01) if wait >= LOADER_WAIT_SHARE else sps


def wait_pct(m: Measured | None) -> float:
    """The median data wait (in %) of a measured config's runs (0 when unknown)."""
    waits = [r.data_wait_pct for r in m.runs if r.ok and r.data_wait_pct is not None] if m else []
    return statistics.median(waits) if waits else 0.0


def compute_choices(search: Search) -> list[str]:
    """The space's compute knobs that are choices (precision, layout, compile), precision
    first; batch size and other numbers are walked, not chosen."""
    names = [n for n in search.space if n != "batch_size" and not _is_ordered(n)
             and _group(n) == "compute"]  # fmt: skip
    return sorted(names, key=lambda n: n != "precision")


def _group(name: str) -> str:
    return SPECS[name].group if name in SPECS else "dist"


def shrink(search: Search, current: Knobs, smaller: Sequence[int]) -> Knobs:
    """The current size did not fit: try the smaller sizes, largest first, until one fits,
    then bisect between it and the smallest size that failed.

    A failure does not end the way down, as it ends a climb: every size below a failure may
    still fit. ``current`` comes back when nothing fits (the tune then reports that).
    """
    failed = current.batch_size
    for size in reversed(smaller):
        knobs = search.compose(current, "batch_size", size)
        if knobs is None:
            continue
        m = search.measure(knobs, f"batch_size={size}")
        if m is None:
            break
        if m.score is not None:
            return bisect(search, knobs, failed)  # measures nothing once the budget is spent
        failed = size
    return current


def bisect(search: Search, best: Knobs, failed: int) -> Knobs:
    """Between the fastest size that fit and the first failure above it, halve the gap while
    the size that fits keeps being the fastest; stop at a gap of 1/8 of the size. Where the
    walk's peaks say where the memory limit falls (``memory_edge``), the first size tried
    is the edge itself (on a multiple of 8) and nothing above it is: an OOM costs a burst."""
    good, bad = best.batch_size, failed
    if bad <= good or _measured_between(search, best, good, bad):
        return best  # something fitting above ``good`` was slower: not rising at the edge
    edge = memory_edge(search, best)
    target = None
    if edge is not None:
        size = math.floor(edge + 1e-6)  # a fit's rounding must not cost a size
        bad = max(good + 1, min(bad, size + 1))  # above it: over the limit
        target = size // 8 * 8 if size >= 16 else size
    while bad - good > max(1, good // 8) or (target is not None and good < target < bad):
        mid = target if target is not None and good < target < bad else midpoint(good, bad)
        target = None
        knobs = best.replace(batch_size=mid)
        m = search.measure(knobs, f"batch_size={mid} (bisect)")
        if m is None:
            break
        top = search.score(best)
        if m.score is None:
            bad = mid
        elif top is None or m.score >= top:
            best, good = knobs, mid
        else:
            break  # fits but slower: the edge region is not where the speed is
    return best


def memory_edge(search: Search, best: Knobs) -> float | None:
    """The largest batch size whose peak stays under the memory limit, read off the peaks
    measured at ``best``'s other knobs (a line through peak against batch: activations grow
    with the batch); None with fewer than two sizes measured or no limit."""
    if search.limit_mib is None:
        return None
    points = [(float(k.batch_size), max(p for p in (r.peak_mem_mib, r.peak_reserved_mib) if p))
              for k in search.runs if k.replace(batch_size=best.batch_size) == best
              for r in search.runs[k]
              if r.ok and (r.peak_mem_mib or r.peak_reserved_mib)]  # fmt: skip
    if len({x for x, _ in points}) < 2:
        return None
    slope, intercept = np.polyfit([x for x, _ in points], [y for _, y in points], 1)
    return (search.limit_mib - intercept) / slope if slope > 0 else None


def _measured_between(search: Search, best: Knobs, good: int, bad: int) -> bool:
    same = {k for k in search.runs if k.replace(batch_size=best.batch_size) == best}
    return any(good < k.batch_size < bad and search.score(k) is not None for k in same)


def _ok_runs(m: Measured) -> int:
    return sum(1 for r in m.runs if r.ok and r.samples_per_s) or 1


def midpoint(good: int, bad: int) -> int:
    """Halfway, on a multiple of 8 when the gap allows (tensor-core and allocator friendly)."""
    mid = (good + bad) // 2
    if bad - good >= 16:
        rounded = round(mid / 8) * 8
        if good < rounded < bad:
            return rounded
    return mid


__all__ = [
    "Measured",
    "Search",
    "batch_search",
    "bisect",
    "climb",
    "compute_choices",
    "coordinate",
    "midpoint",
    "shrink",
    "smoothed_batch",
    "try_each",
    "tune_knob",
    "wait_pct",
]
