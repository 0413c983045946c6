"""Files written into folders that other users may share (a data folder, ``/tmp``, a project).

Two habits make such writes unsafe, and both are avoided here:

- a temporary file under a name others can predict (``.NAME.<pid>.tmp``), opened with
  ``open(..., "w")``: whoever plants a symlink at that name first makes the write follow it and
  truncate a file of theirs choosing (the user's own ``~/.bashrc``). ``write_atomic`` and
  ``scratch_file`` create a file under a random name with ``O_EXCL`` (``tempfile.mkstemp``),
  which never follows a link, then rename it into place;
- a lock file opened with ``open(path, "w")``: that also follows a planted link and truncates
  its target. ``locked`` opens the lock file read-only with ``O_NOFOLLOW``: ``flock`` needs no
  write access, and a link at that name is refused, not followed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["locked", "new_folder", "scratch_file", "write_atomic"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _umask() -> int:
    """This process's umask, read without changing it (``os.umask`` sets it, racing threads)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, sync: bool = False) -> None:
    """Write ``data`` to ``path`` whole or not at all: a reader never sees half a file.

    The temporary file beside ``path`` has a random name and is created with ``O_EXCL`` (no
    symlink is followed); it gets the usual permissions (``0o666`` less the umask), not
    ``mkstemp``'s owner-only ones, so a config or dataset file reads as any other file does.
    ``sync``: flush it to the disk before the rename (a manifest that marks a folder complete).
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def new_folder(parent: str | os.PathLike[str], prefix: str) -> Path:
    """A new empty folder in ``parent`` under a random name (``mkdtemp``: nothing planted there
    beforehand is reused), with the usual permissions (``0o777`` less the umask), not
    ``mkdtemp``'s owner-only ones: what is built in it is read by others as any folder is."""
    folder = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    os.chmod(folder, 0o777 & ~_umask())
    return folder


@contextlib.contextmanager
def scratch_file(folder: str | os.PathLike[str], prefix: str, suffix: str = "") -> Iterator[Path]:
    """A new empty file in ``folder`` under a random name (owner-only, ``O_EXCL``), removed
    afterwards: a test file that nobody can have linked elsewhere beforehand."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
    os.close(fd)
    try:
        yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


@contextlib.contextmanager
def locked(path: str | os.PathLike[str], *, shared: bool = False) -> Iterator[None]:
    """Hold an advisory lock (``flock``) on the lock file ``path``, made if missing (POSIX).

    Opened read-only with ``O_NOFOLLOW``: a symlink planted at ``path`` raises ``OSError``
    (ELOOP) instead of being followed. Windows has no ``flock``: there the lock is a no-op.
    """
    try:
        import fcntl  # POSIX only
    except ImportError:  # Windows: no advisory locks; the callers' work is rare and explicit
        yield
        return
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
