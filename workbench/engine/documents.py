"""A transformer workload's text as documents of varied length, padded or packed into rows.

The ``packing`` knob (``workbench.engine.packing``) reads a workload's tokens as documents.
The sample token file is one stream (the standard library's source files, concatenated) and
keeps no boundary between them, so the documents are cut from that stream, one after the
other, at lengths drawn from a stated distribution with a fixed seed: every burst, every
rank and a production script see the same documents.

- **Lengths**: log-normal (text lengths are close to it: most documents short, a long tail),
  median a quarter of the sequence length, standard deviation 1 in log space, at least 2
  tokens (one target). At 1,024 tokens half the documents are under 256 tokens and about 8%
  run past the context (truncated when padded); one document a row then leaves about 65% of
  the positions padding (:func:`expected_pad_share`). For scale: Krell et al., "Efficient
  Sequence Packing without Cross-contamination" (2021, arXiv:2107.02027) found up to 50% of
  the tokens padding in common NLP datasets (Wikipedia for BERT at 512 tokens) and up to 89%
  in GLUE's CoLA at 128.
- **Relative to the sequence length**: a data set is chosen for a model's context; a fixed
  length would make the 256-token ``gpt`` truncate what ``gpt:124m`` pads.
- **Why not a separator in the text**: measured on the 4 MiB sample file, PEP 8's two blank
  lines before a top-level definition split it into 1,158 pieces, median 930 bytes with a
  tail of tens of KB: at 256 tokens nearly all are truncated (10% padding), which shows
  truncation rather than the padding that packing removes.

Rows (both are ``(input, target)`` with every tensor ``seq_len`` long):

- ``pad``: row ``k`` is document ``k``: its first ``seq_len`` tokens, then the pad id (0).
  Input ``{"tokens": int64[T], "lengths": int64}`` (real tokens in the row); the target is
  the next token of the same document, ``IGNORE_INDEX`` past its end. Right padding under a
  causal mask needs no other mask: a real token attends only to the tokens before it.
- ``pack``: row ``i`` is the stream's positions ``[i*T, (i+1)*T)``: documents concatenated
  and cut into full rows, one that crosses a row's end going on as the next row's first
  (concatenate-and-cut, as llm.c and torchtitan feed GPT-2: no padding at all). Input
  ``{"tokens": int64[T], "docs": int32[T]}`` (the document of each position, 0, 1, ...
  within the row); the target is the next token where it belongs to the same document,
  ``IGNORE_INDEX`` where it would cross into the next. The model keeps documents apart with
  :func:`document_mask` and restarts positions with :func:`document_positions`.

``IGNORE_INDEX`` is ``F.cross_entropy``'s default ``ignore_index``: the loss averages over the
real targets only.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import Dataset

from workbench.core.errors import InputError

DOCUMENTS_KEY = "documents"
"""The ``Workload.extras`` key of a workload that can read its data as documents: a function
``(packing) -> Dataset`` of its rows, ``packing`` being ``pad`` or ``pack`` (as
:func:`file_documents` with the path, sequence length and vocabulary bound), whose model
takes ``model(tokens, docs=None)`` (:func:`document_forward`). Absent: no documents, and the
``packing`` knob is refused."""
IGNORE_INDEX = -100
"""The target of a position the loss skips (padding, a document's last token)."""
PAD_ID = 0
"""The token id of padding (any id would do: its targets are ignored, and causal attention
keeps real tokens from seeing it)."""
MEDIAN_SHARE = 0.25
"""The median document length, as a share of the sequence length."""
LOG_SD = 1.0
"""The standard deviation of the lengths' logarithm."""
MIN_LENGTH = 2
SEED = 0
ROWS = ("pad", "pack")


class TokenStream(Protocol):
    """Token ids by position: what documents are cut from."""

    n_tokens: int

    def ids(self, start: int, stop: int) -> torch.Tensor:
        """int64 ids of positions ``[start, stop)``."""
        ...


def document_bounds(n_tokens: int, seq_len: int, seed: int = SEED) -> np.ndarray:
    """Where the documents of an ``n_tokens`` stream start, then ``n_tokens``: document ``k``
    is ``[b[k], b[k+1])``. Lengths as the module docstring says; the last document takes the
    stream's end (at least ``MIN_LENGTH`` tokens)."""
    if n_tokens < MIN_LENGTH:
        raise ValueError(f"a stream of {n_tokens} tokens holds no document of {MIN_LENGTH}")
    rng = np.random.default_rng(seed)
    median = MEDIAN_SHARE * seq_len
    mean = median * math.exp(LOG_SD**2 / 2)
    lengths: list[np.ndarray] = []
    total = 0
    while total < n_tokens:  # draws of a size fixed by the stream: the same every time
        draw = rng.lognormal(math.log(median), LOG_SD, size=int(n_tokens / mean * 1.1) + 16)
        lengths.append(np.maximum(MIN_LENGTH, np.rint(draw)).astype(np.int64))
        total += int(lengths[-1].sum())
    starts = np.concatenate([[0], np.cumsum(np.concatenate(lengths))])
    starts = starts[starts <= n_tokens - MIN_LENGTH]
    return np.append(starts, n_tokens).astype(np.int64)


def expected_pad_share(seq_len: int, n_tokens: int = 1 << 22) -> float:
    """The share of padded positions when the documents of ``document_bounds`` are padded
    one a row (0.65 at 1,024 tokens)."""
    lengths = np.diff(document_bounds(n_tokens, seq_len))
    return 1.0 - float(np.minimum(lengths, seq_len).mean()) / seq_len


class FileTokens:
    """The ids of a uint8 token file: its bytes (``vocab`` 256), or its byte pairs
    (``datasets.pair_ids``: ``gpt:124m``'s 50,257-token vocabulary). Memory-mapped lazily in
    each process, as ``datasets.TokenWindows`` is."""

    def __init__(self, path: str | os.PathLike[str], vocab: int = 256) -> None:
        from workbench.engine import datasets  # PIL: only when a token file is read

        self.path, self.vocab = Path(path), vocab
        self.n_tokens = datasets.check_token_file(self.path, min_tokens=MIN_LENGTH)
        self._bytes: np.memmap | None = None

    def ids(self, start: int, stop: int) -> torch.Tensor:
        if self._bytes is None:
            self._bytes = np.memmap(self.path, dtype=np.uint8, mode="r")
        chunk = torch.from_numpy(self._bytes[start:stop].astype(np.int64))
        if self.vocab == 256:
            return chunk
        from workbench.engine import datasets  # PIL: only when a token file is read

        before = int(self._bytes[start - 1]) if start > 0 else 0
        return datasets.pair_ids(before, chunk, self.vocab)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_bytes": None}  # a memmap does not travel into workers


class ListTokens:
    """A production script's own documents (sequences of token ids), concatenated."""

    def __init__(self, documents: Sequence[Sequence[int] | torch.Tensor]) -> None:
        parts = [torch.as_tensor(d, dtype=torch.int64).flatten() for d in documents]
        lengths = [len(p) for p in parts]
        if not parts or min(lengths) < MIN_LENGTH:
            raise InputError.not_allowed(
                "documents", f"{len(parts)} documents, lengths from {min(lengths, default=0)}",
                f"at least one document, each of at least {MIN_LENGTH} token ids (one target)",
            )  # fmt: skip
        self.flat = torch.cat(parts)
        self.n_tokens = len(self.flat)
        self.bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    def ids(self, start: int, stop: int) -> torch.Tensor:
        return self.flat[start:stop]


class PaddedDocuments(Dataset):
    """One document a row, padded or truncated to ``seq_len`` (the module docstring)."""

    def __init__(self, stream: TokenStream, bounds: np.ndarray, seq_len: int) -> None:
        self.stream, self.bounds, self.seq_len = stream, bounds, _checked_len(seq_len)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, index: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        k = _index(index, len(self))
        start, end = int(self.bounds[k]), int(self.bounds[k + 1])
        ids = self.stream.ids(start, min(end, start + self.seq_len + 1))
        real = min(len(ids), self.seq_len)
        tokens = torch.full((self.seq_len,), PAD_ID, dtype=torch.int64)
        tokens[:real] = ids[:real]
        targets = torch.full((self.seq_len,), IGNORE_INDEX, dtype=torch.int64)
        targets[: len(ids) - 1] = ids[1:]
        return {"tokens": tokens, "lengths": torch.tensor(real)}, targets


class PackedDocuments(Dataset):
    """Documents concatenated into full rows of ``seq_len`` (the module docstring)."""

    def __init__(self, stream: TokenStream, bounds: np.ndarray, seq_len: int) -> None:
        self.stream, self.bounds, self.seq_len = stream, bounds, _checked_len(seq_len)
        if len(self) < 1:
            raise InputError.not_allowed(
                "documents", f"{stream.n_tokens} tokens",
                f"at least {self.seq_len + 1} tokens in all: one full row of seq_len "
                f"{self.seq_len} and the target after it",
            )  # fmt: skip

    def __len__(self) -> int:
        return (self.stream.n_tokens - 1) // self.seq_len

    def __getitem__(self, index: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        start = _index(index, len(self)) * self.seq_len
        ids = self.stream.ids(start, start + self.seq_len + 1)
        where = np.arange(start, start + self.seq_len + 1)
        doc = np.searchsorted(self.bounds, where, side="right") - 1
        targets = ids[1:].clone()
        targets[torch.from_numpy(doc[1:] != doc[:-1])] = IGNORE_INDEX
        docs = torch.from_numpy((doc[:-1] - doc[0]).astype(np.int32))
        return {"tokens": ids[:-1], "docs": docs}, targets


def file_documents(
    path: str | os.PathLike[str], seq_len: int, vocab: int, packing: str
) -> PaddedDocuments | PackedDocuments:
    """A token file's documents (lengths drawn as the module docstring says) as rows of
    ``seq_len``, padded (``packing="pad"``) or packed (``"pack"``)."""
    stream = FileTokens(path, vocab)
    return _rows(packing)(stream, document_bounds(stream.n_tokens, seq_len), seq_len)


def documents_dataset(
    documents: Sequence[Sequence[int] | torch.Tensor], seq_len: int, packing: str
) -> PaddedDocuments | PackedDocuments:
    """A production script's documents (each a sequence of token ids) as rows of ``seq_len``,
    padded or packed, as a burst with that ``packing`` fed its own."""
    stream = ListTokens(documents)
    return _rows(packing)(stream, stream.bounds, seq_len)


def _rows(packing: str) -> type[PaddedDocuments] | type[PackedDocuments]:
    if packing not in ROWS:
        raise InputError.not_allowed("packing", packing, "pad or pack (off has no documents)")
    return PaddedDocuments if packing == "pad" else PackedDocuments


def _checked_len(seq_len: int) -> int:
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise InputError.not_allowed("seq_len", seq_len, "an integer >= 1")
    return seq_len


def _index(index: int, size: int) -> int:
    if index < 0:
        index += size
    if not 0 <= index < size:
        raise IndexError(f"row {index} out of range for {size} rows")
    return index


# -- the model's side ---------------------------------------------------------------------------


def document_forward(model: Any, inputs: dict[str, torch.Tensor]) -> Any:
    """How a model with documents takes a row's input: ``model(tokens, docs=...)``, ``docs``
    None for padded rows (one document each: the causal mask is enough)."""
    return model(inputs["tokens"], docs=inputs.get("docs"))


def document_mask(docs: torch.Tensor) -> torch.Tensor:
    """The attention mask of packed rows, for ``F.scaled_dot_product_attention(attn_mask=)``:
    bool ``[B, 1, T, T]``, True where query ``t`` may attend key ``s``: the same document and
    ``s <= t`` (causal within each document, block-diagonal across them)."""
    t = docs.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool, device=docs.device).tril()
    same = docs.unsqueeze(-1) == docs.unsqueeze(-2)
    return (same & causal).unsqueeze(-3)


def document_positions(docs: torch.Tensor) -> torch.Tensor:
    """Each token's position within its document (0 where a document starts), int64
    ``[B, T]``: what a position embedding reads in a packed row."""
    index = torch.arange(docs.shape[-1], device=docs.device).expand(docs.shape)
    starts = torch.cat([torch.ones_like(docs[..., :1], dtype=torch.bool),
                        docs[..., 1:] != docs[..., :-1]], dim=-1)  # fmt: skip
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=-1).values
    return index - first


__all__ = [
    "DOCUMENTS_KEY",
    "IGNORE_INDEX",
    "LOG_SD",
    "MEDIAN_SHARE",
    "PAD_ID",
    "FileTokens",
    "ListTokens",
    "PackedDocuments",
    "PaddedDocuments",
    "document_bounds",
    "document_forward",
    "document_mask",
    "document_positions",
    "documents_dataset",
    "expected_pad_share",
    "file_documents",
]
