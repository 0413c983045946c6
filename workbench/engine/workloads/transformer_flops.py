"""Training FLOPs of a decoder-only transformer, from its shape: the numerator of its MFU.

The convention is PaLM's (Chowdhery et al. 2022, appendix B), as nanoGPT's ``estimate_mfu``
applies it: per token, forward and backward,

    6 * N  +  12 * layers * width * seq_len

- ``6 * N``: every weight multiplies each token once forward (2 FLOPs a weight: a multiply and
  an add) and twice backward (the input's gradient and the weight's): 2 + 4. ``N`` counts the
  parameters a token's forward multiplies (:func:`matmul_params`): every parameter except the
  embedding tables, whose lookup is no matmul, with the output head counted even when it is
  the token table itself (GPT-2 ties them: nanoGPT's ``get_num_params()`` and llm.c count it
  for that reason). Layer-norm gains and biases are in ``N`` too, as in nanoGPT: a few
  thousandths of it, which the counter below leaves out.
- ``12 * layers * width * seq_len``: attention's two matmuls (scores ``QK^T`` and the
  weighted sum with ``V``), 2 * 2 * seq_len * width a token a layer forward, twice that
  backward, over the full seq_len x seq_len score matrix: a causal mask's skipped half is
  counted, as PaLM, nanoGPT and PyTorch's ``FlopCounterMode`` count it. llm.c counts half
  (``6 * L * C * T``) and all parameters (the position table too), so its MFU of the same run
  reads a few % lower (GPT-2 small at 1,024 tokens: 6% lower,
  ``(6 * 12 * 768 * 1,024 - 6 * 786,432) / (6 * 123,689,472 + 12 * 12 * 768 * 1,024)``).

Elementwise work (softmax, GELU, layer norm, the loss) is not counted: MFU counts the model's
matmuls, what a GPU's peak FLOP/s is quoted for. ``tests/engine/test_transformer_flops.py``
checks the formula against PyTorch's own count on the meta device. Why a formula, when the
meta count exists: a Hugging Face model does not trace on the meta device, and on real
tensors ``FlopCounterMode`` (torch 2.14) has no formula for the CPU's flash-attention kernel,
so its count of a CPU burst leaves the attention out; the formula is the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def matmul_params(model: nn.Module, head: nn.Module | None = None) -> int:
    """Parameters a token's forward multiplies: all but the ``nn.Embedding`` tables, plus the
    output ``head``'s weight when it is one of them (tied embeddings). Shared parameters once."""
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    head_weight = getattr(head, "weight", None)
    kept = {id(head_weight)} if head_weight is not None else set()
    return sum(p.numel() for p in model.parameters() if id(p) not in tables or id(p) in kept)


def train_flops_per_token(params: int, layers: int, width: int, seq_len: int) -> float:
    """``6 * params + 12 * layers * width * seq_len`` (see the module docstring)."""
    return 6.0 * params + 12.0 * layers * width * seq_len


def train_flops_per_sample(
    build: Callable[[], nn.Module],
    head_of: Callable[[nn.Module], nn.Module | None],
    layers: int,
    width: int,
    seq_len: int,
) -> float:
    """Training FLOPs of one sample of ``seq_len`` tokens: the model is built on the meta
    device (shapes only, no memory) to count its parameters."""
    with torch.device("meta"):
        model = build()
    params = matmul_params(model, head_of(model))
    return train_flops_per_token(params, layers, width, seq_len) * seq_len


__all__ = ["matmul_params", "train_flops_per_sample", "train_flops_per_token"]
