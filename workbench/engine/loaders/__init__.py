"""Loader backends behind one small interface: an endless stream of batches.

A batch is ``(input, target)`` or a dict, any nest of tensors (``workbench.engine.batches``); the
workload's ``collate_fn`` makes it from the dataset's items where the backend is torch's.

``build_loader`` picks the backend from ``knobs.loader``: the torch DataLoader, NVIDIA DALI, or
``synthetic`` (one batch resident on the device, replayed: the compute-only ceiling). With
``decode=gpu`` on CUDA the torch loader's workers read bytes and the device decodes and
augments them (``loaders.device_batches``).

An epoch shorter than ``SHORT_EPOCH_BATCHES`` is continued or measured as it is, by the rule
of ``workbench.engine.epochs``; the stream's ``epoch_handling`` says which.
"""

from __future__ import annotations

import torch

from workbench.core.knobs import Knobs
from workbench.engine.epochs import SAMPLE_SET
from workbench.engine.formats import dataset_for, release_mappings
from workbench.engine.loaders.dali import build_dali_stream  # imports DALI only when called
from workbench.engine.loaders.device_batches import build_device_stream, decode_no_effect
from workbench.engine.loaders.stream import BatchStream, LoaderUnavailable, check_batch_fits
from workbench.engine.loaders.synthetic import SyntheticStream
from workbench.engine.loaders.torch_loader import TorchStream
from workbench.engine.storage import drop_dataset_pages, drop_pages
from workbench.engine.workloads import Workload


def build_loader(
    workload: Workload,
    knobs: Knobs,
    device: torch.device,
    shard: tuple[int, int] | None = None,
    decode_on_device: bool | None = None,
) -> BatchStream:
    """The stream ``knobs.loader`` names. ``shard=(rank, world_size)``: this rank's slice of
    the dataset in a DDP job (every rank reads different samples, as DistributedSampler does).
    ``decode_on_device``: whether ``decode=gpu`` acts, as the burst's plan decided it
    (``engine.plan``); None: decided here."""
    stream = _build(workload, knobs, device, shard, decode_on_device)
    if knobs.cache == "cold":  # dropped now (set-up and warm-up read cold) and before the window
        stream.cold_files = drop_dataset_pages(workload, knobs)  # type: ignore[attr-defined]
    return stream


def drop_before_window(stream: BatchStream) -> None:
    """``cache=cold``: drop the dataset's pages again, so the measured window starts with none
    of them in the page cache (what warm-up read included). Loader workers keep prefetching
    meanwhile, as they would at the start of an epoch."""
    files = getattr(stream, "cold_files", None)
    if files:
        release_mappings(files)
        drop_pages(files)


def _build(
    workload: Workload,
    knobs: Knobs,
    device: torch.device,
    shard: tuple[int, int] | None,
    decode_on_device: bool | None,
) -> BatchStream:
    if knobs.loader == "synthetic":
        dataset = dataset_for(workload, knobs)
        return SyntheticStream.from_dataset(dataset, knobs, device, workload.collate_fn)
    if knobs.loader == "dali":
        if shard is None:
            return build_dali_stream(workload, knobs, device)
        return build_dali_stream(workload, knobs, device, shard=shard)
    dataset = workload.dataset()  # once: decode=gpu's check, its stream and the loader read it
    if decode_on_device is None:
        decode_on_device = knobs.decode == "gpu" and not decode_no_effect(
            knobs, device, workload, dataset
        )
    if decode_on_device:
        return build_device_stream(workload, knobs, device, shard, dataset)
    return TorchStream(
        dataset_for(workload, knobs, dataset),
        knobs,
        device,
        shard=shard,
        collate_fn=workload.collate_fn,
        sample_set=bool(workload.extras.get(SAMPLE_SET)),
    )


__all__ = [
    "BatchStream",
    "LoaderUnavailable",
    "build_loader",
    "check_batch_fits",
    "drop_before_window",
]
