"""One training step, built from the knobs: precision, layout, compile, loss scaling.

Every knob here changes real code: ``precision`` selects autocast (bf16/fp16) or the fp32 math
mode (PyTorch's default, IEEE everywhere, or TF32 tensor cores), fp16 gets a GradScaler,
``channels_last`` converts the model and the image tensors of every batch to NHWC, ``compile``
wraps the model in
``torch.compile``. Batches are any nest of tensors (``workbench.engine.batches``); the workload's
``forward`` hook feeds the input to the model and its loss gets the raw output.
Global backend flags (TF32, cudnn.benchmark) are set for the burst and restored afterwards, so
a burst never leaves the user's kernel in a different numeric mode.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from workbench.core.errors import KnobError
from workbench.core.knobs import Knobs
from workbench.core.torch_math import TORCH_DEFAULTS
from workbench.engine import compiler
from workbench.engine.attention import sdpa_scope
from workbench.engine.batches import (
    Batch,
    BatchError,
    SampleRule,
    describe_batch,
    flop_rows,
    move_batch,
    split_batch,
)
from workbench.engine.failures import describe_error, is_oom_error
from workbench.engine.fp8 import COMPILE_NOTE, convert_for_burst, refusal_of
from workbench.engine.memory_knobs import NO_BLOCKS, apply_activation_checkpointing, with_impl
from workbench.engine.plan import Plan, math_switches, plan_burst
from workbench.engine.plan import no_effect as no_effect  # the plan's; callers import it here
from workbench.engine.sharding import is_sharded, sharded_notes
from workbench.engine.workloads import Workload
from workbench.engine.workloads.base import call_model, default_loss, logits_of
from workbench.engine.workloads.checks import (
    WorkloadWarning,
    default_loss_misfit,
    loss_broadcast_misfit,
)

_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class TrainState:
    """Everything one optimizer step needs."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: Callable[[Any, Any], torch.Tensor]
    scaler: torch.amp.GradScaler | None
    autocast: Callable[[], contextlib.AbstractContextManager[Any]]
    channels_last: bool
    grad_accum: int
    last_loss: torch.Tensor | None = None
    no_sync: Callable[[], contextlib.AbstractContextManager[Any]] | None = None
    """DDP's ``no_sync`` when micro-batches should skip the gradient all-reduce, else None
    (always None under FSDP, which reduce-scatters every micro-batch: ``engine.sharding``)."""
    forward: Callable[[nn.Module, Any], Any] = call_model
    """The workload's forward hook: how the model takes the batch's input."""
    plain: nn.Module | None = None
    """The user's module itself, under the DDP wrapper and torch.compile (the early check and
    the live FLOP count run it: no compiled inference graph, no DDP iteration)."""
    wrapped: bool = False
    """Whether ``model`` is wrapped for a distributed job: in DDP, or sharded in place by
    FSDP2 (``plain`` is then the sharded module itself, whose calls are collectives)."""
    no_effect: dict[str, str] | None = None
    """Knobs found unable to act once the model and optimizer exist (no blocks to recompute,
    an optimizer without foreach/fused), each with the reason."""
    notes: list[str] = field(default_factory=list)
    """What the first batch's check found that leaves the numbers right but deserves a look
    (the default loss given a binary model's output): the result's ``notes``."""
    step: Callable[[nn.Module, Batch], torch.Tensor] | None = None
    """The workload's ``step`` hook (the whole micro-batch's loss), which replaces ``forward``
    and ``loss_fn``; None: ``loss_fn(forward(model, input), target)``."""
    scheduler: Any = None
    """The workload's learning-rate schedule (``step()`` after every optimizer step), or None."""
    attention_backend: str | None = None
    """The SDPA backend the set-up check saw PyTorch choose (``engine.attention``), or None."""
    real_tokens: Any = None
    """A document burst's counter of real tokens (``engine.packing.RealTokens``), or None."""
    fp8_linears: int | None = None
    """Linear layers converted to float8 training (``engine.fp8``); None: fp8 did not act."""
    fp8_recipe: str | None = None
    """The float8 recipe those layers train with; None where none was converted."""

    def loss_of(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """One micro-batch's loss on ``model`` (the burst's, or the plain module for a probe)."""
        if self.step is not None:
            return self.step(model, batch)
        inputs, target = split_batch(batch)
        return self.loss_fn(self.forward(model, inputs), target)

    def micro_batch_sync(self, last: bool) -> contextlib.AbstractContextManager[Any]:
        """Under gradient accumulation DDP should all-reduce once per optimizer step, on the
        last micro-batch, as a training loop does with ``model.no_sync()``; an all-reduce per
        micro-batch would measure ``grad_accum`` times the communication of real training."""
        if self.no_sync is None or last:
            return contextlib.nullcontext()
        return self.no_sync()


def build_train_state(
    workload: Workload,
    knobs: Knobs,
    device: torch.device,
    wrap: Callable[[nn.Module], nn.Module] | None = None,
    plan: Plan | None = None,
) -> TrainState:
    """Model, optimizer and step helpers, as the burst's ``plan`` decided them (None: planned
    here). ``fp8`` converts the Linear layers first
    (``engine.fp8``); ``wrap`` (DDP or FSDP2 in a distributed burst) goes around the model
    after the layout change and activation checkpointing and before the optimizer and
    ``torch.compile``, as PyTorch documents: FSDP2 replaces the parameters with sharded ones,
    which the optimizer must hold (DDP keeps them, so the order is DDP's too)."""
    plan = plan_burst(knobs, workload, device) if plan is None else plan
    model = workload.model().to(device)
    use_nhwc = knobs.channels_last and _has_conv(model)
    if use_nhwc:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    notes: dict[str, str] = {}
    # float8 first, as torchtitan converts: before checkpointing, DDP and compile wrap it
    model, fp8_linears, fp8_idle = convert_for_burst(model, plan.fp8, workload.name)
    if fp8_idle:
        notes["fp8"] = fp8_idle
    plain = model
    if knobs.activation_checkpointing and apply_activation_checkpointing(model) == 0:
        notes["activation_checkpointing"] = NO_BLOCKS
    no_sync, found = None, []
    if wrap is not None:
        model = wrap(model)  # a burst in this process passes Solo's, which returns the model
        no_sync = _accumulation_no_sync(model, knobs)
        cannot, found = sharded_notes(plain)  # a sharded model without blocks says so
        notes.update(cannot)
    optimizer, scheduler, why = _optimizer_and_schedule(workload, plain, knobs.optimizer_impl)
    if why:
        notes["optimizer_impl"] = why
    if plan.compile is not None:
        model = torch.compile(model, mode=None if plan.compile == "default" else plan.compile)
    return TrainState(
        model=model,
        optimizer=optimizer,
        loss_fn=workload.loss,
        scaler=torch.amp.GradScaler(device.type) if plan.grad_scaler else None,
        autocast=_autocast_factory(plan.autocast, device),
        channels_last=use_nhwc,
        grad_accum=knobs.grad_accum,
        no_sync=no_sync,
        forward=workload.forward or call_model,
        plain=plain,
        wrapped=is_sharded(plain) or (model is not plain and not _is_compiled_plain(model, plain)),
        no_effect=notes,
        notes=found + ([COMPILE_NOTE] if fp8_linears and plan.compile is None else []),
        step=workload.step,
        scheduler=scheduler,
        fp8_linears=fp8_linears,
        fp8_recipe=plan.fp8 if fp8_linears else None,
    )


def _optimizer_and_schedule(
    workload: Workload, model: nn.Module, impl: str
) -> tuple[torch.optim.Optimizer, Any, str]:
    """(optimizer, schedule or None, why ``optimizer_impl`` could not act or ""). A schedule
    holds the optimizer it was built on (and wrote its ``initial_lr`` into it): rebuilding
    that optimizer with another implementation would leave the schedule stepping a dead one,
    so a workload with a schedule trains its optimizer as built."""
    optimizer = workload.optimizer(model.parameters())
    if workload.scheduler is None:
        optimizer, why = with_impl(optimizer, impl)
        return optimizer, None, why
    kept = "the workload's learning-rate schedule holds its optimizer: it ran as built"
    return optimizer, workload.scheduler(optimizer), kept


def _is_compiled_plain(model: nn.Module, plain: nn.Module) -> bool:
    """torch.compile's wrapper around the unwrapped model is not a distributed wrapper."""
    return getattr(model, "_orig_mod", None) is plain


def _accumulation_no_sync(model: nn.Module, knobs: Knobs):
    """The wrapped model's ``no_sync`` for accumulation, or None. Not with ``static_graph``:
    PyTorch's DDP fails an internal assert on a first backward under ``no_sync`` with a static
    graph (pytorch/pytorch#143580). Such a burst all-reduces every micro-batch, a real cost
    that production pays too (examples/train.py does the same). Never under FSDP, which
    reduce-scatters every micro-batch to keep its gradients sharded (``engine.sharding``)."""
    if knobs.grad_accum < 2 or knobs.static_graph or is_sharded(model):
        return None
    return getattr(model, "no_sync", None)


def _has_conv(model: nn.Module) -> bool:
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


def _autocast_factory(precision: str | None, device: torch.device):
    dtype = _AUTOCAST_DTYPES.get(precision or "")
    if dtype is None:
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def to_device(batch: Batch, state: TrainState, device: torch.device, pinned: bool) -> Batch:
    """Copy a host batch (any nest of tensors) to the device; ``non_blocking`` only pays off
    from pinned memory. Image tensors go NHWC when the model was converted."""
    return move_batch(batch, device, non_blocking=pinned, channels_last=state.channels_last)


def training_forward(state: TrainState, batch: Batch) -> None:
    """One training-mode forward and loss of the plain model, with gradients, its graph then
    dropped (no backward, no step): the step's forward as it calls its kernels, for a check."""
    model = state.plain or state.model
    with state.autocast():
        loss = state.loss_of(model, batch)
    del loss


def micro_step(state: TrainState, batch: Batch) -> torch.Tensor:
    """Forward and backward of one micro-batch; gradients accumulate. No host sync."""
    with state.autocast():
        loss = state.loss_of(state.model, batch) / state.grad_accum
    if state.scaler is not None:
        state.scaler.scale(loss).backward()
    else:
        loss.backward()
    return loss.detach()


class BatchMismatch(BatchError):
    """The model (or the loss) cannot take the workload's batch; says how the batch looks and
    which hook would fit it."""


def check_model_takes(state: TrainState, batch: Batch, workload: Workload) -> None:
    """Run one forward and the loss on ``batch`` (on the device, no gradients, eval mode) and
    raise BatchMismatch if they fail: a burst with a batch its model cannot take should fail
    in set-up, with the batch's structure and the fix, not deep in a warm-up step.

    The plain module runs, not the compiled or DDP-wrapped one: a compiled no-grad call would
    compile a second (inference) graph, and DDP would count an iteration."""
    if state.step is not None:
        _check_step_takes(state, batch)
        return
    inputs, target = split_batch(batch)
    model = state.plain or state.model
    was_training = model.training
    model.eval()
    stage = "forward"
    try:
        with torch.no_grad(), state.autocast():
            output = state.forward(model, inputs)
            stage = "loss"
            with warnings.catch_warnings(record=True) as said:  # torch's own broadcast warning
                warnings.simplefilter("always")
                state.loss_fn(output, target)
    except Exception as exc:
        if is_oom_error(exc) or isinstance(exc, KnobError):  # a knob this model cannot take
            raise
        _raise_fp8_refusal(exc, state)
        hint = _forward_hint(inputs, workload) if stage == "forward" else None
        hint = hint or (_loss_hint(output, target, workload) if stage == "loss" else None)
        raise BatchMismatch(_mismatch_message(batch, stage, exc, hint)) from exc
    finally:
        model.train(was_training)
    if state.loss_fn is default_loss:
        _check_default_loss(state, logits_of(output), target)
    _check_loss_shapes(state, output, target, said)


def _check_loss_shapes(
    state: TrainState, output: Any, target: Any, said: list[warnings.WarningMessage]
) -> None:
    """Warn, once per burst at set-up, when the loss broadcast the output against a target
    of another shape (``loss_broadcast_misfit``), and keep it for the result; torch's own
    warning about it is replaced by this one, the loss's other warnings pass on as they were."""
    why = loss_broadcast_misfit(output, target, [str(w.message) for w in said])
    if why is not None:
        warnings.warn(why, WorkloadWarning, stacklevel=2)
        state.notes.append(why)
    for w in said:
        if why is None or "broadcast" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _raise_fp8_refusal(exc: Exception, state: TrainState) -> None:
    """A failure inside torchao's float8 layers is the ``fp8`` knob's, not the batch's."""
    refused = refusal_of(exc, state.fp8_recipe)
    if refused is not None:
        raise refused from exc


def _check_default_loss(state: TrainState, logits: Any, target: Any) -> None:
    """Warn, once per burst (here, at set-up), when the default cross-entropy trains the
    wrong thing without an error (``default_loss_misfit``), and keep it for the result."""
    why = default_loss_misfit(logits, target)
    if why is not None:
        warnings.warn(why, WorkloadWarning, stacklevel=2)
        state.notes.append(why)


def _check_step_takes(state: TrainState, batch: Batch) -> None:
    """``check_model_takes`` for a workload's ``step`` hook: it must take the whole batch and
    return a scalar loss tensor (what ``backward()`` is called on)."""
    model = state.plain or state.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), state.autocast():
            loss = state.step(model, batch)
    except Exception as exc:
        if is_oom_error(exc) or isinstance(exc, KnobError):
            raise
        _raise_fp8_refusal(exc, state)
        shape = f"the batch is {describe_batch(batch)}"
        raise BatchMismatch(f"the step cannot take this batch ({describe_error(exc)}); "
                            f"{shape}") from exc  # fmt: skip
    finally:
        model.train(was_training)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        what = describe_batch(loss) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise BatchMismatch(f"the step returned {what}: a burst needs one loss tensor "
                            "(a scalar) to call backward() on")  # fmt: skip


