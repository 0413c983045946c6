"""The storage ceiling: how fast this format's bytes come off this disk, with no decoding.

``diagnose`` measures three ceilings (full, loader alone, compute alone); this is a fourth,
below the loader: the dataset in its ``data_format`` read raw, *cold* (the files' pages
dropped first), with as many reading threads as the loader has workers, for at most one pass
over the data (a second pass would be served by the page cache). What it reads is what the
loader reads per sample: a whole JPEG file (``files``), tar shards front to back
(``shards``), LMDB values by random key (``lmdb``), pixel records at random (``predecoded``).
It never decodes, so comparing it with the loader-only ceiling separates the disk from the
decoder: a loader close to the storage ceiling is storage-bound, one far below it is
decode-bound (or bound by its own per-sample work).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workbench.analysis.advice import Suggestion
from workbench.core.knobs import Knobs
from workbench.engine.workloads import Workload

_CHUNK = 2**20


@dataclass
class StorageCeiling:
    """Raw, cold reads of the dataset as stored: samples/s and MB/s (10^6 bytes)."""

    data_format: str
    samples_per_s: float | None = None
    mb_s: float | None = None
    samples: int = 0
    bytes: int = 0
    measured_s: float = 0.0
    threads: int = 1
    device: str | None = None
    status: str = "ok"
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.samples_per_s is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def storage_ceiling(
    wl: Workload, knobs: Knobs, *, seconds: float = 2.0, stop: threading.Event | None = None
) -> StorageCeiling:
    """Measure the storage ceiling of ``wl`` in ``knobs.data_format`` (a result, never raises
    for a dataset that cannot be read: ``status="error"`` with the reason)."""
    result = StorageCeiling(knobs.data_format, threads=max(1, knobs.num_workers))
    try:
        units, files = _units(wl, knobs)
        from workbench.engine.formats import release_mappings
        from workbench.engine.storage import device_of, drop_pages

        result.device = device_of(files[0]).describe() if files else None
        release_mappings(files)
        drop_pages(files)
        _read(units, result, seconds, stop or threading.Event())
    except Exception as exc:  # a failed ceiling is a result, as a failed burst is
        result.status, result.error = "error", f"{type(exc).__name__}: {exc}"
    return result


Unit = Callable[[], tuple[int, int]]
"""One read: returns (samples, bytes) it covered."""


def _units(wl: Workload, knobs: Knobs) -> tuple[list[Unit], list[Path]]:
    """The reads one pass is made of, in the loader's order (shuffled), and the files."""
    from workbench.engine.formats import data_files, located, open_format

    rng = random.Random(0)
    files = data_files(wl, knobs)
    fmt = knobs.data_format
    if fmt == "files":
        order = files[:]
        rng.shuffle(order)
        return [lambda p=p: (1, _read_file(p)) for p in order], files
    folder, manifest = located(wl, knobs)
    if fmt == "shards":
        per_byte = manifest.count / max(1, manifest.bytes)
        order = files[:]
        rng.shuffle(order)
        return [lambda p=p: _shard(p, per_byte) for p in order], files
    dataset: Any = open_format(folder, fmt)
    indices = list(range(manifest.count))
    rng.shuffle(indices)
    if fmt == "lmdb":
        return [lambda i=i: (1, len(dataset.raw(i)[1])) for i in indices], files
    return [lambda i=i: (1, len(dataset.raw(i)[1].tobytes())) for i in indices], files


def _read_file(path: Path) -> int:
    with open(path, "rb") as handle:
        return len(handle.read())


def _shard(path: Path, samples_per_byte: float) -> tuple[int, int]:
    done = 0
    with open(path, "rb", buffering=0) as handle:
        while chunk := handle.read(_CHUNK):
            done += len(chunk)
    return round(done * samples_per_byte), done


