"""The class store's roles: who may do what on the room's PostgreSQL (``workbench class init``).

A room's store holds every learner's bursts and answers, and every learner's kernel holds a
password to it. So the server, not the client, decides who a learner is and what they may do:
the instructor runs ``workbench class init`` once, as the server's administrator (a superuser
that is never handed out), and from then on each login can do only its part.

Roles (PostgreSQL roles are per server; the two class roles are named after the database, so
two classes on one server stay apart):

- ``<db>_instructor``, a login: owns the ``workbench`` schema and its four tables (``meta``,
  ``bursts``, ``answers``, ``board``), so it may read, write, correct, alter and drop anything
  in them. The instructor's kernel logs in as it.
- ``<db>_learners``, no login: the group that holds the learners' privileges.
- one login per learner, named as the learner (``alice``): a member of the group and nothing
  else (no superuser, no CREATEDB, CREATEROLE, REPLICATION or BYPASSRLS; at most
  ``CONNECTION_LIMIT`` connections). Its name is the ``learner`` on every row it writes.

Grants: the database's ``CONNECT`` only to those two roles (PUBLIC's is revoked, and so is
PUBLIC's ``CREATE`` on the ``public`` schema); the group gets ``USAGE`` on the schema,
``SELECT`` on ``meta``, ``board`` and ``checks``, ``SELECT`` and ``INSERT`` on ``bursts`` and
``answers``, the INSERT on the data columns only (never ``id`` or ``verified``): no UPDATE,
DELETE or TRUNCATE, no DDL (only an object's owner may ALTER or DROP it, and the instructor
owns them all), no ``COPY ... TO PROGRAM`` (superuser only), no large objects (PUBLIC's
EXECUTE on ``lo_create`` and its kin is revoked in the class's database). The server's other
databases that PUBLIC could connect to are closed to the learners: PUBLIC's ``CONNECT`` there
is revoked and granted back to every login that is not a class's learner.

What the server sets, whatever a row says: its ``id`` (an identity column the learners may
not name: no ``OVERRIDING SYSTEM VALUE``, so no id chosen to sort first or last, and no id
taken from another learner's next insert) and its ``created_at`` (a trigger writes the
server's clock, so nothing is backdated). Records have a size limit (``MAX_RECORD_BYTES``,
``MAX_ANSWER_BYTES``: CHECK constraints).

Row-level security is enabled and forced (so the owner, too, goes through a policy) on every
table. The instructor's policy allows everything. The group's:

- ``bursts`` and ``answers``: a learner reads their own rows (``learner = session_user``: the
  login itself, so ``SET ROLE <db>_learners`` gains nothing),
  rows written before class mode (no learner), and everyone's once the board is shared (the
  newest ``board`` row, read in the same statement: as ``base.py`` does in the client, now
  enforced by the server); a learner inserts only rows whose ``learner`` is their own login.
- ``board`` and ``meta``: readable by all (every kernel must see the switch); written only by
  the instructor, since the group has no INSERT there. The board switch is the instructor's.

Identity: a kernel learns its name and role from the server (``current_user``, and whether it
belongs to the instructor's role: ``postgres.ClassLogin``); ``WORKBENCH_LEARNER`` and
``WORKBENCH_ROLE`` cannot impersonate anyone, since the policies check the login itself.

Answers and ``ok``: the server computes the verdict. The ``checks`` table (the instructor's:
:func:`define_check`) holds what each exercise accepts: a prediction within ``rel_tol`` of the
measurement (or ``abs_tol``), or, for a choice, the measured choice itself. A trigger on
``answers`` sets ``ok`` from the row's prediction and measurement by that rule and
``verified`` true; an answer to an exercise without a rule keeps the ``ok`` its client sent,
with ``verified`` false, for the board to show as unverified. So a hand-written ``ok = true``
next to a prediction that misses the measurement is stored as false. What the server still
cannot judge: the measurement is the learner's machine's (the server never saw the burst), so
a learner who types both the prediction and a matching "measurement" gets a verified ``ok``;
the instructor sees the row, its time and its author, and may correct it. An answer is
written once, by its own learner, and never changed after (no UPDATE or DELETE).

Passwords: generated here (``secrets``), turned into SCRAM verifiers on this machine (libpq's
``PQencryptPasswordConn``), so the server (and its statement log) never sees a plaintext
password, and written once to a new file of mode 0600 in PGPASSFILE format (one
``<host>:<port>:<db>:<login>:<password>`` line per login, the server's host and port as the
administrator's URL names them: libpq hands the password to that server only) for handing out;
never in argv or printed.

Waiting: ``init_class`` ends the sessions of this class's learners that sit idle inside a
transaction (their locks would stall its DDL and, queued behind it, everyone's reads), and
every connection carries a ``lock_timeout`` (``postgres.connect_options``).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.core.errors import InputError
from workbench.history.base import StoreError
from workbench.history.exercise_rules import RULES, Rule
from workbench.history.postgres import CLASS_INSTRUCTOR_KEY, PG_SCHEMA, PostgresStore

__all__ = [
    "CONNECTION_LIMIT",
    "MAX_ANSWER_BYTES",
    "MAX_RECORD_BYTES",
    "ClassSetup",
    "define_check",
    "group_role",
    "init_class",
    "instructor_role",
    "read_learners",
]

CONNECTION_LIMIT = 10
"""Connections one learner's login may hold at once (a kernel opens one per call, briefly)."""

