"""The in-process burst: one short, real training run, measured so its numbers can be trusted.

The method (DESIGN.md, "Measurement method"):

1. Set-up (dataset, loader, model, optimizer) is timed as ``setup_s``. On CUDA its memory peak
   is kept apart, as ``setup_peak_mem_mib``, and the peak counters restart when set-up ends,
   just before warm-up (``_restart_peak``): set-up runs passes training never runs again (the
   eager check of the first batch, the attention probe, compile's first trace, fp8's checks),
   and left in ``peak_mem_mib`` they would hide what compile or fp8 save.
2. Warm-up steps run first and are timed as ``warmup_s``: they absorb torch.compile
   (``compile_s``), cuDNN autotuning, loader worker start-up and allocator growth, none of
   which a long training run pays per step.
3. The measured window is time-boxed (``seconds``) with a minimum step count. The device is
   synchronized at both ends of the window, and only there: a sync per step would stop the host
   from queueing ahead and make the measurement slower than real training.
   Throughput = samples trained in the window / the window's wall time, each batch's samples
   counted by the rule set-up decided on the first batch (``batches.sample_rule``: every
   tensor's leading dimension, the target's where they disagree, or ``samples_of``).
4. Per-step samples (step time, data wait, copy) are summarized by median and IQR; a burst
   whose IQR exceeds 10% of the median is flagged ``noisy``.

A Lightning workload (``Workload.from_lightning``) in one process runs Lightning's own
``Trainer.fit`` in place of steps 2 and 3, timed by the same rules from the Trainer's hooks: for
a Lightning user that is the loop production runs (``workbench.engine.lightning_fit``).

One burst at a time: a burst waits for the process's burst slot (``workbench.engine.slot``), and
takes it from whoever holds it (a panel's burst, a tune), who is told to stop first.

Each burst runs on a thread of its own, under its own device, with the calling thread's OpenMP
team released first, so it meets the conditions of the user's loop on the main thread
(``workbench.engine.burst_thread``), and checks its own numbers
(``workbench.engine.selfcheck``): what fails lands in ``suspect``.

Failure is a result: out of memory gives ``status="oom"`` (memory is freed, the next burst runs
at full size), any other exception inside the burst gives ``status="error"`` with the reason; a
device fault that breaks the CUDA context for good says so, and every later burst in the process
says to restart it.
Bad arguments (an invalid knob, an unknown workload, a missing data folder) raise before any
work starts. A first Ctrl-C stops the burst at the next step boundary, shuts the loader's
workers down and raises ``BurstInterrupted`` (a KeyboardInterrupt carrying the result); a
second one interrupts at once.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from workbench.core import ambient, cost
from workbench.core.errors import InputError
from workbench.core.knobs import Knobs
from workbench.core.nccl import flags as nccl_flags
from workbench.core.results import BurstResult, spread, utc_now
from workbench.engine import compiler, hardware, memory, mig, oom
from workbench.engine.attention import watch_attention
from workbench.engine.batches import Batch, SampleRule, sample_rule, tensor_leaves
from workbench.engine.burst_thread import run_as_production
from workbench.engine.epochs import short_epochs_report
from workbench.engine.failures import (
    compile_hint,
    cuda_health,
    is_oom_error,
    note_failure,
    traceback_text,
)
from workbench.engine.lightning_fit import fit_with_trainer
from workbench.engine.loaders import BatchStream, build_loader, drop_before_window
from workbench.engine.loaders.device_batches import decode_ran
from workbench.engine.loop import BurstProgress, Clock, LoopControl
from workbench.engine.packing import RealTokens, documents_view, real_token_figures
from workbench.engine.plan import Plan, plan_burst
from workbench.engine.selfcheck import burst_problems
from workbench.engine.signals import graceful_sigint
from workbench.engine.slot import exclusive
from workbench.engine.telemetry import Sampler, TelemetrySummary, telemetry_problems
from workbench.engine.timing import StepSamples, StepTimer, synchronize
from workbench.engine.training import (
    TrainState,
    build_train_state,
    check_model_takes,
    count_flops_live,
    micro_step,
    numerics_scope,
    optimizer_step,
    precision_state,
    to_device,
    training_forward,
)
from workbench.engine.window import BurstWindow
from workbench.engine.workloads import Workload, count_train_flops, source_names
from workbench.history.store import record_result

BurstPlan = LoopControl
"""The loop's settings under their old name (``engine.loop.LoopControl``); the burst's
decisions are its :class:`~workbench.engine.plan.Plan`."""


@dataclass
class _Measured:
    setup_s: float
    warmup_s: float
    compile_s: float | None
    wall_window: tuple[float, float]  # time.perf_counter() bounds, for the telemetry sampler
    measured_s: float
    steps: int
    samples: int
    timing: StepSamples
    flops_per_sample: float | None
    final_loss: float | None
    epochs: int
    cancelled: bool
    ran_on: str | None = None
    """The device the model's parameters were on, named as the result names devices."""
    compile_report: compiler.CompileReport | None = None
    loader_device_mem_mib: float | None = None
    no_effect: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    samples_from: str | None = None
    short_epochs: dict[str, Any] | None = None
    decode: str | None = None
    h2d_bytes_per_sample: float | None = None
    attention_backend: str | None = None
    real_tokens: int | None = None
    """A document burst's real (non-pad) tokens in the window (``engine.packing``)."""
    fp8_linears: int | None = None


