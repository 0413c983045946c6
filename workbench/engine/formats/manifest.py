"""The manifest of a converted dataset: what was written, checked before anything reads it.

A conversion writes its files under a temporary name, then ``manifest.json`` (last), then
renames the folder into place; a folder without a readable manifest, or whose files do not
match it (a file missing, a size that differs), is refused with the file named. The manifest
also records the source it was made from (image count and bytes), so a re-run can tell a
finished conversion of this source from a stale one without reading any image.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from workbench.core.safefiles import write_atomic
from workbench.engine.datasets import DataError

MANIFEST = "manifest.json"
KIND = "workbench-format"
VERSION = 1
"""Bumped when a format's layout changes: a manifest with another version is rebuilt."""


class FormatError(DataError):
    """A converted dataset that cannot be used: missing, corrupt or stale; names the file."""


@dataclass(frozen=True)
class Manifest:
    """What one converted dataset holds; ``files`` maps each file's name to its size."""

    format: str
    source: str
    source_count: int
    source_bytes: int
    classes: list[str]
    count: int
    files: dict[str, int]
    resolution: int | None = None
    """Predecoded only: the side of the square uint8 images, in pixels."""
    convert_s: float | None = None
    created: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    kind: str = KIND
    version: int = VERSION

    @property
    def bytes(self) -> int:
        return sum(self.files.values())

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def write_manifest(folder: Path, manifest: Manifest) -> None:
    """Write ``manifest.json`` atomically and flushed: it is what marks the folder complete."""
    write_atomic(folder / MANIFEST, manifest.to_json(), sync=True)


def read_manifest(folder: Path) -> Manifest:
    """The manifest of ``folder``; FormatError naming the file when missing or unreadable."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise FormatError(f"{path} is missing: {folder} is not a finished conversion")
    try:
        raw = json.loads(path.read_text())
        manifest = Manifest(**raw)
    except (OSError, ValueError, TypeError) as exc:
        raise FormatError(f"corrupt manifest {path}: {exc}") from None
    if manifest.kind != KIND or manifest.version != VERSION:
        raise FormatError(f"{path} is not a workbench format manifest of version {VERSION}")
    return manifest


def check_files(folder: Path, manifest: Manifest) -> None:
    """Every file the manifest lists is there with its recorded size, else FormatError."""
    for name, size in manifest.files.items():
        path = Path(folder) / name
        try:
            actual = path.stat().st_size
        except FileNotFoundError:
            raise FormatError(f"{path} is missing (listed in {folder / MANIFEST})") from None
        if actual != size:
            raise FormatError(
                f"{path} holds {actual} bytes, its manifest says {size}: truncated or "
                "overwritten; convert again"
            )


def open_checked(folder: Path, fmt: str) -> Manifest:
    """The manifest of a finished ``fmt`` conversion in ``folder``, its files checked."""
    manifest = read_manifest(folder)
    if manifest.format != fmt:
        raise FormatError(f"{folder / MANIFEST} is a {manifest.format} dataset, not {fmt}")
    check_files(folder, manifest)
    return manifest


def decode_jpeg(data: bytes, where: str) -> Image.Image:
    """One stored JPEG as an RGB image; a file that does not decode is a FormatError naming
    ``where`` (the record in its LMDB or shard), never a crash in a loader worker."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            return img.convert("RGB")
    except (OSError, SyntaxError, ValueError) as exc:
        raise FormatError(f"corrupt image {where}: {exc}") from exc