MAX_RECORD_BYTES = 4 << 20
"""A burst's ``record`` (its JSON), at most: a result with a row per rank is tens of KiB."""
MAX_ANSWER_BYTES = 64 << 10
"""Each of an answer's ``message``, ``prediction``, ``measured`` and ``changed_to``, at most."""

_TABLES = ("meta", "bursts", "answers", "board", "checks")
_READ_ONLY = ("meta", "board", "checks")
_APPEND = ("bursts", "answers")
_DATA_COLUMNS = {
    "bursts": ("created_at", "learner", "host", "workload", "device", "status",
               "samples_per_s", "peak_mem_mib", "record"),
    "answers": ("created_at", "learner", "host", "exercise", "ok", "message", "prediction",
                "measured", "kind", "late", "changed_to"),
}  # fmt: skip
"""What a learner may name in an INSERT: never ``id`` or ``verified``; ``created_at`` is
accepted and then replaced by the server's clock (the client has always sent one)."""
_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,62}")
_RESERVED = {"public", "none", "current_user", "current_role", "session_user", "user"}
_MARK = "workbench class {db}: {kind}"
"""The comment on every role this module creates: a role without it is never taken over."""
_SHARED = f"COALESCE((SELECT shared FROM {PG_SCHEMA}.board ORDER BY id DESC LIMIT 1), FALSE)"


@dataclass(frozen=True, slots=True)
class ClassSetup:
    """What ``init_class`` did: the roles, who got a login now, and where their passwords are."""

    database: str
    instructor: str
    group: str
    created: tuple[str, ...]
    """Logins created now (the instructor's first, if new): their passwords are in ``logins``."""
    kept: tuple[str, ...]
    """Learners whose login existed already (from an earlier run): left as they were."""
    logins: Path | None
    """The 0600 PGPASSFILE with the new logins' passwords; None when none was created."""
    checks: tuple[str, ...] = ()
    """The exercises whose verdicts the server now computes (their rules kept in ``checks``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "database": self.database,
            "instructor": self.instructor,
            "group": self.group,
            "created": list(self.created),
            "kept": list(self.kept),
            "logins": None if self.logins is None else str(self.logins),
            "checks": list(self.checks),
        }

    def summary(self) -> str:
        lines = [
            f"class store {self.database}: instructor login {self.instructor}, learners' "
            f"group {self.group}",
            f"created: {', '.join(self.created) or 'none'}; kept: {', '.join(self.kept) or 'none'}",
            f"verdicts the server computes: {', '.join(self.checks) or 'none'} (the other "
            "exercises' answers show as unverified: workbench/history/exercise_rules.py says why)",
        ]
        if self.logins is not None:
            lines.append(
                f"passwords: {self.logins} (mode 0600, PGPASSFILE format): give each learner "
                "their own line only, as their PGPASSFILE (docs/class-mode.md)"
            )
        return "\n".join(lines)


def instructor_role(database: str) -> str:
    return f"{database}_instructor"


def group_role(database: str) -> str:
    return f"{database}_learners"


def read_learners(text: str) -> list[str]:
    """Learner names from ``alice,bob`` or a file's text (one or more a line, ``#`` comments)."""
    names = []
    for line in text.splitlines():
        names += [n.strip() for n in line.split("#", 1)[0].split(",") if n.strip()]
    return names


