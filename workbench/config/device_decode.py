"""``decode=gpu`` in production: a loader of stored bytes, and one call that makes device batches.

A burst with ``decode=gpu`` measures a torch DataLoader whose workers only read each sample's
stored bytes (``collate_fn=collate_encoded``: one ``EncodedBatch`` a batch) and, over it,
``DeviceBatches``: the batch decoded by nvJPEG and augmented on the device, one batch ahead on a
side stream. A production script gets the same two pieces, the same classes with the same
overlap, so its loop runs what was measured::

    loader = cfg.dataloader(dataset, shuffle=True)             # workers read bytes
    for images, labels in cfg.device_batches(loader, device):   # float32 NCHW on the device
        ...

The decisions behind that API:

- **The script keeps its ordinary dataset**, the one with the decode-and-augment transform
  (``ImageFolder``, ``cfg.dataset(DIR, transform)``). :meth:`TunedConfig.dataloader` reads it
  as bytes: a dataset that lists ``.samples`` (``[(path, label)]``: ImageFolder,
  ``ImageFiles``) as ``EncodedFiles`` over the same files, in the same order; a converted copy
  (shards, LMDB, predecoded) as the same copy opened ``encoded=True``; one already encoded as it
  is. Anything else is refused (KnobError naming ``decode``): there are no bytes to read.
- **The augmentation is the dataset's own transform**, read by ``recipe_of`` (RandomResizedCrop's
  size, scale and ratio, the flip probability, the normalisation). The encoded dataset keeps it
  as ``transform`` (never applied by the workers), so :func:`device_batches` finds it from the
  loader alone and one loader is one pipeline.
- **Where decode=gpu cannot act it does what the burst does**: the workers decode and augment on
  the CPU (a plain loader over the script's dataset), and a :class:`ConfigWarning` says why, in
  the words of the burst's ``no_effect``: no CUDA device, a collate_fn of the script's or the
  workload's own (the device pipeline would bypass it), a transform the device cannot reproduce.
- **``device_batches`` is the training loop's one call whatever ``decode`` says**: over a
  loader of decoded batches (``decode=cpu``, or a fallback) it copies each batch to the device
  (``non_blocking`` from pinned memory, images NHWC with ``channels_last``), so a script written
  once runs either config.
- **Each call draws its crops from a seed of its own**: a draw from torch's default generator
  (``torch.manual_seed`` makes a run reproducible) combined with the rank, so two ranks never
  crop alike (the burst's ranks are seeded by their rank too) and a loop that calls
  ``device_batches`` once per epoch gets new crops every epoch, as one that calls it once.

Light imports: torch and the engine inside the functions that need them (``load_config`` stays
torch-free).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from workbench.config.yaml_text import ConfigWarning
from workbench.core.errors import KnobError
from workbench.core.knobs import Knobs

__all__ = ["DecodedBatches", "cannot_act", "device_batches", "loader_dataset", "stored_dataset"]

_NO_CUDA = ("nvJPEG decodes on a CUDA device and this loader's device is {device}: the "
            "workers decode and augment (decode=cpu), as a burst on the CPU does")  # fmt: skip


def loader_dataset(
    knobs: Knobs, dataset: Any, device_type: str, collate: str | None
) -> tuple[Any, bool]:
    """What :meth:`TunedConfig.dataloader` loads, and whether as stored bytes.

    ``(encoded dataset, True)`` where ``decode=gpu`` acts; ``(dataset, False)`` for
    ``decode=cpu`` and, with a ConfigWarning saying why, where ``decode=gpu`` cannot act here
    (:func:`cannot_act`). A dataset that is already encoded is loaded as it is on any device:
    its samples are bytes, and only the device pipeline reads them.
    """
    if knobs.decode != "gpu":
        return dataset, False
    if is_encoded(dataset):
        return dataset, True
    reason = cannot_act(dataset, device_type, collate)
    if reason is not None:
        warnings.warn(f"decode=gpu has no effect here: {reason}", ConfigWarning, stacklevel=3)
        return dataset, False
    return stored_dataset(dataset), True


def cannot_act(dataset: Any, device_type: str, collate: str | None) -> str | None:
    """Why ``decode=gpu`` cannot act for this loader (the burst's ``no_effect`` reasons, in its
    order), or None. A dataset with no bytes to read is an error, not a reason (KnobError)."""
    if device_type != "cuda":
        return _NO_CUDA.format(device=device_type)
    if collate is not None:
        return (f"the loader has its own collate_fn ({collate}), which the device pipeline "
                "would bypass: its workers decode (decode=cpu)")  # fmt: skip
    _check_readable(dataset)
    # the engine (torch, torchvision) only when a loader is built: load_config stays light
    from workbench.engine.device_images import UnsupportedTransform, recipe_of

    try:
        recipe_of(getattr(dataset, "transform", None))
    except UnsupportedTransform as exc:
        return f"the dataset: {exc}; its workers decode (decode=cpu)"
    return None


def is_encoded(dataset: Any) -> bool:
    """Whether ``dataset`` already yields stored bytes (EncodedFiles, a copy opened encoded)."""
    # the engine (torch) only when a loader is built: load_config stays light
    from workbench.engine.encoded import EncodedFiles

    return isinstance(dataset, EncodedFiles) or getattr(dataset, "encoded", False) is True


def _check_readable(dataset: Any) -> None:
    if _format_of(dataset) is None and getattr(dataset, "samples", None) is None:
        raise KnobError("decode", "gpu", f"decode=cpu for a {type(dataset).__name__}, which "
                        "lists no image files: decode=gpu reads the stored bytes of an image "
                        "folder (a dataset with (path, label) .samples, like ImageFolder) or of "
                        "a converted copy from cfg.dataset(DIR, transform)")  # fmt: skip


def _format_of(dataset: Any) -> str | None:
    """The data_format of a converted copy's dataset (shards, lmdb, predecoded), else None."""
    if not hasattr(dataset, "encoded"):
        return None
    return getattr(getattr(dataset, "manifest", None), "format", None)


