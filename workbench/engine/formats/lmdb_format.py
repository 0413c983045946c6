"""``lmdb``: one LMDB environment of the encoded JPEGs, read at random by key.

Key: the sample's index in the source ImageFolder (8 ASCII digits); value: its label as 8
little-endian bytes, then the JPEG as it was. LMDB serves reads from a memory map of one
file (``data.mdb``), so a random read is a page-cache lookup or a page fault on that file:
no open()/close() per image as with a folder of files. Opened read-only, without a lock file,
and *with* the kernel's read-ahead: LMDB advises turning it off for random access to data
larger than memory, but that advice is for small values. An image is ~110 KB of contiguous
overflow pages; without read-ahead each 4 KiB page faults on its own, and a cold read here
(virtio disk, 2 threads) fell from 4,000-7,400 to 420-550 samples/s.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from workbench.engine.encoded import as_tensor
from workbench.engine.formats.manifest import FormatError, decode_jpeg, open_checked

DATA_FILE = "data.mdb"
_LABEL = struct.Struct("<q")
_TXN_SAMPLES = 256
"""Samples per write transaction: one commit (and its sync) per batch of them."""


_ENVS: dict[str, tuple[tuple[int, int], Any]] = {}
_ENVS_LOCK = threading.Lock()


def _environment(folder: Path) -> Any:
    """One read-only environment per folder and process, opened on first use. A forked
    loader worker inherits its parent's handle, which LMDB must not use across a fork (and
    refuses to open twice): the worker closes its copy and opens its own. So does a process
    whose folder was converted again (another file now)."""
    # lmdb is optional (the data extra): only for data_format=lmdb
    import lmdb

    try:
        owner = (os.getpid(), os.stat(folder / DATA_FILE).st_ino)
    except OSError as exc:
        raise FormatError(f"cannot open LMDB {folder / DATA_FILE}: {exc}") from exc
    with _ENVS_LOCK:
        opened, env = _ENVS.get(str(folder), (None, None))
        if env is not None and opened != owner:
            env.close()  # this process's copy only
            env = None
        if env is None:
            try:
                env = lmdb.open(str(folder), readonly=True, lock=False, readahead=True,
                                meminit=False, max_readers=1024)  # fmt: skip
            except lmdb.Error as exc:
                raise FormatError(f"cannot open LMDB {folder / DATA_FILE}: {exc}") from exc
            _ENVS[str(folder)] = (owner, env)
        return env


def close_environment(folder: Path) -> None:
    """Close this process's environment of ``folder`` (the next read reopens it). Pages a
    process has mapped stay in the page cache whatever one asks: ``cache=cold`` closes the
    mapping before it drops the file's pages."""
    with _ENVS_LOCK:
        opened, env = _ENVS.pop(str(folder), (None, None))
        if env is not None and opened is not None and opened[0] == os.getpid():
            env.close()


def key(index: int) -> bytes:
    return b"%08d" % index


class LmdbWriter:
    """Writes samples into a new LMDB environment in ``folder``."""

    def __init__(self, folder: Path, total_bytes: int, count: int):
        # lmdb is optional (the data extra): only for data_format=lmdb
        import lmdb

        # Values larger than a page go to overflow pages: up to one page of slack each.
        map_size = int(total_bytes * 1.1) + count * 8192 + 64 * 2**20
        self.folder = folder
        self._env = lmdb.open(str(folder), map_size=map_size, subdir=True, meminit=False)
        self._txn = self._env.begin(write=True)
        self._pending = 0

    def write(self, index: int, label: int, jpeg: bytes) -> None:
        self._txn.put(key(index), _LABEL.pack(label) + jpeg)
        self._pending += 1
        if self._pending >= _TXN_SAMPLES:
            self._txn.commit()
            self._txn = self._env.begin(write=True)
            self._pending = 0

    def close(self) -> dict[str, int]:
        self._txn.commit()
        self._env.sync(True)
        self._env.close()
        (self.folder / "lock.mdb").unlink(missing_ok=True)  # readers open without locking
        return {DATA_FILE: (self.folder / DATA_FILE).stat().st_size}


class LmdbDataset(Dataset):
    """Map-style dataset over the LMDB: ``(transform(image), label)`` by index (``encoded``:
    ``(JPEG bytes as a uint8 tensor, label)``, undecoded, for ``decode=gpu``)."""

    def __init__(
        self, folder: str | Path, transform: Callable | None = None, *, encoded: bool = False
    ):
        self.folder = Path(folder)
        self.manifest = open_checked(self.folder, "lmdb")
        self.transform = transform
        self.encoded = encoded

    def __len__(self) -> int:
        return self.manifest.count

    def _open(self) -> Any:
        """The environment, shared by every dataset of this folder in this process (LMDB
        refuses a second open of one environment in a process) and never across a fork."""
        return _environment(self.folder)

    def raw(self, index: int) -> tuple[int, bytes]:
        """(label, JPEG bytes) of sample ``index``, undecoded."""
        # lmdb is optional (the data extra): only for data_format=lmdb
        import lmdb

        try:
            with self._open().begin(buffers=False) as txn:
                value = txn.get(key(index))
        except lmdb.Error as exc:
            raise FormatError(f"corrupt LMDB {self.folder / DATA_FILE}: {exc}") from exc
        if value is None or len(value) <= _LABEL.size:
            raise FormatError(f"LMDB {self.folder / DATA_FILE} has no sample {index}")
        return _LABEL.unpack_from(value)[0], value[_LABEL.size :]

    def __getitem__(self, index: int) -> tuple[Any, int]:
        if not -len(self) <= index < len(self):  # Python's protocol: `for x in dataset` ends here
            raise IndexError(f"sample {index} of {len(self)} in LMDB {self.folder / DATA_FILE}")
        if index < 0:
            index += len(self)
        label, jpeg = self.raw(index)
        if self.encoded:
            return as_tensor(jpeg), label
        rgb = decode_jpeg(jpeg, f"{index} in LMDB {self.folder / DATA_FILE}")
        return (self.transform(rgb) if self.transform else rgb), label