@dataclass(frozen=True)
class _Running:
    """What the loop needs once set-up is done: the built state and stream, the plan's
    decisions, the device, the loop's settings and how a batch's samples are counted."""

    state: TrainState
    stream: BatchStream
    plan: Plan
    dev: torch.device
    loop: LoopControl
    rule: SampleRule


def run_in_process(
    wl: Workload,
    knobs: Knobs,
    dev: torch.device,
    window: BurstWindow,
    *,
    record: bool = True,
    store: object = None,
    cancel: threading.Event | None = None,
    progress: Callable[[BurstProgress], None] | None = None,
    clock: Clock = time.perf_counter,
    money: tuple[float | None, float | None] = (None, None),
    plan: Plan | None = None,
) -> BurstResult:
    """One measured burst in this process, holding the burst slot; recorded unless ``record``
    is False. ``workbench.run_burst`` decides between this and a torchrun job: a ``plan``
    (``engine.plan``; None: planned here) that needs fresh processes is refused here, never
    measured wrongly. ``money``: the price per hour and epoch size its ``cost`` is figured
    from (``finish``)."""
    plan = plan_burst(knobs, wl, dev) if plan is None else plan
    if plan.processes:  # run_burst sends these to torchrun; a caller's slip
        raise InputError(
            "world_size > 1, or NCCL variables or alloc_conf on a GPU, need a torchrun job: "
            "workbench.run_burst starts one; run_in_process is one process"
        )
    loop = LoopControl(window, cancel or threading.Event(), progress, clock)
    with exclusive(loop.stop) as got, graceful_sigint(loop.stop) as sigint:
        result = (measure_here(wl, knobs, dev, loop, plan) if got
                  else superseded(wl, knobs, dev, window, plan))  # fmt: skip
    finish(result, money, store)
    record_result(result, record, store)
    if sigint.fired:
        raise BurstInterrupted(result)
    return result


class BurstInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a burst at a step boundary. Raised after its loader workers are shut
    down and its (cancelled) result recorded; ``result`` holds that result, so a caller that
    runs many bursts (a tune) keeps it. Catching KeyboardInterrupt still catches this."""

    def __init__(self, result: BurstResult):
        super().__init__("burst interrupted")
        self.result = result


def measure_here(
    wl: Workload, knobs: Knobs, dev: torch.device, loop: LoopControl, plan: Plan | None = None
) -> BurstResult:
    """The burst in this process (the kernel's, or one torchrun rank's); nothing recorded.
    ``plan``: its decisions (None: planned here, before anything is built). Run where it
    measures what the caller's own loop would get (``engine.burst_thread``)."""
    plan = plan_burst(knobs, wl, dev) if plan is None else plan
    run = lambda: _measure_on_device(wl, knobs, dev, loop, plan)  # noqa: E731
    return run_as_production(run, loop.stop, dev.type)


