"""The tuner's guided moves: the bottleneck re-read after every move that changes it.

A training loop runs at its slower stage: the loader (workers decoding, the data path) or the
model (precision, layout, batch). Every burst says which one it waited on (``data_wait_pct``),
and every move that speeds one stage up can hand the bottleneck to the other. So each move
here is followed by reading the wait again, and the loader is re-sized from it before anything
else: a faster model starves the workers that fed the slower one (the failure of the first
GPU tunes: workers sized for fp32, then bf16 and channels_last, then a batch walk on a curve
the loader had flattened, and the budget gone). The order, and when each step stops, is
written out in ``tuner.py``'s module docstring; the why of each step is here.

- **The loader from the data wait** (``feed_loader``). While the loop waits ``wait`` of its
  window, the model alone runs at ``sps / (1 - wait)`` and one worker delivers ``sps /
  workers`` (with none the loop loads, at ``sps / wait``): the workers needed are their ratio
  times ``LOADER_HEADROOM``. The search jumps there, with the deepest listed prefetch queue
  and pinned memory where the space lists it, instead of walking one worker at a time. A
  wait of ``JUMP_WAIT_SHARE`` (5%) is enough to jump: on a GPU a worker costs a core the
  model does not use, and a 5% wait is 5% of the throughput.
- **The data path when the workers run out** (``feed_path``). With the most workers listed
  and the loop still waiting, each other data path the space offers is measured (a converted
  copy first: no decoding at all; then decoding on the device; then DALI), until one feeds
  the loop and is the fastest so far.
- **The compute choices together, then alone** (``compute_moves``). On CUDA, bf16 with
  channels_last in one burst (the layout pays under autocast: NCHW bf16 pays transposes); if
  that does not gain, each choice in the order it usually runs fastest (``EXPECTED_FASTEST``),
  stopping at the first value not clearly slower than the current one (the values after it
  are expected slower still). Elsewhere nothing is expected (bf16 ran 23x slower on this
  project's CPU): each value is measured. A compute move is judged by the model's own
  speed where the loader hides it (``_gain``): a loop that waits for data reads the same
  throughput at any model speed. A value expected to be faster that reads clearly slower
  gets a second run before it is turned down: a stalled burst (another process, the
  allocator) only slows, and one reading is all a move gets otherwise.
- **The batch walk, unless the loader caps it** (``walk_batch``). A loop that waits for data
  half its window (``LOADER_CAPS_PCT``) with the most workers listed is skipped: a larger
  batch speeds up a model the loader already outruns. A walk stops at the first size where
  the loop starts waiting that much while more workers are listed; the loader is fed there,
  and the walk goes on from the fed config (``MAX_FEEDS`` times at most).
- **The compute choices again at a grown batch** (``RECHECK_GROWTH``). A small batch is
  launch-bound: bf16 cannot show its gain where each step is mostly kernel launches. When
  the walk doubled the batch or more, the choices expected faster than the current ones are
  measured again, and a batch size freed by the memory they save is walked on (``onward``).
"""

from __future__ import annotations

import statistics
from typing import Any

from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.tuning.search import (
    DATA_FIRST_WAIT_PCT,
    LOADER_WAIT_SHARE,
    PATH_KNOBS,
    Measured,
    Search,
    batch_search,
    compute_choices,
    try_each,
    wait_pct,
)

JUMP_WAIT_SHARE = 0.05
"""The loader jump applies from this data wait on (``feed_loader``). From 10% instead, the
token models' 0-worker loops (waiting 5-9%) stayed where they started: within 5% of the best
on 88.5% of the GPU landscapes (seeds 0-399) at 12 bursts against 92.7%, CPU seeds 0-599
91.0% against 91.8% (benchmarks/tuner_landscapes.py)."""
LOADER_HEADROOM = 1.3
"""Workers the loader jump asks for, over the bare ratio of model speed to one worker's: a
loader that only just keeps up stalls on every slow batch."""
LOADER_CAPS_PCT = 50.0
"""A data wait (in %) at which the loader caps the model: past it a faster model gains little
(its time is under half the step), so the batch walk stops there or is skipped."""
MAX_FEEDS = 3
"""Times a batch walk stops for the loader, has it fed, and goes on."""
RECHECK_GROWTH = 2
"""The compute choices are measured again when the batch walk grew the batch this much."""
PATH_FIRST = (("data_format", "predecoded"), ("decode", "gpu"), ("loader", "dali"))
"""The data-path changes tried first: no decoding at all, then decoding on the device."""
EXPECTED_FASTEST: dict[str, tuple[Any, ...]] = {
    "precision": ("bf16", "fp16", "tf32", "default", "fp32-strict"),
    "channels_last": (True, False),
    "cudnn_benchmark": (True, False),
}
"""Compute choices in the order they usually run fastest on a GPU (tensor cores: bf16 and
fp16 over TF32 over IEEE fp32; NHWC for convolutions under autocast)."""


