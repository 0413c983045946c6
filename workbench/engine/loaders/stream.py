"""What every loader backend is: an endless stream of batches, and the checks they share."""

from __future__ import annotations

from typing import Any, Protocol

from workbench.core.knobs import KnobError


class BatchStream(Protocol):
    """Endless batches across epochs; ``close`` shuts workers down (idempotent).

    ``epochs``: times the stream restarted its loader at an epoch's end. ``batches_per_epoch``
    and ``epoch_handling`` (``continued``/``measured``, ``workbench.engine.epochs``): None
    where the backend cannot count its epoch in batches, or the epoch is not short."""

    backend: str
    on_device: bool
    epochs: int
    batches_per_epoch: int | None
    epoch_handling: str | None

    def __next__(self) -> Any: ...

    def close(self) -> None: ...


class LoaderUnavailable(RuntimeError):
    """The chosen loader backend cannot run here (not installed, needs a GPU, ...)."""


def check_batch_fits(batch_size: int, n_samples: int, sharded: bool = False) -> None:
    """Refuse a batch bigger than an epoch (``drop_last`` would yield no batch at all). A
    KnobError, so ``workbench burst`` treats it as bad input (exit 2), while a sweep or tune
    records it as a failed burst and goes on."""
    if batch_size > n_samples:
        where = "each rank's share of the dataset has" if sharded else "the dataset has"
        raise KnobError("batch_size", batch_size, f"{where} only {n_samples} samples")


__all__ = ["BatchStream", "LoaderUnavailable", "check_batch_fits"]
