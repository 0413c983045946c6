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
- **The loader first, from the data wait.** A burst that waited for data a good share of its
  window (``LOADER_WAIT_SHARE``) says how many loader workers the loop needs: the model alone
  runs at ``sps / (1 - wait)``; one worker decodes ``sps / workers`` (with none, the loop
  loads at ``sps / wait``), so the need is their ratio times ``LOADER_HEADROOM``. The search
  jumps there (with the space's deepest prefetch queue) instead of walking one worker at a
  time, and asks again after the batch grew (a faster model needs more data). On 400
  simulated landscapes this, the batch walk below and the smoothed pick lifted the share of
  tunes within 5% of the true best from 60% to 91.5% at 12 bursts
  (benchmarks/tuner_landscapes.py, docs/figures.md).
- **Then the data path, while the loop still waits.** Workers are one way out of a data
  wait; the others change the path (``decode=gpu``, a converted ``data_format``,
  ``loader=dali``: the knobs ``data_paths.path_space`` puts in a CUDA space). After the
  workers' jump, a loop still waiting ``LOADER_WAIT_SHARE`` or more has each of them tried
  (``feed_path``), before the batch walk: a batch sized for a starved loader is the wrong
  size for a fed one. A loop that does not wait meets them in the rounds, as any choice.
- **Batch size is OOM-safe and answers with a measured size.** It grows through the listed
  sizes until a burst runs out of memory, fails, peaks above the memory limit, or reads
  clearly slower twice in a row; throughput per sample rises with the batch to a plateau, so
  a larger size that is not clearly slower is where the walk goes on from. Which walked size
  it answers is read off a curve, not off the single luckiest burst: a parabola in
  ``log2(batch)`` fitted to every run of the walk (a line where the runs bend the wrong way),
  whose highest point among the measured sizes is the pick (``smoothed_batch``): five bursts
  of 10-20% noise each pin the curve better than any one of them. If the pick is the largest
  size that fit (throughput still rising at the edge), it bisects
  between that size and the first failure. A starting size that does not fit shrinks instead:
  down through the smaller sizes until one fits, then the same bisection. Every size it can
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
"""The loop is starved (the loader jump applies) when it waited for data this share of the
window or more; below it more workers can only take cores from the training loop."""
LOADER_HEADROOM = 1.3
"""Workers the loader jump asks for, over the bare ratio of model speed to one worker's: a
loader that only just keeps up stalls on every slow batch."""
PATH_KNOBS = ("decode", "data_format", "loader")
"""The data path's knobs (``data_paths``), tried by ``feed_path`` while the loop waits."""
DATA_FIRST_WAIT_PCT = 30.0
"""Data knobs go first when the loop waited for data this share of the window or more."""
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
        if self.workload is None:  # a simulated landscape (workbench.landscapes): no workload
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
    (``Search.clearly_faster``), else ``current``. Stops when the budget does."""
    ordered = [n for n in search.space if n != "batch_size" and _is_ordered(n)]
    best, top = current, search.measured(current)
    for a, b in itertools.combinations(ordered, 2):
        if SPECS[a].group != SPECS[b].group:
            continue
        for step_a, step_b in itertools.product((+1, -1), repeat=2):
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
    m = search.measured(current)
    waits = [r.data_wait_pct for r in m.runs if r.ok and r.data_wait_pct is not None] if m else []
    data_first = bool(waits) and statistics.median(waits) >= DATA_FIRST_WAIT_PCT
    groups = _GROUP_ORDER[data_first]
    names = [n for n in search.space if n not in search.settled]
    return sorted(names, key=lambda n: groups.index(_group(n)))


def tune_knob(search: Search, current: Knobs, name: str) -> Knobs:
    search.knob, values = name, search.space[name]
    if name == "batch_size":
        return batch_search(search, current, values)
    if _is_ordered(name):
        return climb(search, current, name, values)
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
    return search.best(*candidates)


def climb(search: Search, current: Knobs, name: str, values: Sequence[Any]) -> Knobs:
    """Walk up from the current value while not clearly worse; if that found nothing, down."""
    line, at = _line(values, getattr(current, name), name)
    best = current
    for step in (+1, -1):
        start = at + step if line[at][1] else (at if step > 0 else at - 1)
        best, _ = _walk(search, best, name, line, start, step, patience=CLIMB_PATIENCE)
        if best != current or search.halted:
            break
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
) -> tuple[Knobs, Any]:
    """Measure ``line[i], line[i + step], ...`` from ``best``; stop at a failure or after
    ``patience + 1`` clearly slower values in a row. The best is the fastest reading, or with
    ``onward`` the furthest value not clearly slower than it (a curve known to rise: a
    tie goes the way it rises). Returns the best config and the first value that failed
    (or None)."""
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
    return best, None


def batch_search(search: Search, current: Knobs, values: Sequence[Any]) -> Knobs:
    """Walk up the sizes while not clearly slower (``BATCH_PATIENCE``), to the memory edge;
    down if going up found nothing; pick off the smoothed curve; bisect if still rising at
    the edge."""
    line, at = _line(values, current.batch_size, "batch_size")
    if search.measured(current) and search.score(current) is None:
        return shrink(search, current, [v for v, _ in line[:at]])
    up = at + 1 if line[at][1] else at
    best, failed = _walk(search, current, "batch_size", line, up, +1, BATCH_PATIENCE, True)
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


def loader_need(m: Measured) -> float | None:
    """Loader workers the loop needs, from a measured config's data wait (None when it
    waited less than ``LOADER_WAIT_SHARE``: it is not starved).

    While the loop waits ``wait`` of the time, the model alone would run at
    ``sps / (1 - wait)``; the loader delivers ``sps``, so one worker decodes ``sps /
    workers`` (with no workers the loop itself loads, at ``sps / wait``). The need is the
    ratio of the two, with ``LOADER_HEADROOM``.
    """
    waits = [r.data_wait_pct for r in m.runs if r.ok and r.data_wait_pct is not None]
    wait = statistics.median(waits) / 100.0 if waits else 0.0
    if wait < LOADER_WAIT_SHARE or not m.samples_per_s:
        return None
    model_sps = m.samples_per_s / max(1.0 - wait, 0.01)  # as _model_sps, on the median
    workers = m.knobs.num_workers
    per_worker = m.samples_per_s / workers if workers else m.samples_per_s / wait
    return LOADER_HEADROOM * model_sps / per_worker


def feed_loader(search: Search, current: Knobs) -> Knobs:
    """Jump to the workers ``loader_need`` asks for (the smallest listed count that covers
    it, else the most), with the deepest listed prefetch queue; kept unless clearly slower."""
    m, workers = search.measured(current), sorted(search.space.get("num_workers", []))
    need = loader_need(m) if m is not None and m.score is not None else None
    if need is None or not workers:
        return current
    count = next((w for w in workers if w >= need), workers[-1])
    depths = [p for p in search.space.get("prefetch_factor", []) if p is not None]
    knobs = search.compose(current, "num_workers", count)
    if knobs is not None and count and depths:
        knobs = search.compose(knobs, "prefetch_factor", max(depths)) or knobs
    if knobs is None or knobs == current:
        return current
    search.knob = "num_workers"
    jumped = search.measure(knobs, f"num_workers={count} (data wait)")
    if jumped is None or jumped.score is None or search.clearly_slower(jumped, m):
        return current
    return knobs


def feed_path(search: Search, current: Knobs) -> Knobs:
    """While ``current`` still waits for data (``loader_need``: ``LOADER_WAIT_SHARE`` of its
    window or more), try each data-path knob of the space (``PATH_KNOBS``), one at a time
    from the best so far; unchanged when the loop is fed or the space has none."""
    for name in (n for n in PATH_KNOBS if n in search.space):
        m = search.measured(current)
        if search.halted or m is None or m.score is None or loader_need(m) is None:
            break
        current = tune_knob(search, current, name)
    return current


def guided(search: Search, start: Knobs) -> Knobs:
    """The loader from the data wait (workers, then the data path while it still waits), the
    compute choices (precision, layout: they move the memory edge), the batch to its edge,
    then the loader again for the faster model, with one more batch size if that changed it.
    ``coordinate`` rounds take over from here, without batch size: walking it again after
    other knobs moved measured worse on the simulated
    landscapes (within 5% of the true best on 400 held-out landscapes, settled against walked
    again: 90.2% against 90.2% at 12 bursts, 88.5% against 86.8% at 16, 90.2% against 88.2% at
    24; on seeds 0-199: 91.5% against 90.0%, 90.0% against 86.5%, 91.5% against 89.0%)."""
    current = feed_path(search, feed_loader(search, start))
    for name in search.space:
        if search.halted:
            return current
        if name != "batch_size" and not _is_ordered(name) and _group(name) == "compute":
            current = tune_knob(search, current, name)
    if "batch_size" in search.space and not search.halted:
        current = tune_knob(search, current, "batch_size")
        search.settled.add("batch_size")
    for _ in range(2):
        fed = current if search.halted else feed_loader(search, current)
        if fed == current:
            break
        current = _one_size_up(search, fed)
    return current


def _one_size_up(search: Search, current: Knobs) -> Knobs:
    """The next listed batch size, kept unless clearly slower or failed."""
    if "batch_size" not in search.space or search.halted:
        return current
    knobs = _step(search, current, "batch_size", +1)
    if knobs is None or knobs in search.runs:
        return current
    search.knob = "batch_size"
    m, top = search.measure(knobs, f"batch_size={knobs.batch_size}"), search.measured(current)
    if m is None or m.score is None or top is None or search.clearly_slower(m, top):
        return current
    return knobs


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
    the size that fits keeps being the fastest; stop at a gap of 1/8 of the size."""
    good, bad = best.batch_size, failed
    if bad <= good or _measured_between(search, best, good, bad):
        return best  # something fitting above ``good`` was slower: not rising at the edge
    while bad - good > max(1, good // 8):
        mid = midpoint(good, bad)
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
    "coordinate",
    "feed_loader",
    "feed_path",
    "guided",
    "loader_need",
    "midpoint",
    "shrink",
    "smoothed_batch",
]
