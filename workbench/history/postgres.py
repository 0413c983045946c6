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
- **Who a kernel is comes from its login in a class store.** Where ``workbench class init``
  set the room up (``roles.py``), every row's ``learner`` is the database login
  (``session_user``) and the instructor is whoever logs in as the instructor's role: the server
  enforces both with row-level security, so ``WORKBENCH_LEARNER`` and ``WORKBENCH_ROLE`` are
  ignored there (with a warning when they disagree). A store without class roles keeps them.
- **psycopg 3 is optional** (the ``class`` extra): imported when a PostgreSQL store is opened,
  with a clear message when it is missing.
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from workbench.history.base import Store, StoreError
from workbench.history.dsn import Secret, redact_dsn, scrub

__all__ = ["CLASS_INSTRUCTOR_KEY", "PG_SCHEMA", "PG_SCHEMA_VERSION", "ClassLogin", "PostgresStore",
           "connect_options"]  # fmt: skip

PG_SCHEMA_VERSION = 2
"""The PostgreSQL schema this library writes (its own numbering; the SQLite file has another).

1: meta, bursts, answers, board. 2: answers gain ``kind``, ``late`` and ``changed_to``
(predictions that count: ``workbench/workshop/predictions.py``)."""

_SCHEMA = "workbench"
PG_SCHEMA = _SCHEMA
"""The schema that holds the tables (``meta, bursts, answers, board``)."""
CLASS_INSTRUCTOR_KEY = "class_instructor"
"""The ``meta`` key that ``workbench class init`` sets to the instructor's role: a class store."""
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
_LOCK_TIMEOUT_MS = 5_000
"""Server side: a statement waits at most 5 s for a lock. A learner who holds a table's lock
in an open transaction (``BEGIN; SELECT ...`` in psql) makes a DDL statement wait, and every
read queued behind the DDL with it: this bounds the stall to seconds, not the statement's 30."""
_REQUIRE_AUTH = "scram-sha-256"
"""libpq's ``require_auth`` (libpq 16 and newer): the password goes only to a server that
asks for SCRAM, which proves the server knows the verifier; a fake server that asks for a
cleartext or MD5 password gets nothing. Not for a Unix socket (its folder is the
administrator's; peer authentication is the norm there), nor where the URL sets its own."""
_TCP_USER_TIMEOUT_MS = 60_000
"""Data sent and not acknowledged for 60 s closes the connection (Linux ``TCP_USER_TIMEOUT``):
keepalives cover an idle connection, this one a query sent to a host that went away."""
_INSTALL = "pip install 'throughput-workbench[class]' (psycopg 3)"
_ADVICE = (
    "Check the host, port, database name, user and password (or PGPASSFILE) in WORKBENCH_STORE, "
    "and that the server accepts connections from this machine."
)

_ROW_HEAD = "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, created_at text NOT NULL"
"""The columns every table of rows starts with: the server's id, the row's time."""
_WHO = "learner text NOT NULL, host text"
"""Who wrote an answer or flipped the board (a burst's ``learner`` may be null: no class)."""

_DDL = (
    f"CREATE SCHEMA IF NOT EXISTS {_SCHEMA}",
    f"CREATE TABLE {_SCHEMA}.meta (key text PRIMARY KEY, value text NOT NULL)",
    f"""CREATE TABLE {_SCHEMA}.bursts (
        {_ROW_HEAD},
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
        {_ROW_HEAD}, {_WHO},
        exercise text NOT NULL,
        ok boolean,
        message text,
        prediction json,
        measured json
    )""",
    f"CREATE INDEX answers_exercise ON {_SCHEMA}.answers (exercise, id)",
    f"""CREATE TABLE {_SCHEMA}.board (
        {_ROW_HEAD}, {_WHO},
        shared boolean NOT NULL
    )""",
)