def guided(search: Search, start: Knobs) -> Knobs:
    """From ``start``: the loader fed, the compute choices (the loader fed again after each
    one kept), the batch walked unless the loader caps it, the compute choices again if the
    batch grew ``RECHECK_GROWTH`` times. ``tuner.py`` says the order and the stopping rules."""
    current = compute_moves(search, fed(search, start))
    judged_at = current.batch_size
    current = walk_batch(search, current)
    if current.batch_size < RECHECK_GROWTH * judged_at:
        return current
    walked = current
    current = compute_moves(search, current, recheck=True)
    return current if current == walked else onward(search, current)


# -- the loader -------------------------------------------------------------------------------


def fed(search: Search, current: Knobs) -> Knobs:
    """The loader re-sized from the data wait, then the data path while the loop still
    waits with the most workers listed."""
    return feed_path(search, feed_loader(search, current))


def loader_need(m: Measured, share: float = LOADER_WAIT_SHARE) -> float | None:
    """Loader workers the loop needs, from a measured config's data wait (None when it
    waited less than ``share`` of its window).

    While the loop waits ``wait`` of the time, the model alone would run at
    ``sps / (1 - wait)``; the loader delivers ``sps``, so one worker decodes ``sps /
    workers`` (with no workers the loop itself loads, at ``sps / wait``). The need is the
    ratio of the two, with ``LOADER_HEADROOM``.
    """
    wait = wait_pct(m) / 100.0
    if wait < share or not m.samples_per_s:
        return None
    model_sps = m.samples_per_s / max(1.0 - wait, 0.01)
    workers = m.knobs.num_workers
    per_worker = m.samples_per_s / workers if workers else m.samples_per_s / wait
    return LOADER_HEADROOM * model_sps / per_worker


def feed_loader(search: Search, current: Knobs) -> Knobs:
    """Jump to the workers ``loader_need`` asks for (the smallest listed count that covers
    it, else the most), with the deepest listed prefetch queue and pinned memory where the
    space lists it; kept unless clearly slower."""
    m, workers = search.measured(current), sorted(search.space.get("num_workers", []))
    need = loader_need(m, JUMP_WAIT_SHARE) if m is not None and m.score is not None else None
    if m is None or need is None or not workers:
        return current
    count = next((w for w in workers if w >= need), workers[-1])
    depths = [p for p in search.space.get("prefetch_factor", []) if p is not None]
    knobs = search.compose(current, "num_workers", count)
    if knobs is not None and count and depths:
        knobs = search.compose(knobs, "prefetch_factor", max(depths)) or knobs
    if knobs is not None and True in search.space.get("pin_memory", []):
        knobs = search.compose(knobs, "pin_memory", True) or knobs
    if knobs is None or knobs == current:
        return current
    search.knob = "num_workers"
    jumped = search.measure(knobs, f"num_workers={count} (data wait)")
    if jumped is None or jumped.score is None or search.clearly_slower(jumped, m):
        return current
    return knobs


def feed_path(search: Search, current: Knobs) -> Knobs:
    """A loop that still waits for data (``LOADER_WAIT_SHARE``) with the most workers listed
    tries the other data paths the space offers (one change each from ``current``,
    ``PATH_FIRST`` first) until one feeds the loop and is the fastest so far; the fastest
    tried is kept. Unchanged when the loop is fed or more workers are listed."""
    if not starved(search.measured(current)) or workers_left(search, current):
        return current
    options = [(n, v) for n in PATH_KNOBS if n in search.space for v in search.space[n]
               if v != getattr(current, n)]  # fmt: skip
    options.sort(key=lambda o: PATH_FIRST.index(o) if o in PATH_FIRST else len(PATH_FIRST))
    tried = [current]
    for name, value in options:
        knobs = search.compose(current, name, value)
        if knobs is None or knobs in search.runs:
            continue
        search.knob = name
        m = search.measure(knobs, f"{name}={value} (data wait)")
        if m is None:
            break
        tried.append(knobs)
        if m.score is not None and not starved(m) and search.best(*tried) == knobs:
            break  # this path feeds the loop and is the fastest so far: enough
    return search.best(*tried)


