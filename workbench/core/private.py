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
one. A file is made private where the workbench is about to write all of it (a snapshot or a
trace it replaces).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["DIR_MODE", "FILE_MODE", "private_dir", "private_file", "workbench_home"]

DIR_MODE = 0o700
FILE_MODE = 0o600


def workbench_home() -> Path:
    """``$WORKBENCH_HOME``, else ``~/.workbench`` (not created here)."""
    return Path(os.environ.get("WORKBENCH_HOME") or "~/.workbench").expanduser()


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


def private_file(path: str | os.PathLike[str], *, truncate: bool = False) -> Path:
    """Make sure ``path`` exists as a file of mode 0600 before something else writes it.

    A new file is created 0600 (its folder with ``private_dir``). An existing one is left
    as it is, unless ``truncate``: then its content is about to be replaced whole (a
    snapshot, a trace), so it is emptied and set to 0600 as well.
    """
    target = Path(path).expanduser()
    private_dir(target.parent)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else os.O_EXCL)
    try:
        fd = os.open(target, flags, FILE_MODE)
    except FileExistsError:  # not truncating: an existing file is left as it is
        return target
    try:
        if truncate:
            os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return target