def _measure_on_device(
    wl: Workload, knobs: Knobs, dev: torch.device, loop: LoopControl, plan: Plan
) -> BurstResult:
    result = _new_result(wl, knobs, dev, loop.window.seconds, plan)
    broken = cuda_health(dev)
    if broken is not None:
        result.status, result.error = "error", broken
        return result
    flags_before = precision_state()
    with _device_scope(dev):
        _free_memory(dev, reset_peak=True, collect=False)
        sampler = Sampler(dev).start()
        measured, parts = None, {}  # parts: the memory figures known so far, kept on failure
        try:
            with numerics_scope(plan):
                measured = _guarded(wl, knobs, dev, loop, plan, result, parts)
        finally:
            if measured is not None:
                sampler.mark_window(*measured.wall_window)
            telemetry = sampler.stop()
            _free_memory(dev, reset_peak=False, collect=result.status != "ok")
        if measured is not None:
            _fill_measurement(result, measured, wl)
        _fill_memory_and_telemetry(result, dev, telemetry)
        _fill_breakdown(result, dev, parts, telemetry)
    step_ms = measured.timing.step_ms if measured is not None else []
    ran_on = measured.ran_on if measured is not None else None
    checks = (flags_before, precision_state(), ran_on, telemetry_problems(telemetry))
    result.suspect = burst_problems(result, step_ms, *checks)
    return result


def _device_scope(dev: torch.device) -> contextlib.AbstractContextManager[Any]:
    """Make the burst's GPU the current device of this thread (streams, events, the pinning
    thread of the DataLoader and library handles all follow the current device)."""
    return torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext()


def superseded(
    wl: Workload, knobs: Knobs, dev: torch.device, window: BurstWindow, plan: Plan | None = None
) -> BurstResult:
    """A burst cancelled while it waited for another burst to let go of the slot. Its
    ``no_effect`` is its plan's (planned here where none is given); its ``plan`` stays None
    unless it was planned before it waited."""
    result = _new_result(wl, knobs, dev, window.seconds, plan or plan_burst(knobs, wl, dev))
    result.plan = plan.to_dict() if plan is not None else None
    result.status, result.error = "cancelled", "cancelled before it started"
    return result


def _new_result(
    wl: Workload, knobs: Knobs, dev: torch.device, seconds: float, plan: Plan
) -> BurstResult:
    info = hardware.device_info(dev)
    return BurstResult(
        workload=wl.name,
        device=str(dev),
        device_name=info.name,
        device_mem_mib=info.total_mem_mib,
        mig=info.mig.to_dict() if info.mig else None,
        knobs=knobs,
        seconds=float(seconds),
        no_effect=dict(plan.no_effect),
        plan=plan.to_dict(),
        nccl_flags=nccl_flags(knobs.nccl),
        created_at=utc_now(),
        versions=hardware.versions(),
        workload_source=source_names(wl),
    )


def _guarded(
    wl: Workload,
    knobs: Knobs,
    dev: torch.device,
    loop: LoopControl,
    plan: Plan,
    result: BurstResult,
    parts: dict[str, Any],
) -> _Measured | None:
    """Run the burst; turn OOM and errors into the result's status instead of raising."""
    try:
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            torch.manual_seed(0)
            return _measure(wl, knobs, dev, loop, plan, parts)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a failed burst is a result; the traceback frames die here
        result.status = "oom" if is_oom_error(exc) else "error"
        result.error = note_failure(exc) + compile_hint(exc, knobs.compile)
        result.traceback = traceback_text(exc)  # as text: the frames are not kept
        return None