def init_class(
    admin_url: str,
    learners: Sequence[str],
    *,
    logins: str | os.PathLike[str],
    instructor: str | None = None,
    checks: Mapping[str, Rule] = RULES,
) -> ClassSetup:
    """Set up a class store on ``admin_url`` (the server's administrator); see the module doc.

    Creates the schema if missing, the instructor's login, the learners' group and one login per
    learner, then the grants and policies (all in one transaction). Run again with more
    learners to add them: roles made by an earlier run are kept (their passwords unchanged);
    a role of the same name that this command did not make is refused, never taken over.
    ``logins``: a new file (refused if it exists) for the new logins' passwords. ``checks``:
    what each exercise accepts (default: every workshop exercise the server can judge,
    ``exercise_rules.RULES``), stored in the ``checks`` table so that the server computes
    those verdicts; a rule kept there for another exercise (``define_check``) stays.
    """
    names = _check_learners(learners)
    target = Path(logins).expanduser()
    if target.exists() or not target.parent.is_dir():
        raise InputError.not_allowed("--logins", str(target), "a new file in an existing folder")
    store = PostgresStore(admin_url)  # creates the schema if missing, refuses a newer one
    written = False
    try:
        with store.transaction() as conn:
            database = str(conn.execute("SELECT current_database()").fetchone()[0])
            teacher = _check_name("--instructor", instructor or instructor_role(database))
            if teacher in names:
                raise InputError.not_allowed(
                    "--learners", teacher, "names other than the instructor's"
                )
            group = group_role(database)
            _end_idle_learners(conn, group)
            fresh = _create_roles(conn, database, teacher, group, names)
            _server_side(conn)
            for exercise, rule in checks.items():
                _keep_check(conn, exercise, rule)
            _grant(conn, database, teacher, group)
            _close_other_databases(conn, database)
            _write_logins(target, database, fresh, _host_port(admin_url))
            written = bool(fresh)
    except BaseException:
        if written:
            target.unlink(missing_ok=True)  # the roles were rolled back: their passwords too
        raise
    created = tuple(fresh)
    return ClassSetup(database=database, instructor=teacher, group=group, created=created,
                      kept=tuple(n for n in names if n not in fresh),
                      logins=target if created else None,
                      checks=tuple(checks))  # fmt: skip


# -- names ----------------------------------------------------------------------------------


def _check_learners(learners: Iterable[str]) -> list[str]:
    names = [_check_name("--learners", n.strip()) for n in learners]
    if not names:
        raise InputError.not_allowed("--learners", "", "one learner name or more")
    seen = {n for n in names if names.count(n) > 1}
    if seen:
        raise InputError.not_allowed("--learners", sorted(seen)[0], "each name once")
    return names


def _check_name(option: str, name: str) -> str:
    """A role name that needs no thought: lower case, starts with a letter, at most 63 chars."""
    if not _NAME.fullmatch(name) or name in _RESERVED or name.startswith("pg_"):
        raise InputError.not_allowed(
            option, name, "lower-case letters, digits, '_', '.', '-', starting with a letter, "
            "at most 63 characters, not starting with 'pg_'"
        )  # fmt: skip
    return name


# -- roles ----------------------------------------------------------------------------------


def _create_roles(
    conn: Any, database: str, instructor: str, group: str, learners: list[str]
) -> dict[str, str]:
    """Create the roles that are missing; return ``{login: password}`` of the new logins."""
    from psycopg import sql  # the class extra; PostgresStore has already imported it

    wanted = {instructor: "instructor", group: "learners", **dict.fromkeys(learners, "learner")}
    rows = conn.execute(
        "SELECT rolname, shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = ANY(%s)",
        (list(wanted),),
    ).fetchall()
    for name, comment in rows:
        if comment != _MARK.format(db=database, kind=wanted[name]):
            raise StoreError(
                f"role {name!r} already exists on this server and was not made by `workbench "
                f"class init` as this class's {wanted[name]}; it was left untouched. Choose "
                "another name, or drop that role first."
            )
    existing = {name for name, _ in rows}
    fresh: dict[str, str] = {}
    if group not in existing:
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(group)))
        _mark(conn, group, database, "learners")
    for name in (instructor, *learners):
        if name in existing:
            continue
        password = secrets.token_urlsafe(18)
        verifier = conn.pgconn.encrypt_password(password.encode(), name.encode(), b"scram-sha-256")
        learner = name != instructor
        conn.execute(
            sql.SQL(
                "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
                "NOBYPASSRLS INHERIT CONNECTION LIMIT {} PASSWORD {}"
            ).format(
                sql.Identifier(name),
                sql.Literal(CONNECTION_LIMIT if learner else -1),
                sql.Literal(verifier.decode()),
            )
        )
        if learner:
            conn.execute(
                sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(name))
            )
        _mark(conn, name, database, "learner" if learner else "instructor")
        fresh[name] = password
    return fresh


