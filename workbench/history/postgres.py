"""The room's store: the same append-only burst history on a PostgreSQL server.

In class, thirty kernels on thirty machines append to one database named by
``WORKBENCH_STORE=postgresql://user:password@host:port/db``, and the instructor's board reads
it live. Why it is built this way:

- **Same interface as the SQLite file.** Reading, filters, the learner's view, answers and the
  board switch live in ``base.py``; this module only connects, creates its schema and inserts.
- **Safe under concurrency.** Each append is one ``INSERT ... RETURNING id`` in a transaction of
  its own; ids come from an identity column (a sequence), so concurrent writers never collide
  and a killed kernel loses at most the row it was writing. A connection is opened per call
  (never shared between threads or across a fork), like the SQLite store.
- **Schema created if missing**, in the ``workbench`` schema of the database, under a
  transaction-scoped advisory lock so that thirty kernels starting at once create it once. Its
  version lives in ``workbench.meta``; a newer one is refused, never downgraded.
- **The password is never shown.** The DSN is held as a ``Secret`` (redacted repr); every
  message from the driver is scrubbed (``dsn.scrub``) and raised without its cause attached,
  so a traceback cannot print the driver's own text either.
- **psycopg 3 is optional** (the ``class`` extra): imported when a PostgreSQL store is opened,
  with a clear message when it is missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from workbench.history.base import Store, StoreError
from workbench.history.dsn import Secret, redact_dsn, scrub

__all__ = ["PG_SCHEMA_VERSION", "PostgresStore", "connect_options"]

PG_SCHEMA_VERSION = 1
"""The PostgreSQL schema this library writes (its own numbering; the SQLite file has another)."""

_SCHEMA = "workbench"
_LOCK_KEY = 0x776F726B62656E63  # "workbenc": serializes schema creation across processes
_CONNECT_TIMEOUT_S = 10
"""libpq's ``connect_timeout``: a server that does not finish the handshake in 10 s (down, a
firewall that drops packets, a port that accepts and never answers) is an error, not a hang.
Ten seconds leaves room for a busy server on a classroom Wi-Fi; libpq's minimum is 2."""
_STATEMENT_TIMEOUT_MS = 30_000
"""Server side: any one statement (a lock wait included) ends after 30 s. Ours are one-row
inserts and reads of a class's few thousand rows (milliseconds); 30 s is far above that and
well under what a learner waits before thinking the kernel hung."""
_IDLE_IN_TRANSACTION_MS = 60_000
"""Server side: a session that stops inside a transaction (a kernel frozen or suspended while it
holds the schema lock) is ended after 60 s, so thirty other kernels are not kept waiting."""
_KEEPALIVE = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
              "keepalives_count": 3}  # fmt: skip
"""TCP keepalives: a connection idle 30 s is probed every 10 s and given up after 3 lost probes,
so a server that vanished (its laptop closed, the network gone) is noticed in about a minute
instead of the kernel's default of over two hours."""
_TCP_USER_TIMEOUT_MS = 60_000
"""Data sent and not acknowledged for 60 s closes the connection (Linux ``TCP_USER_TIMEOUT``):
keepalives cover an idle connection, this one a query sent to a host that went away."""
_INSTALL = "pip install 'throughput-workbench[class]' (psycopg 3)"
_ADVICE = (
    "Check the host, port, database name, user and password (or PGPASSFILE) in WORKBENCH_STORE, "
    "and that the server accepts connections from this machine."
)

_DDL = (
    f"CREATE SCHEMA IF NOT EXISTS {_SCHEMA}",
    f"CREATE TABLE {_SCHEMA}.meta (key text PRIMARY KEY, value text NOT NULL)",
    f"""CREATE TABLE {_SCHEMA}.bursts (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        created_at text NOT NULL,
        learner text,
        host text,
        workload text NOT NULL,
        device text,
        status text NOT NULL,
        samples_per_s double precision,
        peak_mem_mib double precision,
        record json NOT NULL
    )""",
    f"CREATE INDEX bursts_workload ON {_SCHEMA}.bursts (workload, id)",
    f"CREATE INDEX bursts_learner ON {_SCHEMA}.bursts (learner, id)",
    f"CREATE INDEX bursts_status ON {_SCHEMA}.bursts (status, id)",
    f"""CREATE TABLE {_SCHEMA}.answers (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        created_at text NOT NULL,
        learner text NOT NULL,
        host text,
        exercise text NOT NULL,
        ok boolean,
        message text,
        prediction json,
        measured json
    )""",
    f"CREATE INDEX answers_exercise ON {_SCHEMA}.answers (exercise, id)",
    f"""CREATE TABLE {_SCHEMA}.board (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        created_at text NOT NULL,
        learner text NOT NULL,
        host text,
        shared boolean NOT NULL
    )""",
)


