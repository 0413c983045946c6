"""``decode=gpu``: the torch loader's workers read bytes, the device decodes and augments.

:class:`DeviceBatches` is the one call a training loop adds (``for images, labels in
DeviceBatches(loader, DeviceImages(recipe, device))``); the burst runs the same class over its
own stream (:class:`DeviceDecodeStream`), so what it measures is what that loop gets.

Overlap: on CUDA the next batch's copy, nvJPEG decode and augmentation are queued on a side
stream before the current batch is handed over, so the device does them while the model trains
on the current one (the training stream waits for the side stream only at the hand-over, and
each tensor is marked as used there, so the caching allocator does not reuse it early). The
host still launches those kernels from the training thread: about 4 small kernels an image.
``overlap=False`` (the ``decode_overlap`` knob) runs them on the training stream, in line;
the GPU session measures both.

When the knob cannot act (:func:`decode_no_effect`), the burst runs the workers' CPU pipeline
and says why in ``no_effect``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from workbench.core.knobs import Knobs
from workbench.engine.device_images import (
    DeviceImages,
    UnsupportedTransform,
    jpeg_decoder,
    recipe_of,
)
from workbench.engine.encoded import collate_encoded
from workbench.engine.epochs import SAMPLE_SET
from workbench.engine.formats import encoded_dataset_for
from workbench.engine.loaders.torch_loader import TorchStream
from workbench.engine.workloads import Workload
from workbench.engine.workloads.lightning import is_lightning

DeviceBatch = tuple[torch.Tensor, torch.Tensor]


class _Ahead:
    """The iterator behind DeviceBatches: one batch prepared ahead (see the module's doc)."""

    def __init__(self, source: Iterator[Any], images: DeviceImages, overlap: bool):
        self._source = source
        self._images = images
        on_cuda = images.device.type == "cuda"
        self._side = torch.cuda.Stream(images.device) if overlap and on_cuda else None
        self.overlaps = self._side is not None
        self._ready: DeviceBatch | None = None
        self._started = False

    def __iter__(self) -> _Ahead:
        return self

    def __next__(self) -> DeviceBatch:
        if not self._started:
            self._ready, self._started = self._prepare(), True
        if self._ready is None:
            raise StopIteration
        images, labels = self._ready
        if self._side is not None:
            current = torch.cuda.current_stream(self._images.device)
            current.wait_stream(self._side)
            images.record_stream(current)
            labels.record_stream(current)
        self._ready = self._prepare()
        return images, labels

    def _prepare(self) -> DeviceBatch | None:
        try:
            batch = next(self._source)
        except StopIteration:
            return None
        if self._side is None:
            return self._images(batch)
        with torch.cuda.stream(self._side):
            return self._images(batch)


class DeviceBatches:
    """``(images, labels)`` on the device from a loader of ``EncodedBatch`` (a DataLoader with
    ``collate_fn=collate_encoded`` over an encoded dataset): decoded and augmented by
    ``images``, one batch ahead. Iterate it once per epoch, as the loader itself."""

    def __init__(
        self, batches: Iterable[Any], images: DeviceImages, *, overlap: bool = True
    ) -> None:
        self.batches = batches
        self.images = images
        self.overlap = overlap

    def __iter__(self) -> Iterator[DeviceBatch]:
        return _Ahead(iter(self.batches), self.images, self.overlap)

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]


class DeviceDecodeStream:
    """The burst's BatchStream for ``decode=gpu``: a TorchStream of encoded batches, handed
    over through DeviceBatches' iterator (the stream never runs out, so neither does it)."""

    backend = "torch"
    on_device = True
    decode = "gpu"

    def __init__(self, inner: TorchStream, images: DeviceImages, *, overlap: bool = True):
        self.inner = inner
        self.images = images
        self._ahead = _Ahead(inner, images, overlap)

    @property
    def epochs(self) -> int:
        return self.inner.epochs

    @property
    def batches_per_epoch(self) -> int | None:
        return self.inner.batches_per_epoch

    @property
    def epoch_handling(self) -> str | None:
        return self.inner.epoch_handling

    @property
    def h2d_bytes_per_sample(self) -> float | None:
        return self.images.h2d_bytes_per_sample

    @property
    def note(self) -> str:
        """What the result's ``notes`` say of this stream: the decoder (its version, and how it
        is made safe: ``device_images``' doc) and the overlap."""
        where = "on a side stream, one batch ahead" if self._ahead.overlaps else "in line"
        return f"decode=gpu: JPEGs decoded by nvJPEG through {jpeg_decoder()[0]}, augmented {where}"

    def __next__(self) -> DeviceBatch:
        return next(self._ahead)

    def close(self) -> None:
        self.inner.close()