def _measure(
    wl: Workload,
    knobs: Knobs,
    dev: torch.device,
    loop: LoopControl,
    plan: Plan,
    parts: dict[str, Any],
) -> _Measured:
    t0 = loop.clock()
    loop.report("setup", 0.0, 0)
    wl = documents_view(wl, knobs, dev)  # packing: its documents' rows (a KnobError if none)
    stream = build_loader(wl, knobs, dev, shard=loop.coord.shard,
                          decode_on_device=plan.decode_on_device)  # fmt: skip
    try:
        state = build_train_state(wl, knobs, dev, wrap=loop.coord.wrap_model, plan=plan)
        state.real_tokens = RealTokens.of(wl, knobs)
        parts["static"] = memory.static_parts(state.plain or state.model, state.optimizer)
        batch, rule, host_bytes = _check_first_batch(state, stream, knobs, dev, wl, plan, parts)
        setup_s = loop.clock() - t0
        h2d_first = host_bytes / max(1, rule.count(batch)) if host_bytes is not None else None
        flops = _count_flops(wl, state, batch, rule)
        del batch  # let go before any step: it would stay in the peak memory
        parts["setup_peak_mib"] = _restart_peak(dev)  # set-up ends here; warm-up follows
        running = _Running(state, stream, plan, dev, loop, rule)
        if plan.trainer:  # a LightningModule in this process: its own Trainer.fit
            measured = _fit_with_trainer(running, knobs)
        else:
            measured = _warm_up_and_window(running)
        measured.no_effect = {**(state.no_effect or {}), **measured.no_effect}
        measured.notes = list(state.notes)
        parts["static"] = memory.static_parts(state.plain or state.model, state.optimizer)
    finally:
        stream.close()
    measured.loader_device_mem_mib = _loader_device_mem(stream)  # DALI's is final once closed
    measured.decode = decode_ran(stream, wl)
    measured.attention_backend = state.attention_backend
    measured.fp8_linears = state.fp8_linears
    if getattr(stream, "note", None):  # decode=gpu: which decoder ran, and how
        measured.notes.append(stream.note)
    measured.h2d_bytes_per_sample = getattr(stream, "h2d_bytes_per_sample", h2d_first)
    measured.setup_s = setup_s
    measured.flops_per_sample, measured.samples_from = flops, rule.source
    return measured


def _warm_up_and_window(run: _Running) -> _Measured:
    """The burst's own loop: warm-up steps, then the measured window. It reads the plan's
    decisions (compiled or not, pinned copies), never the raw knobs: the state was built
    from them already."""
    counts = [compiler.read_counts()] if run.plan.compile is not None else None
    warmup_s, compile_s = _warm_up(run)
    if counts is not None:
        counts.append(compiler.read_counts())
    drop_before_window(run.stream)  # cache=cold only
    measured = _window(run)
    if counts is not None:
        measured.compile_report = compiler.report(*counts, compiler.read_counts())
    measured.ran_on = _device_name(next(run.state.model.parameters(), None))
    measured.warmup_s, measured.compile_s = warmup_s, compile_s
    return measured


def _fit_with_trainer(run: _Running, knobs: Knobs) -> _Measured:
    """A Lightning workload in one process: Lightning's own ``Trainer.fit`` of the module, in
    place of the warm-up and the window, timed by the same rules (``engine.lightning_fit``).
    The Trainer builds its own optimizer (``configure_optimizers``): the memory figures take
    that one."""
    state = run.state
    fit = fit_with_trainer(state.plain or state.model, run.stream, knobs, run.dev, run.loop,
                           run.rule, run.loop.report)  # fmt: skip
    if fit.optimizer is not None:
        state.optimizer = fit.optimizer
    timed = {f.name: getattr(fit, f.name) for f in fields(fit) if f.name != "optimizer"}
    # no_effect stays empty: what Trainer.fit cannot honour is the plan's (engine.plan)
    return _Measured(setup_s=0.0, compile_s=None, flops_per_sample=None, **timed)


