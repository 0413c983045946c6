"""Tests for workbench.history.roles (``workbench class init``) against a real PostgreSQL
(tests/history/conftest.py): what a learner's own login can and cannot do, and the instructor's.

One class database is set up once for the module (by the CLI, as an instructor would); every
attack is tried with a learner's real login, straight in SQL as ``psql`` would send it, not
through the workbench's client (which a learner can change at will).
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from class_room import Room, admin, open_room, psycopg, refused
from postgres_server import PgServer

from workbench.cli import main
from workbench.history.base import StoreError
from workbench.history.postgres import PostgresStore
from workbench.history.roles import init_class, read_learners


@pytest.fixture(scope="module")
def room(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Room]:
    with open_room(pg_server, tmp_path_factory) as made:
        yield made


# -- the command ---------------------------------------------------------------------------


def test_logins_file_is_private_and_no_password_is_printed(room: Room) -> None:
    assert stat.S_IMODE(room.logins.stat().st_mode) == 0o600
    assert set(room.passwords) == {room.instructor, room.ada, room.bob}
    for password in room.passwords.values():
        assert len(password) >= 20 and password not in room.stdout
    assert str(room.logins) in room.stdout


def test_the_file_works_as_a_learners_pgpassfile(
    room: Room, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGPASSFILE", str(room.logins))
    store = PostgresStore(f"postgresql://{room.ada}@127.0.0.1:{room.server.port}/{room.database}")
    assert store.learner_name() == room.ada


def test_learners_are_nothing_but_members_of_the_group(room: Room) -> None:
    rows = room.sql(
        room.instructor,
        "SELECT rolname, rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls,"
        " rolcanlogin FROM pg_roles WHERE rolname = ANY(%s) ORDER BY rolname",
        ([room.ada, room.bob, room.instructor],),
    )
    assert [r[1:] for r in rows] == [(False, False, False, False, False, True)] * 3
    member = room.sql(room.ada, "SELECT pg_has_role(current_user, %s, 'MEMBER')",
                      (f"{room.database}_learners",))  # fmt: skip
    assert member == [(True,)]


def test_a_role_it_did_not_make_is_never_taken_over(room: Room, tmp_path: Path) -> None:
    """A role of the same name made by someone else (here: a superuser) is refused, and
    nothing of that run is kept: no other learner, no logins file."""
    tag = room.ada.rsplit("_", 1)[1]
    with admin(room.server) as conn:
        conn.execute(f"CREATE ROLE mallory_{tag} LOGIN SUPERUSER")
    logins = tmp_path / "more.pgpass"
    with pytest.raises(StoreError, match=f"role 'mallory_{tag}' already exists"):
        init_class(room.server.url(), [f"carl_{tag}", f"mallory_{tag}"], logins=logins)
    assert not logins.exists()
    assert room.sql(room.instructor, "SELECT 1 FROM pg_roles WHERE rolname = %s",
                    (f"carl_{tag}",)) == []  # fmt: skip


def test_a_second_run_adds_learners_and_keeps_the_others(room: Room, tmp_path: Path) -> None:
    tag = room.ada.rsplit("_", 1)[1]
    logins = tmp_path / "more.pgpass"
    setup = init_class(room.server.url(), [room.ada, f"dora_{tag}"], logins=logins)
    assert setup.created == (f"dora_{tag}",) and setup.kept == (room.ada,)
    assert [line.split(":")[3] for line in logins.read_text().splitlines()[1:]] == [f"dora_{tag}"]
    room.sql(room.ada, "SELECT 1")  # ada's password is unchanged


def test_bad_learner_names_are_one_line_errors(
    room: Room,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the password as docs/class-mode.md says: out of the URL (a URL with one warns first)
    monkeypatch.setenv("PGPASSWORD", room.server.password)
    for bad in ("Ada", "pg_ada", "a b", "public"):
        code = main(["class", "init", "--store", room.server.url_without_password(),
                     "--learners", bad,
                     "--logins", str(tmp_path / "x")])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "--learners" in err, err


def test_read_learners_from_a_file_or_a_list() -> None:
    assert read_learners("ada, bob\n# a comment\ncarl  # late\n\n") == ["ada", "bob", "carl"]


# -- what a learner's login cannot do ------------------------------------------------------


def test_a_learner_reads_only_their_own_rows_before_sharing(room: Room) -> None:
    for table in ("bursts", "answers"):
        rows = room.sql(room.ada, f"SELECT DISTINCT learner FROM workbench.{table}")
        assert rows == [(room.ada,)], table
    store = PostgresStore(room.url(room.ada))
    assert [r["tag"] for r in store.records()] == [room.ada]
    assert store.records(learner=room.bob) == []


def test_sharing_the_board_shows_the_room_and_taking_it_back_hides_it(room: Room) -> None:
    teacher = PostgresStore(room.url(room.instructor))
    learner = PostgresStore(room.url(room.ada))
    teacher.share_board()
    try:
        assert learner.board_shared()
        seen = room.sql(room.ada, "SELECT DISTINCT learner FROM workbench.bursts ORDER BY 1")
        assert seen == [(room.ada,), (room.bob,)]
        assert {a["learner"] for a in learner.answers()} == {room.ada, room.bob}
    finally:
        teacher.share_board(False)
    assert room.sql(room.ada, "SELECT DISTINCT learner FROM workbench.bursts") == [(room.ada,)]


def test_a_learner_is_named_by_their_login_whatever_the_environment_says(
    room: Room, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_LEARNER", room.bob)
    monkeypatch.setenv("WORKBENCH_ROLE", "instructor")
    with pytest.warns(UserWarning, match="WORKBENCH_LEARNER and WORKBENCH_ROLE are ignored"):
        store = PostgresStore(room.url(room.ada))
    assert store.learner_name() == room.ada and not store.is_instructor()
    assert store.get(store.append({"workload": "cnn", "status": "ok"}))["learner"] == room.ada
    assert {r["learner"] for r in store.records()} == {room.ada}


@pytest.mark.parametrize("who", ["bob", "instructor", "nobody"])
def test_a_learner_cannot_write_as_anyone_else(room: Room, who: str) -> None:
    name = {"bob": room.bob, "instructor": room.instructor, "nobody": None}[who]
    burst = ("INSERT INTO workbench.bursts (created_at, learner, workload, status, record)"
             " VALUES ('now', %s, 'cnn', 'ok', '{}')")  # fmt: skip
    answer = ("INSERT INTO workbench.answers (created_at, learner, exercise, ok)"
              " VALUES ('now', %s, '03.precision', true)")  # fmt: skip
    for statement in (burst, answer):
        assert "row-level security" in refused(room, room.ada, statement, (name,))


def test_a_learner_cannot_mark_an_answer_correct(room: Room) -> None:
    """Not their own after the fact, not anyone else's: answers are never updated or deleted."""
    for where in ("", f" WHERE learner = '{room.ada}'", f" WHERE learner = '{room.bob}'"):
        message = refused(room, room.ada, f"UPDATE workbench.answers SET ok = true{where}")
        assert "permission denied" in message
        message = refused(room, room.ada, f"DELETE FROM workbench.answers{where}")
        assert "permission denied" in message
    verdicts = room.sql(room.instructor, "SELECT DISTINCT ok FROM workbench.answers")
    assert verdicts == [(False,)]


