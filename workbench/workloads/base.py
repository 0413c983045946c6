"""The Workload dataclass and the FLOP count that MFU is built on."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

log = logging.getLogger("workbench")


def default_optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """SGD with momentum: a real optimizer step with small, fixed state."""
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What a burst trains: ``loss(model(input), target)`` over batches of ``dataset``.

    ``model`` and ``dataset`` are factories (called once per burst), so a burst always
    starts from a fresh model and the same data. The dataset yields ``(input, target)``.
    """

    name: str
    model: Callable[[], nn.Module]
    dataset: Callable[[], Dataset]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy
    optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] = default_optimizer
    flops_per_sample: float | None = None
    """Training FLOPs per sample (forward + backward). None: counted on the meta device."""
    tokens_per_sample: int | None = None
    """For token workloads: tokens in one sample, so results carry tokens_per_s."""
    description: str = ""
    image_dir: Path | None = None
    """The ImageFolder the dataset reads, for loaders that read files themselves (DALI)."""
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> bool:
        return self.tokens_per_sample is not None


def count_train_flops(workload: Workload, x: torch.Tensor, y: torch.Tensor) -> float | None:
    """Model FLOPs of one training sample (forward + backward), or None if they cannot be counted.

    Counted with ``torch.utils.flop_counter.FlopCounterMode`` on the ``meta`` device: shapes
    only, no memory, no compute, so it is cheap even for resnet50. It counts matmuls,
    convolutions and attention, the convention MFU uses (elementwise ops are not "model FLOPs").
    """
    if workload.flops_per_sample is not None:
        return workload.flops_per_sample
    n = min(2, x.shape[0])
    try:
        return _count_on_meta(workload, x[:n], y[:n]) / n
    except Exception as exc:  # a user's model may not build on meta: MFU is then unknown
        log.info("could not count FLOPs for workload %s: %s", workload.name, exc)
        return None


def _count_on_meta(workload: Workload, x: torch.Tensor, y: torch.Tensor) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = workload.model()
    x_meta, y_meta = x.to("meta"), y.to("meta")
    with FlopCounterMode(display=False) as counter:
        workload.loss(model(x_meta), y_meta).backward()
    total = float(counter.get_total_flops())
    if total <= 0:
        raise ValueError("no matmul/convolution FLOPs found")
    return total


def say_progress(message: str) -> None:
    """Progress of a one-time dataset build: stderr, so ``--json`` stdout stays clean. A count
    on its way ("images: 80/800") is rewritten in place by the next message (a carriage
    return, which terminals and Jupyter's output both honour), so a notebook shows one line
    that counts up rather than ten."""
    import sys

    count = message.rpartition(": ")[2].split("/")
    partial = len(count) == 2 and all(c.isdigit() for c in count) and count[0] != count[1]
    print(f"\rworkbench: {message}", end="" if partial else "\n", file=sys.stderr, flush=True)
