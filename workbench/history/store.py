"""Burst history: every burst the workbench runs, appended to one SQLite file.

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
  the write lock up front, so two writers never deadlock upgrading a read lock. Where WAL cannot
  be used (some network filesystems) we keep SQLite's default rollback journal.
- **Schema versions** live in ``PRAGMA user_version``. Newer files are refused (never
  downgraded); older ones are migrated step by step through ``_MIGRATIONS`` inside one
  transaction, so a failed migration leaves the file as it was. A file that is not ours (not
  SQLite, or SQLite with other tables) is refused and never written to.
- **Renamed fields** are renamed on the way out, never rewritten in the file (it is append-only
  and may be shared with an older workbench): a row stored with ``mem_bw_util_pct`` reads back
  as ``mem_busy_pct`` from ``records()``, ``get()`` and ``frame()``.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas

__all__ = [
    "SCHEMA_VERSION",
    "HistoryStore",
    "StoreError",
    "default_store_path",
    "open_store",
    "records_frame",
]

SCHEMA_VERSION = 1
"""The schema this library writes. Bump it together with a new entry in ``_MIGRATIONS``."""

_BUSY_TIMEOUT_S = 30.0
_SQLITE_MAGIC = b"SQLite format 3\x00"
_TABLE = "bursts"
_REQUIRED = ("workload", "status")
_ADVICE = (
    "Check the path and its permissions; 'locked' means another process held the write lock "
    f"for over {_BUSY_TIMEOUT_S:.0f} s; 'malformed' means the file is damaged: move it away."
)
_FRONT = ("id", "created_at", "workload", "device", "status")
_RENAMED = {"mem_bw_util_pct": "mem_busy_pct"}
"""Result fields renamed since rows were first stored, old -> new: the same table as
``core.results.RENAMED``, kept here so that this module needs only the standard library."""

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
        record TEXT NOT NULL
    )""",
    f"CREATE INDEX {_TABLE}_workload ON {_TABLE} (workload, id)",
    f"CREATE INDEX {_TABLE}_device ON {_TABLE} (device, id)",
    f"CREATE INDEX {_TABLE}_status ON {_TABLE} (status, id)",
    f"CREATE INDEX {_TABLE}_created_at ON {_TABLE} (created_at)",
)

Migration = Callable[[sqlite3.Connection], None]

_MIGRATIONS: dict[int, Migration] = {}
"""``{from_version: step}``: ``step(conn)`` brings a file from ``from_version`` to
``from_version + 1``. Steps run inside one ``BEGIN IMMEDIATE`` transaction that also sets the
new ``user_version``; a step must use ``conn.execute`` (never ``executescript`` or ``commit``).

Empty for now: version 1 is the first released schema, so there is nothing older to migrate.
The machinery is kept (and tested with a fake step) so the first real change is one function.
"""


class StoreError(RuntimeError):
    """The history store file cannot be used as it is; the message says why and what to do."""


def default_store_path() -> Path:
    """Where the history lives when no path is given.

    ``$WORKBENCH_HISTORY`` (a file) wins, then ``$WORKBENCH_HOME/history.sqlite``, then
    ``~/.workbench/history.sqlite``. Empty variables count as unset.
    """
    if history := os.environ.get("WORKBENCH_HISTORY"):
        return Path(history).expanduser()
    if home := os.environ.get("WORKBENCH_HOME"):
        return Path(home).expanduser() / "history.sqlite"
    return Path.home() / ".workbench" / "history.sqlite"


