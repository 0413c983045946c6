"""Burst history: every burst the workbench runs, appended to one SQLite file.

This is the embedded default; a room shares one PostgreSQL server instead
(``WORKBENCH_STORE=postgresql://...``, ``workbench/history/postgres.py``). What both do alike
(reading, filters, the learner's view, answers, the board switch) is in ``base.py``.

Why it is built this way:

- **JSON blob + indexed columns.** Each burst is stored whole, as the JSON text of its
  ``BurstResult.to_dict()``, so a new result field needs no schema change. The few fields we
  filter or sort on (``created_at``, ``workload``, ``device``, ``status``) and two numbers
  (``samples_per_s``, ``peak_mem_mib``) are copied into indexed columns beside it.
- **Append-only.** There is no update or delete; each append is one short transaction, so a
  crash (a killed kernel, an OOM-killed process) can lose at most the burst being written.
- **Several threads and processes.** A connection is opened per call (never shared between
  threads); the journal is WAL, so readers never block the writer; ``busy_timeout`` makes a
  writer wait for another instead of failing; writes start with ``BEGIN IMMEDIATE``, which takes
  the write lock up front, so two writers never deadlock upgrading a read lock.
- **No WAL on a network file system.** WAL's shared-memory index is coherent only within one
  host; on NFS, Lustre, GPFS and the like (checked by type: ``filesystems.py``) two nodes'
  kernels sharing one history could corrupt it, so there the file keeps (or goes back to)
  SQLite's default rollback journal. Where WAL fails for another reason we keep the default too.
- **Private.** The file is created with mode 0600 in a folder created 0700 (``core/private``);
  SQLite gives its ``-wal``, ``-shm`` and journal files the database file's mode.
- **Schema versions** live in ``PRAGMA user_version``. Newer files are refused (never
  downgraded); older ones are migrated step by step through ``_MIGRATIONS`` inside one
  transaction, so a failed migration leaves the file as it was. A file that is not ours (not
  SQLite, or SQLite with other tables) is refused and never written to.
- **Renamed fields** are renamed on the way out, never rewritten in the file (it is append-only
  and may be shared with an older workbench): a row stored with ``mem_bw_util_pct`` reads back
  as ``mem_busy_pct`` from ``records()``, ``get()`` and ``frame()``.
"""

from __future__ import annotations

import os
import sqlite3
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from workbench.core.private import private_dir, private_file, workbench_home
from workbench.history import pending
from workbench.history.base import Store, StoreError
from workbench.history.dsn import is_postgres_url, scrub
from workbench.history.filesystems import filesystem_type, is_network_fs
from workbench.history.pending import StoreWarning
from workbench.history.postgres import PostgresStore  # its driver is imported when used
from workbench.history.records import records_frame

__all__ = [
    "SCHEMA_VERSION",
    "HistoryStore",
    "Store",
    "StoreError",
    "StoreWarning",
    "default_store_path",
    "keep_pending",
    "open_store",
    "pending_results",
    "record_result",
    "records_frame",
    "retry_pending",
    "store_url_from_environment",
]

SCHEMA_VERSION = 3
"""The schema this library writes. Bump it together with a new entry in ``_MIGRATIONS``.

1: bursts. 2: bursts gain ``learner`` and ``host``; ``answers`` and ``board`` (class mode).
3: answers gain ``kind`` (a check's verdict or a committed prediction), ``late`` and
``changed_to`` (predictions that count: ``workbench/workshop/predictions.py``)."""

_BUSY_TIMEOUT_S = 30.0
_SQLITE_MAGIC = b"SQLite format 3\x00"
_TABLE = "bursts"
_ADVICE = (
    "Check the path and its permissions; 'locked' means another process held the write lock "
    f"for over {_BUSY_TIMEOUT_S:.0f} s; 'malformed' means the file is damaged: move it away."
)

# Class mode's tables as schema 2 made them, the same in a new file and in a migrated one
# (a new file then takes the later steps' statements too: one definition per column).
_CLASS_TABLES = (
    """CREATE TABLE answers (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at TEXT NOT NULL,
        learner TEXT NOT NULL,
        host TEXT,
        exercise TEXT NOT NULL,
        ok INTEGER,
        message TEXT,
        prediction TEXT,
        measured TEXT
    )""",
    "CREATE INDEX answers_exercise ON answers (exercise, id)",
    "CREATE INDEX answers_learner ON answers (learner, id)",
    """CREATE TABLE board (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at TEXT NOT NULL,
        learner TEXT NOT NULL,
        host TEXT,
        shared INTEGER NOT NULL
    )""",
)