def _read(units: list[Unit], r: StorageCeiling, seconds: float, stop: threading.Event) -> None:
    """Run the reads on ``r.threads`` threads until one pass is done or ``seconds`` pass."""
    lock = threading.Lock()
    start = time.perf_counter()
    deadline = start + seconds
    queue = iter(units)

    def worker() -> None:
        while time.perf_counter() < deadline and not stop.is_set():
            with lock:
                unit = next(queue, None)
            if unit is None:
                return
            samples, size = unit()
            with lock:
                r.samples += samples
                r.bytes += size

    with ThreadPoolExecutor(r.threads) as pool:
        for future in [pool.submit(worker) for _ in range(r.threads)]:
            future.result()
    r.measured_s = time.perf_counter() - start
    if r.measured_s > 0 and r.samples:
        r.samples_per_s = r.samples / r.measured_s
        r.mb_s = r.bytes / 1e6 / r.measured_s


# ---------------------------------------------------------------------------------------------
# What it means for the verdict

STORAGE_BAND = 0.15
"""As diagnosis's balance band: a loader within 15% of the storage ceiling is held by it."""


def storage_bound(
    storage_sps: float | None, loader_sps: float | None, compute_sps: float | None
) -> bool:
    """The disk is the slowest link: its raw, cold rate is below the model's by more than the
    band, and no faster than the loader by more than the band (the loader is held by it, or
    would be on a first epoch or a dataset larger than RAM)."""
    if not storage_sps or not loader_sps or not compute_sps:
        return False
    slower_than_model = storage_sps < compute_sps * (1 - STORAGE_BAND)
    return slower_than_model and storage_sps <= loader_sps * (1 + STORAGE_BAND)


def storage_reason(c: StorageCeiling, loader_sps: float, compute_sps: float, cache: str) -> str:
    warm = cache == "warm" and loader_sps > c.samples_per_s * (1 + STORAGE_BAND)
    said = (
        f"the disk delivers {_num(c.samples_per_s)} samples/s of {c.data_format} read raw and "
        f"cold ({_num(c.mb_s)} MB/s on {c.device or 'this disk'}), below the model's "
        f"{_num(compute_sps)}"
    )
    if warm:
        return (
            f"{said}; from the page cache the loader does {_num(loader_sps)}, so a first epoch "
            f"(or a dataset larger than RAM) waits for the disk: storage-bound when cold. "
            f"{DISK_WORDS}."
        )
    return (
        f"{said}, and the loader ({_num(loader_sps)}) is held by it: storage-bound. {DISK_WORDS}."
    )


def storage_advice(knobs: Knobs) -> list[Suggestion]:
    """Formats that read faster from the same disk (the disk itself is named in the reason)."""
    shards = (
        "read the data in long sequential runs instead of one random read per image "
        "(convert first: workbench data --format shards)"
    )
    lmdb = (
        "one memory-mapped file: no open() per image, random access kept (convert first: "
        "workbench data --format lmdb)"
    )
    out = []
    if knobs.data_format in ("files", "lmdb"):
        out.append(Suggestion("data_format", "shards", shards))
    if knobs.data_format == "files":
        out.append(Suggestion("data_format", "lmdb", lmdb))
    return out


DISK_WORDS = (
    "one NVMe drive reads 3-7 GB/s, a SATA SSD about 0.5 and a network file system what its "
    "link and server allow: copy the data to local NVMe or measure yours with workbench io "
    "--path DIR"
)


def decode_advice(
    knobs: Knobs, wl: Workload, c: StorageCeiling, loader_sps: float
) -> list[Suggestion]:
    """Data-bound, yet the disk is far faster than the loader: the per-sample work (decoding)
    holds it; predecoded pixels take the decoder out of the loop."""
    if knobs.data_format == "predecoded" or wl.image_dir is None or knobs.loader == "dali":
        return []
    if not c.ok or c.samples_per_s < loader_sps * 2:
        return []
    why = (
        f"the disk gives {_num(c.samples_per_s)} samples/s raw but the loader delivers "
        f"{_num(loader_sps)}: decoding holds it; pixels stored at training resolution skip "
        "the decoder (workbench data --format predecoded; costs disk)"
    )
    return [Suggestion("data_format", "predecoded", why)]


def _num(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


__all__ = [
    "StorageCeiling",
    "decode_advice",
    "storage_advice",
    "storage_bound",
    "storage_ceiling",
    "storage_reason",
]
