"""A small decoder-only transformer on byte tokens (nanoGPT's "baby GPT" shape)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from workbench.engine.attention import SDPA_KEY
from workbench.engine.epochs import SAMPLE_SET
from workbench.engine.workloads.base import Workload, say_progress


@dataclass(frozen=True)
class GPTShape:
    vocab: int = 256
    block: int = 256
    layers: int = 6
    heads: int = 6
    width: int = 384


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token + position embeddings, pre-LN blocks, tied output head."""

    def __init__(self, s: GPTShape = GPTShape()):
        super().__init__()
        self.tok = nn.Embedding(s.vocab, s.width)
        self.pos = nn.Embedding(s.block, s.width)
        self.blocks = nn.Sequential(*[_Block(s) for _ in range(s.layers)])
        self.ln = nn.LayerNorm(s.width)
        self.head = nn.Linear(s.width, s.vocab, bias=False)
        self.head.weight = self.tok.weight
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
        for block in self.blocks:  # GPT-2: scale residual projections by depth
            nn.init.normal_(block.proj.weight, std=0.02 / math.sqrt(2 * s.layers))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))

    def checkpoint_blocks(self) -> list[nn.Module]:
        """The transformer blocks: what ``activation_checkpointing`` recomputes."""
        return list(self.blocks)


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy over every position."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _adamw(params):
    return torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1)


def gpt(data_dir: str | Path | None = None, shape: GPTShape = GPTShape()) -> Workload:
    """Byte-level GPT (6 layers, 384 wide, 256 tokens) on the standard-library token file."""
    from workbench.engine import datasets as data  # PIL and numpy: only when the workload is built

    path = _token_file(data_dir)
    data.check_token_file(path)
    return Workload(
        name="gpt",
        model=lambda: TinyGPT(shape),
        dataset=lambda: data.TokenWindows(path, block_size=shape.block),
        loss=token_loss,
        optimizer=_adamw,
        tokens_per_sample=shape.block,
        description=f"decoder-only transformer, {shape.layers} layers x {shape.width}, "
        f"{shape.block} byte tokens",
        extras={"block": shape.block, SAMPLE_SET: data.is_sample_data(path), SDPA_KEY: "sdpa"},
    )


def _token_file(data_dir: str | Path | None) -> Path:
    from workbench.engine import datasets as data  # PIL and numpy: only when the workload is built

    if data_dir is None:
        return data.ensure_datasets(progress=say_progress).tokens
    path = Path(data_dir).expanduser()
    return path / "tokens" / "stdlib.bin" if path.is_dir() else path
