"""A burst's plan: every decision its knobs imply here, made once, before anything is built.

Why one place: a knob used to be asked "can you act here?" by six sibling modules, and the
burst then went back into the same modules to act (the decoder resolved twice, the attention
kernel chosen in one function and judged in another, "torchrun or this process?" asked in three
rooms). :func:`plan_burst` resolves it all from the knobs, the workload and the device into a
frozen :class:`Plan`; the engine reads the plan, and the result prints it (``BurstResult.plan``),
so a person sees what ran and why, beside the numbers.

What the plan decides (its fields): processes or this process (and why), the loader and where
images are decoded, the SDPA kernel, the sharding, fp8's recipe, the math switches (autocast,
the fp32 math mode, cudnn.benchmark, loss scaling, compile) and each knob that cannot act here
with its reason (``no_effect``: the reasons known before the model exists; the model, the
optimizer and the first batch add theirs in set-up, and the result's ``no_effect`` has both).

Nothing here builds a model or a loader, and nothing imports DALI or torchao. One check reads
the dataset: ``decode=gpu`` on CUDA asks whether the workload's transform has a device recipe.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

import torch

from workbench.core import ambient, nccl
from workbench.core.knobs import DDP_KNOBS, DEFAULTS, Knobs
from workbench.engine import fp8 as float8
from workbench.engine.attention import acts_on, attention_no_effect
from workbench.engine.lightning_fit import trainer_no_effect
from workbench.engine.loaders.dali import dali_no_effect, resolve_decode
from workbench.engine.loaders.device_batches import decode_no_effect
from workbench.engine.sharding import sharding_no_effect, shards
from workbench.engine.workloads import Workload
from workbench.engine.workloads.lightning import is_lightning

_FP32_MATH = {"fp32-strict": "ieee", "tf32": "tf32"}
"""The precisions that name an fp32 math mode; the others keep PyTorch's own (``torch``)."""
_AUTOCAST = ("bf16", "fp16")
_DATA_KNOBS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers", "cache")
DDP_ONE_PROCESS = "DDP settings act only in a distributed job (world_size > 1)"
SYNTHETIC = "the synthetic loader replays one device-resident batch"
_ASK: Any = object()


