"""The data's own disk: read rates as fio's classic tests measure them, cold and warm.

``storage_check(path)`` reads one test file on the path's file system three ways, each time
boxed to ``seconds``: sequential 1 MiB reads (``seq_read_mb_s``), random 4 KiB reads
(``rand_4k_iops``) and random 1 MiB reads (``rand_1m_mb_s``), all with plain ``pread`` on one
thread (fio's ``psync`` engine at queue depth 1, buffered). *Cold* first drops the file's pages
from the page cache before each test (``posix_fadvise(POSIX_FADV_DONTNEED)``, as fio's
``invalidate=1`` does; no root needed, it works on any file one can open); *warm* reads the
whole file into the cache first: what RAM serves. MB is 10^6 bytes, as fio's MB/s.

DONTNEED drops only clean pages no process has mapped: the test file is written and flushed
(``fdatasync``) first, and on tmpfs there is no disk behind the cache, so cold equals warm
there (the device then says tmpfs). ``device_of(path)`` names what Linux says is behind the
path, from /proc/self/mountinfo and /sys/dev/block.

*Cold* is cold for this process's view only. The page cache belongs to the host's kernel, and
containers on one host (a JupyterHub room's servers) share it: a file a neighbour has just read
is warm for everyone, and a neighbour reading the same disk shares its bandwidth. The test
file is this check's own, written and dropped here, so no neighbour has it cached; a dataset
that others read too (the room's read-only copy, ``cache=cold`` bursts) may be, between the
drop and the read. Dropping every cache (``echo 3 > /proc/sys/vm/drop_caches``) needs root on
the host, not in a container.

Where it writes: ``storage_check()`` without a path measures the caller's own folder
(``$WORKBENCH_FORMATS``, where converted copies go, else ``$WORKBENCH_HOME``), never the data
root, which a room mounts read-only. To measure the dataset's own disk there, give it a file on
that disk of at least 1 MiB (the sample set's token file, a shard): a file is read as it is,
nothing is written.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workbench.core.errors import InputError
from workbench.core.private import private_dir, workbench_home
from workbench.core.safefiles import scratch_file
from workbench.engine.datasets import DataError
from workbench.engine.formats import data_files, release_mappings

_MB = 1e6
_MIB = 2**20
_NETWORK_FS = {
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs",
    "9p", "afs", "davfs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs",
    "fuse.rclone", "fuse.glusterfs", "fuse.cephfs", "virtiofs", "orangefs", "pvfs2",
}  # fmt: skip
_MAX_RANDOM_READS = 2_000_000
_MEMORY_FS = {"tmpfs", "ramfs", "hugetlbfs", "devtmpfs"}


# ---------------------------------------------------------------------------------------------
# The page cache


def drop_pages(files: Iterable[str | os.PathLike[str]]) -> tuple[int, int]:
    """Drop each file's pages from the page cache; (files, bytes) done. Unreadable files are
    skipped: the burst that reads them next says what is wrong with them."""
    count = size = 0
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            with contextlib.suppress(OSError):  # dirty pages are never dropped: write them
                os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            size += os.fstat(fd).st_size
            count += 1
        finally:
            os.close(fd)
    return count, size


def drop_dataset_pages(workload: Any, knobs: Any) -> list[Path]:
    """``cache=cold``: drop the pages of the files this format reads; returns those files."""
    files = data_files(workload, knobs)
    release_mappings(files)
    drop_pages(files)
    return files


def cached_fraction(path: str | os.PathLike[str]) -> float:
    """Share of a file's pages in the page cache (mincore(2) on a private mapping)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0.0
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    page = mmap.PAGESIZE
    pages = (size + page - 1) // page
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY) as m:
        address = ctypes.addressof(ctypes.c_char.from_buffer(m))
        vec = (ctypes.c_ubyte * pages)()
        rc = libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vec)
        del address
        if rc != 0:
            raise OSError(ctypes.get_errno(), f"mincore failed on {path}")
        resident = sum(b & 1 for b in vec)
    return resident / pages


