"""The ``attention`` knob: which kernel runs ``F.scaled_dot_product_attention`` (SDPA).

PyTorch computes SDPA with one of four backends (``torch.nn.attention.SDPBackend``), each
with its own needs (PyTorch's ``sdp_utils.cpp`` checks them per call):

- ``flash``: FlashAttention-2 on CUDA: compute capability 8.0+, fp16 or bf16 inputs, q, k and
  v with one head dimension of at most 256, no mask other than ``is_causal``. On a CPU PyTorch
  has a kernel of the same name, its own C++ version of the tiled algorithm (fp32 too): there
  the knob chooses that kernel, which is a real, different kernel from ``math``;
- ``efficient``: the memory-efficient kernel (xFormers' CUTLASS kernels), CUDA only; fp32 as
  well as fp16 (bf16 from 8.0), head dimensions aligned, takes a mask;
- ``cudnn``: cuDNN's fused attention, CUDA only: cuDNN 9+, compute capability 8.0 to 12.1,
  fp16 or bf16;
- ``math``: the reference, matmuls and a softmax, on any device in any dtype;
- ``auto``: PyTorch's own choice per call, in its priority order, among all four.

How a burst applies it: ``torch.nn.attention.sdpa_kernel`` around the whole burst
(:func:`attention_scope`), a process-wide switch restored afterwards, like the fp32 math
flags: the set-up check, the warm-up (where ``torch.compile`` bakes the backend chosen at
trace time into its graph) and the window all run under it. ``auto`` enables all four, so a
switch the user turned off earlier in the kernel (``enable_flash_sdp(False)``) does not leak
into a figure that says ``auto``.

Where it cannot act, it says so, never silently:

- ``efficient`` and ``cudnn`` on a CPU have no kernel there: the burst runs ``auto`` and
  ``no_effect`` says so (the knob stays valid: a config tuned on a GPU loads on a laptop);
- a model that never calls SDPA (a convnet, or attention written as matmul and softmax, such
  as a Hugging Face model built with ``attn_implementation="eager"``): the set-up check's
  forward is watched (:func:`watch_attention`), and ``no_effect`` says it found no call;
- a backend that exists here but cannot run this model's attention (flash with fp32 inputs, a
  head dimension over 256, a padding mask): a :class:`KnobError` in set-up, before any
  warm-up, with PyTorch's own reasons and the backends that can run it: the burst's result
  is an error whose ``bad_knob`` is ``attention``.

What ran: the watch asks PyTorch which backend it picks for each call's very inputs (the
dispatcher's own ``torch._fused_sdp_choice``, under the burst's switches and autocast dtype);
the result's ``attention_backend`` is that name. The forward that decides is a training-mode
one with gradients, as the step runs it: a model's SDPA call can differ in evaluation mode
(Hugging Face passes its attention dropout only while training, and PyTorch's CPU flash kernel
takes no dropout), so the burst's evaluation-mode set-up check is watched leniently
(``strict=False``: a refused call runs under ``auto`` there) and a training forward decides.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode

from workbench.core.errors import KnobError
from workbench.core.knobs import Knobs

BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}
"""The knob's values and the ``SDPBackend`` member each selects (``auto``: all of them)."""
CPU_KERNELS = ("auto", "flash", "math")
"""The values that have a kernel on a CPU: PyTorch's CPU SDPA is flash or math."""
SDPA_KEY = "attention"
"""The ``Workload.extras`` key that says whether a workload's model computes attention with
SDPA: ``"sdpa"`` (the knob acts), ``"none"`` (no attention at all), absent when unknown."""
_NAMES = {int(getattr(SDPBackend, member)): name for name, member in BACKENDS.items()}
NO_SDPA_CALL = (
    "the model's forward made no torch.nn.functional.scaled_dot_product_attention call: its "
    "attention, if any, is its own code (matmul and softmax by hand, or a Hugging Face model "
    "built with attn_implementation='eager')"
)
_HEADER = re.compile(r"kernel not used because:?$")
_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?$")


def _enabled(name: str) -> list[SDPBackend]:
    members = BACKENDS.values() if name == "auto" else [BACKENDS[name]]
    return [getattr(SDPBackend, m) for m in members]


def acts_on(knobs: Knobs, device: torch.device) -> bool:
    """Whether the chosen backend has a kernel on this device (not yet: on this model)."""
    return device.type == "cuda" or knobs.attention in CPU_KERNELS


