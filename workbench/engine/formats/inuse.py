"""Which converted copies are being read: a conversion never replaces a copy in use.

A dataset of a converted copy opens its files lazily (shards per epoch, the LMDB and the
pixel map in each loader worker), by path. A conversion that replaced the copy under it (a
source that changed) would delete files a burst in another process is about to open, or hand
it the new copy's files against the old one's manifest. So every reader holds a shared
``flock`` on the copy's ``manifest.json`` for as long as its dataset object lives (loader
workers forked from it share the lock), and the conversion takes an exclusive one, without
waiting, before it moves a copy aside: when a reader holds it, the copy is left as it is.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from workbench.engine.datasets import DataError
from workbench.engine.formats.manifest import MANIFEST

__all__ = ["CopyInUse", "held", "unused"]

T = TypeVar("T")

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)  # a launched job gets no copy of the lock


class CopyInUse(DataError):
    """A converted copy that another process (or a live dataset here) is reading."""


def _lock_current(folder: Path, flags: int) -> int | None:
    """An fd of ``folder``'s manifest, locked with ``flags``, that is still the manifest there
    once locked (a conversion may have swapped the copy while we waited); None: no manifest."""
    import fcntl  # POSIX only

    path = folder / MANIFEST
    for _ in range(5):
        try:
            fd = os.open(path, os.O_RDONLY | _CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, flags)
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise DataError(f"{folder} kept changing while it was opened; try again")


def held(folder: Path, make: Callable[[], T]) -> T:
    """``make()``, a dataset of the copy in ``folder``, with the copy marked in use for as long
    as the dataset lives. The mark is taken first: the copy cannot be swapped while it opens."""
    try:
        import fcntl  # POSIX only
    except ImportError:  # Windows: no advisory locks, and no deleting open files either
        return make()
    fd = _lock_current(Path(folder), fcntl.LOCK_SH)
    if fd is None:
        return make()  # no manifest: make() refuses the folder, naming the file
    try:
        dataset = make()
    except BaseException:
        os.close(fd)
        raise
    weakref.finalize(dataset, os.close, fd)
    return dataset


@contextlib.contextmanager
def unused(folder: Path) -> Iterator[None]:
    """Hold the copy in ``folder`` for replacing; CopyInUse when a reader holds it."""
    try:
        import fcntl  # POSIX only
    except ImportError:
        yield
        return
    try:
        fd = _lock_current(Path(folder), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise CopyInUse(
            f"{folder} is being read by another process (a burst or a data loader): it is "
            "left as it is; convert again once that process is done"
        ) from None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)