# ---------------------------------------------------------------------------------------------
# The device behind a path


@dataclass(frozen=True)
class DeviceInfo:
    """What Linux says is behind a path; ``kind`` is NVMe, SATA, SAS/SCSI, virtio, tmpfs, ..."""

    kind: str
    fstype: str
    mount: str
    source: str
    block: str | None = None
    model: str | None = None
    rotational: bool | None = None

    def describe(self) -> str:
        if self.block is None:
            return f"{self.kind} ({self.fstype} at {self.mount}, from {self.source})"
        media = {True: "rotational", False: "non-rotational", None: "media unknown"}
        model = f" {self.model}" if self.model else ""
        return (
            f"{self.kind}{model} /dev/{self.block}, {media[self.rotational]} "
            f"({self.fstype} at {self.mount})"
        )


def device_of(path: str | os.PathLike[str]) -> DeviceInfo:
    """The file system and block device behind ``path`` (Linux; 'unknown' elsewhere)."""
    mount = _mount_of(Path(path).resolve())
    if mount is None:
        return DeviceInfo("unknown", "unknown", str(path), "unknown")
    mountpoint, fstype, source, dev, options = mount
    if fstype in _MEMORY_FS:
        return DeviceInfo(f"{fstype} (RAM)", fstype, mountpoint, source)
    if fstype in _NETWORK_FS or fstype.startswith("fuse"):
        return DeviceInfo(f"network file system ({fstype})", fstype, mountpoint, source)
    if fstype == "overlay":
        upper = options.get("upperdir")
        if upper and os.path.exists(upper):
            under = device_of(upper)
            kind = f"overlay (container layer) over {under.kind}"
            return DeviceInfo(kind, fstype, mountpoint, source, under.block, under.model,
                              under.rotational)  # fmt: skip
        return DeviceInfo("overlay (container layer)", fstype, mountpoint, source)
    block = _block_of(dev)
    if block is None:
        return DeviceInfo(f"{fstype} without a block device", fstype, mountpoint, source)
    name, sys_dir = block
    return DeviceInfo(
        _kind(name, sys_dir), fstype, mountpoint, source, name, _read(sys_dir / "device" / "model"),
        _rotational(sys_dir),
    )  # fmt: skip


