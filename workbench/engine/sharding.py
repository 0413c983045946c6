"""The ``sharding`` knob: how the ranks of a distributed job hold the model, DDP or FSDP2.

- ``ddp``: ``DistributedDataParallel``. Every rank keeps the whole model, its gradients and its
  optimizer state; after each backward the gradients are all-reduced in buckets
  (``bucket_cap_mb``, ``gradient_as_bucket_view``, ``static_graph``).
- ``fsdp``: FSDP2, ``torch.distributed.fsdp.fully_shard``, applied to every block of the model
  and then to the root, bottom-up as PyTorch asks (each call groups the parameters not yet
  grouped: a block's in one all-gather, the rest, embeddings, final norm and head, in the
  root's). Each parameter becomes a DTensor sharded on dim 0 over the ranks: a rank keeps
  1/world_size of the parameters, of their gradients and of the optimizer state built on them
  (``workbench.engine.memory`` counts the local shards). Before a block runs, its parameters
  are all-gathered; after its backward its gradients are reduce-scattered and the gathered
  parameters freed.

The blocks are the ones activation checkpointing recomputes (``memory_knobs.checkpoint_blocks``:
the model's own ``checkpoint_blocks()``, as ``gpt`` defines it, else ResNet blocks or a list of
transformer layers found by shape, as a Hugging Face model's decoder layers). A model with none
is sharded as one unit, the root: its memory at rest is still split, but every parameter is
gathered at once for the forward, and the result says so in ``notes``.

``reshard_after_forward`` (a bool; PyTorch's own default, None, means True for every module
but the root and False for the root): on, each block frees its gathered parameters after its
forward and gathers them again for its backward (less memory, one more all-gather per block);
off, it keeps them until its backward, as DDP keeps the whole model. The knob is the blocks';
the root keeps PyTorch's default for it, False: its parameters are the first the backward
needs. So the knob's default is exactly what ``fully_shard`` does when not told.

Mixed precision. With ``precision`` bf16 or fp16, every ``fully_shard`` call gets
``MixedPrecisionPolicy(param_dtype=that dtype, reduce_dtype=float32)`` (:func:`mixed_precision`)
and the burst's autocast stays around the forward, as in a DDP burst. The policy is what FSDP
does for mixed precision: parameters are all-gathered in 16 bits (half the bytes on the wire
and half the memory of the gathered block), the forward and backward compute with them,
gradients are reduce-scattered in fp32 and the optimizer steps on the fp32 shards (DDP
all-reduces fp32 gradients too). Autocast stays because the policy casts modules' parameters
and inputs, not operations: without it the operations autocast keeps in fp32 (softmax, layer
norm, the logits' cross-entropy) would run in 16 bits; with it they run in fp32 as in the DDP
burst of the same precision, so a ddp/fsdp comparison changes the sharding, not the numerics
of each operation. What still differs from DDP with autocast: the weights autocast would use
in fp32 (a norm's) are rounded to 16 bits first, and the policy casts each block's input
(``cast_forward_inputs``), so the residual stream between blocks is 16-bit, as torchtitan
trains. fp16's ``torch.amp.GradScaler`` works on the sharded gradients: DTensor reduces its
inf/NaN flag over the ranks, so every rank skips the same steps. The fp32 precisions get no
policy: the gathered parameters are the fp32 ones.

Gradient accumulation: FSDP reduce-scatters after every micro-batch (a DDP burst skips the
all-reduce until the last one, ``no_sync``). Skipping it under FSDP
(``set_requires_gradient_sync(False)``) would keep every block's unsharded gradient until the
last micro-batch, the memory FSDP exists to save; the bursts measure the reduce-scatter per
micro-batch that keeps it, as production with this config pays it.

FSDP2 broadcasts nothing when it shards (DDP copies rank 0's weights to every rank): each rank
keeps its shard of the model it built itself. A burst seeds every rank alike before building
it (``torch.manual_seed(0)``), so the shards are of one model; a production script builds the
model under the same seed on every rank, or loads a checkpoint, before
``TunedConfig.shard_model``.

The order in a burst (``engine.training.build_train_state``) and in production
(``TunedConfig.shard_model``): activation checkpointing, then ``fully_shard``, then the
optimizer, which must be built on the sharded parameters (``fully_shard`` replaces them), then
``torch.compile``.

Where it cannot act, the result says so (``no_effect``): ``fsdp`` with one rank (nothing to
shard across: the model trains whole, as with ``ddp``), ``reshard_after_forward`` without
``fsdp`` on several ranks, and DDP's own knobs under ``fsdp``.

``torch.distributed.fsdp`` takes about 0.7 s to import: it is imported only when a model is
sharded.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from workbench.core.knobs import DDP_KNOBS, DEFAULTS, Knobs
from workbench.engine.memory_knobs import checkpoint_blocks

_MIXED = {"bf16": torch.bfloat16, "fp16": torch.float16}
ONE_RANK = (
    "fsdp shards the model over the ranks of a distributed job; with world_size=1 there is "
    "one rank and nothing to shard across: the model trained whole, as with ddp"
)
NO_FSDP = (
    "reshard_after_forward says when FSDP frees a block's gathered parameters: it acts only "
    "with sharding=fsdp on several ranks"
)
DDP_ONLY = (
    "a DistributedDataParallel setting; with sharding=fsdp FSDP reduce-scatters each block's "
    "gradients itself, without DDP's buckets"
)
NO_BLOCKS = (
    "fsdp found no blocks to shard one by one (define checkpoint_blocks() on the model, "
    "returning its transformer layers): it sharded the model as one unit, so every parameter "
    "is gathered at once for the forward and the backward; the memory at rest is still split "
    "over the ranks"
)
ROOT_ONLY = (
    "no blocks were sharded one by one: the root alone keeps its gathered parameters after "
    "the forward (PyTorch's default for the root), whatever this knob says"
)


def shards(knobs: Knobs) -> bool:
    """Whether these knobs shard the model: ``fsdp`` in a job of several ranks."""
    return knobs.sharding == "fsdp" and knobs.world_size > 1


def sharding_no_effect(knobs: Knobs) -> dict[str, str]:
    """The sharding knobs, and DDP's, that cannot act with these knobs, each with the reason
    (known before the model exists; :func:`sharded_notes` adds what the model decides)."""
    reasons: dict[str, str] = {}
    if knobs.sharding == "fsdp" and knobs.world_size == 1:
        reasons["sharding"] = ONE_RANK
    if not knobs.reshard_after_forward and not shards(knobs):
        reasons["reshard_after_forward"] = NO_FSDP
    if shards(knobs):
        for name in DDP_KNOBS:
            if getattr(knobs, name) != getattr(DEFAULTS, name):
                reasons[name] = DDP_ONLY
    return reasons


def shard_blocks(model: nn.Module) -> list[nn.Module]:
    """The modules ``fully_shard`` wraps one by one before the root: the model's blocks (see
    the module docstring), without the root itself and each module once."""
    seen: dict[int, nn.Module] = {}
    for block in checkpoint_blocks(model):
        if block is not model:
            seen.setdefault(id(block), block)
    return list(seen.values())


def mixed_precision(precision: str) -> Any:
    """FSDP2's ``MixedPrecisionPolicy`` for ``precision``: 16-bit parameters for bf16/fp16
    with fp32 gradient reduction (why, and how it meets autocast: the module docstring);
    the policy that changes nothing for the fp32 precisions."""
    from torch.distributed.fsdp import MixedPrecisionPolicy  # 0.7 s: only when sharding

    dtype = _MIXED.get(precision)
    if dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def shard_model(
    model: nn.Module, knobs: Knobs, device: torch.device, mesh: Any = None
) -> nn.Module:
    """``fully_shard`` on every block, then on the root, in place; returns the model (now an
    ``FSDPModule``). ``mesh``: the data-parallel DeviceMesh (default: every rank of the
    default process group, on ``device``'s type). Call it after activation checkpointing and
    before building the optimizer."""
    # FSDP's modules take about 0.7 s to import: only when a model is sharded
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if mesh is None:
        mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    policy = mixed_precision(knobs.precision)
    for block in shard_blocks(model):
        fully_shard(block, mesh=mesh, mp_policy=policy,
                    reshard_after_forward=knobs.reshard_after_forward)  # fmt: skip
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
    return model


def ddp_model(model: nn.Module, knobs: Knobs, device: torch.device) -> nn.Module:
    """``DistributedDataParallel`` with the DDP knobs, on ``device`` (its index for CUDA)."""
    return DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        **{name: getattr(knobs, name) for name in DDP_KNOBS},  # as TunedConfig.ddp_kwargs()
    )


def data_parallel(model: nn.Module, knobs: Knobs, device: torch.device) -> nn.Module:
    """The model as the ranks train it: sharded with ``fsdp`` on several ranks, else in DDP
    (the process group must exist)."""
    if shards(knobs):
        return shard_model(model, knobs, device)
    return ddp_model(model, knobs, device)


def is_sharded(model: nn.Module) -> bool:
    """Whether ``fully_shard`` was applied to ``model`` (never imports FSDP: a model cannot
    be sharded before its module is loaded)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


def sharded_units(model: nn.Module) -> int:
    """How many modules ``fully_shard`` grouped parameters in (blocks and the root); 0 for a
    model that is not sharded."""
    return sum(1 for m in model.modules() if is_sharded(m))


def sharded_notes(model: nn.Module) -> tuple[dict[str, str], list[str]]:
    """What the sharded model says about the knobs, once it exists: (no_effect, notes). A
    model sharded with no block of its own has one unit, the root (:data:`NO_BLOCKS`)."""
    if not is_sharded(model) or sharded_units(model) > 1:
        return {}, []
    return {"reshard_after_forward": ROOT_ONLY}, [NO_BLOCKS]


def has_blocks(workload: Any) -> bool:
    """Whether the workload's model has blocks to shard one by one, judged on the model built
    on the meta device (shapes only, nothing allocated); False when it cannot be built there."""
    try:
        with torch.device("meta"):
            model = workload.model()
        return len(shard_blocks(model)) > 0
    except Exception:  # a user's model may not build on meta: not offered to the tuner
        return False


def sharding_space(workload: Any, base: Knobs) -> dict[str, list[Any]]:
    """The tuner's values for the sharding knobs: for a job of several ranks whose model has
    blocks, ``ddp`` and ``fsdp``; ``reshard_after_forward`` too when the start already shards
    (with ``ddp`` it would measure nothing new). Empty for one rank, where fsdp cannot act."""
    if base.world_size < 2 or not has_blocks(workload):
        return {}
    space: dict[str, list[Any]] = {"sharding": ["ddp", "fsdp"]}
    if base.sharding == "fsdp":
        space["reshard_after_forward"] = [True, False]
    return space


__all__ = [
    "DDP_ONLY",
    "NO_BLOCKS",
    "NO_FSDP",
    "ONE_RANK",
    "ROOT_ONLY",
    "data_parallel",
    "ddp_model",
    "has_blocks",
    "is_sharded",
    "mixed_precision",
    "shard_blocks",
    "shard_model",
    "sharded_notes",
    "sharded_units",
    "sharding_no_effect",
    "sharding_space",
    "shards",
]
