"""What a batch may be, and the few things a burst does to one.

A dataset item is ``(input, target)``, each a tensor or any nest of tuples, lists and dicts of
tensors, or a mapping (``{"input_ids": ..., "labels": ...}``), which is then the input and the
target at once: the forward hook and the loss each get the whole batch. The DataLoader's collate
(or the workload's ``collate_fn``) gives the same nest with the batch dimension first.

A burst moves a batch to the device (every tensor leaf; other leaves, such as a list of the raw
strings, stay as they are), counts its samples (the batch dimension of the first tensor leaf
that has one), copies two samples of it to the meta device for the FLOP count, and describes it
when the model cannot take it.

Why a small recursion of our own rather than ``torch.utils._pytree``: a collate function's
output is often a mapping that is not a dict (Hugging Face's ``BatchEncoding`` is a
``UserDict``), which pytree treats as one opaque leaf; and the common ``(x, y)`` batch must cost
no more than the two ``.to`` calls it always cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from workbench.core.errors import InputError

Batch = Any
"""A tensor, or a tuple, list or mapping of batches (any depth); other leaves are kept."""

_SHOWN_PER_LEVEL = 8  # entries described per container before "... N more"


class BatchError(InputError):
    """A batch of a shape the burst cannot train on; the message shows its structure."""


def map_tensors(batch: Batch, fn: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
    """``batch`` with ``fn`` applied to every tensor leaf; containers rebuilt as their type
    (a namedtuple as a namedtuple, a ``BatchEncoding`` as one where it can be), other leaves
    kept."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, (tuple, list)):
        items = [map_tensors(b, fn) for b in batch]
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
            return type(batch)(*items)
        return tuple(items) if isinstance(batch, tuple) else items
    if isinstance(batch, Mapping):
        return _same_mapping(batch, {k: map_tensors(v, fn) for k, v in batch.items()})
    return batch


def _same_mapping(original: Mapping[Any, Any], items: dict[Any, Any]) -> Mapping[Any, Any]:
    """The mapping's own type where it can be rebuilt from a dict (as torch's default collate
    does), a plain dict otherwise."""
    if type(original) is dict:
        return items
    try:
        return type(original)(items)  # type: ignore[call-arg]
    except Exception:  # a mapping type with another constructor
        return items


def tensor_leaves(batch: Batch) -> Iterator[torch.Tensor]:
    """Every tensor leaf, in order (mappings in their own key order)."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, (tuple, list)):
        for b in batch:
            yield from tensor_leaves(b)
    elif isinstance(batch, Mapping):
        for v in batch.values():
            yield from tensor_leaves(v)


def count_samples(batch: Batch) -> int:
    """Samples in the batch: the first dimension of its first tensor leaf that has one."""
    first = batch[0] if isinstance(batch, (tuple, list)) and batch else None
    if isinstance(first, torch.Tensor) and first.dim() > 0:  # (x, y): no generator per step
        return first.shape[0]
    for t in tensor_leaves(batch):
        if t.dim() > 0:
            return t.shape[0]
    raise BatchError(f"the batch has no tensor with a batch dimension: {describe_batch(batch)}")


def split_batch(batch: Batch) -> tuple[Batch, Batch]:
    """``(input, target)`` of a batch: a pair's two parts, or a mapping twice (the forward hook
    and the loss then each get the whole batch)."""
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    if isinstance(batch, Mapping):
        return batch, batch
    raise BatchError(
        f"a batch must be (input, target) or a dict; this one is {describe_batch(batch)}: "
        "make the dataset yield (input, target), e.g. ((x1, x2), y), or a dict"
    )


def move_batch(
    batch: Batch, device: torch.device, *, non_blocking: bool = False, channels_last: bool = False
) -> Batch:
    """Every tensor leaf on ``device`` (``non_blocking`` pays off only from pinned memory);
    with ``channels_last``, 4-D floating-point tensors (images) in NHWC, never integer ones
    (token ids, masks) nor tensors of other ranks."""

    def move(t: torch.Tensor) -> torch.Tensor:
        t = t.to(device, non_blocking=non_blocking)
        if channels_last and t.dim() == 4 and t.is_floating_point():
            t = t.contiguous(memory_format=torch.channels_last)
        return t

    return map_tensors(batch, move)


def shape_sample(batch: Batch, n: int = 2) -> Batch:
    """``n`` samples of the batch on the meta device (shapes and dtypes, no memory), for the FLOP
    count: tensors with the batch dimension are cut to ``n`` rows, others copied whole. A view
    such as ``x[:2]`` on the real device would keep the whole batch alive."""
    size = count_samples(batch)
    n = min(n, size)

    def cut(t: torch.Tensor) -> torch.Tensor:
        rows = t[:n] if t.dim() > 0 and t.shape[0] == size else t
        return rows.to("meta")

    return map_tensors(batch, cut)


def describe_batch(batch: Batch, depth: int = 0) -> str:
    """The batch's structure in one line: ``dict {input_ids: int64[8, 32], ...}``,
    ``tuple (float32[8, 16], int64[8])``; other leaves by their type."""
    if isinstance(batch, torch.Tensor):
        dtype = str(batch.dtype).removeprefix("torch.")
        return f"{dtype}[{', '.join(str(d) for d in batch.shape)}]"
    if depth > 4:
        return "..."
    if isinstance(batch, Mapping):
        parts = [f"{k}: {describe_batch(v, depth + 1)}" for k, v in _first(batch.items())]
        return f"{type(batch).__name__} {{{_joined(parts, len(batch))}}}"
    if isinstance(batch, (tuple, list)):
        if batch and all(isinstance(b, str) for b in batch):
            return f"{type(batch).__name__} of {len(batch)} str"
        parts = [describe_batch(b, depth + 1) for b in _first(batch)]
        left, right = ("(", ")") if isinstance(batch, tuple) else ("[", "]")
        return f"{type(batch).__name__} {left}{_joined(parts, len(batch))}{right}"
    return type(batch).__name__


def _first(items: Any) -> list[Any]:
    out = []
    for i, item in enumerate(items):
        if i == _SHOWN_PER_LEVEL:
            break
        out.append(item)
    return out


def _joined(parts: list[str], total: int) -> str:
    more = f", ... {total - len(parts)} more" if total > len(parts) else ""
    return ", ".join(parts) + more


__all__ = [
    "Batch",
    "BatchError",
    "count_samples",
    "describe_batch",
    "map_tensors",
    "move_batch",
    "shape_sample",
    "split_batch",
    "tensor_leaves",
]
