"""Loader backends behind one small interface: an endless stream of batches.

A batch is ``(input, target)`` or a dict, any nest of tensors (``workbench.engine.batches``); the
workload's ``collate_fn`` makes it from the dataset's items where the backend is torch's.

``build_loader`` picks the backend from ``knobs.loader``: the torch DataLoader, NVIDIA DALI, or
``synthetic`` (one batch resident on the device, replayed: the compute-only ceiling).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from workbench.core.knobs import KnobError, Knobs
from workbench.engine.workloads import Workload


class BatchStream(Protocol):
    """Endless batches across epochs; ``close`` shuts workers down (idempotent)."""

    backend: str
    on_device: bool
    epochs: int

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


def build_loader(
    workload: Workload,
    knobs: Knobs,
    device: torch.device,
    shard: tuple[int, int] | None = None,
) -> BatchStream:
    """The stream ``knobs.loader`` names. ``shard=(rank, world_size)``: this rank's slice of
    the dataset in a DDP job (every rank reads different samples, as DistributedSampler does)."""
    stream = _build(workload, knobs, device, shard)
    if knobs.cache == "cold":  # dropped now (set-up and warm-up read cold) and before the window
        from workbench.engine.storage import drop_dataset_pages

        stream.cold_files = drop_dataset_pages(workload, knobs)  # type: ignore[attr-defined]
    return stream


def drop_before_window(stream: BatchStream) -> None:
    """``cache=cold``: drop the dataset's pages again, so the measured window starts with none
    of them in the page cache (what warm-up read included). Loader workers keep prefetching
    meanwhile, as they would at the start of an epoch."""
    files = getattr(stream, "cold_files", None)
    if files:
        from workbench.engine.formats import release_mappings
        from workbench.engine.storage import drop_pages

        release_mappings(files)
        drop_pages(files)


def _build(
    workload: Workload, knobs: Knobs, device: torch.device, shard: tuple[int, int] | None
) -> BatchStream:
    from workbench.engine.formats import dataset_for

    if knobs.loader == "synthetic":
        from workbench.engine.loaders.synthetic import SyntheticStream

        dataset = dataset_for(workload, knobs)
        return SyntheticStream.from_dataset(dataset, knobs, device, workload.collate_fn)
    if knobs.loader == "dali":
        from workbench.engine.loaders.dali import build_dali_stream

        if shard is None:
            return build_dali_stream(workload, knobs, device)
        return build_dali_stream(workload, knobs, device, shard=shard)
    from workbench.engine.loaders.torch_loader import TorchStream

    return TorchStream(
        dataset_for(workload, knobs), knobs, device, shard=shard, collate_fn=workload.collate_fn
    )


__all__ = [
    "BatchStream",
    "LoaderUnavailable",
    "build_loader",
    "check_batch_fits",
    "drop_before_window",
]