def _mark(conn: Any, role: str, database: str, kind: str) -> None:
    from psycopg import sql  # the class extra's driver: only where a class is set up

    conn.execute(
        sql.SQL("COMMENT ON ROLE {} IS {}").format(
            sql.Identifier(role), sql.Literal(_MARK.format(db=database, kind=kind))
        )
    )


# -- what the server sets -------------------------------------------------------------------

_CLOCK = """to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')"""
"""The server's clock in the client's format (``core.results.utc_now``): rows sort as before."""

_SERVER_SIDE = (
    f"""CREATE TABLE IF NOT EXISTS {PG_SCHEMA}.checks (
        exercise text PRIMARY KEY,
        rel_tol double precision NOT NULL DEFAULT 0 CHECK (rel_tol >= 0),
        abs_tol double precision NOT NULL DEFAULT 0 CHECK (abs_tol >= 0),
        choice boolean NOT NULL DEFAULT false
    )""",
    f"ALTER TABLE {PG_SCHEMA}.answers ADD COLUMN IF NOT EXISTS verified boolean",
    f"""CREATE OR REPLACE FUNCTION {PG_SCHEMA}.wb_server_clock() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            NEW.created_at := {_CLOCK};
            RETURN NEW;
        END $$""",
    f"""CREATE OR REPLACE FUNCTION {PG_SCHEMA}.wb_verdict() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
        DECLARE
            rule {PG_SCHEMA}.checks%ROWTYPE;
            guess text := NEW.prediction #>> '{{}}';
            truth text := NEW.measured #>> '{{}}';
        BEGIN
            NEW.created_at := {_CLOCK};
            NEW.verified := NULL;
            IF COALESCE(NEW.kind, 'check') <> 'check' THEN
                RETURN NEW;  -- a prediction's commit or a reset: no verdict to judge
            END IF;
            SELECT * INTO rule FROM {PG_SCHEMA}.checks WHERE exercise = NEW.exercise;
            IF NOT FOUND THEN
                NEW.verified := false;  -- the client's ok, shown as unverified
                RETURN NEW;
            END IF;
            IF guess IS NULL OR truth IS NULL THEN
                NEW.ok := false;  -- no prediction, or nothing measured: nothing right
            ELSIF rule.choice THEN
                NEW.ok := lower(btrim(guess)) = lower(btrim(truth));
            ELSIF json_typeof(NEW.prediction) = 'number'
                    AND json_typeof(NEW.measured) = 'number' THEN
                NEW.ok := abs(guess::float8 - truth::float8)
                          <= greatest(rule.rel_tol * abs(truth::float8), rule.abs_tol);
            ELSE
                NEW.ok := false;  -- a word where the rule asks for a number
            END IF;
            -- a prediction committed after a burst had run is judged, never right
            NEW.ok := NEW.ok AND NOT COALESCE(NEW.late, false);
            NEW.verified := true;
            RETURN NEW;
        END $$""",
    f"DROP TRIGGER IF EXISTS wb_server_sets ON {PG_SCHEMA}.bursts",
    f"""CREATE TRIGGER wb_server_sets BEFORE INSERT ON {PG_SCHEMA}.bursts
        FOR EACH ROW EXECUTE FUNCTION {PG_SCHEMA}.wb_server_clock()""",
    f"DROP TRIGGER IF EXISTS wb_server_sets ON {PG_SCHEMA}.answers",
    f"""CREATE TRIGGER wb_server_sets BEFORE INSERT ON {PG_SCHEMA}.answers
        FOR EACH ROW EXECUTE FUNCTION {PG_SCHEMA}.wb_verdict()""",
    f"ALTER TABLE {PG_SCHEMA}.bursts DROP CONSTRAINT IF EXISTS wb_size",
    f"""ALTER TABLE {PG_SCHEMA}.bursts ADD CONSTRAINT wb_size
        CHECK (octet_length(record::text) <= {MAX_RECORD_BYTES}) NOT VALID""",
    f"ALTER TABLE {PG_SCHEMA}.answers DROP CONSTRAINT IF EXISTS wb_size",
    f"""ALTER TABLE {PG_SCHEMA}.answers ADD CONSTRAINT wb_size CHECK (
        octet_length(COALESCE(message, '')) <= {MAX_ANSWER_BYTES}
        AND octet_length(COALESCE(prediction::text, '')) <= {MAX_ANSWER_BYTES}
        AND octet_length(COALESCE(measured::text, '')) <= {MAX_ANSWER_BYTES}
        AND octet_length(COALESCE(changed_to::text, '')) <= {MAX_ANSWER_BYTES}) NOT VALID""",
    "REVOKE EXECUTE ON FUNCTION lo_create(oid), lo_creat(integer), lo_from_bytea(oid, bytea), "
    "lo_import(text), lo_import(text, oid), lowrite(integer, bytea), lo_put(oid, bigint, bytea) "
    "FROM PUBLIC",
)
"""The checks table, the ``verified`` column, the triggers that set ``created_at`` and the
verdict, the size limits (``NOT VALID``: rows already there are not re-checked) and no large
objects. Run as the administrator; ``_grant`` then hands the objects to the instructor."""