# Schema 3: what a prediction row is, and whether it counts. Nullable, so older rows read as
# checks whose lateness and edits are unknown.
_PREDICTION_COLUMNS = (
    "ALTER TABLE answers ADD COLUMN kind TEXT",
    "ALTER TABLE answers ADD COLUMN late INTEGER",
    "ALTER TABLE answers ADD COLUMN changed_to TEXT",
)

# The latest schema, used as is for a new file. Plain statements, run one by one with
# ``execute`` inside our own transaction (``executescript`` would commit on its own).
_SCHEMA = (
    f"""CREATE TABLE {_TABLE} (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at TEXT NOT NULL,
        workload TEXT NOT NULL,
        device TEXT,
        status TEXT NOT NULL,
        samples_per_s REAL,
        peak_mem_mib REAL,
        record TEXT NOT NULL,
        learner TEXT,
        host TEXT
    )""",
    f"CREATE INDEX {_TABLE}_workload ON {_TABLE} (workload, id)",
    f"CREATE INDEX {_TABLE}_device ON {_TABLE} (device, id)",
    f"CREATE INDEX {_TABLE}_status ON {_TABLE} (status, id)",
    f"CREATE INDEX {_TABLE}_created_at ON {_TABLE} (created_at)",
    f"CREATE INDEX {_TABLE}_learner ON {_TABLE} (learner, id)",
    *_CLASS_TABLES,
    *_PREDICTION_COLUMNS,
)

Migration = Callable[[sqlite3.Connection], None]


def _add_class_mode(conn: sqlite3.Connection) -> None:
    """1 -> 2: learner and host on every burst (null on older rows: they are the file
    owner's), and the answers and board tables."""
    conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN learner TEXT")
    conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN host TEXT")
    conn.execute(f"CREATE INDEX {_TABLE}_learner ON {_TABLE} (learner, id)")
    for statement in _CLASS_TABLES:
        conn.execute(statement)


def _add_prediction_columns(conn: sqlite3.Connection) -> None:
    """2 -> 3: ``kind``, ``late`` and ``changed_to`` on answers (null on older rows: checks,
    read as such, whose lateness and edits were never recorded)."""
    for statement in _PREDICTION_COLUMNS:
        conn.execute(statement)


_MIGRATIONS: dict[int, Migration] = {1: _add_class_mode, 2: _add_prediction_columns}
"""``{from_version: step}``: ``step(conn)`` brings a file from ``from_version`` to
``from_version + 1``. Steps run inside one ``BEGIN IMMEDIATE`` transaction that also sets the
new ``user_version``; a step must use ``conn.execute`` (never ``executescript`` or ``commit``).
"""


def default_store_path() -> Path:
    """Where the history lives when no path is given.

    ``$WORKBENCH_HISTORY`` (a file) wins, then ``$WORKBENCH_HOME/history.sqlite``, then
    ``~/.workbench/history.sqlite``. Empty variables count as unset.
    """
    if history := os.environ.get("WORKBENCH_HISTORY"):
        return Path(history).expanduser()
    return workbench_home() / "history.sqlite"


