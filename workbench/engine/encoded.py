"""What the loader's workers hand over with ``decode=gpu``: stored bytes, not float crops.

A worker reads a sample's bytes as stored (a JPEG file, a shard's or an LMDB's JPEG record, a
predecoded uint8 square) and nothing else; :func:`collate_encoded` packs a batch of them into
one :class:`EncodedBatch`: the JPEGs back to back in one uint8 tensor (one shared-memory block
to hand from a worker to the trainer, one block to pin), or the predecoded squares stacked.
``workbench.engine.device_images`` turns it into the float batch on the device.

What crosses to the device per sample, at 224 px crops: float32 crops 602 KB (3 x 224 x 224 x
4); a predecoded 256 px square 197 KB (3 x 256 x 256); a sample-set JPEG about 110 KB.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset

from workbench.core.errors import KnobError

JPEG = "jpeg"
PIXELS = "pixels"
JPEG_SUFFIXES = (".jpg", ".jpeg")


@dataclass(slots=True)
class EncodedBatch:
    """A batch as stored: ``kind`` "jpeg" (``data`` holds every file's bytes back to back and
    ``lengths`` each one's length) or "pixels" (``data`` is N x R x R x 3 uint8); ``labels``
    int64. Has ``pin_memory``, so a DataLoader with ``pin_memory=True`` pins it."""

    kind: str
    data: torch.Tensor
    labels: torch.Tensor
    lengths: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def pin_memory(self) -> EncodedBatch:
        lengths = self.lengths  # read on the host only: never pinned, never copied
        return EncodedBatch(self.kind, self.data.pin_memory(), self.labels.pin_memory(), lengths)

    @property
    def nbytes(self) -> int:
        """Bytes that cross to the device for this batch: the data and the labels."""
        return self.data.nbytes + self.labels.nbytes

    def jpegs(self) -> list[torch.Tensor]:
        """The JPEGs as 1-D uint8 views into ``data`` (on the host, as nvJPEG takes them)."""
        if self.kind != JPEG or self.lengths is None:
            raise ValueError(f"a {self.kind} batch holds no JPEG bytes")
        return list(torch.split(self.data, self.lengths.tolist()))


def collate_encoded(items: Sequence[tuple[torch.Tensor, int]]) -> EncodedBatch:
    """One EncodedBatch from ``(bytes or pixels, label)`` samples: 1-D tensors are JPEGs,
    3-D ones (H x W x 3) predecoded pixels."""
    data = [item[0] for item in items]
    labels = torch.tensor([int(item[1]) for item in items], dtype=torch.int64)
    if data[0].dim() == 1:
        lengths = torch.tensor([len(d) for d in data], dtype=torch.int64)
        return EncodedBatch(JPEG, torch.cat(data), labels, lengths)
    return EncodedBatch(PIXELS, torch.stack(data), labels)


def file_bytes(path: str | os.PathLike[str]) -> torch.Tensor:
    """A file's bytes as a 1-D uint8 tensor (one read, no decode)."""
    with open(path, "rb") as handle:
        return torch.frombuffer(bytearray(handle.read()), dtype=torch.uint8)


def check_jpegs(samples: Sequence[tuple[str, int]]) -> None:
    """Refuse a folder with other images than JPEGs: nvJPEG decodes JPEG only."""
    for path, _ in samples:
        if not str(path).lower().endswith(JPEG_SUFFIXES):
            raise KnobError("decode", "gpu", f"decode=cpu for this folder: nvJPEG decodes JPEGs "
                            f"only, and {path} is not one")  # fmt: skip


class EncodedFiles(Dataset):
    """An image folder's samples (``[(path, label)]``, as ImageFolder lists them) as
    ``(JPEG bytes, label)``: the same order and labels as the decoding dataset. ``transform``
    is kept, never applied: the device runs it (as the format datasets keep theirs)."""

    def __init__(self, samples: Sequence[tuple[str, int]], transform: Any = None):
        check_jpegs(samples)
        self.samples = [(str(path), int(label)) for path, label in samples]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        return file_bytes(path), label


def as_tensor(data: bytes | Any) -> torch.Tensor:
    """Stored bytes (bytes, bytearray, memoryview or a uint8 array) as a uint8 tensor copy."""
    if isinstance(data, torch.Tensor):
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return torch.from_numpy(data.copy())