class HistoryStore:
    """Append-only burst history in one SQLite file, safe from several threads and processes."""

    path: Path
    journal_mode: str
    """``"wal"`` normally; SQLite's default (e.g. ``"delete"``) where WAL is not possible."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        if path is not None and os.fspath(path) in ("", ":memory:"):
            raise StoreError(
                f"history store path {os.fspath(path)!r} is not a file; the history is opened "
                "once per call, so it needs a real file (use a temporary directory in tests)."
            )
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.journal_mode = self._prepare()

    def __repr__(self) -> str:
        return f"HistoryStore({str(self.path)!r})"

    def __len__(self) -> int:
        with self._connect() as conn:
            return int(conn.execute(f"SELECT COUNT(*) FROM {_TABLE}").fetchone()[0])

    # -- writing -----------------------------------------------------------------------------

    def append(self, record: Mapping[str, Any]) -> int:
        """Store one burst result (a JSON-serializable dict) and return its new id.

        NaN and infinite floats are stored as null. ``id`` and ``created_at`` are assigned
        here; same-named keys in ``record`` are shadowed by them when read back.
        """
        row = _row(record)
        with self._connect() as conn, _transaction(conn):
            cursor = conn.execute(
                f"INSERT INTO {_TABLE} (created_at, workload, device, status, samples_per_s,"
                " peak_mem_mib, record) VALUES (?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    # -- reading -----------------------------------------------------------------------------

    def records(
        self,
        *,
        workload: str | None = None,
        status: str | None = None,
        device: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Stored bursts, oldest first, each as appended plus ``id`` and ``created_at``.

        Filters are exact matches; ``limit`` keeps the newest ``limit`` of the matches.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0 or None, got {limit}")
        where, params = _where(workload=workload, status=status, device=device)
        sql = f"SELECT id, created_at, record FROM {_TABLE}{where} ORDER BY id DESC LIMIT ?"
        with self._connect() as conn:
            rows = conn.execute(sql, (*params, -1 if limit is None else limit)).fetchall()
        return [_decode(*row) for row in reversed(rows)]

    def get(self, burst_id: int) -> dict[str, Any]:
        """One burst by id; ``KeyError`` if there is none."""
        with self._connect() as conn:
            row = conn.execute(
                f"SELECT id, created_at, record FROM {_TABLE} WHERE id = ?", (burst_id,)
            ).fetchone()
        if row is None:
            raise KeyError(f"no burst with id {burst_id} in history store {self.path}")
        return _decode(*row)

    def frame(self, **filters: Any) -> pandas.DataFrame:
        """One row per burst (filters as in ``records``), ready for plots.

        Columns: ``id, created_at`` (UTC timestamps), ``workload, device, status``, then one
        column per knob (``knob_<name>`` where a knob shares a result field's name) and one per
        NCCL variable (``NCCL_ALGO`` ...), then the other result fields (``knobs`` kept whole).
        An empty history has the same columns (but no NCCL ones).
        """
        return records_frame(self.records(**filters))

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
        """Check the file is ours (or new), create or migrate the schema, then switch on WAL.

        WAL comes last so that a refused file, or one whose migration fails, is not changed.
        """
        self._check_header()
        with self._connect() as conn:
            version, tables = _inspect(conn)
            self._check_schema(version, tables)
            if version < SCHEMA_VERSION:
                self._upgrade(conn)
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


def open_store(store: HistoryStore | str | os.PathLike[str] | None = None) -> HistoryStore:
    """Accept what callers pass around: a store (returned as is), a path, or None (default)."""
    return store if isinstance(store, HistoryStore) else HistoryStore(store)


# -- helpers ---------------------------------------------------------------------------------


def records_frame(records: Iterable[Mapping[str, Any]]) -> pandas.DataFrame:
    """Burst dicts (stored records or ``BurstResult.to_dict()``) as a frame shaped like ``frame()``.

    Sweeps and tunes return their bursts this way, so the same plots read them.
    """
    import pandas as pd

    rows = [_flatten(record) for record in records]
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=_burst_columns())
    frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True, format="ISO8601")
    return frame


def _burst_columns() -> list[str]:
    """The columns of a frame of bursts, for a frame with none (an empty history, a sweep
    cancelled before its first burst): code that selects columns works on it unchanged.

    Those of a default BurstResult's row, so a result field or knob added later is a column
    here too; NCCL variable columns exist only where a burst set them.
    """
    from workbench.core.results import BurstResult  # here: results need nothing from the store

    return list(_flatten(BurstResult().to_dict()))


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


def _enable_wal(conn: sqlite3.Connection) -> str:
    """Switch to WAL (persistent in the file); keep the default journal where it fails."""
    try:
        return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
    except sqlite3.OperationalError:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()


def _row(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """Validate a record and turn it into the INSERT parameters."""
    if not isinstance(record, Mapping):
        raise TypeError(f"a burst record must be a dict, got {type(record).__name__}")
    for key in _REQUIRED:
        if not isinstance(record.get(key), str):
            raise ValueError(f"burst record has no {key!r} (a string is required): {record!r}")
    clean = _jsonable(dict(record), "record")
    return (
        datetime.now(timezone.utc).isoformat(timespec="microseconds"),
        clean["workload"],
        clean.get("device") if isinstance(clean.get("device"), str) else None,
        clean["status"],
        _number(clean.get("samples_per_s")),
        _number(clean.get("peak_mem_mib")),
        json.dumps(clean, allow_nan=False, separators=(",", ":")),
    )


def _jsonable(value: Any, where: str) -> Any:
    """A copy of ``value`` that ``json.dumps(allow_nan=False)`` accepts: NaN/inf -> None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int)):  # bool is an int
        return value
    if isinstance(value, Mapping):
        return {_key(k, where): _jsonable(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item):
        try:
            return _jsonable(item(), where)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise TypeError(
        f"{where} is a {type(value).__name__}, which the history store cannot save as JSON; "
        "convert it to a number, string, list or dict first"
    )


def _key(key: Any, where: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"{where} has a non-string key {key!r}; JSON object keys are strings")
    return key


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _where(**filters: str | None) -> tuple[str, tuple[str, ...]]:
    used = {column: value for column, value in filters.items() if value is not None}
    if not used:
        return "", ()
    return " WHERE " + " AND ".join(f"{column} = ?" for column in used), tuple(used.values())


def _decode(row_id: int, created_at: str, text: str) -> dict[str, Any]:
    return {**_current_names(json.loads(text)), "id": row_id, "created_at": created_at}


def _current_names(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with renamed fields under their current names, in the same place.

    Where a row has both names (written by a version in between), the current one wins.
    """
    renamed: dict[str, Any] = {}
    for key, value in record.items():
        new = _RENAMED.get(key)
        if new is None:
            renamed[key] = value
        elif new not in record:
            renamed[new] = value
    return renamed


def _flatten(record: Mapping[str, Any]) -> dict[str, Any]:
    """One frame row: the front columns, then knobs and NCCL variables, then the rest."""
    record = _current_names(record)  # also for dicts that never went through the store
    head = {column: record.get(column) for column in _FRONT}
    knobs = record.get("knobs")
    flat: dict[str, Any] = {}
    for name, value in (knobs if isinstance(knobs, Mapping) else {}).items():
        if name == "nccl" and isinstance(value, Mapping):
            flat.update(value)
        else:
            flat[f"knob_{name}" if name in record else name] = value
    rest = {key: value for key, value in record.items() if key not in head}
    return {**head, **flat, **rest}