class HistoryStore(Store):
    """Append-only burst history in one SQLite file, safe from several threads and processes."""

    path: Path
    journal_mode: str
    """``"wal"`` normally; SQLite's default (``"delete"``) on a network file system or where WAL
    is not possible."""
    filesystem: str | None
    """The type of the file system that holds the file (``"ext4"``, ``"nfs4"``), or None where
    it cannot be read (not Linux)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        if path is not None and os.fspath(path) in ("", ":memory:"):
            raise StoreError(
                f"history store path {os.fspath(path)!r} is not a file; the history is opened "
                "once per call, so it needs a real file (use a temporary directory in tests)."
            )
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        private_dir(self.path.parent)
        self.filesystem = filesystem_type(self.path.parent)
        self.journal_mode = self._prepare()

    def __repr__(self) -> str:
        return f"HistoryStore({str(self.path)!r})"

    def where(self) -> str:
        return str(self.path)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._connect() as conn:
            return conn.execute(sql, tuple(params)).fetchall()

    def _insert(self, sql: str, params: Sequence[Any]) -> int:
        with self._connect() as conn, _transaction(conn):
            cursor = conn.execute(sql, tuple(params))
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    # -- connections and schema --------------------------------------------------------------

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A fresh connection in autocommit mode (we issue BEGIN ourselves), closed after use."""
        try:
            conn = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise self._error(f"cannot be opened ({exc})", _ADVICE) from exc
        try:
            yield conn
        except sqlite3.DatabaseError as exc:
            raise self._error(f"cannot be used ({exc})", _ADVICE) from exc
        finally:
            conn.close()

    def _error(self, problem: str, advice: str) -> StoreError:
        return StoreError(f"history store {self.path} {problem}. {advice}")

    def _prepare(self) -> str:
        """Check the file is ours (or new), create or migrate the schema, then choose the
        journal: WAL, or the default one on a network file system.

        The journal comes last so that a refused file, or one whose migration fails, is not
        changed.
        """
        self._check_header()
        if not self.path.exists():
            private_file(self.path)  # 0600 before SQLite creates it with the umask's mode
        with self._connect() as conn:
            version, tables = _inspect(conn)
            self._check_schema(version, tables)
            if version < SCHEMA_VERSION:
                self._upgrade(conn)
            if is_network_fs(self.filesystem):
                return _rollback_journal(conn)
            return _enable_wal(conn)

    def _check_header(self) -> None:
        if self.path.is_dir():
            raise self._error("is a directory", "Point WORKBENCH_HISTORY at a file.")
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
        if head and head != _SQLITE_MAGIC:
            raise self._error(
                "is not an SQLite database; it was left untouched",
                "Move it away, or point WORKBENCH_HISTORY at another file.",
            )

    def _check_schema(self, version: int, tables: list[str]) -> None:
        """Refuse newer schemas and foreign databases before anything is written."""
        if version > SCHEMA_VERSION:
            raise self._error(
                f"has schema version {version}; this workbench knows up to {SCHEMA_VERSION}",
                "Upgrade workbench, or point WORKBENCH_HISTORY at another file.",
            )
        if (version == 0 and tables) or (version > 0 and _TABLE not in tables):
            raise self._error(
                f"is an SQLite database with other tables ({', '.join(tables) or 'none'}) and "
                f"user_version {version}, not a workbench history; it was left untouched",
                "Point WORKBENCH_HISTORY at another file.",
            )

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        """Create the schema in a new file, or migrate an older one, in one transaction."""
        with _transaction(conn):
            version, tables = _inspect(conn)  # again: another process may have done it by now
            self._check_schema(version, tables)
            if version >= SCHEMA_VERSION:
                return
            if version == 0:
                for statement in _SCHEMA:
                    conn.execute(statement)
            else:
                self._migrate(conn, version)
            conn.execute(f"PRAGMA user_version = {int(SCHEMA_VERSION)}")

    def _migrate(self, conn: sqlite3.Connection, version: int) -> None:
        for step_from in range(version, SCHEMA_VERSION):
            step = _MIGRATIONS.get(step_from)
            if step is None:
                raise self._error(
                    f"has schema version {step_from} and this workbench has no migration from "
                    "it; it was left untouched",
                    "Report this as a workbench bug, or point WORKBENCH_HISTORY elsewhere.",
                )
            try:
                step(conn)
            except Exception as exc:
                raise self._error(
                    f"could not be migrated from schema version {step_from} to {step_from + 1} "
                    f"({exc!r}); it was rolled back and left at version {version}",
                    "Report this as a workbench bug, or point WORKBENCH_HISTORY elsewhere.",
                ) from exc


def open_store(store: Store | str | os.PathLike[str] | None = None) -> Store:
    """Accept what callers pass around: a store (returned as is), a path, a PostgreSQL URL, or
    None: ``$WORKBENCH_STORE`` (a ``postgresql://`` URL: the room's shared store) if set, else
    the SQLite file at ``default_store_path()``."""
    if isinstance(store, Store):
        return store
    if store is None:
        store = store_url_from_environment()
        if store is not None and not is_postgres_url(store):
            raise StoreError(
                "WORKBENCH_STORE must be a postgresql://user@host:port/db URL (the class "
                "store; so must the file WORKBENCH_STORE_FILE names); for a local file use "
                "WORKBENCH_HISTORY or WORKBENCH_HOME instead"
            )
    if is_postgres_url(store):
        return PostgresStore(str(store))
    return HistoryStore(store)