def test_a_learner_cannot_flip_the_board(room: Room, monkeypatch: pytest.MonkeyPatch) -> None:
    message = refused(room, room.ada,
                       "INSERT INTO workbench.board (created_at, learner, shared)"
                       " VALUES ('now', %s, true)", (room.ada,))  # fmt: skip
    assert "permission denied" in message
    monkeypatch.setenv("WORKBENCH_ROLE", "instructor")  # the client's claim changes nothing
    with pytest.warns(UserWarning):
        store = PostgresStore(room.url(room.ada))
    with pytest.raises(StoreError, match="instructor's switch"):
        store.share_board()
    assert not store.board_shared()


_FORBIDDEN = [
    "DROP SCHEMA workbench CASCADE",
    "DROP TABLE workbench.answers",
    "TRUNCATE workbench.bursts",
    "ALTER TABLE workbench.answers ADD COLUMN x int",
    "ALTER TABLE workbench.bursts DISABLE ROW LEVEL SECURITY",
    "ALTER TABLE workbench.bursts NO FORCE ROW LEVEL SECURITY",
    "DROP POLICY wb_learner_read ON workbench.bursts",
    "UPDATE workbench.bursts SET samples_per_s = 1e9",
    "UPDATE workbench.meta SET value = '99'",
    "DELETE FROM workbench.board",
    "CREATE TABLE workbench.mine (x int)",
    "CREATE TABLE public.mine (x int)",
    "CREATE SCHEMA mine",
    "CREATE ROLE eve LOGIN",
    "COPY workbench.bursts TO PROGRAM 'id'",
    "ALTER ROLE current_user SUPERUSER",
    "ALTER ROLE current_user BYPASSRLS",
]


