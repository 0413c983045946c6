"""Lesson 12's batch and sequence on a GPU, chosen from this device's free memory so that every
burst of the lesson fits the smallest common MIG slice, ``1g.10gb``.

GPT-2 small at 16 x 1,024 tokens keeps about 19.5 GiB of activations for backward in the
default math (a reviewer's count with saved-tensor hooks, issue 43): every burst then runs out of
memory on a 1g.10gb slice, and the default math does not fit 20 GB slices either. So the lesson
measures instead of assuming:

- **per sequence**: what one sequence's forward keeps for backward on this device, counted by
  the workbench's own probe (``engine.memory.SavedTensorProbe``, the burst's
  ``activations_mib``) on a real batch of one, in the default math (the largest of the
  lesson's precisions) with the ``math`` attention kernel (the largest of its kernels: the
  score matrices are kept), so that every burst of the lesson, optional ones included, fits;
- **states**: weights, gradients and AdamW's two moments in fp32 (16 bytes a parameter) and
  autocast's bf16 copies of the weights (2 more);
- **the loss's transient**: the logits and their gradient in fp32 during the loss's backward
  (8 bytes a vocabulary row a token), which the probe does not count.

The budget is the smaller of this device's free memory and the 1g.10gb slice's, less the
tuner's margin (``slices.MEMORY_MARGIN``: the allocator's cache, the CUDA context, cuDNN's
workspace); the batch is the largest power of two whose tokens fit it, at most
``MAX_BATCH``, at GPT-2's 1,024 tokens, else at a shorter sequence. :func:`size_for` is the
arithmetic (pure: tested with recorded figures); :func:`size_here` measures and calls it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from workbench.engine.memory import SavedTensorProbe
from workbench.engine.workloads.gpt import GPT_SIZES, gpt
from workbench.workshop.slices import MEMORY_MARGIN, profile_memory_mib

__all__ = ["MAX_BATCH", "SEQUENCES", "SLICE", "Sizing", "per_sequence_mib", "size_for",
           "size_here", "workload_at"]  # fmt: skip

SLICE = "1g.10gb"
"""The smallest common MIG slice: every burst of the lesson must fit it."""
MAX_BATCH = 16
"""GPT-2 small's lesson batch before sizing (``lesson_plans``): never more."""
SEQUENCES = (1024, 512, 256)
"""GPT-2's context first; shorter only where not one sequence of it fits."""
STATE_BYTES_PER_PARAM = 18
"""fp32 weights, gradients and AdamW's two moments (16), autocast's bf16 weight copies (2)."""
LOSS_BYTES_PER_ROW = 8
"""The logits and their gradient in fp32, per vocabulary row and token, in the loss backward."""
MIB = 2**20


@dataclass(frozen=True, slots=True)
class Sizing:
    """What the lesson runs at on this device, and the figures it was chosen from."""

    batch: int
    seq: int
    budget_mib: float
    per_sequence_mib: float
    """Kept for backward by one sequence of ``SEQUENCES[0]`` tokens (measured)."""
    states_mib: float
    loss_mib: float
    """The loss's transient for one sequence of ``SEQUENCES[0]`` tokens."""
    free_mib: float

    @property
    def need_mib(self) -> float:
        """The estimated peak of the lesson's largest burst at this batch and sequence."""
        scale = self.seq / SEQUENCES[0]
        return self.states_mib + self.batch * scale * (self.per_sequence_mib + self.loss_mib)

    @property
    def fits(self) -> bool:
        return self.need_mib <= self.budget_mib

    def sentence(self) -> str:
        if not self.fits:
            return (
                f"Even batch 1 x {self.seq:,} tokens needs about {self.need_mib:,.0f} MiB "
                f"here, over {self.budget_mib:,.0f} MiB (this device's free "
                f"{self.free_mib:,.0f} MiB less {MEMORY_MARGIN:.0%}): expect "
                "status='oom' rows; free the GPU (other kernels) and run this cell again."
            )
        return (f"Batch {self.batch} x {self.seq:,} tokens: the largest burst of this lesson "
                f"needs about {self.need_mib:,.0f} MiB (states {self.states_mib:,.0f}, "
                f"{self.per_sequence_mib:,.0f} MiB kept a sequence, measured here, and "
                f"{self.loss_mib:,.0f} for the loss), within {self.budget_mib:,.0f} MiB: the "
                f"smaller of this device's free {self.free_mib:,.0f} MiB and a {SLICE} "
                f"slice's, less {MEMORY_MARGIN:.0%}.")  # fmt: skip


def size_for(per_sequence_mib: float, states_mib: float, loss_mib: float,
             free_mib: float) -> Sizing:  # fmt: skip
    """The batch and sequence (module docstring) for figures at ``SEQUENCES[0]`` tokens; the
    activations scale with the tokens (linearly: an upper bound for ``math``'s quadratic
    scores at a shorter sequence). Batch 1 at the shortest sequence where nothing fits."""
    budget = min(free_mib, profile_memory_mib(SLICE)) * (1 - MEMORY_MARGIN)
    room = budget - states_mib
    for seq in SEQUENCES:
        per = (per_sequence_mib + loss_mib) * seq / SEQUENCES[0]
        fits = int(room // per) if room > 0 else 0
        if fits >= 1:
            batch = min(MAX_BATCH, 2 ** int(math.log2(fits)))
            return Sizing(batch, seq, budget, per_sequence_mib, states_mib, loss_mib, free_mib)
    return Sizing(1, SEQUENCES[-1], budget, per_sequence_mib, states_mib, loss_mib, free_mib)


def per_sequence_mib(workload: Any, device: Any) -> float:
    """What one sequence's forward and loss keep for backward on ``device`` (MiB), at the
    default math with the ``math`` attention kernel: the burst's own probe on a real batch of
    one (``engine.memory.SavedTensorProbe``), its graph then dropped."""
    model = workload.model().to(device)
    x, y = next(iter(torch.utils.data.DataLoader(workload.dataset(), batch_size=1)))
    x, y = x.to(device), y.to(device)
    with sdpa_kernel(SDPBackend.MATH), SavedTensorProbe(model.parameters()) as probe:
        loss = workload.loss(model(x), y)
    del loss, model
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    return probe.mib


def size_here(workload: Any, device: Any = "cuda") -> Sizing:
    """Measure on ``device`` (a GPU) and size: free memory by CUDA, states from the model's
    parameter count, the loss's transient from its vocabulary (the tied head's rows)."""
    per = per_sequence_mib(workload, device)
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    model = workload.model()
    params = sum(p.numel() for p in model.parameters())
    rows = model.head.weight.shape[0]
    return size_for(per, params * STATE_BYTES_PER_PARAM / MIB,
                    rows * SEQUENCES[0] * LOSS_BYTES_PER_ROW / MIB, free / MIB)  # fmt: skip


def workload_at(name: str, seq: int) -> Any:
    """``name`` (``gpt:124m``) at ``seq`` tokens: the name itself at GPT-2's 1,024, else the
    same shape with a shorter context, named ``gpt:124m@512``."""
    shape = GPT_SIZES[name.split(":", 1)[1]]
    if seq == shape.block:
        return name
    return gpt(None, dataclasses.replace(shape, block=seq), name=f"{name}@{seq}")