def _device_name(param: torch.Tensor | None) -> str | None:
    """Where the model's parameters are, named as results name devices ("cuda:1")."""
    if param is None:
        return None
    where = param.device
    return f"cuda:{where.index}" if where.type == "cuda" else str(where)


def _loader_device_mem(stream: BatchStream) -> float | None:
    """Device memory the loader's own pools hold (DALI's), outside torch's allocator."""
    read = getattr(stream, "device_mem_mib", None)
    return read() if callable(read) else None


def _check_first_batch(
    state: TrainState,
    stream: BatchStream,
    knobs: Knobs,
    dev: torch.device,
    wl: Workload,
    plan: Plan,
    parts: dict[str, Any],
) -> tuple[Batch, SampleRule, int | None]:
    """Set-up's early check: one batch from the stream, on the device. How its samples are
    counted is decided here, once, from every tensor's leading dimension (``sample_rule``: a
    batch nothing decides is refused, naming ``samples_of``); then it goes through the model
    and the loss (``check_model_takes``), so a batch the model cannot take fails here, before
    the window, with the batch's structure and the hook that fits; its attention calls are
    watched (``watch_attention``: the kernel that runs them, or the ``attention`` value this
    model cannot take, refused here). Returns the batch, for the FLOP count, the rule every
    step counts with, and the bytes the batch copied from host memory to a GPU (None where
    nothing was copied: a CPU burst, a stream on the device)."""
    batch = next(stream)
    host_bytes = None
    if not stream.on_device:
        if dev.type == "cuda":  # the whole batch crosses; counted before it does
            host_bytes = sum(t.nbytes for t in tensor_leaves(batch))
        batch = to_device(batch, state, dev, plan.pinned_copy)
    rule = sample_rule(batch, wl.samples_of)
    with watch_attention(plan.attention, strict=False) as seen:  # eval mode: not what trains
        check_model_takes(state, batch, wl)
    _check_attention(state, batch, knobs, plan, parts, seen.calls > 0)
    return batch, rule, host_bytes


def _check_attention(
    state: TrainState,
    batch: Batch,
    knobs: Knobs,
    plan: Plan,
    parts: dict[str, Any],
    calls_sdpa: bool,
) -> None:
    """A training-mode forward (with gradients, its graph dropped), its SDPA calls watched:
    the kernel each runs in training (``attention_backend``), or a KnobError when the chosen
    ``attention`` cannot run them (``engine.attention``). Without compile it is the forward
    that counts the activations; compiled, one is run for a model that calls SDPA."""
    with watch_attention(plan.attention) as seen:
        if plan.compile is None:  # compiled graphs save other tensors than the eager model
            parts["activations_mib"] = memory.activation_mib(state, batch)
        elif calls_sdpa:
            training_forward(state, batch)
    state.attention_backend = seen.ran()
    state.no_effect = {**(state.no_effect or {}), **seen.no_effect(plan.attention)}


def _count_flops(wl: Workload, state: TrainState, batch: Batch, rule: SampleRule) -> float | None:
    """Training FLOPs per sample, counted while the first batch is at hand (before the
    warm-up, which must not hold it): on the meta device, or, for a model that cannot run
    there, on its own parameters (``count_flops_live``); per sample as ``rule`` counts them."""
    flops = count_train_flops(wl, batch, rule=rule)
    return flops if flops is not None else count_flops_live(state, batch, rule)


