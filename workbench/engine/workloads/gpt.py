"""Decoder-only transformers on the sample text: ``gpt`` (nanoGPT's "baby GPT" shape, byte
tokens: quick on a CPU) and ``gpt:124m`` (GPT-2 small's shape at 1,024 tokens).

``gpt:124m`` is GPT-2 small as llm.c and nanoGPT reproduce it: 12 layers, 12 heads, 768 wide,
1,024 positions, pre-LN blocks with biases, the output head tied to the token table, no
dropout, GELU. Its vocabulary is GPT-2's 50,257 tokens with the table padded to 50,304 rows (a
multiple of 64), as both do: the head's matmul, the largest of the model, then tiles evenly on
tensor cores; the padded rows are never a target, and llm.c's parameter count (124,475,904)
includes them. Its tokens are byte pairs of the same local text
(``datasets.BigramTokenWindows``): no tokenizer or corpus to download.

MFU counts their FLOPs from the shape (``transformer_flops``: 6N + 12 * layers * width *
seq_len per token), the same convention for every size.

Both also read their text as documents (``engine.documents``), padded or packed into rows by
the ``packing`` knob: the model then takes each position's document (``forward(idx,
docs=...)``), keeps documents apart with a block-diagonal causal mask through SDPA's
``attn_mask`` and restarts positions at each document's start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from workbench.engine.attention import SDPA_KEY
from workbench.engine.documents import (
    DOCUMENTS_KEY,
    IGNORE_INDEX,
    document_mask,
    document_positions,
    file_documents,
)
from workbench.engine.epochs import SAMPLE_SET
from workbench.engine.workloads.base import Workload, logits_of, say_progress
from workbench.engine.workloads.transformer_flops import train_flops_per_sample


@dataclass(frozen=True)
class GPTShape:
    vocab: int = 256
    """Token ids the data holds: 256 reads bytes; more reads byte pairs."""
    block: int = 256
    """Tokens a sample holds (the context length)."""
    layers: int = 6
    heads: int = 6
    width: int = 384
    pad_to: int = 1
    """The embedding table's rows are ``vocab`` rounded up to a multiple of this."""

    @property
    def rows(self) -> int:
        """Rows of the token table (and of the tied output head)."""
        return -(-self.vocab // self.pad_to) * self.pad_to


GPT_SIZES = {
    "124m": GPTShape(vocab=50257, pad_to=64, block=1024, layers=12, heads=12, width=768),
}
"""``gpt:<size>``: real shapes (see the module docstring); plain ``gpt`` is the default shape."""


class _Block(nn.Module):
    def __init__(self, s: GPTShape):
        super().__init__()
        self.heads = s.heads
        self.ln1, self.ln2 = nn.LayerNorm(s.width), nn.LayerNorm(s.width)
        self.qkv = nn.Linear(s.width, 3 * s.width)
        self.proj = nn.Linear(s.width, s.width)
        self.mlp = nn.Sequential(
            nn.Linear(s.width, 4 * s.width), nn.GELU(), nn.Linear(4 * s.width, s.width)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``mask``: a packed row's document mask (``documents.document_mask``); None: causal
        over the whole row, which PyTorch's fused kernels run without a mask tensor."""
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token + position embeddings, pre-LN blocks, tied output head."""

    def __init__(self, s: GPTShape = GPTShape()):
        super().__init__()
        self.tok = nn.Embedding(s.rows, s.width)
        self.pos = nn.Embedding(s.block, s.width)
        self.blocks = nn.Sequential(*[_Block(s) for _ in range(s.layers)])
        self.ln = nn.LayerNorm(s.width)
        self.head = nn.Linear(s.width, s.rows, bias=False)
        self.head.weight = self.tok.weight
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
        for block in self.blocks:  # GPT-2: scale residual projections by depth
            nn.init.normal_(block.proj.weight, std=0.02 / math.sqrt(2 * s.layers))

    def forward(self, idx: torch.Tensor, docs: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of every position. ``docs``: each position's document in a packed row
        (``documents.PackedDocuments``): attention stays inside a document and positions
        restart at its start; None: one sequence a row."""
        if docs is None:
            pos, mask = torch.arange(idx.shape[1], device=idx.device), None
        else:
            pos, mask = document_positions(docs), document_mask(docs)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))

    def checkpoint_blocks(self) -> list[nn.Module]:
        """The transformer blocks: what ``activation_checkpointing`` recomputes."""
        return list(self.blocks)


def token_loss(output: Any, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy over every position whose target is a token (of
    ``output.logits`` for a model output object, as Hugging Face's): targets
    ``IGNORE_INDEX`` (padding, a document's end) are left out of the mean."""
    logits = logits_of(output).flatten(0, 1)
    return F.cross_entropy(logits, targets.flatten(), ignore_index=IGNORE_INDEX)


def _adamw(params):
    return torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1)


def gpt(
    data_dir: str | Path | None = None, shape: GPTShape = GPTShape(), name: str = "gpt"
) -> Workload:
    """A GPT of ``shape`` on the standard-library token file: by default 6 layers, 384 wide,
    256 byte tokens."""
    from workbench.engine import datasets as data  # PIL and numpy: only when the workload is built

    path = _token_file(data_dir)
    data.check_token_file(path)
    return Workload(
        name=name,
        model=lambda: TinyGPT(shape),
        dataset=lambda: _windows(path, shape),
        loss=token_loss,
        optimizer=_adamw,
        flops_per_sample=train_flops_per_sample(lambda: TinyGPT(shape), lambda m: m.head,
                                                shape.layers, shape.width, shape.block),
        tokens_per_sample=shape.block,
        description=_describe(shape),
        extras={"block": shape.block, SAMPLE_SET: data.is_sample_data(path), SDPA_KEY: "sdpa",
                DOCUMENTS_KEY: partial(file_documents, path, shape.block, shape.vocab)},
    )  # fmt: skip


def gpt_124m(data_dir: str | Path | None = None) -> Workload:
    """``gpt:124m``: GPT-2 small's shape (module docstring), 1,024 byte-pair tokens a sample."""
    return gpt(data_dir, GPT_SIZES["124m"], name="gpt:124m")


def _windows(path: Path, shape: GPTShape) -> Any:
    from workbench.engine import datasets as data  # PIL and numpy: only when the workload is built

    if shape.vocab == 256:
        return data.TokenWindows(path, block_size=shape.block)
    return data.BigramTokenWindows(path, block_size=shape.block, vocab=shape.vocab)


def _describe(s: GPTShape) -> str:
    tokens = "byte tokens" if s.vocab == 256 else f"tokens (vocabulary {s.vocab:,}, byte pairs)"
    return (f"decoder-only transformer, {s.layers} layers x {s.width}, {s.heads} heads, "
            f"{s.block:,} {tokens}")  # fmt: skip


def _token_file(data_dir: str | Path | None) -> Path:
    from workbench.engine import datasets as data  # PIL and numpy: only when the workload is built

    if data_dir is None:
        return data.ensure_datasets(progress=say_progress).tokens
    path = Path(data_dir).expanduser()
    return path / "tokens" / "stdlib.bin" if path.is_dir() else path
