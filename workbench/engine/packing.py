"""The ``packing`` knob: a transformer workload's documents padded one a row, or packed.

Values (``core.knobs.PACKINGS``): ``off`` (the workload's own data: fixed windows of one
token stream, no documents), ``pad`` and ``pack`` (``engine.documents`` says how the
documents are drawn and how each makes its rows).

What a burst does with it (:func:`documents_view`, in set-up, before anything is built):

- the workload's dataset becomes its documents' rows (``Workload.extras[DOCUMENTS_KEY]``)
  and its forward hook hands the model each packed row's documents
  (``documents.document_forward``). A workload without documents (a convnet, ``hf:gpt2``, a
  user's own) cannot act on the knob: a KnobError naming ``packing``, the burst's result an
  error whose ``bad_knob`` is ``packing``;
- the mask: packed rows attend through SDPA's ``attn_mask`` (block-diagonal causal, boolean).
  PyTorch's CUDA flash kernel takes no mask other than ``is_causal``, so ``attention=flash``
  with ``packing=pack`` on CUDA is refused in set-up, naming ``attention``, before any step;
  the memory-efficient kernel and math take a mask, and whether cuDNN's does depends on the
  PyTorch and cuDNN versions: the attention watch asks PyTorch, as for any other input, and
  refuses with its reasons. ``auto`` picks among the kernels that take it. On a CPU,
  PyTorch's own flash kernel takes a mask: flash runs packed rows there. Padded rows need no
  mask (right padding under ``is_causal``), so every kernel runs them.
- Not ``torch.nn.attention.flex_attention``: a dense mask makes SDPA compute every score of
  the row, where flex_attention's block mask skips the blocks between documents, but eager
  flex_attention "will use an unfused implementation that materializes the full scores
  matrix" (its own warning, torch 2.14: it is fast only under ``torch.compile``), and it
  bypasses SDPA, so the ``attention`` knob would no longer say what ran.

How a document burst counts (:class:`RealTokens`, :func:`real_token_figures`): padding is
work the device does and nothing learns from, so it is not counted as throughput.
``tokens_per_s`` is real (non-pad) tokens a second; ``samples_per_s`` counts samples of
``tokens_per_sample`` real tokens (real tokens / sequence length: a half-padded row is half a
sample), so samples/s, MFU, the cost per sample and the tuner compare useful work across
``off``, ``pad`` and ``pack``; ``pad_share_pct`` is the share of the window's positions that
were padding. Real tokens are read from each batch on the host before its copy (a padded
row's ``lengths``; a packed row has no padding), never from the device, which would wait for
it every step; a batch resident on the device (the synthetic loader's, replayed) is counted
once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from workbench.core.errors import KnobError
from workbench.core.knobs import Knobs
from workbench.engine.batches import Batch, split_batch
from workbench.engine.documents import DOCUMENTS_KEY, document_forward
from workbench.engine.workloads import Workload

WITH_DOCUMENTS = "gpt, gpt:124m"
"""The built-in workloads whose data has documents, as the refusals name them."""


def has_documents(workload: Any) -> bool:
    """Whether the workload can read its data as documents (``extras[DOCUMENTS_KEY]``)."""
    return callable(getattr(workload, "extras", {}).get(DOCUMENTS_KEY))


def no_documents(workload: Any) -> str:
    """Why ``packing`` cannot act on a workload without documents."""
    return (
        f"off for workload {getattr(workload, 'name', workload)}: it has no documents to pad "
        f"or pack (Workload.extras['{DOCUMENTS_KEY}'], a function packing -> rows, as "
        f"{WITH_DOCUMENTS} have)"
    )


def packing_refusal(knobs: Knobs, device: torch.device) -> str | None:
    """Why these knobs cannot run packed rows on ``device`` (flash on CUDA), or None."""
    if knobs.packing != "pack" or knobs.attention != "flash" or device.type != "cuda":
        return None
    return (
        "auto, efficient, cudnn or math with packing=pack on CUDA: packed rows keep documents "
        "apart with an attn_mask, and PyTorch's CUDA flash kernel takes no mask but is_causal "
        "(or packing=pad, whose rows need no mask)"
    )


def documents_view(wl: Workload, knobs: Knobs, device: torch.device) -> Workload:
    """``wl`` reading its documents as ``knobs.packing`` says (``wl`` itself for ``off``); a
    KnobError where it cannot (see the module docstring)."""
    if knobs.packing == "off":
        return wl
    if not has_documents(wl):
        raise KnobError("packing", knobs.packing, no_documents(wl))
    refusal = packing_refusal(knobs, device)
    if refusal is not None:
        raise KnobError("attention", knobs.attention, refusal)
    rows = wl.extras[DOCUMENTS_KEY]
    return dataclasses.replace(
        wl, dataset=lambda: rows(knobs.packing), forward=document_forward, collate_fn=None,
        samples_of=None,
    )  # fmt: skip


def check_packing_values(workload: Any, values: list[Any]) -> None:
    """Refuse ``pad``/``pack`` among the values a search will try (a tuner's space) for a
    workload without documents, before any burst: every one of them would be refused."""
    asked = [v for v in values if v != "off"]
    if asked and not has_documents(workload):
        raise KnobError("packing", asked, no_documents(workload))


def packing_space(workload: Any, base: Knobs) -> dict[str, list[str]]:
    """The tuner's values for ``packing``: ``pad`` and ``pack`` for a workload with documents
    whose start reads them. ``off`` reads other data (a stream with no documents), so a tune
    never moves into or out of it: that is the user's choice of data, not a speed knob."""
    if base.packing == "off" or not has_documents(workload):
        return {}
    return {"packing": ["pad", "pack"]}


class RealTokens:
    """The real (non-pad) tokens of a document view's batches, counted on the host."""

    def __init__(self) -> None:
        self.total = 0
        self._resident: tuple[Batch, int] | None = None

    @classmethod
    def of(cls, workload: Workload, knobs: Knobs) -> RealTokens | None:
        """A counter for a burst that reads documents; None otherwise."""
        return cls() if knobs.packing != "off" and has_documents(workload) else None

    def add(self, batch: Batch) -> int:
        """Count one batch as the loader delivered it (before its copy to the device)."""
        if self._resident is not None and self._resident[0] is batch:
            n = self._resident[1]
        else:
            n = real_tokens(batch)
            if _on_device(batch):  # read once: a device read waits for the device
                self._resident = (batch, n)
        self.total += n
        return n

    def reset(self) -> None:
        """Start a new count (the window's), keeping a resident batch's."""
        self.total = 0


def real_tokens(batch: Batch) -> int:
    """Real tokens in a batch of document rows: a padded row's ``lengths``, a packed row's
    every position."""
    inputs, _ = split_batch(batch)
    if "lengths" in inputs:
        return int(inputs["lengths"].sum())
    return inputs["tokens"].numel()


def _on_device(batch: Batch) -> bool:
    inputs, _ = split_batch(batch)
    return inputs["tokens"].device.type != "cpu"


def real_token_figures(
    rows: int, real: int, seq_len: int, seconds: float
) -> dict[str, float | int]:
    """A document window's figures: ``samples`` and ``samples_per_s`` in samples of
    ``seq_len`` real tokens, ``tokens_per_s`` real tokens, ``pad_share_pct`` the padded share
    of the ``rows`` x ``seq_len`` positions."""
    positions = rows * seq_len
    return {
        "samples": round(real / seq_len),
        "samples_per_s": real / seq_len / seconds,
        "tokens_per_s": real / seconds,
        "pad_share_pct": 100.0 * (positions - real) / positions if positions else 0.0,
    }


__all__ = [
    "WITH_DOCUMENTS",
    "RealTokens",
    "check_packing_values",
    "documents_view",
    "has_documents",
    "no_documents",
    "packing_refusal",
    "packing_space",
    "real_token_figures",
    "real_tokens",
]
