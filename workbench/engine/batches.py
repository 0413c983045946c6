"""What a batch may be, and the few things a burst does to one.

A dataset item is ``(input, target)``, each a tensor or any nest of tuples, lists and dicts of
tensors, or a mapping (``{"input_ids": ..., "labels": ...}``), which is then the input and the
target at once: the forward hook and the loss each get the whole batch. The DataLoader's collate
(or the workload's ``collate_fn``) gives the same nest with the batch dimension first.

A burst moves a batch to the device (every tensor leaf; other leaves, such as a list of the raw
strings, stay as they are), counts its samples, copies it (two samples of it where that is
possible) to the meta device for the FLOP count, and describes it when the model cannot take
it.

Samples are counted from what the batch proves, never from the first tensor met: on the first
batch every tensor's leading dimension is read, and a ``SampleRule`` decided from them (all
agree; else the target's; else the workload's ``samples_of`` hook; else the burst is refused)
counts every batch after it. The first tensor met is wrong for a batch that flattens
variable-length parts (an EmbeddingBag's items beside their offsets), and its answer would
change with a dict's key order.

Why a small recursion of our own rather than ``torch.utils._pytree``: a collate function's
output is often a mapping that is not a dict (Hugging Face's ``BatchEncoding`` is a
``UserDict``), which pytree treats as one opaque leaf; and the common ``(x, y)`` batch must cost
no more than the two ``.to`` calls it always cost.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
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


Path = tuple[Any, ...]
"""Keys and indices from a batch's root to one of its leaves: ``(0, "items")``."""

SamplesOf = Callable[[Batch], int]
"""``Workload(samples_of=...)``: the number of samples in a batch, for batches whose tensors
do not say it alone."""


@dataclass(frozen=True, slots=True)
class SampleRule:
    """How a burst counts its batches' samples: decided once, on the first batch
    (``sample_rule``), then applied to every batch by ``count``: one walk down a known path
    (or the hook) per step, right for a partial last batch too."""

    source: str
    """Which tensor counted, as ``BurstResult.samples_from`` names it: ``"all tensors"``
    (every tensor's leading dimension agreed), ``"target"`` (they disagreed; the target's
    decided) or ``"samples_of"`` (the workload's hook)."""
    path: Path = ()
    """The tensor whose leading dimension is read (with the hook: none)."""
    hook: SamplesOf | None = None
    sliceable: bool = False
    """Every tensor shares the batch dimension, so ``n`` rows of each are ``n`` samples (the
    FLOP count's cheap sample); otherwise only the whole batch is a known number of samples."""

    def count(self, batch: Batch) -> int:
        """Samples in ``batch``."""
        if self.hook is not None:
            return _hook_count(self.hook, batch)
        leaf = batch
        try:
            for key in self.path:
                leaf = leaf[key]
            return leaf.shape[0]
        except (LookupError, TypeError, AttributeError):  # the batch changed its shape
            raise BatchError(
                f"this batch has no tensor with a batch dimension at {_spelled(batch, self.path)}, "
                f"which counted the first batch's samples; the batch is {describe_batch(batch)}. "
                f"{_HOOK_FIX}"
            ) from None


_HOOK_FIX = "Pass Workload(samples_of=...), a function batch -> int that counts any batch's samples"


