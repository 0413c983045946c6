"""``tune``: the highest *measured* throughput whose peak memory stays under a margin.

The strategy (the moves themselves are in ``search.py`` and ``bottleneck.py``, the noise
rules in ``noise.py``):

1. **Start: what the user runs today.** ``base`` (default: ``Knobs()``, PyTorch's own
   defaults: ``precision="default"``, no loader workers), measured once: the reference of the
   speed-up, re-measured in step 4. Running it twice first would give a noise reading at once
   and halve the weight of one lucky first burst, but on the simulated landscapes
   (benchmarks/tuner_landscapes.py, 150 of them) it cost more than it saved: within 5% of the
   true best on 45% of them at 12 bursts against 63% measured once (74% against 78% at 16,
   79% against 80% at 24). Until a config has run twice the noise is
   ``tune_noise.PRIOR_NOISE``.
2. **Guided moves, the bottleneck re-read after each** (``bottleneck.guided``), in this order:

   a. *The loader.* A start that waited for data ``bottleneck.JUMP_WAIT_SHARE`` (5%) of its
      window or more jumps to the workers its wait asks for (deepest prefetch, pinned memory
      where listed); kept unless clearly slower. With the most workers listed and the loop
      still waiting ``search.LOADER_WAIT_SHARE`` (10%), each other data path of the space
      (predecoded copy, ``decode=gpu``, DALI, ...) is measured until one feeds the loop and is
      the fastest so far. Together: *the loader fed* (``bottleneck.fed``).
   b. *The compute choices* (precision, layout, compile, cudnn_benchmark): on CUDA their
      usually fastest values together in one burst (bf16 + channels_last); if that does not
      gain, each choice alone, in the order its values usually run fastest, stopping at the
      first value not clearly slower (elsewhere each value is measured). Judged by the
      model's own speed where the loader hides it. A change kept is followed at once by
      *the loader fed* again, sized from the new wait, before anything else.
   c. *The batch walk*, skipped when the loop waits ``bottleneck.LOADER_CAPS_PCT`` (50%) of
      its window with the most workers listed (the loader caps the curve). A walk stops at
      the first size where the loop starts to wait that much with workers left; the loader is
      fed there and the walk goes on up from the fed config, three times at most. It also
      stops at an OOM or the memory limit, or after ``search.BATCH_PATIENCE`` clearly slower
      sizes in a row. Batch size is then settled.
   d. *The compute choices again* when the walk at least doubled the batch (a small batch is
      launch-bound and hides what bf16 gains): values ranked above the current ones only; a
      change kept is followed by the loader fed and, where it freed memory below a size that
      failed, the batch walked on.

3. **Coordinate rounds**, one knob at a time, the bottleneck's group first (the data knobs
   while the loop waits ``search.DATA_FIRST_WAIT_PCT``, and then only the way that feeds it:
   more workers, deeper prefetch, pinned memory); a close call between a knob's best value
   and the current config is decided side by side (``Search.prefer``: the current config
   runs again beside its rival when it last ran more than ``search.NEAR_BURSTS`` bursts
   before and drift could explain the difference). Rounds repeat until one changes nothing,
   then pairs of knobs (``joint_steps``), while the budget left is more than the
   confirmation needs (``confirmation_reserve``, recomputed after every burst from the noise
   measured so far and the contenders close to the leader).
4. **Confirmation, interleaved.** A single short burst on a shared machine can be 2-30% off,
   and the maximum of many noisy bursts is biased upwards: the config that won its one burst
   by luck would otherwise be the answer. In passes, interleaved so drift hits them alike,
   the start (always, at least once: the speed-up then compares medians measured side by
   side; ``START_RUNS`` before extra runs of the contenders), the search's own answer, and
   every contender *close* to the leader (within ``tune_noise.Z_CLOSE`` standard
   errors, the top ``MAX_CONTENDERS``) are measured again until each has
   ``tune_noise.runs_needed(noise)`` runs; the winner is the highest *median*.
   When the runs still cannot tell the winner from the start (step 6's ``speedup_uncertain``)
   and budget is left, more interleaved passes over the start and the two leaders follow
   (``settle``, up to ``SETTLE_RUNS`` each); a tune that still cannot tell says so, and its
   saved config is marked uncertain in its first lines (``workbench.config.saved``).
5. **The speed-up with its interval**: the winner's median over the start's, with a 95%
   interval from the pooled noise (``tune_noise.ratio_interval``); when it holds 1 the
   summary says the runs cannot separate them.
6. **Drift.** The start's runs (its first burst and its re-measurements in the confirmation)
   are readings of one config across the tune: ``workbench.analysis.drift`` turns them into
   the drift over the tune and per burst, which widens the speed-up's interval
   (``workbench.tuning.speedup``); ``speedup_uncertain`` says when the runs cannot tell the
   speed-up: no interval, one that holds 1 or spans more than ``WIDE_FACTOR``, or drift
   larger than the speed-up. This estimate does not steer the search (a
   re-measure of the start midway would cost a burst of every budget); the search's own
   close calls are compared side by side instead (step 3), and the confirmation interleaves
   the start with the contenders, so drift after the search hits both alike.

Budget = bursts run (each ``run_burst`` call, failed or not). Every burst goes to the history
store. A burst that fails (OOM, a crashing worker, a bad value for this workload) is a
recorded result and the search moves on; a store that fails is a warning, never a lost
measurement. ``cancel`` (or Ctrl-C) stops the running burst at its next step boundary, that
burst stays among the tune's bursts, and the best so far is returned.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from workbench.analysis.data_paths import path_space
from workbench.analysis.drift import TUNE_WORDS, Drift, estimate_drift
from workbench.analysis.sweeps import check_values
from workbench.core import cost
from workbench.core.errors import InputError
from workbench.core.knobs import KnobError, Knobs
from workbench.core.results import BurstResult
from workbench.distributed.dispatch import run_burst
from workbench.engine import hardware
from workbench.engine.attention import attention_space
from workbench.engine.burst import BurstInterrupted, BurstProgress
from workbench.engine.failures import describe_error
from workbench.engine.fp8 import fp8_space
from workbench.engine.packing import check_packing_values, packing_space
from workbench.engine.sharding import sharding_space
from workbench.engine.window import BurstOptions, BurstSetup, BurstWindow
from workbench.engine.workloads import Workload, WorkloadArg, resolve_target
from workbench.history.store import Store, StoreWarning, keep_pending
from workbench.tuning import noise as tune_noise
from workbench.tuning import parity_gate
from workbench.tuning.bottleneck import guided
from workbench.tuning.parity_gate import Check
from workbench.tuning.result import Candidate, TuneProgress, TuneResult, candidates
from workbench.tuning.search import Measured, Search, coordinate, joint_steps
from workbench.tuning.speedup import judge

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11; hints only

MAX_CONTENDERS = 3
"""Configs confirmed at the end besides the start: the leader and the two closest to it."""
RESERVED_CONTENDERS = 2
"""Contenders the rounds keep budget for (the leader and its runner-up); a third close one
is confirmed only when the budget allows."""
MAX_RESERVE_SHARE = 0.4
"""The confirmation never keeps more than this share of the budget from the rounds: at high
noise a few runs more cannot beat it, and the search must still get somewhere."""
MAX_MARGIN = 0.9
START_RUNS = 2
"""Runs of the start the confirmation gives before the contenders' own (the speed-up's
denominator: one run has no spread to show)."""
SETTLE_RUNS = 2 * tune_noise.MAX_RUNS
"""Most runs of the start and of each leader when the confirmed runs still cannot tell them
apart (``settle``): past it a busy machine is reported uncertain, not outwaited."""


def tune(
    workload: WorkloadArg = None,
    space: Mapping[str, Any] | None = None,
    *,
    budget: int = 16,
    memory_margin: float = 0.1,
    base: Knobs | None = None,
    progress: Callable[[TuneProgress], None] | None = None,
    burst_progress: Callable[[BurstProgress], None] | None = None,
    price_per_hour: float | None = None,
    epoch_samples: float | None = None,
    hours_per_month: float | None = None,
    parity_steps: int | None = None,
    **options: Unpack[BurstOptions],
) -> TuneResult:
    """Search ``space`` (knob -> values) from ``base`` for the fastest config that fits.

    Fits: every burst of the config peaked under ``(1 - memory_margin)`` of the device's
    memory (GPU memory on CUDA; on a CPU system RAM, against the PSS of the process and its
    loader workers, so pages the workers share with it count once: ``peak_mem_kind``).
    With ``price_per_hour`` (or ``$WORKBENCH_PRICE_PER_HOUR``) every burst has a ``cost`` and
    the result a ``saving`` against the start (``workbench.core.cost``; ``epoch_samples`` and
    ``hours_per_month`` size it). ``budget`` caps the bursts (default 16: on simulated GPU
    landscapes the search was never tuned on, 96% of tunes end within 5% of the best at 16,
    92% at 12; docs/figures.md). Sizes between the listed batch sizes may be measured when
    the memory edge falls between them.
    ``options``: the window, device and history of every burst (``BurstOptions``: seconds,
    min_steps, warmup_steps, device, data_dir, record, store, cancel).
    ``parity_steps``: the optimizer steps of the loss-parity check a pick that changes
    rounding gets before it is reported (``tuning.parity_gate``; None: sized to about 15% of
    the tune's time; 0: no check).
    Warm-up is long enough to consume what loader workers prefetch (``BurstWindow.settled``):
    otherwise a short window is served from a full queue and deep prefetching wins for the
    wrong reason. ``progress`` gets a TuneProgress as each burst lands (the panel redraws);
    ``burst_progress`` gets each burst's own progress. Without ``space``,
    ``default_space`` for this device. Bad input raises (a ValueError naming it) before any
    burst runs.
    """
    began = time.perf_counter()
    check_budget(budget)
    check_margin(memory_margin)
    if parity_steps not in (None, 0):
        check_parity_steps(parity_steps)
    price = cost.resolve_price(price_per_hour)
    money = {"price_per_hour": price,
             "epoch_samples": cost.check_count(epoch_samples, "epoch_samples")}  # fmt: skip
    hours = cost.check_count(hours_per_month, "hours_per_month")
    start = Knobs() if base is None else base
    checked = None if space is None else check_space(space)  # before a dataset is built
    setup = BurstSetup.of("tune", options)
    wl, dev = resolve_target(workload, setup.device, setup.data_dir)
    total = hardware.device_info(dev).total_mem_mib
    stop = setup.cancel
    run = _StoredBursts(wl, dev, stop, setup.store, setup.window, burst_progress, money)
    if checked is not None:
        _warn_oversubscribed(checked, hardware.device_info(dev).cpu_count)
        check_packing_values(wl, [*checked.get("packing", []), start.packing])
    search = Search(run, space=checked or default_space(dev, wl, start), budget=budget,
                    limit_mib=total * (1 - memory_margin) if total else None, device=dev,
                    workload=wl, cancel=stop)  # fmt: skip
    search.on_burst = _reporter(search, progress)
    _drive(search, start)
    if run.interrupted:
        search.stopped = "interrupted"
    search.notes += run.notes()
    gate = _gate(search, start, parity_steps, wl, dev, began)
    result = _result(search, start, wl.name, dev, memory_margin, total, time.perf_counter() - began,
                     gate)  # fmt: skip
    result.saving = cost.tune_result_saving(result, price, money["epoch_samples"], hours)
    return result


def tune_on(
    run: Callable[[Knobs], BurstResult],
    space: Mapping[str, Any],
    *,
    budget: int,
    base: Knobs | None = None,
    limit_mib: float | None = None,
    name: str = "simulated",
    device: str = "cpu",
    parity: Check | None = None,
) -> TuneResult:
    """The same search and confirmation as ``tune``, with ``run`` where a burst would run.

    ``run(knobs)`` returns a BurstResult (a simulated landscape's, from the benchmarks' proving
    ground: ``benchmarks/proving_ground/``); ``device`` is the kind of device the bursts stand
    for (on ``cuda`` the search expects bf16 and channels_last to run faster: ``bottleneck``).
    Nothing is stored, no device is touched and no knob is checked for effect on this
    machine. This is how the proving ground runs the tuner on hundreds of landscapes.
    ``parity(reference, candidate)`` stands where the loss-parity check of a pick that changes
    rounding would run (``tuning.parity_gate``); None: no check.
    """
    check_budget(budget)
    start, began = Knobs() if base is None else base, time.perf_counter()
    dev = torch.device(device)
    search = Search(run, space=check_space(space), budget=budget, limit_mib=limit_mib,
                    device=dev, workload=None, cancel=threading.Event())  # fmt: skip
    _drive(search, start)
    gate = parity_gate.choose(_fitting(search), start, parity) if parity is not None else None
    return _result(search, start, name, dev, 0.0, None, time.perf_counter() - began, gate)


def _fitting(search: Search) -> list[Knobs]:
    """The configs that ran and fit, fastest first (the pick's order)."""
    return [c.knobs for c in candidates(search) if c.fits]


def _gate(
    search: Search, start: Knobs, steps: int | None, wl: Workload, dev: torch.device, began: float
) -> parity_gate.Gate | None:
    """The loss-parity gate over the fitting configs (``tuning.parity_gate``); None when it is
    off (``steps=0``) or the tune was stopped."""
    if steps == 0 or search.stopped in ("interrupted", "cancelled"):
        return None

    def result_of(knobs: Knobs) -> BurstResult | None:  # its last finished run, for its timing
        return next((r for r in reversed(search.runs.get(knobs, [])) if r.ok), None)

    check = parity_gate.MeasuredCheck(wl, dev, began, result_of, steps)
    return parity_gate.choose(_fitting(search), start, check)


def check_parity_steps(steps: Any) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or not 2 <= steps <= 10_000:
        allowed = "an integer from 2 to 10000, or 0 for no loss-parity check"
        raise InputError.not_allowed("parity_steps", steps, allowed)


def _drive(search: Search, start: Knobs) -> None:
    """Start, the guided moves (loader from the data wait, compute choices, batch to its
    edge), coordinate rounds under the reserve (with joint steps of two knobs while budget is
    left after they converge), then confirm; Ctrl-C ends it early."""
    try:
        search.reserve = lambda: confirmation_reserve(search, start)
        search.measure(start, "start")
        best = coordinate(search, guided(search, start))
        while not search.halted:  # the rounds converged with budget left: try pairs of knobs
            search.knob = None
            joint = joint_steps(search, best)
            if joint == best:
                break
            best = coordinate(search, joint)
        search.reserve, search.knob = (lambda: 0), None
        confirm(search, start, best)
        settle(search, start)
    except KeyboardInterrupt:
        search.stopped = "interrupted"


def contenders(search: Search, limit: int = MAX_CONTENDERS) -> list[Measured]:
    """The leader and the configs close to it (``tune_noise.close``), fastest first."""
    ranked = search.ranked()
    if not ranked:
        return []
    top, noise = ranked[0], search.noise_or_prior()
    return [m for m in ranked[:limit]
            if tune_noise.close(m.score or 0.0, len(m.runs), top.score or 0.0, len(top.runs),
                                noise)]  # fmt: skip


def confirmation_reserve(search: Search, start: Knobs) -> int:
    """Bursts the rounds leave for the confirmation, from what is known now: one for the
    start's interleaved re-measurement, and the runs the leader and its close runner-up still
    need at the noise measured so far; at most ``MAX_RESERVE_SHARE`` of the budget. None on
    a budget too small to both search and confirm."""
    if search.budget < 5 or search.score(start) is None:
        return 0
    need = tune_noise.runs_needed(search.noise_or_prior())
    owed = sum(max(0, need - len(m.runs)) for m in contenders(search, RESERVED_CONTENDERS)
               if m.knobs != start)  # fmt: skip
    return min(1 + owed, max(1, round(search.budget * MAX_RESERVE_SHARE)))


def confirm(search: Search, start: Knobs, answer: Knobs | None = None) -> None:
    """Interleaved passes over the start, the search's own ``answer`` and the contenders
    close to the leader, until each contender has the runs the measured noise asks for
    (``tune_noise.runs_needed``); a pass can change the ranking and the noise, so both are
    recomputed each pass.

    The start is in the first pass whatever its runs (its last run sits among the
    contenders': the speed-up divides by it), then in passes until it has ``START_RUNS``;
    runs past that go to the contenders first: which config wins matters more than how
    precisely the speed-up is known. The ``answer`` (where the moves converged, on a curve
    fitted to their runs) is confirmed even when one lucky burst elsewhere leads: otherwise
    the leader by one reading is all that is checked."""
    first = True
    while not search.halted:
        need = tune_noise.runs_needed(search.noise_or_prior())
        close = [m.knobs for m in contenders(search)]
        if answer is not None and search.score(answer) is not None and answer not in close:
            close = [answer, *close[: MAX_CONTENDERS - 1]]
        todo = [k for k in close if len(search.runs[k]) < need]
        if _start_due(search, start, need, first, bool(todo)) and start not in todo:
            todo.insert(0, start)
        if not todo:
            return
        for knobs in todo:
            stage = "start, again" if knobs == start else "re-measure"
            if search.measure(knobs, stage, again=True) is None:
                return
        first = False


def settle(search: Search, start: Knobs) -> None:
    """When the confirmed runs still cannot tell the pick from the start
    (``speedup.judge``), the budget the confirmation left goes to more interleaved passes over
    the start and the leaders (``RESERVED_CONTENDERS``), until the runs tell, each has
    ``SETTLE_RUNS``, or the budget ends. A tune that converged early would otherwise save a
    guess with bursts unspent; one that still cannot tell says so (``speedup_uncertain``)."""
    while not search.halted:
        pick = _doubtful_pick(search, start)
        if pick is None:
            return
        leaders = [m.knobs for m in contenders(search, RESERVED_CONTENDERS)]
        todo = [k for k in dict.fromkeys([start, pick, *leaders])
                if len(search.runs.get(k, [])) < SETTLE_RUNS]  # fmt: skip
        if len(todo) < 2 or start not in todo:  # a pass without the start compares nothing
            return
        for knobs in todo:
            stage = "start, again" if knobs == start else "re-measure (uncertain)"
            if search.measure(knobs, stage, again=True) is None:
                return


def _doubtful_pick(search: Search, start: Knobs) -> Knobs | None:
    """The tune's pick when the runs cannot tell it from the start (as ``_result`` judges
    it); None when they can, or when there is no pick other than the start."""
    found = candidates(search)
    best = next((c for c in found if c.fits), None)
    begin = next((c for c in found if c.knobs == start), None)
    if best is None or begin is None or best.knobs == start:
        return None
    if not best.samples_per_s or not begin.samples_per_s:
        return None
    speedup = best.samples_per_s / begin.samples_per_s
    _, _, doubt = judge(search, best.knobs, start, speedup, tune_drift(search, start, speedup))
    return best.knobs if doubt else None


def _start_due(search: Search, start: Knobs, need: int, first: bool, others_due: bool) -> bool:
    m = search.measured(start)
    if m is None or not m.fits:
        return False
    return first or len(m.runs) < (min(need, START_RUNS) if others_due else need)


# -- checking the input -----------------------------------------------------------------------


def check_budget(budget: Any) -> None:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        allowed = "an integer >= 1 (the most bursts the tune may run)"
        raise InputError.not_allowed("budget", budget, allowed)


def check_margin(margin: Any) -> None:
    ok = isinstance(margin, (int, float)) and not isinstance(margin, bool)
    if not ok or not math.isfinite(margin) or not 0 <= margin <= MAX_MARGIN:
        raise InputError.not_allowed(
            "memory_margin",
            margin,
            f"a number from 0 to {MAX_MARGIN} (the share of device memory kept free, e.g. 0.1)",
        )


def check_space(space: Any) -> dict[str, list[Any]]:
    """Each knob known, each value valid on its own, no empty lists; duplicates dropped."""
    if not isinstance(space, Mapping) or not space:
        raise InputError.not_allowed(
            "space", space, "at least one knob with its values, e.g. {'batch_size': [32, 64, 128]}"
        )
    checked: dict[str, list[Any]] = {}
    for name, values in space.items():
        checked[name] = list(dict.fromkeys(check_values(name, values)))
        if name == "world_size" and len(checked[name]) > 1:
            raise KnobError(
                "world_size",
                checked[name],
                "one value: the tuner tunes the knobs of a job of fixed size (more ranks always "
                "add samples/s); set world_size in base=, or compare sizes with wb.sweep",
            )
    return checked


def _warn_oversubscribed(space: Mapping[str, list[Any]], cores: int | None) -> None:
    """A user's space may offer more loader workers than cores (their machine, their call),
    but it is said: such workers share cores with each other and the training loop."""
    over = [w for w in space.get("num_workers", []) if cores and w > cores]
    if over:
        warnings.warn(f"num_workers={over} in the space: more loader workers than the "
                      f"{cores} cores this process may use; they will share cores with each "
                      "other and with the training loop", RuntimeWarning, stacklevel=3)  # fmt: skip


def default_space(dev: torch.device, wl: Workload, base: Knobs) -> dict[str, list[Any]]:
    """What is worth searching here: batch size around the start, workers up to the cores
    this process may run on (never more: an oversubscribed loader competes with the training
    loop), prefetch depth; on CUDA also pinned memory, precision, (image models)
    channels_last, (models whose attention is SDPA) the attention kernel
    (``engine.attention.attention_space``: auto and the fused kernels, never math), (models
    with Linear layers, on a GPU with float8 tensor cores and torchao installed) float8
    training (``engine.fp8.fp8_space``: off, tensorwise, rowwise; tried once precision is
    bf16) and the data path (``data_paths.path_space``: ``decode`` where the device
    can decode, ``data_format`` over the converted copies already built, ``loader=dali``
    where installed; nothing is built or installed for it). On any device, a workload with
    documents started at ``packing`` pad or pack compares the two
    (``engine.packing.packing_space``: never ``off``, which reads other data). Precision
    starts from PyTorch's own math (``default``); ``fp32-strict`` is not searched: IEEE
    everywhere is a numerics choice, never faster than ``default``. A job of several ranks
    whose model has blocks also searches ``sharding`` (``engine.sharding.sharding_space``: ddp
    and fsdp, and ``reshard_after_forward`` when the start already shards), on any device:
    what FSDP costs or saves is measured where it runs."""
    b = base.batch_size
    sizes = sorted({s for s in (max(1, b // 2), b, b * 2, b * 4, b * 8) if s <= 65536})
    cores = hardware.device_info(dev).cpu_count or 1
    workers = sorted({w for w in (0, 1, 2, 4, 8, 16) if w <= cores} | {min(cores, 16)})
    space: dict[str, list[Any]] = {
        "batch_size": sizes,
        "num_workers": workers,
        "prefetch_factor": [2, 4],
    }
    if dev.type == "cuda":
        fast = ["bf16"] if torch.cuda.get_device_capability(dev)[0] >= 8 else ["fp16"]
        space |= {"pin_memory": [False, True], "precision": ["default", "tf32", *fast]}
        if wl.image_dir is not None:
            space["channels_last"] = [False, True]
        space |= attention_space(wl, dev)
        space |= fp8_space(wl, dev)
        space |= path_space(wl, base, dev)
    space |= packing_space(wl, base)
    space |= sharding_space(wl, base)
    return space


# -- running and reporting --------------------------------------------------------------------


class _StoredBursts:
    """One burst per call, never raising for a burst. The tune stores its bursts itself
    (``run_burst`` gets ``record=False``), so that:

    - a burst refused before it ran becomes a stored ``error`` result, never fatal;
    - a burst stopped by Ctrl-C (``BurstInterrupted``) is returned, stored, and ends the tune
      (``interrupted``); a second Ctrl-C, with no result to keep, still stops at once;
    - a history that fails after a burst measured is a warning and a note, not a lost
      measurement: the burst keeps ``id`` None and the tune goes on.
    """

    def __init__(
        self, wl: Workload, dev: torch.device, stop: threading.Event,
        target: Store | None, window: BurstWindow,
        progress: Callable[[BurstProgress], None] | None, money: dict[str, Any],
    ) -> None:  # fmt: skip
        self.wl, self.dev, self.stop, self.window, self.target = wl, dev, stop, window, target
        self.progress, self.money = progress, money
        self.interrupted = False
        self.unstored: list[str] = []
        """The history's error for each burst it failed to store."""
        self.kept_in: Path | None = None
        """The pending file that keeps them for a retry (``history/pending.py``)."""

    def __call__(self, knobs: Knobs) -> BurstResult:
        try:
            r = run_burst(self.wl, knobs, window=self.window.settled(knobs), device=self.dev,
                          record=False, cancel=self.stop, progress=self.progress,
                          **self.money)  # fmt: skip
        except BurstInterrupted as stopped:
            self.interrupted, r = True, stopped.result
        except Exception as exc:  # refused before it ran: still a recorded result
            r = BurstResult(status="error", error=describe_error(exc), workload=self.wl.name,
                            device=str(self.dev), knobs=knobs)  # fmt: skip
        self._store(r)
        return r

    def _store(self, r: BurstResult) -> None:
        if self.target is None:
            return
        try:
            r.id = self.target.append(r.to_dict())
        except Exception as exc:  # the measurement stands; only its stored copy failed
            self.unstored.append(describe_error(exc))
            self.kept_in = self._keep(r, exc)
            where = (f"and in {self.kept_in} for 'workbench history --retry'" if self.kept_in
                     else "but cannot store them")  # fmt: skip
            warnings.warn(f"{self.target}: {self.unstored[-1]}; the tune keeps its bursts in "
                          f"its result {where}", StoreWarning, stacklevel=3)  # fmt: skip

    def _keep(self, r: BurstResult, exc: Exception) -> Path | None:
        """The pending file now holding ``r`` for a retry, or None where it cannot."""
        try:
            return keep_pending(r.to_dict(), self.target, exc)
        except Exception:
            return None

    def notes(self) -> list[str]:
        if not self.unstored:
            return []
        where = f"this result and {self.kept_in}" if self.kept_in else "this result only"
        return [f"{len(self.unstored)} burst(s) measured but not stored in the history "
                f"({self.unstored[-1]}): they are in {where}"]  # fmt: skip


def _reporter(
    search: Search, progress: Callable[[TuneProgress], None] | None
) -> Callable[[BurstResult, str], None] | None:
    if progress is None:
        return None

    def report(result: BurstResult, stage: str) -> None:
        ranked = search.ranked()
        best = ranked[0] if ranked else None
        progress(
            TuneProgress(
                result=result,
                stage=stage,
                knob=search.knob,
                bursts=len(search.bursts),
                budget=search.budget,
                best=best.knobs if best else None,
                best_samples_per_s=best.score if best else None,
            )
        )

    return report


def _result(
    search: Search,
    start: Knobs,
    workload: str,
    dev: torch.device,
    margin: float,
    total: float | None,
    wall_s: float,
    gate: parity_gate.Gate | None = None,
) -> TuneResult:
    found = candidates(search)
    best = next((c for c in found if c.fits), None)
    begin = next((c for c in found if c.knobs == start), None)
    if gate is not None and best is not None and best.knobs != start:  # the numerics' say
        wanted = gate.pick or start
        best = next((c for c in found if c.knobs == wanted), begin)
    noise, _ = search.noise()
    speedup = None
    if best and begin and best.samples_per_s and begin.samples_per_s:
        speedup = best.samples_per_s / begin.samples_per_s
    pick = best.knobs if best and speedup and best.knobs != start else None  # not the start
    stopped = search.stopped or ("budget" if len(search.bursts) >= search.budget else "converged")
    drift = tune_drift(search, start, speedup if pick is not None else None)
    low, high, doubt = None, None, ""
    if pick is not None and speedup:
        low, high, doubt = judge(search, pick, start, speedup, drift)
    result = TuneResult(
        best=best.knobs if best else None,
        best_result=best.representative if best else None,
        start=start,
        start_result=begin.representative if begin else None,
        speedup=speedup,
        speedup_low=low,
        speedup_high=high,
        start_runs=begin.ok_runs if begin else 0,
        noise_pct=None if noise is None else 100.0 * noise,
        candidates=found,
        bursts=list(search.bursts),
        budget=search.budget,
        memory_margin=margin,
        limit_mib=search.limit_mib,
        device_mem_mib=total,
        stopped=stopped,
        wall_s=wall_s,
        notes=list(search.notes),
        workload=workload,
        device=str(dev),
        drift_pct=drift.drift_pct,
        drift_pct_per_burst=drift.pct_per_burst,
        speedup_uncertain=bool(doubt) if pick is not None else None,
        speedup_doubt=doubt,
        drift_sentence=drift.sentence,
        parity=gate.evidence if gate is not None else None,
        parity_refused=list(gate.refused) if gate is not None else [],
        parity_s=gate.seconds if gate is not None and gate.checks else None,
    )
    if gate is not None:
        result.notes += gate.notes
    return result


def tune_drift(search: Search, start: Knobs, speedup: float | None) -> Drift:
    """The drift across the tune, read from the start's runs where they ran among the bursts,
    against the speed-up's effect (``100 * |speedup - 1|``; none when ``speedup`` is None)."""
    runs = search.runs.get(start, [])
    reference = [any(r is run for run in runs) for r in search.bursts]
    sps = [r.samples_per_s if r.ok else None for r in search.bursts]
    effect = None if speedup is None else 100.0 * abs(speedup - 1.0)
    return estimate_drift(sps, reference, effect_pct=effect, words=TUNE_WORDS)


__all__ = ["Candidate", "TuneProgress", "TuneResult", "default_space", "tune", "tune_on"]