def store_url_from_environment(*, check_mode: bool = True) -> str | None:
    """The class store's URL: ``$WORKBENCH_STORE``, else the first line of the file
    ``$WORKBENCH_STORE_FILE`` names, else None.

    The file keeps the password out of every process's environment and argv (a variable is
    readable in ``/proc/PID/environ`` by the same user, and is forwarded to whatever the
    kernel starts); like libpq's ``.pgpass`` it must be readable by its owner only, and one
    that others can read is refused (``check_mode``). Without a password in the URL, libpq
    reads it from ``PGPASSFILE`` or ``~/.pgpass``, the better place (docs/class-mode.md).
    """
    if url := os.environ.get("WORKBENCH_STORE", "").strip():
        return url
    name = os.environ.get("WORKBENCH_STORE_FILE", "").strip()
    if not name:
        return None
    path = Path(name).expanduser()
    try:
        mode, text = path.stat().st_mode, path.read_text(encoding="utf-8")
    except OSError as exc:
        raise StoreError(
            f"WORKBENCH_STORE_FILE={name} cannot be read ({exc.strerror or exc}); point it at "
            "a file of mode 0600 that holds the store's postgresql:// URL"
        ) from None
    if check_mode and mode & 0o077:
        raise StoreError(
            f"WORKBENCH_STORE_FILE={name} has mode {oct(mode & 0o777)}: other users can read "
            f"the password in it; run 'chmod 600 {name}' (the owner alone may read it)"
        )
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else None


def record_result(result: Any, record: bool, store: object) -> None:
    """Append a result (anything with ``to_dict()``, a BurstResult) to the history unless
    ``record`` is False, and set its ``id``: every burst is recorded through here.

    A store that cannot take it (down, refusing, timing out) costs no measurement: a
    ``StoreWarning`` says so, the result keeps ``id`` None and is kept in the pending file
    (``pending.py``) for a later retry. A result that reaches its store first stores the
    ones kept for that store.

    The class store (``store`` None with ``WORKBENCH_STORE`` set: a room's PostgreSQL) that
    failed is left alone for ``CLASS_RETRY_S``: the bursts meanwhile are kept at once, each
    with one short line, so a room whose store is down pays its connect timeout once a
    minute, not once a burst.
    """
    if not record:
        return
    doc = result.to_dict()
    if store is None and time.monotonic() < _class_down_until[0]:
        _keep_while_down(doc)
        return
    try:
        target = open_store(store)  # type: ignore[arg-type]
        result.id = target.append(doc)
    except Exception as exc:  # the measurement stands; only its stored copy is late
        if store is None and _class_store_set():
            _class_down_until[0] = time.monotonic() + CLASS_RETRY_S
            _keep_while_down(doc, exc)
            return
        _keep_unstored(doc, store, exc)
        return
    _retry_quietly(target)


CLASS_RETRY_S = 60.0
"""After the class store failed a burst, later bursts leave it alone this long."""
_class_down_until = [0.0]
"""``time.monotonic()`` before which the class store is not tried (one list: mutable)."""


def _class_store_set() -> bool:
    try:
        return store_url_from_environment(check_mode=False) is not None
    except StoreError:
        return True


def _keep_while_down(doc: dict[str, Any], exc: Exception | None = None) -> None:
    """Keep a burst for the class store while it is down, with one short line."""
    why = "" if exc is None else f" ({_short(_scrubbed(' '.join(str(exc).split()), None))})"
    try:
        keep_pending(doc, None, exc or StoreError("the class store is down"))
    except Exception as keep_exc:
        warnings.warn(f"class store down{why}: this burst is stored nowhere ({keep_exc})",
                      StoreWarning, stacklevel=4)  # fmt: skip
        return
    left = max(0.0, _class_down_until[0] - time.monotonic())
    warnings.warn(f"class store down{why}: burst kept, stored when it answers (next try in "
                  f"{left:.0f} s)", StoreWarning, stacklevel=4)  # fmt: skip