def attention_no_effect(knobs: Knobs, device: torch.device) -> dict[str, str]:
    """``{"attention": reason}`` when the chosen backend has no kernel on this device."""
    if acts_on(knobs, device):
        return {}
    why = (
        f"{knobs.attention} attention has CUDA kernels only; this burst ran on the CPU "
        "with PyTorch's own choice (auto: flash or math)"
    )
    return {"attention": why}


def uses_sdpa(workload: Any) -> bool | None:
    """True when the workload declares that its model's attention goes through SDPA, False
    when it declares no attention at all, None when it does not say (a user's own model: the
    burst's watch finds out)."""
    said = getattr(workload, "extras", {}).get(SDPA_KEY)
    return {"sdpa": True, "none": False}.get(said)


def attention_space(workload: Any, device: torch.device) -> dict[str, list[str]]:
    """The tuner's values for ``attention`` here: on CUDA, for a workload whose attention is
    SDPA, PyTorch's choice and each fused kernel (flash and cudnn need compute capability
    8.0+); ``math`` is never searched, being the slow reference. Empty elsewhere."""
    if device.type != "cuda" or not uses_sdpa(workload):
        return {}
    fused = ["flash", "efficient", "cudnn"]
    if torch.cuda.get_device_capability(device)[0] < 8:
        fused = ["efficient"]
    return {"attention": ["auto", *fused]}