def stored_dataset(dataset: Any) -> Any:
    """``dataset``'s samples as stored, ``(bytes or uint8 pixels, label)``, in its order and
    with its labels, keeping its ``transform`` for the device (see the module's doc)."""
    _check_readable(dataset)
    transform = getattr(dataset, "transform", None)
    fmt = _format_of(dataset)
    if fmt is None:
        # the engine (torch) only when a loader is built: load_config stays light
        from workbench.engine.encoded import EncodedFiles

        return EncodedFiles(dataset.samples, transform)  # kept for device_batches
    # the format readers only when a loader is built: load_config stays light
    from workbench.engine.formats import open_format

    stored = open_format(dataset.folder, fmt, transform, encoded=True)
    if fmt == "shards":  # the same share of the shards, and the same shuffle
        stored.seed = dataset.seed
        stored = stored.for_rank(dataset.rank, dataset.world_size)
    return stored


def device_batches(
    loader: Iterable[Any],
    device: Any = None,
    *,
    channels_last: bool = False,
    seed: int | None = None,
    overlap: bool = True,
) -> Iterable[Any]:
    """``(images, labels)`` on ``device`` from ``loader``, one epoch per iteration.

    A loader of stored bytes (``cfg.dataloader`` with ``decode=gpu`` acting): the burst's
    ``DeviceBatches`` over ``DeviceImages`` with the dataset's augmentation, its crops drawn
    from ``seed`` (default: see the module's doc). Any other loader: :class:`DecodedBatches`,
    its batches copied to the device. ``device``: default CUDA's current device when there is
    one, else the CPU, where the same decode and augmentation run on CPU tensors.
    """
    # the engine (torch) only when a loop asks for batches: load_config stays light
    from workbench.engine.device_images import DeviceImages, UnsupportedTransform, recipe_of
    from workbench.engine.loaders.device_batches import DeviceBatches

    target = _device(device)
    dataset = getattr(loader, "dataset", None)
    if not is_encoded(dataset):
        pinned = target.type == "cuda" and bool(getattr(loader, "pin_memory", False))
        return DecodedBatches(loader, target, channels_last=channels_last, non_blocking=pinned)
    transform = getattr(dataset, "transform", None)
    try:
        recipe = recipe_of(transform)
    except UnsupportedTransform as exc:
        raise KnobError("decode", "gpu", f"the loader's dataset keeps no augmentation the "
                        f"device can run ({exc}): build the loader with cfg.dataloader(dataset), "
                        "from the dataset with its training transform") from None  # fmt: skip
    images = DeviceImages(recipe, target, seed=_seed() if seed is None else seed,
                          channels_last=channels_last)  # fmt: skip
    return DeviceBatches(loader, images, overlap=overlap)


class DecodedBatches:
    """A loader's decoded batches on ``device``: every tensor copied (``non_blocking`` from
    pinned memory), 4-D float images NHWC with ``channels_last``, as a burst's step copies them."""

    def __init__(
        self,
        batches: Iterable[Any],
        device: Any,
        *,
        channels_last: bool = False,
        non_blocking: bool = False,
    ) -> None:
        self.batches = batches
        self.device = device
        self.channels_last = channels_last
        self.non_blocking = non_blocking

    def __iter__(self) -> Iterator[Any]:
        # the engine (torch) only when a loop asks for batches: load_config stays light
        from workbench.engine.batches import move_batch

        for batch in self.batches:
            yield move_batch(batch, self.device, non_blocking=self.non_blocking,
                             channels_last=self.channels_last)  # fmt: skip

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]


def _device(device: Any) -> Any:
    """``device`` as a torch.device; None: CUDA's current device when there is one."""
    # torch only when a loop asks for batches: load_config stays light
    import torch

    if device is not None:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _seed() -> int:
    """A draw from torch's default generator, the rank in its low bits (module's doc)."""
    # torch only when a loop asks for batches: load_config stays light
    import torch

    draw = int(torch.randint(2**31 - 1, ()).item())
    return draw * _RANKS + _rank() % _RANKS


_RANKS = 1 << 16
"""Ranks told apart by the default seed (its low 16 bits)."""


def _rank() -> int:
    """This process's rank: the process group's, else torchrun's RANK, else 0."""
    # torch only when a loop asks for batches: load_config stays light
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0