def _short(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def retry_pending(store: Store | str | os.PathLike[str] | None = None) -> int:
    """Store the bursts kept for ``store`` (as ``open_store`` takes it) while it was down;
    returns how many were stored. A store that still fails raises (the rest stay kept)."""
    target = open_store(store)
    return len(pending.retry(pending.store_key(target.where()), target.append))


def pending_results(store: Store | str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The bursts kept for ``store`` (not opened: it may be the one that is down), each
    ``store, kept_at, error, record``, oldest first."""
    return pending.pending(pending.store_key(_intended_where(store)))


def keep_pending(doc: dict[str, Any], store: object, exc: Exception) -> Path:
    """Keep a burst record that ``store`` failed to take (``exc``) for a later retry; returns
    the pending file. For callers that warn in their own words (the tuner)."""
    error = _scrubbed(" ".join(str(exc).split()) or type(exc).__name__, store)
    return pending.keep(doc, pending.store_key(_intended_where(store)), error)


def _keep_unstored(doc: dict[str, Any], store: object, exc: Exception) -> None:
    """Warn that ``doc`` was not stored and keep it in the pending file."""
    shown = pending.store_key(_intended_where(store))
    error = _scrubbed(" ".join(str(exc).split()) or type(exc).__name__, store)
    try:
        path = keep_pending(doc, store, exc)
    except Exception as keep_exc:
        warnings.warn(
            f"history store {shown} could not record this burst ({error}), and it could not "
            f"be kept for a later retry either ({keep_exc}): the result is returned, stored "
            "nowhere",
            StoreWarning,
            stacklevel=4,
        )
        return
    warnings.warn(
        f"history store {shown} could not record this burst ({error}). The result is "
        f"returned and kept in {path}; the next burst that reaches this store stores it, or "
        "run 'workbench history --retry' (Python: workbench.retry_pending()).",
        StoreWarning,
        stacklevel=4,
    )


def _retry_quietly(target: Store) -> None:
    """After a burst reached ``target``, store the ones kept for it; a failure is a warning."""
    key = pending.store_key(target.where())
    if not pending.pending(key):
        return
    try:
        pending.retry(key, target.append)
    except Exception as exc:
        left = len(pending.pending(key))
        warnings.warn(
            f"{left} burst(s) kept for history store {key} are still not stored "
            f"({_scrubbed(str(exc), target)}); they stay in {pending.pending_path()}",
            StoreWarning,
            stacklevel=4,
        )


def _intended_where(store: object) -> str:
    """Where ``store`` would write, without opening it (safe to show once keyed)."""
    if isinstance(store, Store):
        return store.where()
    if store is None:
        try:
            url = store_url_from_environment(check_mode=False)
        except StoreError:  # its file cannot be read: a key that matches no store by mistake
            return f"{pending.UNKNOWN}WORKBENCH_STORE_FILE"
        return url or str(default_store_path())
    return os.fspath(store)  # type: ignore[call-overload]


def _scrubbed(text: str, store: object) -> str:
    """``text`` without the password of the DSN ``store`` names (or the environment's)."""
    dsn = store if isinstance(store, str) else None
    if store is None:
        try:
            dsn = store_url_from_environment(check_mode=False)
        except StoreError:
            dsn = None
    return scrub(text, dsn) if dsn and is_postgres_url(dsn) else text


# -- helpers ---------------------------------------------------------------------------------


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` (take the write lock now, wait up to busy_timeout) ... COMMIT."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.rollback()
        raise
    conn.execute("COMMIT")


def _inspect(conn: sqlite3.Connection) -> tuple[int, list[str]]:
    """``(user_version, table names)`` read from one snapshot.

    Two separate autocommit reads could straddle another process creating the schema and see
    version 0 with our table already there, which looks like a foreign database.
    """
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " ORDER BY name"
        ).fetchall()
    finally:
        if own:
            conn.rollback()  # a read-only snapshot: nothing to commit
    return version, [name for (name,) in rows]


def _rollback_journal(conn: sqlite3.Connection) -> str:
    """SQLite's default journal; a file left in WAL (persistent) by a local run goes back.

    Leaving WAL needs the only connection to the file: where another kernel has it open the
    switch fails and this connection reads what the file says (still ``wal``).
    """
    try:
        return str(conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0]).lower()
    except sqlite3.OperationalError:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()


def _enable_wal(conn: sqlite3.Connection) -> str:
    """Switch to WAL (persistent in the file); keep the default journal where it fails."""
    try:
        return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
    except sqlite3.OperationalError:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