def starved(m: Measured | None) -> bool:
    """The loop waited for data ``LOADER_WAIT_SHARE`` of its window or more."""
    return m is not None and m.score is not None and loader_need(m) is not None


def workers_left(search: Search, current: Knobs) -> bool:
    """More loader workers are listed than ``current`` runs."""
    workers = search.space.get("num_workers", [])
    return bool(workers) and current.num_workers < max(workers)


def capped(search: Search, current: Knobs) -> bool:
    """The loader caps the model (``LOADER_CAPS_PCT``) with the most workers listed (the
    data path was tried by ``fed`` before this is asked)."""
    return wait_pct(search.measured(current)) >= LOADER_CAPS_PCT and not workers_left(
        search, current
    )


# -- the compute choices ----------------------------------------------------------------------


def compute_moves(search: Search, current: Knobs, recheck: bool = False) -> Knobs:
    """The compute choices at their usually fastest values together in one burst; if that
    does not gain, each alone (``compute_move``). The loader is fed after a change kept.
    With ``recheck`` only values expected faster than the current ones are measured."""
    expected = EXPECTED_FASTEST if search.device.type == "cuda" else {}
    names = [n for n in compute_choices(search) if n in expected]
    joint = current
    for name in names:
        fastest = min(search.space[name], key=lambda v: _rank(search, name, v))
        joint = search.compose(joint, name, fastest) or joint
    changed = [n for n in names if getattr(joint, n) != getattr(current, n)]
    if len(changed) > 1 and not search.halted:
        search.knob = changed[0]
        if _gains(search, joint, current, f"{' and '.join(changed)} together"):
            return fed(search, joint)
    for name in compute_choices(search):
        if search.halted:
            return current
        current = compute_move(search, current, name, recheck=recheck)
    return current


def compute_move(search: Search, current: Knobs, name: str, recheck: bool = False) -> Knobs:
    """One compute choice: on CUDA its values in ``EXPECTED_FASTEST`` order until one is not
    clearly slower than ``current``; the one that gains most over it (``_gain``) is kept and
    the loader fed for it. With ``recheck`` only values ranked above the current one.
    Elsewhere (or a choice with no expected order) each value is measured, the fastest
    kept (``search.try_each``)."""
    search.knob = name
    if search.device.type != "cuda" or name not in EXPECTED_FASTEST:  # no order expected
        best = current if recheck else try_each(search, current, name, search.space[name])
        return fed(search, best) if best != current else current
    here = _rank(search, name, getattr(current, name))
    values = sorted(search.space[name], key=lambda v: _rank(search, name, v))
    if recheck:
        values = [v for v in values if _rank(search, name, v) < here]
    ref = search.measured(current)
    if ref is None or ref.score is None:
        return current
    best, best_gain = current, 1.0
    for value in values:
        knobs = search.compose(current, name, value)
        if knobs is None or knobs == current:
            continue
        faster = _rank(search, name, value) < here
        m = _measured_twice_if_slower(search, knobs, ref, f"{name}={value}", expected_faster=faster)
        if m is None:
            break
        if m.score is None:
            continue
        if (gain := _gain(m, ref)) > best_gain:
            best, best_gain = knobs, gain
        if not search.clearly_slower(m, ref):
            break  # the values after it usually run slower still: not worth a burst each
    return fed(search, best) if best != current else current


def _gains(search: Search, knobs: Knobs, current: Knobs, stage: str) -> bool:
    """``knobs`` (expected faster) measured, and gaining over ``current`` (``_gain``)."""
    ref = search.measured(current)
    if ref is None or ref.score is None:
        return False
    m = _measured_twice_if_slower(search, knobs, ref, stage, expected_faster=True)
    return m is not None and m.score is not None and _gain(m, ref) > 1.0


