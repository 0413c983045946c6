"""What the ``activation_checkpointing`` and ``optimizer_impl`` knobs do to a model and optimizer.

Activation checkpointing: a block's forward runs under ``torch.utils.checkpoint`` (the
non-reentrant implementation, ``use_reentrant=False``, which PyTorch recommends and which works
with keyword arguments, ``torch.compile`` and inputs that need no gradient). Only the block's
inputs are kept; its inner activations are recomputed in the backward pass, which costs about
one more forward of the block. Which modules are blocks:

- a model that defines ``checkpoint_blocks()`` (returning the modules to recompute) chooses
  itself: this is how a user's own model opts in, and what the built-in ``cnn`` and ``gpt``
  do;
- otherwise torchvision ResNets (``BasicBlock``/``Bottleneck``) and Hugging Face-style models
  with a ``layers``/``h``/``blocks`` list of transformer layers are found by shape;
- a model with none is reported in ``no_effect`` with the fix, never silently run without.

A block's module is kept (its ``forward`` is replaced on the instance), so parameter names and
``state_dict`` keys do not change. Caveat worth knowing: BatchNorm inside a recomputed block
updates its running statistics twice per step (forward and recompute), as with any
checkpointing of BatchNorm layers.

``optimizer_impl``: PyTorch's optimizers take ``foreach`` and ``fused`` arguments. The
workload's optimizer is rebuilt with the same class, groups and hyper-parameters and the chosen
implementation: ``foreach`` (one multi-tensor kernel per operation over all parameters; torch's
default on CUDA), ``fused`` (one kernel for the whole update; with a GradScaler it also takes
the inf/NaN flag on the device, removing fp16's per-step host sync) or ``for-loop`` (one tensor
at a time; torch's default on a CPU). An optimizer class that takes neither argument keeps its
own and is reported in ``no_effect``.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from workbench.engine.memory import note_kept

_BLOCK_CLASS_NAMES = ("BasicBlock", "Bottleneck")
_LAYER_LISTS = ("layers", "h", "blocks", "layer")
IMPL_ARGS = {"foreach": (True, False), "fused": (False, True), "for-loop": (False, False)}


def checkpoint_blocks(model: nn.Module) -> list[nn.Module]:
    """The modules whose activations checkpointing recomputes (see the module docstring)."""
    own = getattr(model, "checkpoint_blocks", None)
    if callable(own):
        return list(own())
    found = [m for m in model.modules() if type(m).__name__ in _BLOCK_CLASS_NAMES]
    if found:
        return found
    for module in model.modules():
        for name in _LAYER_LISTS:
            layers = getattr(module, name, None)
            if isinstance(layers, (nn.ModuleList, nn.Sequential)) and len(layers) > 1:
                return list(layers)
    return []


def apply_activation_checkpointing(model: nn.Module) -> int:
    """Make every block of ``model`` recompute its activations in backward; returns how many."""
    blocks = checkpoint_blocks(model)
    for block in blocks:
        _recompute(block)
    return len(blocks)


def _recompute(block: nn.Module) -> None:
    forward = block.forward

    def recomputed(*args, **kwargs):
        if not torch.is_grad_enabled():  # evaluation: nothing is kept for a backward anyway
            return forward(*args, **kwargs)
        note_kept(args)  # what the block keeps instead, for the activation count
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    block.forward = recomputed  # an instance attribute: module names and state_dict unchanged


NO_BLOCKS = (
    "the model has no blocks to recompute: define checkpoint_blocks() on it, returning the "
    "modules (e.g. its transformer layers)"
)


def with_impl(optimizer: torch.optim.Optimizer, impl: str) -> tuple[torch.optim.Optimizer, str]:
    """``optimizer`` rebuilt with implementation ``impl``; (optimizer, "") or, when its class
    cannot take it, (the original, the reason). Rebuilt before its first step: no state yet."""
    foreach, fused = IMPL_ARGS[impl]
    cls = type(optimizer)
    params = inspect.signature(cls.__init__).parameters
    if "foreach" not in params or (fused and "fused" not in params):
        return optimizer, f"{cls.__name__} takes no foreach/fused argument; it ran as it is"
    options = {k: v for k, v in optimizer.defaults.items() if k in params}  # AdamW's defaults
    options["foreach"] = foreach  # hold decoupled_weight_decay, which its __init__ refuses
    if "fused" in params:
        options["fused"] = fused
    groups = [{**g, "foreach": foreach, **({"fused": fused} if "fused" in params else {})}
              for g in optimizer.param_groups]  # fmt: skip
    try:
        return cls(groups, **options), ""
    except (RuntimeError, ValueError, TypeError) as exc:  # fused needs float params on a device
        return optimizer, f"{cls.__name__} refused {impl}: {exc}"
