"""The ``data_format`` knob: one ImageFolder stored four ways, read with the same transforms.

- ``files``: the JPEG folder itself (``workbench.engine.datasets.ImageFiles``), one file per image;
- ``shards``: WebDataset tar shards (``formats.shards``), read in sequence;
- ``lmdb``: one LMDB of the JPEGs (``formats.lmdb_format``), random access by key;
- ``predecoded``: uint8 pixels at training resolution (``formats.predecoded``), memory-mapped.

A converted copy of a folder ``DIR`` lives beside it, as ``DIR.shards``, ``DIR.lmdb`` and
``DIR.predecoded-R`` (R its side in pixels), or under ``$WORKBENCH_FORMATS`` when set
(``workbench data --format F --to ROOT`` writes under ROOT). Every copy keeps each sample's
index in the source (its ImageFolder order) and its label, so the same sample has the same
label under every format, and the same count; ``workbench.engine.convert`` builds them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from workbench.core.knobs import DATA_FORMATS, KnobError, Knobs
from workbench.engine.encoded import EncodedFiles
from workbench.engine.formats.inuse import held
from workbench.engine.formats.lmdb_format import DATA_FILE, LmdbDataset, close_environment
from workbench.engine.formats.manifest import FormatError, Manifest, open_checked, read_manifest
from workbench.engine.formats.predecoded import PredecodedDataset, resolution_for
from workbench.engine.formats.shards import ShardDataset
from workbench.engine.workloads.base import Workload

CONVERTED = ("shards", "lmdb", "predecoded")


class FormatMissing(KnobError):
    """``data_format`` names a format this dataset has not been converted to (yet): bad input,
    with the command that builds it."""

    def __init__(self, fmt: str, folder: Path, build: str):
        super().__init__("data_format", fmt, f"no {fmt} copy of {folder.parent} at {folder}; "
                                             f"build it with: {build}")  # fmt: skip


def format_root(source: Path, root: str | os.PathLike[str] | None = None) -> Path:
    """Where converted copies of ``source`` are written and looked for."""
    chosen = root or os.environ.get("WORKBENCH_FORMATS")
    return Path(chosen).expanduser() if chosen else Path(source).parent


def format_dir(
    source: Path, fmt: str, resolution: int | None = None, root: str | None = None
) -> Path:
    """The folder of ``source`` converted to ``fmt`` (predecoded: at ``resolution`` px)."""
    if fmt not in CONVERTED:
        raise KnobError("data_format", fmt, f"one of {', '.join(CONVERTED)} (files is the source)")
    if fmt == "predecoded":
        if not resolution:
            raise KnobError("resolution", resolution, "a side in pixels for predecoded data")
        fmt = f"predecoded-{resolution}"
    return format_root(source, root) / f"{Path(source).name}.{fmt}"


def build_command(source: Path, fmt: str, resolution: int | None = None) -> str:
    size = f" --resolution {resolution}" if fmt == "predecoded" else ""
    return f"workbench data --format {fmt} --from {source}{size}"


def image_size(wl: Workload, dataset: Any) -> int:
    """The training crop of an image workload: its ``image_size``, else its transform's crop."""
    if wl.extras.get("image_size"):
        return int(wl.extras["image_size"])
    for t in getattr(getattr(dataset, "transform", None), "transforms", ()):
        size = getattr(t, "size", None)
        if isinstance(size, (tuple, list)) and size:
            return int(size[0])
        if isinstance(size, int):
            return size
    raise KnobError("data_format", "predecoded", "a workload whose transform has a crop size "
                    "(RandomResizedCrop) or extras['image_size']")  # fmt: skip


def located(wl: Workload, knobs: Knobs, dataset: Any = None) -> tuple[Path, Manifest]:
    """The converted copy ``knobs.data_format`` names for this workload, checked."""
    fmt = knobs.data_format
    if wl.image_dir is None or wl.tokens:
        raise KnobError("data_format", fmt, f"files: workload {wl.name!r} reads no image folder, "
                        "and only image folders are converted")  # fmt: skip
    dataset = wl.dataset() if dataset is None else dataset
    resolution = None
    if fmt == "predecoded":
        resolution = resolution_for(image_size(wl, dataset))
    samples = getattr(dataset, "samples", None)
    count = None if samples is None else len(samples)
    return checked_copy(wl.image_dir, fmt, resolution, count)