_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        f"ALTER TABLE {_SCHEMA}.answers ADD COLUMN IF NOT EXISTS kind text",
        f"ALTER TABLE {_SCHEMA}.answers ADD COLUMN IF NOT EXISTS late boolean",
        f"ALTER TABLE {_SCHEMA}.answers ADD COLUMN IF NOT EXISTS changed_to json",
    ),
}
"""``{from_version: statements}`` that bring the schema to ``from_version + 1``. A new store
runs ``_DDL`` (version 1 as released) and then every step, so each column has one definition.
Added columns are nullable: rows written before them read as before (``records.py``)."""


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
        self._login: ClassLogin | None = None
        self._judged = False
        """Whether ``answers`` has the server's ``verified`` column (``workbench class init``)."""
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
    def transaction(self) -> Iterator[Any]:
        """One connection in one transaction, errors scrubbed as everywhere here (for
        ``workbench class init``, which sets up roles as the server's administrator)."""
        with self._connect() as conn, conn.transaction():
            yield conn

    @contextmanager
    def _connect(self) -> Iterator[Any]:
        """A fresh autocommit connection (transactions are explicit), closed after use."""
        psycopg = self._psycopg
        try:
            dsn = self._dsn.reveal()
            conn = psycopg.connect(dsn, autocommit=True, **connect_options(dsn))
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
        """Create the schema if missing; refuse a newer one; learn who this login is.

        The advisory lock is taken only while the schema is missing: once it exists (always, in
        a class set up by ``workbench class init``), a learner who holds that lock from ``psql``
        cannot make every other kernel wait on it.
        """
        with self._connect() as conn, conn.transaction():
            if not _schema_exists(conn):
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                if not _schema_exists(conn):  # again: another kernel may have created it
                    _create_schema(conn)
            version = _read_version(conn)
            self._check_version(version)
            if version < PG_SCHEMA_VERSION:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                self._migrate(conn, _read_version(conn))  # again: another kernel may have
            self._login = _class_login(conn)
            self._judged = _has_verdicts(conn)
        self._warn_ignored_identity()

    def _check_version(self, version: int) -> None:
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

    def _migrate(self, conn: Any, version: int) -> None:
        """Bring an older schema to ``PG_SCHEMA_VERSION`` inside the caller's transaction (a
        failed step leaves the store as it was). Only the tables' owner may alter them: in a
        class set up by ``workbench class init`` that is the instructor's login, so a learner's
        kernel that opens a store not yet upgraded is told who can do it."""
        try:
            for step in range(version, PG_SCHEMA_VERSION):
                for statement in _MIGRATIONS[step]:
                    conn.execute(statement)
            conn.execute(
                f"UPDATE {_SCHEMA}.meta SET value = %s WHERE key = 'schema_version'",
                (str(PG_SCHEMA_VERSION),),
            )
        except self._psycopg.errors.InsufficientPrivilege:
            raise StoreError(
                f"history store {self.url} has schema version {version} and this login may not "
                f"upgrade it to {PG_SCHEMA_VERSION} (only the tables' owner may). The "
                "instructor opens the store once with this workbench (the instructor's login, "
                "or `workbench class init` again) to upgrade it; nothing was changed."
            ) from None

    def _verified_column(self) -> str:
        return "verified" if self._judged else "NULL"

    # -- who this login is (a class set up by ``workbench class init``) ----------------------

    def learner_name(self) -> str:
        """The database login in a class store (``session_user``); else the environment's."""
        return self._login.user if self._login is not None else super().learner_name()

    def is_instructor(self) -> bool:
        """In a class store: whether this login is the instructor's role (or a superuser)."""
        return self._login.instructor if self._login is not None else super().is_instructor()

    def share_board(self, shared: bool = True) -> None:
        if self._login is not None and not self._login.instructor:
            raise StoreError(
                f"share_board() is the instructor's switch; this kernel is logged in to "
                f"{self.url} as learner {self._login.user!r}, and only the instructor's login "
                "may flip it"
            )
        super().share_board(shared)

    def _warn_ignored_identity(self) -> None:
        """Say once that WORKBENCH_LEARNER / WORKBENCH_ROLE do not apply to a class login."""
        login = self._login
        if login is None:
            return
        named = os.environ.get("WORKBENCH_LEARNER", "").strip()
        role = os.environ.get("WORKBENCH_ROLE", "").strip().lower()
        if (named and named != login.user) or (role == "instructor" and not login.instructor):
            warnings.warn(
                f"this class store names you by your database login ({login.user!r}, "
                f"{'instructor' if login.instructor else 'learner'}); WORKBENCH_LEARNER and "
                "WORKBENCH_ROLE are ignored here",
                stacklevel=4,
            )