def count_flops_live(state: TrainState, batch: Batch, rule: SampleRule) -> float | None:
    """Training FLOPs per sample counted on the burst's own model and real data, for a model
    that cannot run on the meta device (Hugging Face's attention masks call ``.item()`` on a
    tensor). One forward and backward, in eval mode and before any window, of two samples of
    ``batch`` where every tensor shares the batch dimension, else of the whole batch, over the
    samples ``rule`` counts in it (``flop_rows``); the gradients are dropped after. None under
    DDP, whose hooks would see a backward outside a step, or when the model fails here too."""
    # FlopCounterMode loads triton (~0.2 s): imported only when FLOPs are counted
    from torch.utils.flop_counter import FlopCounterMode

    if state.wrapped:
        return None
    model = state.plain or state.model
    was_training = model.training
    model.eval()
    rows, samples = flop_rows(batch, rule, meta=False)
    try:
        with FlopCounterMode(display=False) as counter, state.autocast():
            state.loss_of(model, rows).backward()
        total = float(counter.get_total_flops())
    except Exception:  # MFU is then unknown, never made up
        return None
    finally:
        model.train(was_training)
        for param in model.parameters():
            param.grad = None
    return total / samples if total > 0 else None


def _mismatch_message(batch: Batch, stage: str, exc: Exception, hint: str | None) -> str:
    who = "the model" if stage == "forward" else "the loss"
    if isinstance(batch, Mapping):
        shape = f"the batch is {describe_batch(batch)}"
    else:
        inputs, target = (describe_batch(part) for part in batch)
        shape = f"the batch is (input, target) = ({inputs}, {target})"
    fix = f": pass {hint}" if hint else ""
    return f"{who} cannot take this batch ({describe_error(exc)}); {shape}{fix}"