@pytest.mark.parametrize("statement", _FORBIDDEN)
def test_a_learner_cannot_drop_alter_or_escape(room: Room, statement: str) -> None:
    refused(room, room.ada, statement)


def test_someone_outside_the_class_cannot_connect(room: Room) -> None:
    tag = room.ada.rsplit("_", 1)[1]
    with admin(room.server) as conn:
        conn.execute(f"CREATE ROLE eve_{tag} LOGIN PASSWORD 'eve-pw'")
    url = f"postgresql://eve_{tag}:eve-pw@127.0.0.1:{room.server.port}/{room.database}"
    with pytest.raises(psycopg.Error, match="permission denied for database"):
        psycopg.connect(url).close()


# -- what the instructor can do ------------------------------------------------------------


def test_the_instructor_sees_and_corrects_everything(room: Room) -> None:
    teacher = PostgresStore(room.url(room.instructor))
    assert teacher.is_instructor() and teacher.learner_name() == room.instructor
    assert {r["learner"] for r in teacher.records()} >= {room.ada, room.bob}
    room.sql(room.instructor, "INSERT INTO workbench.answers (created_at, learner, exercise, ok)"
                              " VALUES ('now', %s, 'by-hand', true)", (room.bob,))  # fmt: skip
    with psycopg.connect(room.url(room.instructor)) as conn:  # one transaction, rolled back
        conn.execute("UPDATE workbench.answers SET ok = true WHERE learner = %s", (room.ada,))
        conn.execute("DELETE FROM workbench.bursts WHERE learner = %s", (room.bob,))
        conn.execute("ALTER TABLE workbench.answers ADD COLUMN grade int")
        conn.execute("DROP SCHEMA workbench CASCADE")
        conn.rollback()
    assert room.sql(room.instructor, "SELECT count(*) FROM workbench.answers WHERE ok") == [(1,)]


# -- the recipes ---------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "class-mode.md"


def test_the_recipes_keep_the_server_to_the_room_and_the_passwords_out_of_urls() -> None:
    """docs/class-mode.md: no address-wide listening, TLS-only access rules from the room's
    subnet, every learner's store URL without a password and checking the server
    (sslmode=verify-full with the room's CA), and login lines that name the server."""
    import re

    text = DOCS.read_text()
    assert "listen_addresses='*'" not in text and not re.search(r"(?<![\d.])0\.0\.0\.0", text)
    assert "-p 5432:5432 " not in text.replace("a bare `-p 5432:5432`", "")
    rules = re.findall(r"'((?:local|host\w*)\s[^']*)'", text)
    assert rules and all(r.split()[0] in ("local", "hostssl") or "reject" in r for r in rules)
    urls = re.findall(r"WORKBENCH_STORE='([^']+)'", text)
    assert urls and all(not re.search(r"://[^@/]*:[^@/]*@", u) for u in urls), urls
    assert all("sslmode=verify-full&sslrootcert=room-ca.crt" in u for u in urls), urls
    assert "sslmode=require" not in text and "*:*:" not in text
    assert "POSTGRES_PASSWORD=" not in text  # a password on docker's command line
    assert "workbench class init" in text