def attention_scope(knobs: Knobs, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """The SDPA switches for these knobs on ``device``: the chosen backend, or ``auto`` where
    it has no kernel here (a burst's plan decides that once: ``engine.plan``)."""
    return sdpa_scope(knobs.attention if acts_on(knobs, device) else "auto")


@contextlib.contextmanager
def sdpa_scope(chosen: str) -> Iterator[None]:
    """The burst's SDPA switches: only the ``chosen`` backend enabled (all four for
    ``auto``); restored exactly on the way out."""
    with sdpa_kernel(_enabled(chosen)):
        yield


def production_scope(knobs: Knobs, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """:func:`attention_scope` for a production script (``TunedConfig.attention_context``):
    where the tuned backend has no kernel on this device, a warning says so and PyTorch's own
    choice runs, as the bursts reported it in ``no_effect``."""
    why = attention_no_effect(knobs, device).get("attention")
    if why is not None:
        warnings.warn(f"attention={knobs.attention}: {why.replace('this burst ran', 'runs')}",
                      RuntimeWarning, stacklevel=3)  # fmt: skip
    return attention_scope(knobs, device)


@dataclass
class AttentionSeen:
    """What the watched forward's SDPA calls ran, as PyTorch chose for their inputs."""

    calls: int = 0
    backends: list[str] = field(default_factory=list)
    """The backends chosen, each once, in the order first seen."""
    refused: str | None = None
    """A lenient watch's first refusal (the KnobError's message it did not raise)."""

    def ran(self) -> str | None:
        """``"flash"``, or ``"flash, math"`` where calls differed; None: no call, or no way to
        ask this torch."""
        return ", ".join(self.backends) or None

    def no_effect(self, chosen: str) -> dict[str, str]:
        """The knob has nothing to choose in a model that made no SDPA call (``chosen``: the
        kernel the burst enabled, the plan's ``attention``)."""
        if self.calls or chosen == "auto":
            return {}
        return {"attention": NO_SDPA_CALL}


@contextlib.contextmanager
def watch_attention(chosen: str, *, strict: bool = True) -> Iterator[AttentionSeen]:
    """Watch the SDPA calls of the forward run inside: which backend PyTorch picks for each,
    and, ``strict``, a KnobError naming ``attention`` when ``chosen`` (the enabled backend:
    the plan's ``attention``, decided once) cannot run one
    (raised at that call, before PyTorch's own "No available kernel"). Not ``strict``: the
    refusal is kept in ``refused`` and that call runs under ``auto``."""
    seen = AttentionSeen()
    with _Watch(seen, chosen, strict):
        yield seen


class _Watch(TorchFunctionMode):
    """Sees every ``F.scaled_dot_product_attention`` call; runs each as the switches say."""

    def __init__(self, seen: AttentionSeen, asked: str, strict: bool):
        super().__init__()
        self.seen, self.asked, self.strict = seen, asked, strict

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention and not self._judge(
            *_as_trained(*args, **kwargs)
        ):
            with sdpa_kernel(_enabled("auto")):  # a lenient watch's refused call
                return func(*args, **kwargs)
        return func(*args, **kwargs)

    def _judge(self, inputs: tuple[Any, ...], options: dict[str, Any]) -> bool:
        """Record the call's backend; False for a call a lenient watch lets run under auto."""
        self.seen.calls += 1
        chosen, reasons = _choice(inputs, options)
        if chosen is None and reasons is None:  # this torch cannot say: what ran stays unknown
            return True
        if chosen is None:
            refusal = KnobError(
                "attention", self.asked, _refusal(self.asked, reasons, inputs, options)
            )
            if self.strict:
                raise refusal
            self.seen.refused = self.seen.refused or str(refusal)
            return False
        if chosen not in self.seen.backends:
            self.seen.backends.append(chosen)
        return True


def _as_trained(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]:
    """SDPA's arguments as the training step passes them: in autocast's dtype where autocast
    is on (it casts SDPA's inputs below this mode) and needing gradients (the set-up check runs
    without them, and flash's limits on some GPUs differ when a backward will follow)."""
    where = query.device.type
    dtype = torch.get_autocast_dtype(where) if torch.is_autocast_enabled(where) else None

    def trained(t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point():
            return t
        return t.detach().to(dtype or t.dtype).requires_grad_(True)

    options = {
        "attn_mask": attn_mask,
        "dropout_p": dropout_p,
        "is_causal": is_causal,
        "scale": scale,
        "enable_gqa": enable_gqa,
    }
    return (trained(query), trained(key), trained(value)), options


def _choice(
    inputs: tuple[torch.Tensor, ...], options: dict[str, Any]
) -> tuple[str | None, str | None]:
    """(the backend PyTorch picks for these inputs under the switches now on, None) or
    (None, PyTorch's reasons that no enabled backend can run them); (None, None) where this
    torch has no way to ask."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            picked = choose(
                *inputs,
                options["attn_mask"],
                options["dropout_p"],
                options["is_causal"],
                scale=options["scale"],
                enable_gqa=options["enable_gqa"],
            )
        except RuntimeError as exc:
            return None, _reasons([str(w.message) for w in caught], exc)
    name = _NAMES.get(int(picked))
    return (name, None) if name else (None, f"PyTorch chose no backend ({picked})")


def _reasons(messages: list[str], exc: Exception) -> str:
    """PyTorch's debug warnings, without their headers, the disabled backends and the source
    locations; its error's first line where it warned nothing (a CPU without the kernel)."""
    kept = []
    for message in messages:
        text = _TRIGGERED.sub("", message.strip())
        if text and not _HEADER.search(text) and "runtime disabled" not in text:
            kept.append(text.rstrip("."))
    return "; ".join(dict.fromkeys(kept)) or str(exc).splitlines()[0].rstrip(".")


def _refusal(
    asked: str, reasons: str, inputs: tuple[torch.Tensor, ...], options: dict[str, Any]
) -> str:
    """What a KnobError says: the backends that can run this call here, and PyTorch's
    reasons that the asked one cannot."""
    q = inputs[0]
    masked = ", a mask" if options["attn_mask"] is not None else ""
    dropout = f", dropout {options['dropout_p']:g}" if options["dropout_p"] else ""
    shape = f"{q.dtype}, head dim {q.shape[-1]}{masked}{dropout}"
    able = ["auto", *(name for name in BACKENDS if _runs(name, inputs, options))]
    return (
        f"one that runs this model's attention here ({shape}): {', '.join(able)}; "
        f"PyTorch's {asked} kernel refused it: {reasons}"
    )


def _runs(name: str, inputs: tuple[torch.Tensor, ...], options: dict[str, Any]) -> bool:
    with sdpa_kernel(_enabled(name)), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _choice(inputs, options)[0] is not None


__all__ = [
    "BACKENDS",
    "CPU_KERNELS",
    "NO_SDPA_CALL",
    "SDPA_KEY",
    "AttentionSeen",
    "acts_on",
    "attention_no_effect",
    "attention_scope",
    "attention_space",
    "production_scope",
    "sdpa_scope",
    "uses_sdpa",
    "watch_attention",
]