def _forward_hint(inputs: Batch, workload: Workload) -> str | None:
    if workload.forward is not None:
        return None  # the user's own hook failed: the batch and the error say the rest
    if isinstance(inputs, Mapping):
        return "forward=lambda model, batch: model(**batch)"
    if isinstance(inputs, (tuple, list)):
        return "forward=lambda model, batch: model(*batch)"
    return None


def _loss_hint(output: Any, target: Batch, workload: Workload) -> str | None:
    """A loss that fits this output and target, when the failing loss is a likely misfit."""
    own_loss = isinstance(getattr(output, "loss", None), torch.Tensor)
    if isinstance(target, Mapping):  # a dict batch: the loss gets it whole
        if own_loss:
            return "loss=lambda out, batch: out.loss (the model computed its own)"
        key = next((k for k in _LABEL_KEYS if k in target), next(iter(target), "labels"))
        logits = "out.logits" if hasattr(output, "logits") else "out"
        return f"loss=lambda out, batch: F.cross_entropy({logits}, batch[{key!r}])"
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return "loss=lambda out, target: F.cross_entropy(out[0], target)"
    if hasattr(output, "logits"):
        return "loss=lambda out, target: F.cross_entropy(out.logits, target)"
    return None


_LABEL_KEYS = ("labels", "label", "targets", "target", "y")