def checked_copy(
    source: Path, fmt: str, resolution: int | None, count: int | None
) -> tuple[Path, Manifest]:
    """The ``fmt`` copy of the folder ``source``: built (else the command that builds it), its
    files as its manifest says and, when ``count`` is given, as many samples as the source
    has now (a stale copy is an error, not old data read silently)."""
    folder = format_dir(source, fmt, resolution)
    if not folder.is_dir():
        raise FormatMissing(fmt, folder, build_command(source, fmt, resolution))
    manifest = open_checked(folder, fmt)
    if count is not None and count != manifest.count:
        raise FormatError(
            f"{folder} holds {manifest.count} samples but {source} has {count} "
            f"now: convert again ({build_command(source, fmt, resolution)})"
        )
    return folder, manifest


def dataset_for(wl: Workload, knobs: Knobs, dataset: Any = None) -> Dataset:
    """The workload's dataset in ``knobs.data_format``, with the workload's own transform
    (``dataset``: ``wl.dataset()`` when the caller already built it)."""
    dataset = wl.dataset() if dataset is None else dataset
    if knobs.data_format == "files":
        return dataset
    folder, _ = located(wl, knobs, dataset)
    return open_format(folder, knobs.data_format, getattr(dataset, "transform", None))


def open_format(folder: Path, fmt: str, transform: Any = None, *, encoded: bool = False) -> Dataset:
    """The dataset of a converted folder (no workload needed), marked in use while it lives;
    ``encoded``: its samples as stored, undecoded (``decode=gpu``, ``workbench.engine.encoded``)."""
    kinds = {"shards": ShardDataset, "lmdb": LmdbDataset, "predecoded": PredecodedDataset}
    if fmt not in kinds:
        raise KnobError("data_format", fmt, f"one of {', '.join(DATA_FORMATS)}")
    # Marked in use while the dataset lives: a conversion never replaces it under a reader.
    return held(Path(folder), lambda: kinds[fmt](folder, transform, encoded=encoded))


def encoded_dataset_for(wl: Workload, knobs: Knobs, dataset: Any = None) -> Dataset:
    """The workload's samples in ``knobs.data_format`` as stored, undecoded, with their labels
    and in the decoding dataset's order (``decode=gpu``): JPEG bytes, or predecoded squares."""
    dataset = wl.dataset() if dataset is None else dataset
    if knobs.data_format == "files":
        samples = getattr(dataset, "samples", None)
        if samples is None:
            raise KnobError("decode", "gpu", f"decode=cpu for workload {wl.name!r}: its dataset "
                            "lists no (path, label) samples to read as bytes")  # fmt: skip
        return EncodedFiles(samples)
    folder, _ = located(wl, knobs, dataset)
    return open_format(folder, knobs.data_format, encoded=True)


def data_files(wl: Workload, knobs: Knobs) -> list[Path]:
    """The files a burst in this format reads: what ``cache=cold`` drops from the page cache."""
    if knobs.data_format == "files":
        samples = getattr(wl.dataset(), "samples", None)
        if samples is None:
            return []
        return [Path(path) for path, _ in samples]
    folder, manifest = located(wl, knobs)
    return [folder / name for name in manifest.files]


def release_mappings(files: list[Path]) -> None:
    """Close this process's LMDB mappings of these files (see ``close_environment``)."""
    for path in files:
        if path.name == DATA_FILE:
            close_environment(path.parent)


__all__ = [
    "CONVERTED",
    "DATA_FORMATS",
    "FormatError",
    "FormatMissing",
    "build_command",
    "checked_copy",
    "data_files",
    "dataset_for",
    "encoded_dataset_for",
    "format_dir",
    "located",
    "open_format",
    "read_manifest",
    "release_mappings",
]
