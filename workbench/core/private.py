"""Files only their owner reads: the workbench's home, its history and what bursts leave there.

On a shared cluster node or a classroom server, other users can list ``/home`` and read what
the default umask (022) leaves readable: a burst's history names the user's workloads, knobs
and data paths; a memory snapshot holds the stack of every allocation; a profiler trace holds
the user's code paths. So the folders the workbench creates are 0700 and the files 0600.

Why the files are created with their mode rather than chmod-ed after: between a plain create
and a chmod another user could open the file (and keep it open). ``os.open(..., mode)`` sets
the mode when the file is made; the umask can only take bits away. Why not set the umask: it
is process-wide, and a notebook kernel runs bursts on background threads while other code
writes files of its own.

Folders and files that already exist keep the mode they have (the user or an admin may have
chosen it, e.g. a class folder shared on purpose); ``chmod 700 ~/.workbench`` tightens an old
one. A snapshot or a trace the workbench writes replaces its target whole, with mode 0600.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "DIR_MODE", "FILE_MODE", "others_can_change", "private_dir", "private_file", "private_output",
    "workbench_home",
]  # fmt: skip

DIR_MODE = 0o700
FILE_MODE = 0o600


def workbench_home() -> Path:
    """``$WORKBENCH_HOME``, else ``~/.workbench`` (not created here)."""
    return Path(os.environ.get("WORKBENCH_HOME") or "~/.workbench").expanduser()


def others_can_change(path: str | os.PathLike[str]) -> str | None:
    """Why another user could change what is in the folder ``path`` (None: nobody but its
    owner, this user, can): another user's folder, or one writable by everyone, or by a group
    other than this user's own. For folders found by where a command runs (``./data``,
    ``./notebooks``), which are adopted only when the answer is None."""
    info = os.stat(path)
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"owned by another user (uid {info.st_uid})"
    if info.st_mode & 0o002:
        return f"writable by every user (mode {info.st_mode & 0o7777:o})"
    if info.st_mode & 0o020 and hasattr(os, "getgid") and info.st_gid != os.getgid():
        return f"writable by group {info.st_gid} (mode {info.st_mode & 0o7777:o})"
    return None


def private_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` as a folder, each missing folder on the way created with mode 0700.

    ``Path.mkdir(parents=True, mode=...)`` gives the mode to the last folder only; the ones
    above it get the umask's default, so they are made one by one here.
    """
    folder = Path(path).expanduser()
    missing = [p for p in [folder, *folder.parents] if not p.exists()]
    for p in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            p.mkdir(mode=DIR_MODE)
    return folder


def private_file(path: str | os.PathLike[str]) -> Path:
    """Make sure ``path`` exists before SQLite (or another writer that keeps an existing
    file) opens it: a new file is created empty with mode 0600, its folders with
    ``private_dir``; an existing one is left as it is."""
    target = Path(path).expanduser()
    private_dir(target.parent)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return target
    os.close(fd)
    return target


@contextmanager
def private_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A path for a library to write ``path``'s whole content to; ``path`` appears, mode
    0600, only when the block ends without an error.

    For writers that choose the mode themselves: the profiler's trace is written by Kineto
    to a temporary file and renamed over the target (so a file made 0600 beforehand is
    replaced by one with the umask's mode). Here the writer works in a 0700 folder beside the
    target (same file system: the rename is atomic), the file is set to 0600 there, where
    nobody else can reach it, and then renamed into place.
    """
    target = Path(path).expanduser()
    private_dir(target.parent)
    work = Path(tempfile.mkdtemp(prefix=".workbench-", dir=target.parent))  # made 0700
    try:
        out = work / target.name
        yield out
        os.chmod(out, FILE_MODE)
        os.replace(out, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
