"""A class set up by ``workbench class init`` on the suite's real PostgreSQL, for the tests
that attack it (test_roles.py, test_roles_doors.py): its logins, and SQL sent as ``psql``
would send it, never through the workbench's client (which a learner can change at will)."""

from __future__ import annotations

import contextlib
import io
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from postgres_server import IN_CI, PgServer

from workbench.cli import main
from workbench.history.postgres import PostgresStore

# under CI these tests must run: a missing driver fails the collection there, never skips
psycopg = __import__("psycopg") if IN_CI else pytest.importorskip("psycopg")


@dataclass(frozen=True)
class Room:
    """The module's class database: its server, the logins file and the names in it."""

    server: PgServer
    database: str
    logins: Path
    passwords: dict[str, str]
    ada: str
    bob: str
    instructor: str
    stdout: str

    def url(self, login: str) -> str:
        from urllib.parse import quote

        secret = quote(self.passwords[login], safe="")
        return f"postgresql://{login}:{secret}@127.0.0.1:{self.server.port}/{self.database}"

    def sql(self, login: str, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """One statement as ``login``, committed; its rows (none for a statement without)."""
        with psycopg.connect(self.url(login), autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []


def admin(server: PgServer, database: str = "postgres") -> Any:
    return psycopg.connect(PgServer(server.user, server.password, server.port, database).url(),
                           autocommit=True)  # fmt: skip


@contextlib.contextmanager
def open_room(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Room]:
    """A class set up by ``workbench class init`` (the CLI), with two learners' rows in it;
    dropped at the end, roles and all."""
    tag = secrets.token_hex(3)
    database, ada, bob = f"c_{tag}", f"ada_{tag}", f"bob_{tag}"
    with admin(pg_server) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    owner = PgServer(pg_server.user, pg_server.password, pg_server.port, database)
    logins = tmp_path_factory.mktemp("class") / "logins.pgpass"
    try:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["class", "init", "--store", owner.url(), "--learners", f"{ada},{bob}",
                         "--logins", str(logins)])  # fmt: skip
        assert code == 0, out.getvalue()
        lines = [line.split(":") for line in logins.read_text().splitlines()[1:]]
        passwords = {fields[3]: fields[4] for fields in lines}
        room = Room(owner, database, logins, passwords, ada, bob, f"{database}_instructor",
                    out.getvalue())  # fmt: skip
        for learner in (ada, bob):  # each learner's first burst and answer, through the client
            store = PostgresStore(room.url(learner))
            store.append({"workload": "cnn", "status": "ok", "tag": learner})
            store.record_answer({"exercise": "03.precision", "ok": False, "message": "not yet"})
        yield room
    finally:
        drop_class(pg_server, database, tag)


def drop_class(server: PgServer, database: str, tag: str) -> None:
    with admin(server) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        roles = conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE %s OR rolname LIKE %s",
            (f"%\\_{tag}", f"{database}\\_%"),
        ).fetchall()
        for (role,) in roles:  # DROP OWNED: the CONNECT it was granted on other databases
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def refused(room: Room, login: str, statement: str, params: tuple[Any, ...] = ()) -> str:
    """The server's refusal of ``statement`` as ``login`` for want of privilege (SQLSTATE
    42501: no grant, not the owner, a row-level security check); the test fails otherwise."""
    with pytest.raises(psycopg.Error) as info:
        room.sql(login, statement, params)
    assert info.value.sqlstate == "42501", f"{statement}: {info.value}"
    return str(info.value)