def _measured_twice_if_slower(
    search: Search, knobs: Knobs, ref: Measured, stage: str, *, expected_faster: bool
) -> Measured | None:
    """``knobs`` measured; run again when it was expected faster than ``ref`` and its one
    run reads clearly slower (a stall only slows: ``_gain`` then takes its better run)."""
    m = search.measure(knobs, stage)
    if m is None or m.score is None or not expected_faster or len(m.runs) > 1:
        return m
    if search.clearly_slower(m, ref):
        return search.measure(knobs, f"{stage} (again: read slower)", again=True) or m
    return m


def _gain(m: Measured, ref: Measured) -> float:
    """``m`` over ``ref``: by throughput, or by the model's own speed (``sps / (1 - wait)``)
    where either waited for data ``DATA_FIRST_WAIT_PCT`` or the move shifted the wait by
    ``LOADER_WAIT_SHARE`` (the loader then hides what the model gained); ``m`` by its best
    run."""
    wm, wr = wait_pct(m), wait_pct(ref)
    by_model = max(wm, wr) >= DATA_FIRST_WAIT_PCT or abs(wm - wr) >= 100 * LOADER_WAIT_SHARE
    top = max((r for r in m.runs if r.ok and r.samples_per_s), key=_sps)
    if not by_model:
        return _sps(top) / (ref.score or 1.0)
    return _model(top) / statistics.median(_model(r) for r in ref.runs if r.ok and r.samples_per_s)


def _sps(r: BurstResult) -> float:
    return r.samples_per_s or 0.0


def _model(r: BurstResult) -> float:
    return _sps(r) / max(0.01, 1.0 - (r.data_wait_pct or 0.0) / 100.0)


def _rank(search: Search, name: str, value: Any) -> int:
    """Where ``value`` stands in ``EXPECTED_FASTEST`` on a CUDA device; 0 for every value
    elsewhere (on a CPU bf16 can run 20x slower: nothing is expected there)."""
    order = EXPECTED_FASTEST.get(name, ()) if search.device.type == "cuda" else ()
    return order.index(value) if value in order else len(order)


# -- the batch --------------------------------------------------------------------------------


def walk_batch(search: Search, current: Knobs) -> Knobs:
    """The batch walk (``search.batch_search``) unless the loader caps the loop; a walk
    stops where the loader starts to cap it with workers left, the loader is fed there and
    the walk goes on upwards (``MAX_FEEDS`` times). Batch size is then settled: the rounds
    do not walk it again, nor on a capped loop (the data wait says the curve is flat)."""
    if "batch_size" not in search.space or search.halted:
        return current
    if capped(search, current):
        search.settled.add("batch_size")
        return current
    values = search.space["batch_size"]
    for resumed in range(MAX_FEEDS):
        search.knob = "batch_size"
        current = batch_search(search, current, values, stop=lambda m: _loader_caps(search, m),
                               onward_only=resumed > 0)  # fmt: skip
        refed = current if search.halted else fed(search, current)
        if refed == current:
            break
        current = refed
    search.settled.add("batch_size")
    return current


def _loader_caps(search: Search, m: Measured) -> bool:
    return wait_pct(m) >= LOADER_CAPS_PCT and workers_left(search, m.knobs)


def onward(search: Search, current: Knobs) -> Knobs:
    """The batch walked on from ``current`` when a larger size failed or went over the limit
    under the compute choices before and ``current`` peaks under 3/4 of the limit now (bf16
    halves the activations: the memory edge moved)."""
    m = search.measured(current)
    if "batch_size" not in search.space or search.halted or m is None or capped(search, current):
        return current
    larger = [k for k in search.runs
              if k.batch_size > current.batch_size and search.score(k) is None]  # fmt: skip
    peak = max((max(r.peak_mem_mib or 0, r.peak_reserved_mib or 0) for r in m.runs), default=0)
    if not larger or search.limit_mib is None or peak > 0.75 * search.limit_mib:
        return current
    search.knob = "batch_size"
    return fed(search, batch_search(search, current, search.space["batch_size"]))


__all__ = [
    "EXPECTED_FASTEST",
    "capped",
    "compute_move",
    "compute_moves",
    "fed",
    "feed_loader",
    "feed_path",
    "guided",
    "loader_need",
    "onward",
    "starved",
    "walk_batch",
    "workers_left",
]