def _driver() -> ModuleType:
    """psycopg 3, or a StoreError that says how to install it."""
    try:
        return importlib.import_module("psycopg")
    except ImportError as exc:
        raise StoreError(
            "WORKBENCH_STORE names a PostgreSQL server, but the PostgreSQL driver (psycopg 3) "
            f"is not installed: {_INSTALL}; or unset WORKBENCH_STORE to use the local "
            "SQLite history"
        ) from exc


class PostgresStore(Store):
    """Append-only burst history on a PostgreSQL server, shared by a room."""

    _P = "%s"
    _JSON_IN = "%s::json"
    _JSON_OUT = "{}::text"
    _PREFIX = f"{_SCHEMA}."

    def __init__(self, dsn: str) -> None:
        self._dsn = Secret(dsn.strip())
        self._psycopg = _driver()
        self._prepare()

    @property
    def url(self) -> str:
        """The server's URL with its password masked: safe to print."""
        return redact_dsn(self._dsn.reveal())

    def where(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"

    def __reduce__(self) -> tuple[Callable[[Secret], PostgresStore], tuple[Secret]]:
        return (_reopen, (self._dsn,))  # a store handed to a worker process reconnects there

    # -- the three primitives ----------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._connect() as conn:
            return conn.execute(sql, tuple(params)).fetchall()

    def _insert(self, sql: str, params: Sequence[Any]) -> int:
        with self._connect() as conn, conn.transaction():
            row = conn.execute(f"{sql} RETURNING id", tuple(params)).fetchone()
        return int(row[0])

    # -- connections and schema --------------------------------------------------------------

    @contextmanager
    def _connect(self) -> Iterator[Any]:
        """A fresh autocommit connection (transactions are explicit), closed after use."""
        psycopg = self._psycopg
        try:
            conn = psycopg.connect(self._dsn.reveal(), autocommit=True, **connect_options())
        except psycopg.Error as exc:
            raise self._error("cannot be reached", exc, _ADVICE) from None
        try:
            yield conn
        except psycopg.Error as exc:
            raise self._error("cannot be used", exc, _ADVICE) from None
        finally:
            conn.close()

    def _error(self, problem: str, exc: BaseException, advice: str) -> StoreError:
        """A StoreError naming the server (redacted) and the driver's scrubbed message."""
        detail = scrub(" ".join(str(exc).split()), self._dsn.reveal())
        return StoreError(f"history store {self.url} {problem} ({detail}). {advice}")

    def _prepare(self) -> None:
        """Create the schema if missing; refuse a newer one. One process at a time."""
        with self._connect() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            exists = conn.execute("SELECT to_regclass(%s)", (f"{_SCHEMA}.meta",)).fetchone()[0]
            if exists is None:
                for statement in _DDL:
                    conn.execute(statement)
                conn.execute(
                    f"INSERT INTO {_SCHEMA}.meta (key, value) VALUES ('schema_version', %s)",
                    (str(PG_SCHEMA_VERSION),),
                )
                return
            row = conn.execute(
                f"SELECT value FROM {_SCHEMA}.meta WHERE key = 'schema_version'"
            ).fetchone()
        version = int(row[0]) if row else 0
        if version > PG_SCHEMA_VERSION:
            raise StoreError(
                f"history store {self.url} has schema version {version}; this workbench knows "
                f"up to {PG_SCHEMA_VERSION}. Upgrade workbench on this machine (the room's "
                "store was created by a newer one)."
            )
        if version < 1:
            raise StoreError(
                f"history store {self.url} has a '{_SCHEMA}' schema without a version; it is not "
                "a workbench history and was left untouched. Use another database."
            )


def connect_options() -> dict[str, Any]:
    """libpq parameters of every connection: how long a store that stops answering can keep a
    kernel waiting (the values and why: the constants above). A value the URL itself sets
    (``?connect_timeout=5``) is overridden by these."""
    timeouts = (
        f"-c statement_timeout={_STATEMENT_TIMEOUT_MS} "
        f"-c idle_in_transaction_session_timeout={_IDLE_IN_TRANSACTION_MS}"
    )
    return {"connect_timeout": _CONNECT_TIMEOUT_S, "options": timeouts, **_KEEPALIVE,
            "tcp_user_timeout": _TCP_USER_TIMEOUT_MS}  # fmt: skip


def _reopen(dsn: Secret) -> PostgresStore:
    return PostgresStore(dsn.reveal())
