"""Loader backends behind one small interface: an endless stream of batches.

A batch is ``(input, target)`` or a dict, any nest of tensors (``workbench.engine.batches``); the
workload's ``collate_fn`` makes it from the dataset's items where the backend is torch's.

``build_loader`` picks the backend from ``knobs.loader``: the torch DataLoader, NVIDIA DALI, or
``synthetic`` (one batch resident on the device, replayed: the compute-only ceiling).
"""

from __future__ import annotations

import torch

from workbench.core.knobs import Knobs
from workbench.engine.loaders.dali import build_dali_stream  # imports DALI only when called
from workbench.engine.loaders.stream import BatchStream, LoaderUnavailable, check_batch_fits
from workbench.engine.loaders.synthetic import SyntheticStream
from workbench.engine.loaders.torch_loader import TorchStream
from workbench.engine.workloads import Workload


def build_loader(
    workload: Workload,
    knobs: Knobs,
    device: torch.device,
    shard: tuple[int, int] | None = None,
) -> BatchStream:
    """The stream ``knobs.loader`` names. ``shard=(rank, world_size)``: this rank's slice of
    the dataset in a DDP job (every rank reads different samples, as DistributedSampler does)."""
    if knobs.loader == "synthetic":
        return SyntheticStream.from_dataset(workload.dataset(), knobs, device, workload.collate_fn)
    if knobs.loader == "dali":
        if shard is None:
            return build_dali_stream(workload, knobs, device)
        return build_dali_stream(workload, knobs, device, shard=shard)
    return TorchStream(
        workload.dataset(), knobs, device, shard=shard, collate_fn=workload.collate_fn
    )


__all__ = ["BatchStream", "LoaderUnavailable", "build_loader", "check_batch_fits"]
