"""What each knob may change in the numbers training computes: its numeric class.

A speed knob is only worth having if the faster config still trains the same. Each knob is in
one class, which says what a loss-parity check (``workbench.analysis.parity``) may expect:

- ``bit-identical``: the math must not change at all (the loader's workers, prefetch, pinned
  memory, the page cache, DDP's buckets and NCCL's variables that keep the reduction order;
  those NCCL's table marks as changing the sums, ``core.nccl``, are ``rounding``). The same
  weights on the same batches give the same loss, bit for bit; a knob of this class that
  moves the loss is a defect, and the check names it.
- ``rounding``: the same math in other roundings (precision, compile's fused kernels, the
  attention kernel, channels_last's convolution algorithms, cudnn.benchmark's choice of
  algorithm, fused or foreach optimizer steps, fp8, FSDP's reduce-scatter). The loss moves by
  rounding; the check says whether it stays within the noise band.
- ``optimisation``: another optimisation problem (batch size, gradient accumulation, ranks:
  the effective batch per optimizer step). Compared per sample seen, as information: a
  different loss curve is expected, not a defect.
- ``data``: other batches (another decoder, reader order or augmentation path: DALI, GPU
  decode, converted formats, packing). Compared as information, like ``optimisation``.

Kept beside the knobs (``workbench.core.knobs``): ``numeric_class`` answers for every knob name,
and the Knobs page and the panel's tooltips print the class with the knob.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.core import nccl

NUMERIC_CLASSES = ("bit-identical", "rounding", "optimisation", "data")
"""From the strictest to the loosest comparison."""

CLASS_MEANING = {
    "bit-identical": "leaves the math bit-identical: a loss that moves is a defect",
    "rounding": "changes rounding only: the loss may move within the noise band",
    "optimisation": "changes the optimisation (effective batch): compared per sample seen, "
    "as information",
    "data": "changes the batches the model sees: compared as information",
}

_CLASSES: dict[str, str] = {
    "batch_size": "optimisation",
    "num_workers": "bit-identical",
    "prefetch_factor": "bit-identical",
    "pin_memory": "bit-identical",
    "persistent_workers": "bit-identical",
    "precision": "rounding",
    "channels_last": "rounding",
    "compile": "rounding",
    "cudnn_benchmark": "rounding",
    "grad_accum": "optimisation",
    "attention": "rounding",
    "fp8": "rounding",
    "loader": "data",
    "dali_decode": "data",
    "dali_hw_decoder_load": "data",
    "decode": "data",
    "decode_overlap": "bit-identical",
    "data_format": "data",
    "cache": "bit-identical",
    "packing": "data",
    "world_size": "optimisation",
    "nodes": "rounding",
    "bucket_cap_mb": "bit-identical",
    "gradient_as_bucket_view": "bit-identical",
    "static_graph": "bit-identical",
    "sharding": "rounding",
    "reshard_after_forward": "bit-identical",
    "alloc_conf": "bit-identical",
    "activation_checkpointing": "bit-identical",
    "optimizer_impl": "rounding",
    "nccl": "bit-identical",
}


def numeric_class(name: str) -> str:
    """The numeric class of knob ``name`` (module docstring); KeyError for an unknown name."""
    return _CLASSES[name]


def classes() -> Mapping[str, str]:
    """Every knob's numeric class, by knob name."""
    return dict(_CLASSES)


def change_class(name: str, reference: Any, candidate: Any) -> str:
    """The class of changing knob ``name`` from ``reference`` to ``candidate``: the knob's,
    except an NCCL mapping that changes a variable NCCL's table marks as changing the sums
    (``core.nccl``: the algorithm, protocol and channel counts reorder the reduction)."""
    if name == "nccl":
        ref, cand = dict(reference or {}), dict(candidate or {})
        changed = [v for v in {*ref, *cand} if ref.get(v) != cand.get(v)]
        if any(nccl.VARIABLES[v].numerics for v in changed if v in nccl.VARIABLES):
            return "rounding"
    return numeric_class(name)


def loosest(found: list[str]) -> str:
    """The loosest class among ``found`` (``bit-identical`` when none)."""
    return max(found, key=NUMERIC_CLASSES.index, default="bit-identical")


def tooltip_line(name: str) -> str:
    """The line the Knobs page and the panel's tooltips add to a knob's doc."""
    kind = _CLASSES.get(name)
    return f"Numerics: {kind} ({CLASS_MEANING[kind]})." if kind else ""


__all__ = [
    "CLASS_MEANING",
    "NUMERIC_CLASSES",
    "change_class",
    "classes",
    "loosest",
    "numeric_class",
    "tooltip_line",
]