@dataclass(frozen=True, slots=True)
class Plan:
    """What one burst does, decided before it builds anything (module docstring)."""

    device: str
    """The device the burst runs on ("cpu", "cuda:0")."""
    processes: bool
    """True: a torchrun job of fresh processes (each rank plans again, with the same answer);
    False: this process."""
    processes_why: str
    """Why it runs where it runs, in a sentence."""
    loader: str
    """The loader backend (``torch``, ``dali``, ``synthetic``)."""
    decode_on_device: bool
    """``decode=gpu`` acts: the torch loader's workers read bytes and the device decodes."""
    dali_decode: str | None
    """DALI's decoder as resolved here (``mixed`` or ``cpu``); None without ``loader=dali``."""
    attention: str
    """The SDPA kernel enabled for the burst: the knob's value, or ``auto`` where the chosen
    one has no kernel on this device."""
    sharding: str
    """``fsdp`` (sharded over several ranks), ``ddp`` (a job of several processes) or ``none``
    (one process: nothing wraps the model)."""
    fp8: str | None
    """The float8 recipe the Linear layers convert with; None: no conversion (off, or a
    device without float8 tensor cores)."""
    autocast: str | None
    """The autocast dtype (``bf16``, ``fp16``); None: fp32 math."""
    fp32_math: str | None
    """The fp32 math mode set for the burst on CUDA (``tf32``, ``ieee``, or ``torch``:
    PyTorch's defaults put back); None on a CPU, where no switch is written."""
    cudnn_benchmark: bool | None
    """cudnn.benchmark for the burst on CUDA; None on a CPU (no cuDNN)."""
    grad_scaler: bool
    """fp16's GradScaler scales the loss."""
    compile: str | None
    """torch.compile's mode (``default``, ``reduce-overhead``, ``max-autotune``); None: eager."""
    pinned_copy: bool = False
    """Batches are copied host-to-device from pinned memory (``pin_memory`` on CUDA)."""
    trainer: bool = False
    """Lightning's own ``Trainer.fit`` runs the burst (a LightningModule in this process); in
    a torchrun job each rank runs the workbench's loop on the module."""
    no_effect: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Each knob that cannot act here, with the reason (reported, never faked)."""

    def to_dict(self) -> dict[str, Any]:
        """The decisions as a plain, JSON-ready dict (``BurstResult.plan``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["no_effect"] = dict(self.no_effect)
        return out


def processes_why(knobs: Knobs, device: torch.device) -> str | None:
    """Why a burst with these knobs needs fresh processes (a torchrun job), or None when this
    process will do: several ranks or nodes, NCCL variables (a fresh communicator reads them),
    or allocator settings (CUDA reads them once at start-up). A CPU has neither NCCL nor the
    CUDA allocator: there one process will do and those knobs are reported as no effect."""
    if knobs.world_size > 1 or knobs.nodes > 1:
        return (f"world_size={knobs.world_size}, nodes={knobs.nodes}: one process per rank "
                "under torchrun")  # fmt: skip
    if device.type != "cuda":
        return None
    if knobs.nccl:
        return "NCCL variables are read when a communicator is created: fresh processes"
    if knobs.alloc_conf:
        return "alloc_conf is read by CUDA once at start-up: fresh processes"
    return None


def plan_burst(
    knobs: Knobs,
    workload: Workload,
    device: torch.device,
    *,
    processes: str | None = _ASK,
) -> Plan:
    """The burst's plan (module docstring). ``processes``: the caller's own
    :func:`processes_why` answer, when it routed the burst by it already (None: this
    process); left out, it is asked here."""
    why = processes_why(knobs, device) if processes is _ASK else processes
    fp32_math, benchmark = math_switches(knobs, device)
    decode = decode_no_effect(knobs, device, workload)  # reads the dataset's transform: once
    return Plan(
        device=str(device),
        processes=why is not None,
        processes_why=why or "this process: no knob needs a fresh one",
        loader=knobs.loader,
        decode_on_device=knobs.decode == "gpu" and "decode" not in decode,
        dali_decode=resolve_decode(knobs.dali_decode, device) if knobs.loader == "dali" else None,
        attention=knobs.attention if acts_on(knobs, device) else "auto",
        sharding="fsdp" if shards(knobs) else "ddp" if why is not None else "none",
        fp8=knobs.fp8 if knobs.fp8 != "off" and float8.device_refusal(device) is None else None,
        autocast=knobs.precision if knobs.precision in _AUTOCAST else None,
        fp32_math=fp32_math,
        cudnn_benchmark=benchmark,
        grad_scaler=knobs.precision == "fp16",
        compile=None if knobs.compile == "off" else knobs.compile,
        pinned_copy=knobs.pin_memory and device.type == "cuda",
        trainer=is_lightning(workload) and why is None,
        no_effect=MappingProxyType(_no_effect(knobs, device, workload, why is not None, decode)),
    )


def math_switches(knobs: Knobs, device: torch.device) -> tuple[str | None, bool | None]:
    """(the fp32 math mode, cudnn.benchmark) a burst sets on ``device``: ``tf32``, ``ieee``
    or ``torch`` (PyTorch's defaults put back: ``default``, and bf16/fp16, whose fp32 ops
    outside autocast run PyTorch's own math); (None, None) on a CPU, where none is written."""
    if device.type != "cuda":
        return None, None
    return _FP32_MATH.get(knobs.precision, "torch"), knobs.cudnn_benchmark


def no_effect(knobs: Knobs, device: torch.device, workload: Workload) -> dict[str, str]:
    """Knobs that cannot act in a burst of ``workload`` on ``device``, each with the reason
    (the plan's ``no_effect``, for callers that want only that)."""
    processes = processes_why(knobs, device) is not None
    return _no_effect(knobs, device, workload, processes, decode_no_effect(knobs, device, workload))


def _no_effect(
    knobs: Knobs,
    device: torch.device,
    workload: Workload,
    processes: bool,
    decode: dict[str, str],
) -> dict[str, str]:
    reasons: dict[str, str] = {}
    cuda = device.type == "cuda"
    if not cuda:
        reasons.update(_cpu_reasons(knobs))
    elif knobs.precision in {"tf32", "bf16"} and torch.cuda.get_device_capability(device)[0] < 8:
        reasons["precision"] = f"{knobs.precision} tensor cores need compute capability 8.0+"
    if knobs.channels_last and workload.tokens:
        reasons["channels_last"] = f"workload {workload.name} has no 4-D image tensors"
    if knobs.loader == "synthetic":
        for name in _DATA_KNOBS:
            if getattr(knobs, name) != getattr(DEFAULTS, name):
                reasons[name] = SYNTHETIC
    reasons.update(dali_no_effect(knobs, device))  # also says which decode DALI ran
    reasons.update(decode)
    reasons.update(attention_no_effect(knobs, device))
    reasons.update(sharding_no_effect(knobs))
    reasons.update(float8.fp8_no_effect(knobs, device))
    reasons.update(_dist_reasons(knobs, device, processes))
    reasons.update(ambient.conflicts(os.environ, knobs.precision, device.type))  # e.g. TF32 off
    if is_lightning(workload) and not processes:
        reasons.update(trainer_no_effect(knobs, device))  # what Trainer.fit cannot honour
    return reasons


def _dist_reasons(knobs: Knobs, device: torch.device, processes: bool) -> dict[str, str]:
    """DDP and NCCL knobs act only in a torchrun job; NCCL ones only on the NCCL backend.

    A one-rank job on a GPU (NCCL variables set) still wraps the model in DDP, so the DDP
    knobs act there; in this process (world_size 1, no NCCL variables) nothing wraps it.
    """
    reasons: dict[str, str] = {}
    if not processes:
        for name in DDP_KNOBS:
            if getattr(knobs, name) != getattr(DEFAULTS, name):
                reasons[name] = DDP_ONE_PROCESS
    if knobs.nccl and device.type != "cuda":
        reasons["nccl"] = nccl.ON_GLOO
    return reasons


def _cpu_reasons(knobs: Knobs) -> dict[str, str]:
    reasons = {}
    if knobs.pin_memory:
        reasons["pin_memory"] = "pinned memory speeds host-to-GPU copies; this burst ran on the CPU"
    if knobs.precision == "tf32":
        reasons["precision"] = "TF32 is an NVIDIA tensor-core mode; the CPU ran IEEE fp32"
    if knobs.cudnn_benchmark:
        reasons["cudnn_benchmark"] = "cuDNN runs only on NVIDIA GPUs"
    if knobs.alloc_conf:
        reasons["alloc_conf"] = "the CUDA caching allocator's settings; this burst ran on the CPU"
    if knobs.compile == "reduce-overhead":
        reasons["compile"] = "reduce-overhead adds CUDA graphs, which need CUDA; compiled without"
    return reasons


__all__ = ["Plan", "math_switches", "no_effect", "plan_burst", "processes_why"]