@dataclass(frozen=True, slots=True)
class ClassLogin:
    """Who a connection is in a class store set up by ``workbench class init``
    (``workbench/history/roles.py``): the server says, not the environment."""

    user: str
    """``session_user``, the login: the name on every row it writes (row-level security checks
    it; a ``SET ROLE`` inside the session changes nothing)."""
    instructor: bool
    """Whether the login is (a member of) the class's instructor role, or a superuser."""


def _schema_exists(conn: Any) -> bool:
    """Whether the ``meta`` table exists, read from the catalog with this statement's snapshot.

    Not ``to_regclass``: its answer comes from a cache that the advisory lock does not refresh,
    so after waiting for another kernel's creation it could still say "missing".
    """
    return _exists(conn, "pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid ="
                         " c.relnamespace WHERE n.nspname = %s AND c.relname = 'meta'")  # fmt: skip


def _has_verdicts(conn: Any) -> bool:
    """Whether ``answers`` has the ``verified`` column that ``workbench class init`` adds (the
    server's verdicts, ``roles.py``); a store without class roles has none."""
    return _exists(conn, "information_schema.columns WHERE table_schema = %s AND table_name ="
                         " 'answers' AND column_name = 'verified'")  # fmt: skip


def _exists(conn: Any, rows: str) -> bool:
    """``SELECT EXISTS (SELECT 1 FROM <rows>)`` with the schema's name as its one parameter."""
    return bool(conn.execute(f"SELECT EXISTS (SELECT 1 FROM {rows})", (_SCHEMA,)).fetchone()[0])


def _read_version(conn: Any) -> int:
    row = conn.execute(f"SELECT value FROM {_SCHEMA}.meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def _create_schema(conn: Any) -> None:
    for statement in (*_DDL, *(s for step in sorted(_MIGRATIONS) for s in _MIGRATIONS[step])):
        conn.execute(statement)
    conn.execute(
        f"INSERT INTO {_SCHEMA}.meta (key, value) VALUES ('schema_version', %s)",
        (str(PG_SCHEMA_VERSION),),
    )


def _class_login(conn: Any) -> ClassLogin | None:
    """This connection's login in a class store; None in a store without class roles."""
    row = conn.execute(
        f"""SELECT session_user::text, i.value,
                COALESCE((SELECT rolsuper FROM pg_roles WHERE rolname = session_user), FALSE)
                OR COALESCE((SELECT pg_has_role(session_user, r.oid, 'MEMBER')
                             FROM pg_roles r WHERE r.rolname = i.value), FALSE)
            FROM (SELECT value FROM {_SCHEMA}.meta WHERE key = %s) AS i""",
        (CLASS_INSTRUCTOR_KEY,),
    ).fetchone()
    return None if row is None else ClassLogin(user=row[0], instructor=bool(row[2]))


def connect_options(dsn: str | None = None) -> dict[str, Any]:
    """libpq parameters of every connection: how long a store that stops answering or a lock
    can keep a kernel waiting, and (for ``dsn``'s server over TCP, with libpq 16+) that the
    password goes only to a server that asks for SCRAM (the values and why: the constants
    above). A value the URL itself sets (``?connect_timeout=5``) is overridden by these, but
    ``require_auth``, which the URL may set itself."""
    timeouts = (
        f"-c statement_timeout={_STATEMENT_TIMEOUT_MS} -c lock_timeout={_LOCK_TIMEOUT_MS} "
        f"-c idle_in_transaction_session_timeout={_IDLE_IN_TRANSACTION_MS}"
    )
    options = {"connect_timeout": _CONNECT_TIMEOUT_S, "options": timeouts, **_KEEPALIVE,
               "tcp_user_timeout": _TCP_USER_TIMEOUT_MS}  # fmt: skip
    if dsn is not None and _wants_scram(dsn):
        options["require_auth"] = _REQUIRE_AUTH
    return options


def _wants_scram(dsn: str) -> bool:
    """Whether ``require_auth`` is added for ``dsn``: a TCP host, no ``require_auth`` of its
    own, and a libpq that knows the parameter (16 and newer)."""
    psycopg = _driver()
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return False  # connecting reports the URL's problem, scrubbed
    host = str(info.get("host") or os.environ.get("PGHOST") or "")
    local = not host or host.startswith("/") or host.startswith("@")
    return not local and "require_auth" not in info and psycopg.pq.version() >= 160000


def _reopen(dsn: Secret) -> PostgresStore:
    return PostgresStore(dsn.reveal())
