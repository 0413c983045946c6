"""Bursts measured but not yet stored: kept on this machine until their store answers again.

A burst costs minutes of someone's GPU; a class store that is down for a moment (the
instructor's laptop asleep, the room's Wi-Fi) must not cost the measurement. So when a store
cannot record a result, ``record_result`` (``store.py``) warns, returns the result, and keeps
it here; the next burst that reaches the same store stores the ones kept for it first, and
``retry_pending()`` / ``workbench history --retry`` do it on request.

Why it is built this way:

- **One JSON line per burst** in ``$WORKBENCH_HOME/pending.jsonl``, mode 0600 (it holds the
  same results the history would), appended with one ``write`` under ``O_APPEND``: a killed
  kernel leaves whole lines. A line that cannot be read (a torn one) is kept, never dropped.
- **Named by store.** Each line names its store as it is safe to show (the file's absolute
  path, or the server's URL with its password masked), so a result kept for the class store
  never lands in a local file, and no password is written here: retrying needs the store
  itself (``WORKBENCH_STORE``, ``--store``), which brings its password.
- **Each stored once.** Appends and retries hold an exclusive lock (``pending.lock``,
  ``flock``), so two kernels retrying at once do not both store a line; after each stored
  burst the file is rewritten without it (a temporary file renamed over it), so a retry that
  fails half-way keeps exactly the ones not yet stored. A process killed between a store's
  commit and that rename would store that one burst again on the next retry: the only window.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from workbench.core.jsonsafe import jsonable
from workbench.core.private import FILE_MODE, private_dir, workbench_home
from workbench.core.results import utc_now
from workbench.history.dsn import is_postgres_url, redact_dsn

try:
    import fcntl
except ImportError:  # not POSIX: no lock (one kernel at a time is then the user's care)
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "PENDING_FILE", "StoreWarning", "keep", "pending", "pending_path", "retry", "store_key",
]  # fmt: skip

PENDING_FILE = "pending.jsonl"
_LOCK_FILE = "pending.lock"
UNKNOWN = "unknown:"
"""The start of a store key for a store that could not even be named (its file unreadable)."""


class StoreWarning(RuntimeWarning):
    """A burst was measured but its store could not record it: it is kept for a retry."""


def pending_path() -> Path:
    """``$WORKBENCH_HOME/pending.jsonl``: where results wait for their store."""
    return workbench_home() / PENDING_FILE


def store_key(where: str) -> str:
    """How a pending burst names its store: a URL with its password masked, or a file's
    absolute path (so ``./h.sqlite`` and ``/home/ada/h.sqlite`` are one store)."""
    if is_postgres_url(where):
        return redact_dsn(where.strip())
    if where.startswith(UNKNOWN):
        return where
    return os.path.abspath(os.path.expanduser(where))


def keep(record: Mapping[str, Any], store: str, error: str) -> Path:
    """Keep one burst record for ``store`` (a ``store_key``), with the error that kept it
    out; returns the file. Raises what ``jsonable`` raises for a record that no store could
    take either (not JSON-serializable)."""
    clean = jsonable(dict(record), "record")
    clean.setdefault("created_at", utc_now())  # stored later, still dated when it was made
    entry = {"store": store, "kept_at": utc_now(), "error": error, "record": clean}
    line = (json.dumps(entry, allow_nan=False) + "\n").encode()
    with _locked():
        fd = os.open(pending_path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    return pending_path()


def pending(store: str | None = None) -> list[dict[str, Any]]:
    """The kept bursts (each ``store, kept_at, error, record``), oldest first; only those
    of ``store`` (a ``store_key``) when one is given."""
    entries = [e for e in _read() if isinstance(e, dict)]
    return [e for e in entries if store is None or e.get("store") == store]


def retry(store: str, append: Callable[[Mapping[str, Any]], int]) -> list[int]:
    """Store the bursts kept for ``store`` through ``append`` (a store's own), oldest first,
    each removed from the file once stored; returns their new ids. The first failure stops
    the retry and is raised: the rest stay kept."""
    ids: list[int] = []
    with _locked():
        lines = _read_lines()
        for line in list(lines):
            entry = _parse(line)
            if not isinstance(entry, dict) or entry.get("store") != store:
                continue
            ids.append(append(entry["record"]))
            lines.remove(line)
            _rewrite(lines)  # at once: a later failure must not store this one again
    return ids


# -- the file --------------------------------------------------------------------------------


@contextmanager
def _locked() -> Iterator[None]:
    """An exclusive lock on ``pending.lock`` beside the file (the file itself is replaced
    by a rewrite, so a lock held on it would be a lock on a file no longer there)."""
    folder = private_dir(pending_path().parent)
    fd = os.open(folder / _LOCK_FILE, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _read_lines() -> list[str]:
    try:
        text = pending_path().read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [line for line in text.splitlines() if line.strip()]


def _read() -> list[Any]:
    return [_parse(line) for line in _read_lines()]


def _parse(line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None  # a torn line: kept in the file, never retried


def _rewrite(lines: list[str]) -> None:
    """The file with only ``lines``, renamed into place (a temporary file made 0600)."""
    target = pending_path()
    fd, tmp = tempfile.mkstemp(prefix=".pending-", dir=target.parent)  # 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