def _server_side(conn: Any) -> None:
    for statement in _SERVER_SIDE:
        conn.execute(statement)


def _end_idle_learners(conn: Any, group: str) -> None:
    """End this class's learners' sessions that sit idle inside a transaction: the locks they
    hold would stall this setup's DDL, and everyone's reads queued behind it."""
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (group,)).fetchone() is None:
        return
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
        " AND state LIKE 'idle in transaction%%' AND pg_has_role(usesysid, %s, 'MEMBER')",
        (group,),
    )


def _close_other_databases(conn: Any, database: str) -> None:
    """The server's other databases that PUBLIC may connect to: CONNECT granted to every login
    that is not a class's learner, then revoked from PUBLIC (a login made later needs a
    GRANT there)."""
    from psycopg import sql  # the class extra's driver: only where a class is set up

    others = [row[0] for row in conn.execute(
        "SELECT datname FROM pg_database WHERE datallowconn AND datname <> %s"
        " AND has_database_privilege('public', oid, 'CONNECT')", (database,),
    ).fetchall()]  # fmt: skip
    keep = [row[0] for row in conn.execute(
        "SELECT r.rolname FROM pg_roles r WHERE r.rolcanlogin AND NOT EXISTS ("
        " SELECT 1 FROM pg_auth_members m WHERE m.member = r.oid"
        " AND shobj_description(m.roleid, 'pg_authid') LIKE 'workbench class %%: learners')"
    ).fetchall()]  # fmt: skip
    for name in others:
        db = sql.Identifier(name)
        if keep:
            roles = sql.SQL(", ").join(map(sql.Identifier, keep))
            conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, roles))
        conn.execute(sql.SQL("REVOKE CONNECT ON DATABASE {} FROM PUBLIC").format(db))


def define_check(
    url: str, exercise: str, *, rel_tol: float = 0.0, abs_tol: float = 0.0, choice: bool = False
) -> None:
    """What ``exercise`` accepts, kept by the server (the instructor's login, or the
    administrator's): a prediction within ``rel_tol`` of the measurement, or ``abs_tol``;
    ``choice``: the measured choice itself. Answers recorded after it get their ``ok``
    computed by the server (``verified``); see the module doc. ``workbench class init`` keeps
    every workshop exercise's rule this way (``exercise_rules.RULES``)."""
    rule = Rule(rel_tol=rel_tol, abs_tol=abs_tol, choice=choice)
    _valid_rule(exercise, rule)
    with PostgresStore(url).transaction() as conn:
        _keep_check(conn, exercise, rule)


