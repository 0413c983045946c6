"""Where a burst's memory goes: the parts of its peak, what the allocator keeps, and a snapshot.

Every burst reports ``memory_breakdown`` (MiB):

- ``params_mib``, ``grads_mib``, ``optimizer_mib``: the bytes of the model's parameters, of
  one gradient per trainable parameter (what a full backward holds before the optimizer step;
  with ``zero_grad(set_to_none=True)`` they are freed between steps, so at a peak in the
  forward pass fewer may be resident) and of the optimizer's state tensors (momentum, Adam's
  two moments and step counters), summed over distinct storages. These are exact on any device.
  They are what lives on *this* rank: a model sharded with FSDP2 (``sharding=fsdp``) holds
  DTensor parameters, and its gradients and optimizer state are DTensors too, of which a rank
  keeps its local shard, about 1/world_size; those shards are what is counted
  (:func:`local_part`). The parameters FSDP gathers for a block while it runs are not in
  ``params_mib``: they come and go inside the step, in the peak's rest.
- ``activations_mib``: what one micro-batch's forward keeps for the backward pass, counted
  with autograd's saved-tensor hooks on the burst's first batch (parameters left out; with
  activation checkpointing, the inputs kept by each recomputed block instead of its insides).
  Measured on the eager model: ``None`` under ``torch.compile``, whose graphs save other
  tensors.
- ``peak_mib`` and, on CUDA, ``rest_mib`` = peak allocated - parameters - gradients -
  optimizer state: activations plus workspace (cuBLAS/cuDNN scratch, temporaries). On a CPU
  the peak is the process tree's PSS, which also holds the interpreter and torch's libraries,
  so ``rest_mib`` is None there.

On CUDA ``fragmentation_pct`` = (peak reserved - peak allocated) / peak reserved: memory the
caching allocator holds but no tensor uses at the peak. Both peaks restart when set-up ends
(the cache emptied first: ``burst._restart_peak``), and reserved memory only grows after that
(nothing empties the cache until the burst ends), so the peak reserved is what was reserved at
the allocated peak. Despite the field's name, most of that share is free blocks the allocator
keeps cached for the next request (this process reuses them; other processes cannot); only the
part split into pieces too small for what is asked next is fragmentation, the part
``alloc_conf=expandable_segments:True`` attacks. So the figure bounds fragmentation from above;
it does not measure it.

``workbench.analysis.memory_views.memory_snapshot`` records a whole burst's allocations.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from workbench.core.errors import KnobError
from workbench.engine.failures import is_oom_error

MIB = 2**20
_KEPT = threading.local()


def local_part(t: Any) -> Any:
    """What of ``t`` lives on this rank: a DTensor's local shard (FSDP2's parameters, their
    gradients and the optimizer state built on them), any other value itself. DTensor's module
    is never imported here (about 0.7 s with FSDP): no DTensor exists before it is loaded."""
    dtensor = sys.modules.get("torch.distributed.tensor")
    if dtensor is not None and isinstance(t, dtensor.DTensor):
        return t.to_local()
    return t


def tensor_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (tensors sharing one count once; a
    DTensor by its local shard)."""
    seen: dict[tuple[str, int], int] = {}
    for t in map(local_part, tensors):
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            continue
        storage = t.untyped_storage()
        seen[(str(t.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


def static_parts(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """Parameters, gradients (one per trainable parameter) and optimizer state, in MiB, on
    this rank (a sharded model's local shards)."""
    params = list(model.parameters())
    trainable = [local_part(p) for p in {id(p): p for p in params if p.requires_grad}.values()]
    grads = sum(p.numel() * p.element_size() for p in trainable)
    state = [v for s in optimizer.state.values() for v in s.values()]
    return {
        "params_mib": tensor_bytes(params) / MIB,
        "grads_mib": grads / MIB,
        "optimizer_mib": tensor_bytes(state) / MIB,
    }


class SavedTensorProbe:
    """Counts what autograd keeps for the backward pass while it is active (this thread).

    Parameters are left out (they are memory of their own, not activations), and so are the
    parameters FSDP gathers for a block while it runs (``nn.Parameter`` objects of their own,
    registered on the block for its forward and backward). A block under
    activation checkpointing saves nothing through these hooks (checkpoint's own hooks take
    over inside it); the inputs it keeps to recompute from are counted by ``note_kept``.
    """

    def __init__(self, params: Iterable[torch.Tensor] = ()) -> None:
        local = (local_part(p) for p in params)
        self._skip = {(str(p.device), p.untyped_storage().data_ptr()) for p in local}
        self._seen: dict[tuple[str, int], int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        """Count, and keep a detached view: returning ``t`` itself would make a saved *output*
        hold its own ``grad_fn`` (tensor -> node -> packed tensor), a cycle through C++ that
        Python's collector cannot see, and each probe's activations would never be freed."""
        self.add(t)
        return t.detach()

    def add(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta" or _of_a_parameter(t):
            return
        key = (str(t.device), t.untyped_storage().data_ptr())
        if key not in self._skip:
            self._seen[key] = t.untyped_storage().nbytes()

    @property
    def mib(self) -> float:
        return sum(self._seen.values()) / MIB

    def __enter__(self) -> SavedTensorProbe:
        _KEPT.probe = self
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
        _KEPT.probe = None


def _of_a_parameter(t: torch.Tensor) -> bool:
    """A parameter, or a view of one (a matmul saves ``weight.t()``): FSDP's gathered
    parameters are ``nn.Parameter`` objects that the probe's list of storages never saw."""
    base = t._base if t._base is not None else t
    return isinstance(base, nn.Parameter)


def note_kept(args: Iterable[Any]) -> None:
    """A checkpointed block keeps its inputs to recompute from: count them in an active probe."""
    probe = getattr(_KEPT, "probe", None)
    if probe is not None:
        for a in args:
            probe.add(a)


def breakdown(
    parts: dict[str, float] | None,
    activations_mib: float | None,
    peak_mib: float | None,
    on_cuda: bool,
) -> dict[str, Any] | None:
    """The result's ``memory_breakdown`` from the static parts, the probe and the peak."""
    if parts is None:
        return None
    out: dict[str, Any] = {**{k: round(v, 3) for k, v in parts.items()}}
    out["activations_mib"] = None if activations_mib is None else round(activations_mib, 3)
    out["peak_mib"] = None if peak_mib is None else round(peak_mib, 3)
    rest = None
    if on_cuda and peak_mib is not None:
        rest = max(0.0, peak_mib - sum(parts.values()))
    out["rest_mib"] = None if rest is None else round(rest, 3)
    return out


def fragmentation_pct(peak_allocated_mib: float | None, peak_reserved_mib: float | None):
    """Reserved but unused at the peak, as a share of reserved (cached free blocks, of which
    fragmentation is a part); None without both figures."""
    if peak_allocated_mib is None or not peak_reserved_mib:
        return None
    return max(0.0, 100.0 * (peak_reserved_mib - peak_allocated_mib) / peak_reserved_mib)


def activation_mib(state: Any, batch: Any) -> float | None:
    """What one micro-batch's forward keeps for backward (MiB), on the burst's own batch: a
    training-mode forward and loss under :class:`SavedTensorProbe`, its graph then dropped (no
    backward, no optimizer step). None when it cannot be counted."""
    model = state.plain or state.model
    try:
        with SavedTensorProbe(model.parameters()) as probe, state.autocast():
            loss = state.loss_of(model, batch)
        del loss
    except Exception as exc:
        if is_oom_error(exc) or isinstance(exc, KnobError):  # a knob the model cannot take
            raise
        return None
    return probe.mib