def _warm_up(run: _Running) -> tuple[float, float | None]:
    """Steps outside the window; returns (warmup_s, compile_s)."""
    loop = run.loop
    start = loop.clock()
    step_s: list[float] = []
    for _ in range(loop.window.warmup_steps):
        if loop.stop.is_set():
            break
        t = loop.clock()
        _train_one_step(run, None)
        synchronize(run.dev)
        step_s.append(loop.clock() - t)
        loop.report("warmup", loop.clock() - start, len(step_s))
    compile_s = None
    if run.plan.compile is not None and step_s:
        rest = sorted(step_s[1:])
        compile_s = step_s[0] - (rest[len(rest) // 2] if rest else 0.0)
    return loop.clock() - start, compile_s


def _train_one_step(run: _Running, timer: StepTimer | None) -> int:
    """One optimizer step over ``grad_accum`` micro-batches; returns the samples it trained,
    each micro-batch counted by ``rule`` (a partial last batch counts what it holds)."""
    state, stream = run.state, run.stream
    samples = 0
    for i in range(state.grad_accum):
        wait_start = time.perf_counter()
        batch = next(stream)
        if timer is not None:
            timer.add_wait(time.perf_counter() - wait_start)
        if state.real_tokens is not None:  # on the host, before the copy: no device sync
            state.real_tokens.add(batch)
        marks = timer.copy_marks() if timer is not None and not stream.on_device else None
        if not stream.on_device:
            batch = to_device(batch, state, run.dev, run.plan.pinned_copy)
        if timer is not None:
            timer.copy_done(marks)
        samples += run.rule.count(batch)
        with state.micro_batch_sync(last=i == state.grad_accum - 1):
            state.last_loss = micro_step(state, batch)
    optimizer_step(state)
    return samples


def _window(run: _Running) -> _Measured:
    """The measured window. Ranks of a DDP job start it together, agree on its last step
    (rank 0's clock decides, over a host-side channel: no device sync per step) and end it
    together, so the window's wall time covers the slowest rank."""
    state, stream, loop = run.state, run.stream, run.loop
    timer = StepTimer(run.dev, loop.clock)
    steps = samples = 0
    epochs_before = stream.epochs
    if state.real_tokens is not None:
        state.real_tokens.reset()  # the window's tokens, not the warm-up's
    synchronize(run.dev)
    loop.coord.barrier()
    start, wall_start = loop.clock(), time.perf_counter()
    while not loop.stop.is_set():
        timer.step_start()
        trained = _train_one_step(run, timer)
        timer.step_end()
        steps += 1
        samples += trained
        elapsed = loop.clock() - start
        loop.report("measuring", elapsed, steps)
        done = elapsed >= loop.window.seconds and steps >= loop.window.min_steps
        if loop.coord.agree_stop(done):
            break
    timing = timer.finish()  # records the closing mark and synchronizes
    loop.coord.barrier()
    measured_s = loop.clock() - start
    loss = state.last_loss
    loop.report("done", measured_s, steps)
    return _Measured(
        setup_s=0.0,
        warmup_s=0.0,
        compile_s=None,
        wall_window=(wall_start, time.perf_counter()),
        measured_s=measured_s,
        steps=steps,
        samples=samples,
        timing=timing,
        flops_per_sample=None,
        final_loss=float(loss) * state.grad_accum if loss is not None else None,
        epochs=stream.epochs,
        cancelled=loop.stop.is_set(),
        real_tokens=state.real_tokens.total if state.real_tokens is not None else None,
        short_epochs=short_epochs_report(
            stream.epoch_handling,
            stream.batches_per_epoch,
            stream.epochs - epochs_before,
            steps * state.grad_accum,
            timing.step_ms,
        ),
    )


def _fill_measurement(r: BurstResult, m: _Measured, wl: Workload) -> None:
    r.status = "cancelled" if m.cancelled else "ok"
    if m.cancelled:
        r.error = "stopped before the window closed"
    r.setup_s, r.warmup_s, r.compile_s = m.setup_s, m.warmup_s, m.compile_s
    r.steps, r.samples, r.measured_s = m.steps, m.samples, m.measured_s
    r.samples_from = m.samples_from
    r.loader_epochs, r.final_loss = m.epochs, m.final_loss
    r.short_epochs = m.short_epochs
    r.loader_device_mem_mib = m.loader_device_mem_mib
    r.decode, r.h2d_bytes_per_sample = m.decode, m.h2d_bytes_per_sample
    r.attention_backend = m.attention_backend
    r.fp8_linears = m.fp8_linears
    r.no_effect = {**m.no_effect, **r.no_effect}  # the plan's reason stands where both speak
    r.notes = list(m.notes)
    _fill_compile(r, m.compile_report)
    if m.steps == 0 or m.measured_s <= 0:
        return
    r.samples_per_s = m.samples / m.measured_s
    if wl.tokens_per_sample:
        r.tokens_per_s = r.samples_per_s * wl.tokens_per_sample
    if m.real_tokens is not None and wl.tokens_per_sample:  # packing: real tokens only
        figures = real_token_figures(m.samples, m.real_tokens, wl.tokens_per_sample,
                                     m.measured_s)  # fmt: skip
        r.samples, r.samples_per_s = figures["samples"], figures["samples_per_s"]
        r.tokens_per_s, r.pad_share_pct = figures["tokens_per_s"], figures["pad_share_pct"]
        r.samples_from = "real tokens"
    _fill_step_stats(r, m.timing, m.measured_s)
    _fill_flops(r, m.flops_per_sample)


def _fill_compile(r: BurstResult, report: compiler.CompileReport | None) -> None:
    if report is None:
        return
    r.compile_graphs, r.compile_graph_breaks = report.graphs, report.graph_breaks
    r.compile_window_graphs = report.window_graphs
    if report.fallback:
        r.no_effect["compile"] = f"torch.compile fell back to eager: {report.fallback}"


def _fill_step_stats(r: BurstResult, t: StepSamples, measured_s: float) -> None:
    step = spread(t.step_ms)
    r.step_ms_p50, r.step_ms_iqr, r.noisy = step.p50, step.iqr, step.noisy
    r.step_ms = [round(v, 3) for v in t.step_ms]
    r.step_ms_mean = statistics.fmean(t.step_ms) if t.step_ms else None
    r.data_wait_ms_p50 = spread(t.data_wait_ms).p50
    r.data_wait_pct = 100.0 * sum(t.data_wait_ms) / 1e3 / measured_s
    r.h2d_ms_p50 = spread(t.h2d_ms).p50
    # The rest of the step is compute (plus launch overhead): an approximate split for charts.
    rest = [max(0.0, s - w) for s, w in zip(t.step_ms, t.data_wait_ms, strict=False)]
    copy_ms = (r.h2d_ms_p50 or 0.0) * r.knobs.grad_accum
    r.compute_ms_p50 = max(0.0, (spread(rest).p50 or 0.0) - copy_ms) if rest else None


def _fill_flops(r: BurstResult, flops_per_sample: float | None) -> None:
    r.flops_per_sample = flops_per_sample
    if flops_per_sample is None or r.samples_per_s is None:
        return
    r.achieved_tflops = flops_per_sample * r.samples_per_s / 1e12
    sms = r.mig["sms"] if r.mig else None  # a MIG slice: its share of the GPU's peak
    peak = hardware.peak_flops(r.device_name or "", r.knobs.precision, sms=sms)
    r.peak_tflops = peak / 1e12 if peak else None
    r.mfu_pct = hardware.estimate_mfu(flops_per_sample, r.samples_per_s, peak)


def _fill_memory_and_telemetry(r: BurstResult, dev: torch.device, t: TelemetrySummary) -> None:
    if dev.type == "cuda":
        r.peak_mem_mib = torch.cuda.max_memory_allocated(dev) / 2**20
        r.peak_reserved_mib = torch.cuda.max_memory_reserved(dev) / 2**20
        r.peak_mem_kind = "allocated"
    else:
        # PSS of the process and its loader workers (each shared page once), summed RSS where
        # PSS cannot be read; peak_mem_kind says which (workbench/engine/telemetry.py).
        r.peak_mem_mib, r.peak_mem_kind = t.host_mem_peak_mib, t.host_mem_kind
    r.gpu_util_pct, r.power_w, r.temp_c = t.gpu_util_pct, t.power_w, t.temp_c
    r.gpu_mem_used_mib, r.mem_busy_pct = t.gpu_mem_used_mib, t.mem_busy_pct
    if r.mig:  # unknown, not 0 and not the whole GPU's (engine/mig.py)
        r.gpu_util_pct = r.mem_busy_pct = None
        r.notes.append(f"on {r.mig['name']}: {mig.UTILISATION_UNAVAILABLE}")
    r.sm_clock_mhz, r.throttle_reasons = t.sm_clock_mhz, list(t.throttle_reasons)
    r.mem_clock_mhz, r.clock_drop_pct, r.nvml = t.mem_clock_mhz, t.clock_drop_pct, t.nvml
    r.cpu_util_pct, r.telemetry = t.cpu_util_pct, t.source


def _fill_breakdown(
    r: BurstResult, dev: torch.device, parts: dict[str, Any], t: TelemetrySummary
) -> None:
    """The peak's parts (``workbench.engine.memory``), what one rank holds at rest (its
    shards, under FSDP), fragmentation, set-up's own peak (``_restart_peak``; None where
    set-up did not finish), and on a CPU the memory timeline."""
    cuda = dev.type == "cuda"
    r.setup_peak_mem_mib = parts.get("setup_peak_mib")
    peak = r.peak_mem_mib
    if cuda and r.status == "oom":  # the failed allocation is not in the peak: the state is
        peak = torch.cuda.max_memory_allocated(dev) / 2**20
    static = parts.get("static")
    r.memory_breakdown = memory.breakdown(static, parts.get("activations_mib"), peak, cuda)
    if static is not None:
        r.param_mib_per_rank = static["params_mib"]
        r.grad_mib_per_rank = static["grads_mib"]
        r.optimizer_state_mib_per_rank = static["optimizer_mib"]
    if cuda:
        r.fragmentation_pct = memory.fragmentation_pct(r.peak_mem_mib, r.peak_reserved_mib)
    else:
        r.mem_timeline = [list(p) for p in t.host_mem_timeline]


def _restart_peak(dev: torch.device) -> float | None:
    """Set-up is over and warm-up comes next: keep set-up's peak (MiB allocated) and restart
    the peak counters, so ``peak_mem_mib`` is the training peak (warm-up and window). Why:
    set-up's peak is not the training peak; its eager passes (the first batch checked, the
    attention probe, compile's first trace) can exceed a compiled or fp8 step's and would
    hide their savings. The cache is emptied first, so ``peak_reserved_mib`` starts from what
    training holds, not from blocks set-up left cached. None on a CPU: a process's resident
    memory has no such counter to restart (``peak_mem_mib`` is then the whole burst's)."""
    if dev.type != "cuda":
        return None
    setup_peak = torch.cuda.max_memory_allocated(dev) / 2**20
    _free_memory(dev, reset_peak=True, collect=False)
    return setup_peak


def _free_memory(dev: torch.device, *, reset_peak: bool, collect: bool = True) -> None:
    """Release what an earlier (or failed) burst held; optionally restart the peak counters.

    A full ``gc.collect()`` costs about 0.3 s in a process with torch loaded, so it runs only
    where it matters: on CUDA (cached blocks are only returned once nothing references them)
    and after a failure (a traceback keeps frames, and their tensors, in reference cycles).
    """
    if dev.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        if reset_peak:
            torch.cuda.reset_peak_memory_stats(dev)
    elif collect:
        gc.collect()


def finish(result: BurstResult, money: tuple[float | None, float | None], store: object) -> None:
    """What a result gets after it is measured, in the process that started the burst: the
    environment around it (``core.ambient``: the kernel's own, never silent; the same again
    for a torchrun job, whose ranks got this process's), its cost with a price, and, out of
    memory, its explanation against the history (``workbench.core.cost``, ``engine.oom``)."""
    ambient.stamp(result, result.knobs, result.device.split(":")[0])
    result.cost = cost.burst_cost(result, *money)
    if result.status == "oom":
        result.oom_report = oom.explain_from_store(result, store)