def sample_rule(batch: Batch, samples_of: SamplesOf | None = None) -> SampleRule:
    """Decide, on a burst's first batch, how every batch's samples are counted.

    Every tensor's leading dimension is read (0-d tensors have none). The hook, when given,
    always decides, and is tried on this batch now, so a hook that cannot count it fails in
    set-up. Without it: when all agree, that is the count; when they disagree, the target's
    decides, if the batch is ``(input, target)`` and the target's own tensors agree. That is
    the recommender's case: an EmbeddingBag collate flattens variable-length bags into one
    long tensor beside per-sample offsets (``({"items": int64[6752], "offsets": int64[256],
    ...}, float32[256])``), while the target keeps one row per sample. Nothing else can tell
    which tensor is per sample (the first one met, or the most common length, would change
    with the dict's key order or the data): a BatchError then shows the structure and the
    hook to pass.
    """
    if samples_of is not None:
        try:
            _hook_count(samples_of, batch)
        except BatchError:
            raise
        except Exception as exc:
            raise BatchError(
                f"samples_of failed on the first batch ({type(exc).__name__}: {exc}); the batch "
                f"is {describe_batch(batch)}"
            ) from exc
        return SampleRule("samples_of", hook=samples_of)
    dims = leading_dims(batch)
    unstacked = _unstacked_items(batch)
    if unstacked and (not dims or len({d for _, d in dims}) > 1):
        raise BatchError(unstacked)
    if not dims:
        raise BatchError(
            f"the batch has no tensor with a batch dimension: {describe_batch(batch)}. {_HOOK_FIX}"
        )
    if len({d for _, d in dims}) == 1:
        return SampleRule("all tensors", _steady_path(batch, dims), sliceable=True)
    target = [(p, d) for p, d in dims if _is_pair(batch) and p[0] == 1]
    if target and len({d for _, d in target}) == 1:
        return SampleRule("target", target[0][0])
    raise BatchError(_undecided(batch, dims))


def count_samples(batch: Batch, samples_of: SamplesOf | None = None) -> int:
    """Samples in one batch, by the rule ``sample_rule`` decides on it (a burst decides once,
    on its first batch, and counts every later batch with that rule)."""
    return sample_rule(batch, samples_of).count(batch)


def leading_dims(batch: Batch) -> list[tuple[Path, int]]:
    """Every tensor leaf that has a batch dimension, with its path, in the batch's order."""
    found: list[tuple[Path, int]] = []
    _walk_dims(batch, (), found)
    return found


def _walk_dims(batch: Batch, path: Path, found: list[tuple[Path, int]]) -> None:
    if isinstance(batch, torch.Tensor):
        if batch.dim() > 0:
            found.append((path, batch.shape[0]))
    elif isinstance(batch, (tuple, list)):
        for i, b in enumerate(batch):
            _walk_dims(b, (*path, i), found)
    elif isinstance(batch, Mapping):
        for k, v in batch.items():
            _walk_dims(v, (*path, k), found)


def _steady_path(batch: Batch, dims: list[tuple[Path, int]]) -> Path:
    """Where to read the count when every tensor agreed: the target's first tensor where there
    is one (one row per sample in any batch, where an input's length could agree with the
    batch size by chance in the first batch only), else the first tensor."""
    target = [p for p, _ in dims if _is_pair(batch) and p[0] == 1]
    return target[0] if target else dims[0][0]


def _unstacked_items(batch: Batch) -> str | None:
    """Where the batch holds a list of per-item dicts (a collate that returned its items as
    they came), the message that says to stack them: counting them with a hook would still
    leave the model a list. None for any other batch."""
    found = _item_list(batch, ())
    if found is None:
        return None
    path, n, keys = found
    return (
        f"{_spelled(batch, path) if path else 'the batch'} is a list of {n} per-item dicts (keys "
        f"{', '.join(map(str, keys))}): the collate_fn returned the items unstacked, so no "
        "tensor holds the batch and the model would get a list. Stack them in the collate_fn, "
        "one tensor per key: {k: torch.stack([item[k] for item in items]) for k in items[0]} "
        "(pad ragged ones first), or leave collate_fn=None: default_collate stacks dicts"
    )


def _item_list(node: Batch, path: Path) -> tuple[Path, int, list[Any]] | None:
    """The first list of two or more dicts with the same keys holding tensors, depth first."""
    if isinstance(node, Mapping):
        children: Iterable[tuple[Any, Batch]] = node.items()
    elif isinstance(node, (tuple, list)):
        items = list(node)
        if len(items) >= 2 and all(isinstance(i, Mapping) for i in items):
            keys = list(items[0])
            if keys and all(list(i) == keys for i in items) and leading_dims(items[0]):
                return path, len(items), keys
        children = enumerate(items)
    else:
        return None
    for key, child in children:
        found = _item_list(child, (*path, key))
        if found:
            return found
    return None


