"""``convert_dataset``: an ImageFolder rewritten as shards, an LMDB or predecoded pixels.

Safe to interrupt: everything is written under a hidden temporary name beside the target,
the manifest last, and the folder is renamed into place only when complete. Ctrl-C, a full
disk or any error removes the temporary folder, so no half dataset is ever found where a
burst looks. A re-run whose target holds a finished conversion of the same source (same
image count and bytes, every file at its recorded size) reuses it without reading an image.

Safe to run twice at once: a conversion holds a lock on its target (``.NAME.lock`` beside
it), so a second one waits and then reuses the first's copy instead of replacing it. A copy
is replaced (its source changed) only when no dataset is reading it (``formats.inuse``): a
burst in another process never has its files deleted under it.

Reading is parallel: threads for shards and LMDB (the work is reading files; the GIL is
released while they wait on the disk), forked processes for predecoded data (decoding and
resizing are CPU work). Writing is one sequential stream per format.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from workbench.core.knobs import KnobError
from workbench.core.safefiles import locked, new_folder
from workbench.engine.datasets import (
    DataError,
    ImageFiles,
    _ignore_sigint,
    data_root,
    ensure_datasets,
)
from workbench.engine.formats import CONVERTED, format_dir
from workbench.engine.formats.inuse import unused
from workbench.engine.formats.lmdb_format import LmdbWriter
from workbench.engine.formats.manifest import FormatError, Manifest, open_checked, write_manifest
from workbench.engine.formats.predecoded import PredecodedWriter, predecode
from workbench.engine.formats.shards import ShardWriter, shard_sizes

Progress = Callable[[str], None]
_WINDOW = 256
"""Samples in flight at once: bounds memory to ~256 encoded images (or pixel records)."""


@dataclass(frozen=True)
class ConvertResult:
    """A finished conversion: where, how big beside its source, and how fast it was made."""

    format: str
    folder: Path
    source: Path
    count: int
    bytes: int
    source_bytes: int
    seconds: float
    reused: bool

    @property
    def images_per_s(self) -> float | None:
        return self.count / self.seconds if self.seconds > 0 and not self.reused else None

    def summary(self) -> str:
        size = f"{_mb(self.bytes)} on disk (source: {_mb(self.source_bytes)} in {self.count} files)"
        if self.reused:
            return f"{self.format}: reused the finished conversion in {self.folder}; {size}"
        mb_s = self.source_bytes / 2**20 / self.seconds
        rate = f"{self.images_per_s:,.0f} images/s, {mb_s:,.1f} MiB/s"
        return (
            f"{self.format}: {self.count} images in {self.seconds:.1f} s ({rate}); {size}; "
            f"-> {self.folder}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format, "folder": str(self.folder), "source": str(self.source),
            "count": self.count, "bytes": self.bytes, "source_bytes": self.source_bytes,
            "seconds": round(self.seconds, 3), "images_per_s": self.images_per_s,
            "reused": self.reused,
        }  # fmt: skip


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def convert_dataset(
    fmt: str,
    source: str | os.PathLike[str] | None = None,
    to: str | os.PathLike[str] | None = None,
    *,
    resolution: int | None = None,
    workers: int | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> ConvertResult:
    """Convert the ImageFolder ``source`` (default: the sample images) to ``fmt``.

    ``to``: the folder the copy goes under (default: beside the source; bursts look there or
    under ``$WORKBENCH_FORMATS``). ``resolution``: predecoded only, the stored side in pixels
    (default 73: the cnn workload's 64 px crop x 8/7; 256 for resnet50's 224).
    """
    if fmt not in CONVERTED:
        raise KnobError("format", fmt, f"one of {', '.join(CONVERTED)}")
    if fmt == "predecoded":
        resolution = 73 if resolution is None else resolution
        if (
            isinstance(resolution, bool)
            or not isinstance(resolution, int)
            or not 8 <= resolution <= 4096
        ):
            raise KnobError("resolution", resolution, "an integer from 8 to 4096 (pixels)")
    elif resolution is not None:
        raise KnobError("resolution", resolution, "only with --format predecoded")
    src = _source(source)
    dataset = ImageFiles(src)
    source_bytes = sum(os.stat(path).st_size for path, _ in dataset.samples)
    target = format_dir(src, fmt, resolution, str(to) if to else None)
    say = progress or (lambda _: None)
    reused = _finished(target, fmt, len(dataset), source_bytes, resolution)
    if reused is None:
        target.parent.mkdir(parents=True, exist_ok=True)
        # One conversion of a target at a time: a second one waits, then reuses the first's.
        with locked(target.with_name(f".{target.name}.lock")):
            reused = _finished(target, fmt, len(dataset), source_bytes, resolution)
            if reused is None:
                with unused(target):  # refused now, not after the work, when a reader has it
                    pass
                return _convert(fmt, src, dataset, source_bytes, target, resolution, workers,
                                seed, say)  # fmt: skip
    return ConvertResult(fmt, target, src, reused.count, reused.bytes, source_bytes, 0.0, True)


def _convert(
    fmt: str,
    src: Path,
    dataset: ImageFiles,
    source_bytes: int,
    target: Path,
    resolution: int | None,
    workers: int | None,
    seed: int,
    say: Progress,
) -> ConvertResult:
    """Write the copy in a new hidden folder (a random name: nothing planted there is reused),
    then swap it into place; the hidden folder is gone afterwards, whatever happens."""
    started = time.perf_counter()
    tmp = new_folder(target.parent, f".{target.name}.tmp-")
    try:
        files = _write(fmt, tmp, dataset, source_bytes, resolution, workers, seed, say)
        seconds = time.perf_counter() - started
        manifest = Manifest(
            format=fmt, source=str(src), source_count=len(dataset), source_bytes=source_bytes,
            classes=list(dataset.classes), count=len(dataset), files=files,
            resolution=resolution, convert_s=round(seconds, 3),
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )  # fmt: skip
        write_manifest(tmp, manifest)
        _swap_into_place(tmp, target)
    except OSError as exc:
        raise DataError(f"converting {src} to {fmt} failed writing under {tmp}: {exc}; "
                        "nothing was left behind") from exc  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.perf_counter() - started
    return ConvertResult(fmt, target, src, len(dataset), manifest.bytes, source_bytes, seconds,
                         False)  # fmt: skip


def _source(source: str | os.PathLike[str] | None) -> Path:
    if source is None:
        return ensure_datasets().images
    path = Path(source).expanduser()
    if (path / "images").is_dir() and (path / "manifest.json").is_file():
        return path / "images"  # a workbench data root: its image folder
    return path


def _finished(
    target: Path, fmt: str, count: int, source_bytes: int, resolution: int | None
) -> Manifest | None:
    """The manifest of a finished conversion of this very source at ``target``, else None."""
    if not target.is_dir():
        return None
    try:
        manifest = open_checked(target, fmt)
    except FormatError:
        return None
    same = (manifest.source_count, manifest.source_bytes, manifest.resolution)
    return manifest if same == (count, source_bytes, resolution) else None


def _swap_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished folder into place; an older copy is moved aside, then removed, but
    only while no reader holds it (CopyInUse otherwise, and the older copy stays)."""
    old = target.with_name(f".{target.name}.old-{secrets.token_hex(8)}")
    with unused(target):
        if target.exists():
            os.rename(target, old)
        os.rename(tmp, target)
    _fsync_dir(target.parent)
    shutil.rmtree(old, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(
    fmt: str,
    folder: Path,
    dataset: ImageFiles,
    source_bytes: int,
    resolution: int | None,
    workers: int | None,
    seed: int,
    say: Progress,
) -> dict[str, int]:
    samples = dataset.samples
    order = list(range(len(samples)))
    if fmt == "shards":  # each shard mixes classes: an ImageFolder is sorted by class
        random.Random(seed).shuffle(order)
        writer: Any = ShardWriter(folder, shard_sizes(len(order), source_bytes))
    elif fmt == "lmdb":
        writer = LmdbWriter(folder, source_bytes, len(order))
    else:
        writer = PredecodedWriter(folder, int(resolution or 0))
    paths = [samples[i][0] for i in order]
    payloads = _payloads(fmt, paths, resolution, workers)
    step = max(1, len(order) // 100)
    started = time.perf_counter()
    for done, (index, payload) in enumerate(zip(order, payloads, strict=False), start=1):
        writer.write(index, samples[index][1], payload)
        if done % step == 0 or done == len(order):
            rate = done / max(time.perf_counter() - started, 1e-9)
            say(f"{fmt}, {rate:,.0f} images/s: {done}/{len(order)}")
    return writer.close()


def _payloads(
    fmt: str, paths: list[str], resolution: int | None, workers: int | None
) -> Iterator[bytes]:
    """Each path's payload in order: its bytes, or (predecoded) its pixels."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if fmt == "predecoded":
        fn: Callable[[str], bytes] = partial(predecode, resolution=resolution)
        n = workers or cpus or 1
        pool: Executor | None = _processes(n) if n > 1 and sys.platform == "linux" else None
    else:
        fn = _read_bytes
        n = workers or min(16, 4 * (cpus or 1))
        pool = ThreadPoolExecutor(n) if n > 1 else None
    if pool is None:
        yield from map(fn, paths)
        return
    try:
        for start in range(0, len(paths), _WINDOW):
            yield from pool.map(fn, paths[start : start + _WINDOW])
    finally:  # Ctrl-C: drop the queued work rather than finish it
        pool.shutdown(wait=True, cancel_futures=True)


def _processes(n: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"),
                               initializer=_ignore_sigint)  # fmt: skip


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


__all__ = ["ConvertResult", "convert_dataset", "data_root"]