def optimizer_step(state: TrainState) -> None:
    """One optimizer step. With fp16's GradScaler and an optimizer that is not ``fused``,
    ``scaler.step`` reads the inf/NaN flag on the host (``.item()``), a device sync per step
    that bf16 rows do not pay. It stays in the measurement on purpose: a training loop with the
    same optimizer pays it too. A fused optimizer (``fused=True``) takes the flag on the device
    and has no such sync."""
    if state.scaler is not None:
        state.scaler.step(state.optimizer)
        state.scaler.update()
    else:
        state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    if state.scheduler is not None:  # after the optimizer's step, as torch.optim asks
        state.scheduler.step()


def backend_flags(knobs: Knobs, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """:func:`math_scope` for ``knobs`` on ``device`` (a burst reads its plan's instead)."""
    return math_scope(*math_switches(knobs, device))


@contextlib.contextmanager
def math_scope(fp32_math: str | None, cudnn_benchmark: bool | None) -> Iterator[None]:
    """Set the fp32 math mode and cudnn.benchmark for the burst, as its plan says
    (``Plan.fp32_math``, ``Plan.cudnn_benchmark``; both None on a CPU: nothing written);
    restore the previous values exactly after.

    A burst measures what the knobs name whatever the kernel was left in: ``default`` (and
    bf16/fp16, whose fp32 ops outside autocast run PyTorch's own math) puts back, for the
    window, only the switches that differ from PyTorch's defaults (:data:`TORCH_DEFAULTS`),
    so a user's earlier ``allow_tf32 = True`` does not leak into a "default" figure;
    ``fp32-strict`` is IEEE everywhere (cuDNN too); ``tf32`` is TF32 for matmuls and
    convolutions. cudnn.benchmark is the knob's.
    """
    if fp32_math is None:
        yield
        return
    saved = _read_flags()
    try:
        if fp32_math == "torch":
            _write_torch_defaults()
        else:
            _write_math(fp32_math == "tf32")
        torch.backends.cudnn.benchmark = bool(cudnn_benchmark)
        yield
    finally:
        _restore_flags(saved)


@contextlib.contextmanager
def numerics_scope(plan: Plan) -> Iterator[None]:
    """The plan's numerics for the steps inside, as a burst (and a parity trace) sets them:
    the fp32 math mode and cudnn.benchmark (:func:`math_scope`), the SDPA kernel
    (``attention.sdpa_scope``) and a clean compiler (``compiler.clean_compiler``); all put
    back after."""
    with (
        math_scope(plan.fp32_math, plan.cudnn_benchmark),
        sdpa_scope(plan.attention),
        compiler.clean_compiler(plan.compile is not None),
    ):
        yield


_FP32_MODES = {"fp32-strict": False, "tf32": True}
"""The precisions that name an fp32 math mode (TF32 or not); the others leave fp32 math as
PyTorch has it: ``default`` by definition, bf16/fp16 because autocast is what they name (their
fp32 ops outside autocast then run as an untouched ``import torch`` runs them)."""


def apply_backend_flags(knobs: Knobs) -> dict[str, Any]:
    """Set what the knobs name, and leave it set (production side); returns what it wrote,
    ``{}`` when nothing.

    ``fp32-strict`` and ``tf32`` write their fp32 math mode (both TF32 APIs, coherent);
    ``default``, ``bf16`` and ``fp16`` write no math switch at all: the process keeps its own
    (PyTorch's defaults unless the script changed them), and autocast is
    ``TunedConfig.autocast``'s. cudnn.benchmark is written when the knob turns it on; off is
    PyTorch's default and is left as the process has it. A no-op in effect on a CPU.
    """
    done: dict[str, Any] = {}
    tf32 = _FP32_MODES.get(knobs.precision)
    if tf32 is not None:
        _write_math(tf32)
        done["fp32_precision"] = "tf32" if tf32 else "ieee"
    if knobs.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
        done["cudnn_benchmark"] = True
    return done


# Why both TF32 APIs are written: since torch 2.9 the fp32 math mode has a new per-backend API
# (``torch.backends.cuda.matmul.fp32_precision = "tf32"``) beside the legacy one
# (``torch.set_float32_matmul_precision``, ``cudnn.allow_tf32``). Setting only the new one
# leaves the legacy state behind, and the legacy readers then *raise* ("mix of the legacy and
# new APIs"): ``torch.get_float32_matmul_precision()``, which Inductor's max-autotune and our
# matmul ceiling call, and ``allow_tf32``. Writing the legacy switches first and the new
# per-operator ones after keeps every reader coherent, and the new ones also override a
# generic ``torch.backends.fp32_precision`` a user may have set.
_NEW_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")


def _new_api_objects() -> dict[str, Any]:
    """Every object with an ``fp32_precision`` switch: the legacy setters write some of them
    (``set_float32_matmul_precision`` also sets oneDNN's matmul), so all are saved."""
    b = torch.backends
    found = {
        "generic": b, "cuda.matmul": b.cuda.matmul, "cudnn": b.cudnn, "cudnn.conv": b.cudnn.conv,
        "cudnn.rnn": b.cudnn.rnn, "mkldnn": b.mkldnn, "mkldnn.matmul": b.mkldnn.matmul,
        "mkldnn.conv": b.mkldnn.conv, "mkldnn.rnn": b.mkldnn.rnn,
    }  # fmt: skip
    return {name: obj for name, obj in found.items() if hasattr(obj, "fp32_precision")}


def _read_or_none(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except RuntimeError:  # the legacy reader refuses a mixed state
        return None


def _read_flags() -> dict[str, Any]:
    b = torch.backends
    flags: dict[str, Any] = {
        "legacy_matmul": _read_or_none(torch.get_float32_matmul_precision),
        "legacy_cudnn": _read_or_none(lambda: b.cudnn.allow_tf32),
        "benchmark": b.cudnn.benchmark,
        "readers": precision_state(),
    }
    if _NEW_API:
        flags["new"] = {n: o.fp32_precision for n, o in _new_api_objects().items()}
    return flags


def _write_math(tf32: bool) -> None:
    """TF32 on or off for fp32 matmuls and cuDNN (convolutions and RNNs), through both APIs."""
    b = torch.backends
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    b.cudnn.allow_tf32 = tf32
    if _NEW_API:
        mode = "tf32" if tf32 else "ieee"
        b.cuda.matmul.fp32_precision = mode
        b.cudnn.conv.fp32_precision = b.cudnn.rnn.fp32_precision = mode


def torch_defaults() -> dict[str, Any]:
    """:data:`TORCH_DEFAULTS` for the readers this torch has."""
    return {name: TORCH_DEFAULTS[name] for name in precision_state() if name in TORCH_DEFAULTS}


def _write_torch_defaults() -> None:
    """Put the fp32 math switches that differ from PyTorch's defaults back to them; write
    nothing when none differs. A legacy setter also writes some per-operator switches, so
    the legacy ones go first and the per-operator ones are then set where they still differ."""
    b = torch.backends
    target = torch_defaults()
    if _math(precision_state()) == _math(target):
        return
    if _read_or_none(torch.get_float32_matmul_precision) != target[_LEGACY_MATMUL]:
        torch.set_float32_matmul_precision(target[_LEGACY_MATMUL])
    if _read_or_none(lambda: b.cudnn.allow_tf32) != target["cudnn.allow_tf32"]:
        b.cudnn.allow_tf32 = target["cudnn.allow_tf32"]
    for name, obj in _new_api_objects().items():
        wanted = target.get(f"{name}.fp32_precision")
        if wanted is not None and obj.fp32_precision != wanted:
            obj.fp32_precision = wanted


_LEGACY_MATMUL = "torch.get_float32_matmul_precision()"


@contextlib.contextmanager
def at_torch_defaults() -> Iterator[None]:
    """Inside: every math switch and cudnn.benchmark as an untouched ``import torch`` has them;
    after: exactly as found, whichever API set them (the save/restore a burst uses). For a dry
    run of what a production apply changes in a fresh process (``workbench show``)."""
    saved = _read_flags()
    try:
        _write_torch_defaults()
        torch.backends.cudnn.benchmark = TORCH_DEFAULTS["cudnn.benchmark"]
        yield
    finally:
        _restore_flags(saved)


def _math(state: dict[str, Any]) -> dict[str, Any]:
    """The fp32 math readers of a :func:`precision_state` (all but cudnn.benchmark)."""
    return {name: value for name, value in state.items() if name != "cudnn.benchmark"}


def _restore_flags(saved: dict[str, Any]) -> None:
    """Legacy switches first (they also write some per-operator ones), then every per-operator
    value as it was: the user's own setting comes back exactly, whichever API made it.

    A user who set only the new API is in a state the legacy readers refuse, so the legacy
    values cannot be read; the candidates are tried until every reader reads as before (the
    first, torch's default "highest", is what such a user has)."""
    b = torch.backends
    matmuls = [saved["legacy_matmul"]] if saved["legacy_matmul"] else ["highest", "high", "medium"]
    cudnns = [saved["legacy_cudnn"]] if saved["legacy_cudnn"] is not None else [True, False]
    for matmul, cudnn in itertools.product(matmuls, cudnns):
        torch.set_float32_matmul_precision(matmul)
        b.cudnn.allow_tf32 = cudnn
        for name, obj in _new_api_objects().items():
            if name in saved.get("new", {}):
                obj.fp32_precision = saved["new"][name]
        b.cudnn.benchmark = saved["benchmark"]
        if precision_state() == saved["readers"]:
            return


def precision_state() -> dict[str, Any]:
    """What every reader of the fp32 math mode and of cudnn.benchmark returns now, as a user's
    code (or Inductor) would read it; a reader that raises reads as ``"error: ..."``. Equal
    before and after a burst, or the burst changed the user's numerics (a self-check)."""
    b = torch.backends
    readers: dict[str, Callable[[], Any]] = {
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision,
        "cuda.matmul.allow_tf32": lambda: b.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": lambda: b.cudnn.allow_tf32,
        "cudnn.benchmark": lambda: b.cudnn.benchmark,
    }
    for name, obj in _new_api_objects().items():
        readers[f"{name}.fp32_precision"] = lambda obj=obj: obj.fp32_precision
    state: dict[str, Any] = {}
    for name, read in readers.items():
        try:
            state[name] = read()
        except RuntimeError as exc:
            state[name] = f"error: {str(exc).splitlines()[0][:80]}"
    return state