def _valid_rule(exercise: str, rule: Rule) -> None:
    if not isinstance(exercise, str) or not exercise:
        raise InputError.not_allowed("exercise", exercise, "an exercise's name, e.g. 03.precision")
    for name, value in (("rel_tol", rule.rel_tol), ("abs_tol", rule.abs_tol)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise InputError.not_allowed(name, value, "a number >= 0")


def _keep_check(conn: Any, exercise: str, rule: Rule) -> None:
    """Insert or replace ``exercise``'s row of the ``checks`` table."""
    _valid_rule(exercise, rule)
    conn.execute(
        f"INSERT INTO {PG_SCHEMA}.checks (exercise, rel_tol, abs_tol, choice)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT (exercise) DO UPDATE SET"
        " rel_tol = EXCLUDED.rel_tol, abs_tol = EXCLUDED.abs_tol, choice = EXCLUDED.choice",
        (exercise, float(rule.rel_tol), float(rule.abs_tol), bool(rule.choice)),
    )


def _host_port(url: str) -> str:
    """``host:port`` of ``url`` for a PGPASSFILE line (``*`` for a local socket or none), so
    that libpq hands the password to that server only."""
    from psycopg.conninfo import conninfo_to_dict  # the class extra's driver

    info = conninfo_to_dict(url)
    host = str(info.get("host") or "")
    port = str(info.get("port") or os.environ.get("PGPORT") or "5432")
    if not host or host.startswith("/") or "," in host:
        host = "*"

    def escaped(text: str) -> str:
        return text.replace("\\", "\\\\").replace(":", "\\:")

    return f"{escaped(host)}:{escaped(port)}"


# -- grants and policies --------------------------------------------------------------------


def _grant(conn: Any, database: str, instructor: str, group: str) -> None:
    """Ownership, grants and row-level security, as the module docstring says."""
    from psycopg import sql  # the class extra's driver: only where a class is set up

    ident = sql.Identifier
    db, teacher, learners, schema = (
        ident(database),
        ident(instructor),
        ident(group),
        ident(PG_SCHEMA),
    )
    statements = [
        sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(db),
        sql.SQL("GRANT CONNECT ON DATABASE {} TO {}, {}").format(db, teacher, learners),
        sql.SQL("REVOKE CREATE ON SCHEMA public FROM PUBLIC"),
        sql.SQL("ALTER SCHEMA {} OWNER TO {}").format(schema, teacher),
        sql.SQL("REVOKE ALL ON SCHEMA {} FROM PUBLIC").format(schema),
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, learners),
    ]
    for name in _TABLES:
        table = ident(PG_SCHEMA, name)
        statements += [
            sql.SQL("ALTER TABLE {} OWNER TO {}").format(table, teacher),
            sql.SQL("REVOKE ALL ON {} FROM PUBLIC, {}").format(table, learners),
            sql.SQL("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(table),
            sql.SQL("ALTER TABLE {} FORCE ROW LEVEL SECURITY").format(table),
            *_policies(name, table, teacher, learners),
        ]
    for function in ("wb_server_clock", "wb_verdict"):
        statements.append(sql.SQL("ALTER FUNCTION {}() OWNER TO {}").format(
            ident(PG_SCHEMA, function), teacher))  # fmt: skip
    for statement in statements:
        conn.execute(statement)
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
        ).format(ident(PG_SCHEMA, "meta")),
        (CLASS_INSTRUCTOR_KEY, instructor),
    )


def _policies(name: str, table: Any, teacher: Any, learners: Any) -> list[Any]:
    """The table's policies, replaced whole (a second run leaves the same set)."""
    from psycopg import sql  # the class extra's driver: only where a class is set up

    def policy(label: str, rest: str) -> list[Any]:
        return [
            sql.SQL("DROP POLICY IF EXISTS {} ON {}").format(sql.Identifier(label), table),
            sql.SQL("CREATE POLICY {} ON {} " + rest).format(
                sql.Identifier(label), table, teacher if label == "wb_instructor" else learners
            ),
        ]

    statements = policy("wb_instructor", "FOR ALL TO {} USING (true) WITH CHECK (true)")
    if name in _READ_ONLY:
        statements += [
            sql.SQL("GRANT SELECT ON {} TO {}").format(table, learners),
            *policy("wb_learner_read", "FOR SELECT TO {} USING (true)"),
        ]
    if name in _APPEND:
        own = "learner = session_user"  # the login: SET ROLE to the group gains nothing
        columns = sql.SQL(", ").join(map(sql.Identifier, _DATA_COLUMNS[name]))
        statements += [
            sql.SQL("GRANT SELECT ON {} TO {}").format(table, learners),
            sql.SQL("GRANT INSERT ({}) ON {} TO {}").format(columns, table, learners),
            *policy(
                "wb_learner_read",
                f"FOR SELECT TO {{}} USING ({own} OR learner IS NULL OR {_SHARED})",
            ),
            *policy("wb_learner_write", f"FOR INSERT TO {{}} WITH CHECK ({own})"),
        ]
    return statements


# -- the logins file ------------------------------------------------------------------------


def _write_logins(target: Path, database: str, fresh: dict[str, str], server: str) -> None:
    """The new logins' passwords in a new 0600 file (PGPASSFILE format), never anywhere else;
    ``server``: ``host:port`` as the lines name it."""
    if not fresh:
        return
    lines = [
        f"# workbench class {database}: one PGPASSFILE line per login; give each learner their "
        "own line only",
        *(f"{server}:{database}:{name}:{password}" for name, password in fresh.items()),
    ]
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