def _mount_of(path: Path) -> tuple[str, str, str, str, dict[str, str]] | None:
    """(mount point, fstype, source, major:minor, super options) of the deepest mount holding
    ``path``, from /proc/self/mountinfo."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    best = None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 2:
            continue
        point = fields[4].replace("\\040", " ")
        inside = path == Path(point) or Path(point) in path.parents
        if inside and (best is None or len(point) >= len(best[0])):
            opts = dict(
                o.partition("=")[::2] for o in (tail[2] if len(tail) > 2 else "").split(",")
            )
            best = (point, tail[0], tail[1], fields[2], opts)
    return best


def _block_of(dev: str) -> tuple[str, Path] | None:
    """The whole-disk block device (name, /sys dir) for a ``major:minor``, partitions and
    device-mapper resolved to the disk (the first slave) below them."""
    sys_dir = Path(f"/sys/dev/block/{dev}")
    if not sys_dir.exists():
        return None
    real = sys_dir.resolve()
    if (real / "partition").exists():
        real = real.parent
    slaves = sorted((real / "slaves").glob("*")) if (real / "slaves").is_dir() else []
    if slaves:  # dm-crypt, LVM, md RAID: what lies below
        below = slaves[0].resolve()
        real = below.parent if (below / "partition").exists() else below
    return real.name, real


_BLOCK_KINDS = (
    ("nvme", "NVMe"), ("vd", "virtio disk"), ("xvd", "Xen disk"), ("mmcblk", "SD/eMMC"),
    ("loop", "loop device"), ("md", "md RAID"), ("rbd", "Ceph RBD (network)"),
    ("nbd", "network block device"),
)  # fmt: skip


def _kind(name: str, sys_dir: Path) -> str:
    where = str(sys_dir)
    for prefix, kind in _BLOCK_KINDS:
        if name.startswith(prefix):
            return kind
    if name.startswith("sd"):
        if "/usb" in where:
            return "USB disk"
        if "/ata" in where:
            return "SATA"
        return "SAS/SCSI disk"
    return f"block device {name}"


def _rotational(sys_dir: Path) -> bool | None:
    text = _read(sys_dir / "queue" / "rotational")
    return None if text is None else text == "1"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------
# The read tests


@dataclass(frozen=True)
class ReadRates:
    """One pass of the three tests (cold or warm)."""

    seq_read_mb_s: float
    rand_4k_iops: float
    rand_1m_mb_s: float


@dataclass(frozen=True)
class StorageCheck:
    """``workbench io``: the path, its device, and the read rates cold and warm."""

    path: str
    device: str
    device_info: DeviceInfo
    test_file: str
    file_mib: float
    seconds_per_test: float
    cold: ReadRates
    warm: ReadRates

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        rows = [f"{self.path}: {self.device}",
                f"  test file {self.file_mib:,.0f} MiB, {self.seconds_per_test:g} s per test, "
                "one thread, buffered pread",
                f"  {'':<6} {'seq read MB/s':>14} {'rand 4K IOPS':>13} "
                f"{'rand 1M MB/s':>13}"]  # fmt: skip
        for name, r in (("cold", self.cold), ("warm", self.warm)):
            rows.append(f"  {name:<6} {r.seq_read_mb_s:>14,.0f} {r.rand_4k_iops:>13,.0f} "
                        f"{r.rand_1m_mb_s:>13,.0f}")  # fmt: skip
        if self.device_info.kind.startswith(("tmpfs", "ramfs")):
            rows.append("  (tmpfs: the files live in RAM, so cold reads are warm reads)")
        return "\n".join(rows)


Clock = Callable[[], float]


def storage_check(
    path: str | os.PathLike[str] | None = None,
    *,
    size_mib: float = 256.0,
    seconds: float = 2.0,
    seed: int = 0,
) -> StorageCheck:
    """Measure the disk behind ``path`` (a folder: a test file is written there and removed;
    a file: that file is read as it is). Default path: ``check_dir()``, the caller's own
    folder; the data root only when asked (a file on it, where it is read-only)."""
    target = Path(path).expanduser() if path is not None else check_dir()
    if not target.exists():
        raise DataError(f"storage path {target} does not exist")
    if not seconds > 0:
        raise InputError.not_allowed("seconds", seconds, "a number of seconds > 0 (per test)")
    if not size_mib >= 1:
        raise InputError.not_allowed("size_mib", size_mib, "a test file of at least 1 MiB")
    with _test_file(target, size_mib) as test_file:
        size = os.path.getsize(test_file)
        if size < _MIB:
            raise DataError(f"{test_file} holds {size} bytes: a test needs at least 1 MiB")
        cold = _pass(test_file, seconds, seed, cold=True)
        warm = _pass(test_file, seconds, seed, cold=False)
    info = device_of(target)
    return StorageCheck(
        path=str(target), device=info.describe(), device_info=info, test_file=str(test_file),
        file_mib=size / _MIB, seconds_per_test=seconds, cold=cold, warm=warm,
    )  # fmt: skip


def check_dir() -> Path:
    """Where ``storage_check()`` writes its test file by default: ``$WORKBENCH_FORMATS`` (the
    disk lesson 9's converted copies are read from), else ``$WORKBENCH_HOME``; made (0700) if
    missing. Both are the caller's own, and writable where the data root may not be."""
    chosen = os.environ.get("WORKBENCH_FORMATS")
    return private_dir(Path(chosen).expanduser() if chosen else workbench_home())


@contextlib.contextmanager
def _test_file(target: Path, size_mib: float) -> Iterator[Path]:
    if target.is_file():
        yield target
        return
    # A random name made with O_EXCL: a symlink planted under a name others could predict
    # (this pid's) would make the write below fill a file of their choosing with noise.
    with contextlib.ExitStack() as stack:
        try:
            path = stack.enter_context(scratch_file(target, ".workbench-io-", ".bin"))
            with open(path, "wb") as handle:
                for _ in range(int(size_mib)):
                    handle.write(os.urandom(_MIB))  # incompressible: no file system shrinks it
                handle.flush()
                os.fdatasync(handle.fileno())
        except OSError as exc:
            raise DataError(
                f"cannot write a test file in {target}: {exc}. To measure a read-only disk "
                "(a dataset mounted read-only), pass a file on it of at least 1 MiB: it is "
                "read as it is, nothing written; without a path the check writes in your "
                "own folder ($WORKBENCH_FORMATS, else $WORKBENCH_HOME)"
            ) from exc
        yield path


def _pass(path: Path, seconds: float, seed: int, *, cold: bool) -> ReadRates:
    def one(field: str) -> float:
        return measure_one(path, field, cold=cold, seconds=seconds, seed=seed)

    return ReadRates(one("seq_read_mb_s"), one("rand_4k_iops"), one("rand_1m_mb_s"))


def measure_one(path: str | os.PathLike[str], field: str, *, cold: bool, seconds: float,
                seed: int = 0) -> float:  # fmt: skip
    """One test of ``storage_check`` alone on an existing file (what a side-by-side with fio
    runs): ``field`` is seq_read_mb_s, rand_4k_iops or rand_1m_mb_s."""
    tests = {
        "seq_read_mb_s": lambda fd, size: _sequential(fd, size, seconds, not cold) / _MB,
        "rand_4k_iops": lambda fd, size: _random(fd, size, 4096, seconds, rng, not cold),
        "rand_1m_mb_s": lambda fd, size: _random(fd, size, _MIB, seconds, rng, not cold)
        * _MIB / _MB,
    }  # fmt: skip
    rng = random.Random(seed)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if cold:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        else:
            _read_all(fd, size)
        return float(tests[field](fd, size))
    finally:
        os.close(fd)


def _read_all(fd: int, size: int) -> None:
    for offset in range(0, size, _MIB):
        os.pread(fd, _MIB, offset)


def _sequential(fd: int, size: int, seconds: float, wrap: bool) -> float:
    """Bytes/s of 1 MiB reads front to back: one pass at most when cold (a second would be
    warm), round and round for ``seconds`` when warm (a short pass times badly)."""
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # fio's fadvise_hint does the same
    buffer = bytearray(_MIB)  # one buffer, as fio's: a fresh 1 MiB object per read costs faults
    done = offset = 0
    start = time.perf_counter()
    while True:
        got = os.preadv(fd, [buffer], offset)
        done += got
        offset += got
        if got == 0 or offset >= size:
            if not wrap:
                break
            offset = 0
        if time.perf_counter() - start >= seconds:
            break
    return done / (time.perf_counter() - start)


def _random(
    fd: int, size: int, block: int, seconds: float, rng: random.Random, wrap: bool
) -> float:
    """Reads/s of ``block``-sized reads at random aligned offsets, each block once per pass
    (fio's random map: cold, a block read twice would be served warm by the first read; so
    one pass at most when cold, passes for ``seconds`` when warm). Read-ahead is off
    (``POSIX_FADV_RANDOM``, as fio's fadvise_hint sets it): it would read pages never asked for.
    """
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    slots = max(1, size // block)
    order = rng.sample(range(slots), k=min(slots, _MAX_RANDOM_READS))
    buffer = [bytearray(block)]
    reads = 0
    start = time.perf_counter()
    while True:
        for i in range(0, len(order), 64):  # the clock is read every 64 reads
            for slot in order[i : i + 64]:
                os.preadv(fd, buffer, slot * block)
            reads += len(order[i : i + 64])
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return reads / elapsed
        if not wrap:
            return reads / (time.perf_counter() - start)


__all__ = [
    "DeviceInfo",
    "ReadRates",
    "StorageCheck",
    "cached_fraction",
    "check_dir",
    "device_of",
    "drop_dataset_pages",
    "drop_pages",
    "storage_check",
]
