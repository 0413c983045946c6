"""How the processes of one burst agree: one process alone, or the ranks of a DDP job.

The burst loop (``workbench.engine.burst``) is the same code in the kernel and in each torchrun
worker. What differs is gathered here, behind four small methods, so the loop never asks
"am I distributed?":

- ``shard``: which part of the dataset this process reads (each rank its own slice);
- ``wrap_model``: DDP around the model, or FSDP2's shards of it (``sharding=fsdp``,
  ``workbench.engine.sharding``), before the optimizer and ``torch.compile`` (the order
  PyTorch documents);
- ``agree_stop``: the measured window must end on the *same* step on every rank, or the next
  gradient all-reduce waits forever for a rank that already left;
- ``barrier``: the window starts and ends together on every rank.
"""

from __future__ import annotations

from typing import Protocol

from torch import nn


class Coordinator(Protocol):
    rank: int
    world_size: int

    @property
    def shard(self) -> tuple[int, int] | None:
        """(rank, world_size) when the dataset is split between ranks, else None."""
        ...

    def wrap_model(self, model: nn.Module) -> nn.Module: ...

    def agree_stop(self, stop_here: bool) -> bool: ...

    def barrier(self) -> None: ...


class Solo:
    """One process: nothing to agree on."""

    rank = 0
    world_size = 1
    shard = None

    def wrap_model(self, model: nn.Module) -> nn.Module:
        return model

    def agree_stop(self, stop_here: bool) -> bool:
        return stop_here

    def barrier(self) -> None:
        return None