def _hook_count(hook: SamplesOf, batch: Batch) -> int:
    n = hook(batch)
    try:
        count = operator.index(n) if not isinstance(n, bool) else None
    except TypeError:
        count = None
    if count is None or count < 1:
        raise BatchError(
            f"samples_of returned {n!r} for the batch {describe_batch(batch)}: it must return "
            "the number of samples in the batch, an int >= 1"
        )
    return count


def _is_pair(batch: Batch) -> bool:
    """An ``(input, target)`` batch, as ``split_batch`` reads it."""
    return isinstance(batch, (tuple, list)) and len(batch) == 2


def _spelled(batch: Batch, path: Path) -> str:
    """A path as messages and results show it: ``input["items"]``, ``target``,
    ``batch["label"]`` (a dict batch), ``batch[2]``."""
    if _is_pair(batch) and path:
        root, path = ("input", "target")[path[0]], path[1:]
    else:
        root = "batch"
    return root + "".join(f"[{json.dumps(k)}]" if isinstance(k, str) else f"[{k!r}]" for k in path)


def _code(path: Path) -> str:
    """A path as Python that reads it from ``batch``: ``batch[0]['users']``."""
    return "batch" + "".join(f"[{k!r}]" for k in path)


def _undecided(batch: Batch, dims: list[tuple[Path, int]]) -> str:
    listed = _joined([f"{_spelled(batch, p)} {d}" for p, d in _first(dims)], len(dims))
    if _is_pair(batch) and any(p[0] == 1 for p, _ in dims):
        why = "the target's own tensors disagree too"
    elif _is_pair(batch):
        why = "the target has no tensor with a batch dimension"
    elif isinstance(batch, Mapping):
        why = "a dict batch is input and target at once, so no target decides"
    else:
        why = "the batch is not (input, target), so no target decides"
    shortest, _ = min(dims, key=lambda pd: pd[1])  # per-sample tensors are the short ones
    return (
        f"cannot tell how many samples this batch holds: its tensors' leading dimensions "
        f"disagree ({listed}) and {why}; the batch is {describe_batch(batch)}. {_HOOK_FIX}, "
        f"e.g. Workload(..., samples_of=lambda batch: len({_code(shortest)}))"
    )


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


def flop_rows(batch: Batch, rule: SampleRule, *, meta: bool, n: int = 2) -> tuple[Batch, int]:
    """Rows of ``batch`` for a FLOP count, and the number of samples they are.

    Where every tensor shares the batch dimension (``rule.sliceable``), ``n`` rows of each are
    ``n`` samples; otherwise (flattened bags beside their offsets, a hook's count) no slice is
    a known number of samples, so the rows are the whole batch and the number its count. With
    ``meta``, the rows are copied to the meta device (shapes and dtypes, no memory, so a whole
    batch costs nothing): a view such as ``x[:2]`` on the real device would keep the whole
    batch alive as long as the rows live."""
    size = rule.count(batch)
    if not rule.sliceable:
        return (map_tensors(batch, _to_meta) if meta else batch), size
    n = min(n, size)

    def cut(t: torch.Tensor) -> torch.Tensor:
        rows = t[:n] if t.dim() > 0 else t
        return _to_meta(rows) if meta else rows

    return map_tensors(batch, cut), n


def _to_meta(t: torch.Tensor) -> torch.Tensor:
    return t.to("meta")


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
    "SampleRule",
    "SamplesOf",
    "count_samples",
    "describe_batch",
    "flop_rows",
    "leading_dims",
    "map_tensors",
    "move_batch",
    "sample_rule",
    "split_batch",
    "tensor_leaves",
]
