"""``predecoded``: uint8 RGB pixels at the training resolution, in one memory-mapped file.

What "pre-decoded batches" buy: no JPEG decoder in the loop (the costliest per-image step of
an image pipeline on a CPU). What they cost: disk. A 500x375 JPEG of ~110 KB becomes
R x R x 3 bytes: 16 KB at R=73 (for 64 px crops), 197 KB at R=256 (for 224 px crops), and
about 2-3x the JPEG's bytes at full ImageNet size.

Each image is resized so its short side is R and centre-cropped to R x R (R is the training
crop scaled by 8/7, the classic 256-for-224), then stored as record ``index`` of
``pixels.u8``; ``labels.i64`` holds the labels. The workload's own transform (random-resized
crop, flip, normalize) runs on each record, so augmentation stays random per epoch; it crops
from the stored square rather than the full photo, the price of decoding once.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps
from torch.utils.data import Dataset

from workbench.engine.encoded import as_tensor
from workbench.engine.formats.manifest import FormatError, open_checked

PIXELS = "pixels.u8"
LABELS = "labels.i64"


def resolution_for(image_size: int) -> int:
    """The stored side for a training crop of ``image_size``: 8/7 of it (256 for 224)."""
    return round(image_size * 8 / 7)


def predecode(jpeg_path: str, resolution: int) -> bytes:
    """One image decoded, short side resized to ``resolution``, centre-cropped square."""
    with Image.open(jpeg_path) as img:
        rgb = img.convert("RGB")
    fitted = ImageOps.fit(rgb, (resolution, resolution), Image.Resampling.BILINEAR)
    return fitted.tobytes()


class PredecodedWriter:
    """Appends records in index order (the caller writes index 0, 1, 2, ...)."""

    def __init__(self, folder: Path, resolution: int):
        self.folder = folder
        self.record = resolution * resolution * 3
        self._pixels = open(folder / PIXELS, "wb")  # noqa: SIM115 (closed by close())
        self._labels: list[int] = []

    def write(self, index: int, label: int, pixels: bytes) -> None:
        if index != len(self._labels) or len(pixels) != self.record:
            raise ValueError(f"record {index} out of order or of the wrong size")
        self._pixels.write(pixels)
        self._labels.append(label)

    def close(self) -> dict[str, int]:
        self._pixels.flush()
        os.fsync(self._pixels.fileno())
        self._pixels.close()
        np.asarray(self._labels, dtype="<i8").tofile(self.folder / LABELS)
        return {name: (self.folder / name).stat().st_size for name in (PIXELS, LABELS)}


class PredecodedDataset(Dataset):
    """Map-style dataset over the pixel file: ``(transform(image), label)`` by index
    (``encoded``: ``(R x R x 3 uint8 tensor, label)``, the stored square as it is, for
    ``decode=gpu``: the device crops it)."""

    def __init__(
        self, folder: str | Path, transform: Callable | None = None, *, encoded: bool = False
    ):
        self.folder = Path(folder)
        self.encoded = encoded
        self.manifest = open_checked(self.folder, "predecoded")
        self.resolution = int(self.manifest.resolution or 0)
        self.record = self.resolution * self.resolution * 3
        if self.manifest.files.get(PIXELS) != self.record * self.manifest.count:
            raise FormatError(f"{self.folder / PIXELS} does not hold {self.manifest.count} records")
        self.labels = np.fromfile(self.folder / LABELS, dtype="<i8")
        self.transform = transform
        self._map: mmap.mmap | None = None
        self._pid = -1

    def __len__(self) -> int:
        return self.manifest.count

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_map": None, "_pid": -1}

    def _pixels(self) -> mmap.mmap:
        """The pixel file mapped once per process (a mapping is not shared across a fork)."""
        if self._map is None or self._pid != os.getpid():
            with open(self.folder / PIXELS, "rb") as handle:
                self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            self._pid = os.getpid()
        return self._map

    def raw(self, index: int) -> tuple[int, np.ndarray]:
        """(label, H x W x 3 uint8 view of the record) of sample ``index``."""
        pixels = np.frombuffer(self._pixels(), np.uint8, self.record, index * self.record)
        return int(self.labels[index]), pixels.reshape(self.resolution, self.resolution, 3)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range for {len(self)} samples")
        label, pixels = self.raw(index)
        if self.encoded:
            return as_tensor(pixels), label
        image = Image.fromarray(pixels)  # a copy: the transform may keep it past the mapping
        return (self.transform(image) if self.transform else image), label
