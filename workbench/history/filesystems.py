"""Which file system holds the history, so that WAL is used only where it is safe.

SQLite's WAL keeps its index in a shared-memory file (``-shm``) that every connection maps;
that works only when all of them run on one host, whose page cache keeps the mapping coherent.
On a network or cluster file system (an NFS home directory, Lustre, GPFS: typical on clusters)
two nodes' kernels sharing one history would each see their own copy of that index, and the
file can be corrupted (https://www.sqlite.org/wal.html, "Disadvantages"; the default rollback
journal relies on POSIX locks, which these file systems do carry across nodes).

How the type is found, and why this way: on Linux, ``/proc/self/mountinfo`` lists every mount
this process sees with its type by name; the history's folder is on the mount with the longest
mount point that contains it (the last one listed wins a tie: a later mount hides an earlier
one at the same point). ``os.statvfs`` carries no type, and ``statfs(2)`` through ctypes gives a
magic number, the same one for every FUSE file system, so it could not tell ``sshfs`` from a
local FUSE mount; mountinfo names them (``fuse.sshfs``). Elsewhere (macOS, or no ``/proc``) the
type is unknown and WAL is kept, as before.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["MOUNTINFO", "NETWORK_TYPES", "filesystem_type", "is_network_fs"]

MOUNTINFO = Path("/proc/self/mountinfo")
_OCTAL = re.compile(r"\\([0-7]{3})")

NETWORK_TYPES = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "coda", "9p", "virtiofs",
        "lustre", "gpfs", "ceph", "beegfs", "glusterfs", "orangefs", "pvfs2", "panfs",
        "wekafs", "ocfs2", "gfs2", "davfs", "fhgfs", "quobyte", "cvfs",
    }
)  # fmt: skip
"""Types whose files other hosts (or VMs) reach too. ``9p`` and ``virtiofs`` share a host's
folder with VMs and WSL, where WAL is known to fail; ``ocfs2`` and ``gfs2`` are shared disks."""

_LOCAL_FUSE = frozenset({"fuseblk"})
"""FUSE types known to be one host's own disk (ntfs-3g, exfat): WAL is safe there."""


def is_network_fs(fstype: str | None) -> bool:
    """Whether ``fstype`` (as mountinfo names it) may be shared between hosts.

    Any FUSE file system but ``fuseblk`` counts: sshfs, s3fs, rclone, gcsfuse, JuiceFS, the
    FUSE clients of Ceph and Gluster are all remote, and a FUSE file system gives no guarantee
    that the shared memory WAL needs is coherent. Wrongly counting a local one costs only
    WAL's concurrency; wrongly missing a remote one can corrupt the history.
    """
    if not fstype:
        return False
    kind = fstype.lower()
    if kind in _LOCAL_FUSE:
        return False
    return kind in NETWORK_TYPES or kind == "fuse" or kind.startswith("fuse.")


def filesystem_type(path: str | os.PathLike[str], mountinfo: Path | None = None) -> str | None:
    """The type of the file system that holds ``path`` (an existing file or folder), or None
    where it cannot be read (no ``/proc``: not Linux)."""
    try:
        text = (mountinfo or MOUNTINFO).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return None
    target = os.path.realpath(path)
    best: tuple[int, str] | None = None
    for point, fstype in _mounts(text):
        if _contains(point, target) and (best is None or len(point) >= best[0]):
            best = (len(point), fstype)
    return best[1] if best else None


def _mounts(text: str) -> list[tuple[str, str]]:
    """``(mount point, type)`` of each mountinfo line (proc(5): the type follows ``-``)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:] or len(fields) < 5:
            continue
        dash = fields.index("-", 6)
        if dash + 1 < len(fields):
            mounts.append((_unescape(fields[4]), fields[dash + 1]))
    return mounts


def _unescape(field: str) -> str:
    r"""Mount points escape space, tab, newline and backslash as octal (``\040``)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def _contains(point: str, target: str) -> bool:
    return point == "/" or target == point or target.startswith(point.rstrip("/") + "/")