def decode_no_effect(
    knobs: Knobs, device: torch.device, workload: Workload, dataset: Any = None
) -> dict[str, str]:
    """``{"decode": reason}`` when ``decode=gpu`` cannot act in this burst, else {}
    (``dataset``: the workload's, when the caller already built it)."""
    if knobs.decode != "gpu":
        off = not knobs.decode_overlap
        return (
            {"decode_overlap": "acts only with decode=gpu (no side stream to run)"} if off else {}
        )
    reason = _why_not(knobs, device, workload, dataset)
    if reason is None:
        return {}
    refused = {"decode": reason}
    if not knobs.decode_overlap:
        refused["decode_overlap"] = "decode=gpu did not act here: nothing decoded on the device"
    return refused


def _why_not(knobs: Knobs, device: torch.device, workload: Workload, dataset: Any) -> str | None:
    if device.type != "cuda":
        return ("nvJPEG decodes on a CUDA device; this burst ran on the CPU, where the "
                "workers decoded and augmented (decode=cpu)")  # fmt: skip
    if knobs.loader != "torch":
        return (f"decode is the torch loader's; loader={knobs.loader} "
                + ("decodes as dali_decode says" if knobs.loader == "dali"
                   else "replays one device-resident batch"))  # fmt: skip
    if workload.image_dir is None or workload.tokens:
        return f"workload {workload.name} reads no image folder: there are no JPEGs to decode"
    if workload.collate_fn is not None:
        return (f"workload {workload.name} has its own collate_fn, which the device pipeline "
                "would bypass: its workers decode (decode=cpu)")  # fmt: skip
    if is_lightning(workload):
        return ("a Lightning Trainer iterates its own DataLoader; call DeviceBatches in the "
                "module's step instead (docs/production.md)")  # fmt: skip
    try:
        dataset = workload.dataset() if dataset is None else dataset
        recipe_of(getattr(dataset, "transform", None))
    except UnsupportedTransform as exc:
        return f"workload {workload.name}: {exc}; its workers decode (decode=cpu)"
    return None


def build_device_stream(
    workload: Workload,
    knobs: Knobs,
    device: torch.device,
    shard: tuple[int, int] | None,
    dataset: Any = None,
) -> DeviceDecodeStream:
    """The encoded dataset in ``knobs.data_format``, its loader, and the device pipeline with
    the workload's own augmentation; each rank draws its crops from its own seed."""
    dataset = workload.dataset() if dataset is None else dataset
    recipe = recipe_of(getattr(dataset, "transform", None))
    encoded = encoded_dataset_for(workload, knobs, dataset)
    inner = TorchStream(
        encoded,
        knobs,
        device,
        shard=shard,
        collate_fn=collate_encoded,
        sample_set=bool(workload.extras.get(SAMPLE_SET)),
    )
    seed = shard[0] if shard else 0
    images = DeviceImages(recipe, device, seed=seed, channels_last=knobs.channels_last)
    return DeviceDecodeStream(inner, images, overlap=knobs.decode_overlap)


def decode_ran(stream: Any, workload: Workload) -> str | None:
    """The result's ``decode``: where this stream's images were decoded ("gpu": on the
    device, by nvJPEG or DALI's mixed decode; "cpu": in the loader's workers or DALI's CPU
    threads); None for a workload without an image folder and for the synthetic loader."""
    if workload.image_dir is None or workload.tokens or stream.backend == "synthetic":
        return None
    ran = getattr(stream, "decode", "cpu")  # DALI's stream says "mixed" for its GPU decode
    return "gpu" if ran in {"gpu", "mixed"} else "cpu"
