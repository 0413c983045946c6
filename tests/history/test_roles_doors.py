"""The class store's last doors (issue 41), each attack tried against the suite's real
PostgreSQL with a learner's real login, as ``psql`` would send it: ids and times the server
sets, ``SET ROLE`` to the group, verdicts the server computes, a fake server that asks for a
cleartext password, the server's other databases, records too large, a learner's open
transaction. A class of its own: these tests write answers the other module counts."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from class_room import Room, open_room, psycopg, refused
from postgres_server import PgServer

from workbench.core.errors import InputError
from workbench.history.postgres import PostgresStore, connect_options
from workbench.history.roles import MAX_ANSWER_BYTES, define_check, init_class

ANSWER = "INSERT INTO workbench.answers (created_at, learner, exercise, ok, prediction, measured)"


@pytest.fixture(scope="module")
def room(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Room]:
    with open_room(pg_server, tmp_path_factory) as made:
        yield made


def _answers(room: Room, exercise: str) -> list[tuple]:
    return room.sql(room.instructor, "SELECT id, created_at, learner, ok, verified FROM "
                    "workbench.answers WHERE exercise = %s ORDER BY id", (exercise,))  # fmt: skip


def test_a_learner_can_choose_neither_the_row_id_nor_its_time(room: Room) -> None:
    for table, columns, values in (
        ("answers", "id, created_at, learner, exercise, ok", "9e18, 'now', %s, 'ids', true"),
        ("bursts", "id, created_at, learner, workload, status, record",
         "0, 'now', %s, 'cnn', 'ok', '{}'"),
    ):  # fmt: skip
        message = refused(room, room.ada, f"INSERT INTO workbench.{table} ({columns}) "
                          f"OVERRIDING SYSTEM VALUE VALUES ({values})", (room.ada,))  # fmt: skip
        assert "permission denied" in message
    refused(room, room.ada, "SELECT setval('workbench.answers_id_seq', 1000)")  # no next ids
    # a backdated answer is stamped with the server's clock, whatever it says
    room.sql(room.ada, f"{ANSWER} VALUES ('2000-01-01T00:00:00+00:00', %s, 'ids', true, "
             "null, null)", (room.ada,))  # fmt: skip
    (row_id, created, *_), *_ = _answers(room, "ids")
    age_s = (datetime.now(timezone.utc) - datetime.fromisoformat(created)).total_seconds()
    assert -5 < age_s < 60, created
    largest = room.sql(room.instructor, "SELECT max(id) FROM workbench.answers")[0][0]
    assert row_id == largest < 1000  # from the sequence: nobody else's next id was taken
    refused(room, room.ada, "INSERT INTO workbench.answers (learner, exercise, verified) "
            "VALUES (%s, 'ids', true)", (room.ada,))  # fmt: skip


def test_switching_to_the_group_role_gains_nothing(room: Room) -> None:
    group = f"{room.database}_learners"
    with psycopg.connect(room.url(room.ada), autocommit=True) as conn:
        conn.execute(f'SET ROLE "{group}"')
        with pytest.raises(psycopg.Error) as info:  # posting as the group: an extra learner
            conn.execute(f"{ANSWER} VALUES ('now', %s, 'as-group', true, null, null)", (group,))
        assert info.value.sqlstate == "42501" and "row-level security" in str(info.value)
        learners = {r[0] for r in conn.execute("SELECT learner FROM workbench.answers")}
        assert learners <= {room.ada}  # still only their own rows before the board is shared
    assert _answers(room, "as-group") == []


def test_the_server_computes_the_verdict_and_marks_a_hand_written_one_unverified(
    room: Room,
) -> None:
    define_check(room.url(room.instructor), "05.speed", rel_tol=0.1)
    define_check(room.url(room.instructor), "06.bound", choice=True)
    refused(room, room.ada, "INSERT INTO workbench.checks (exercise, rel_tol) VALUES ('x', 9)")
    cases = [  # (exercise, ok typed by hand, prediction, measured) -> the stored ok, verified
        ("05.speed", True, "10", "100", False, True),  # far off, claimed right: false
        ("05.speed", False, "95", "100", True, True),  # within 10 %: the server says so
        ("06.bound", True, '"data"', '"Compute"', False, True),
        ("06.bound", False, '" compute"', '"Compute"', True, True),
        ("07.free", True, "1", "2", True, False),  # no rule kept: the claim, unverified
    ]
    for exercise, ok, guess, truth, _, _ in cases:
        room.sql(room.ada, f"{ANSWER} VALUES ('now', %s, %s, %s, %s::json, %s::json)",
                 (room.ada, exercise, ok, guess, truth))  # fmt: skip
    stored = [row[3:] for name in ("05.speed", "06.bound", "07.free")
              for row in _answers(room, name)]  # fmt: skip
    assert stored == [(ok, verified) for *_, ok, verified in cases]
    with pytest.raises(InputError, match=r"rel_tol=-1 is not allowed: a number >= 0"):
        define_check(room.url(room.instructor), "05.speed", rel_tol=-1)


def test_records_and_answers_have_a_size_limit_and_large_objects_are_closed(room: Room) -> None:
    big = "x" * (MAX_ANSWER_BYTES + 1)
    with pytest.raises(psycopg.errors.CheckViolation):
        room.sql(room.ada, "INSERT INTO workbench.answers (created_at, learner, exercise, "
                 "message) VALUES ('now', %s, 'big', %s)", (room.ada, big))  # fmt: skip
    with pytest.raises(psycopg.errors.CheckViolation):
        room.sql(room.ada, "INSERT INTO workbench.bursts (created_at, learner, workload, status,"
                 " record) VALUES ('now', %s, 'cnn', 'ok', json_build_object('x', repeat('y', "
                 "5000000)))", (room.ada,))  # fmt: skip
    for statement in ("SELECT lo_create(0)", "SELECT lo_from_bytea(0, 'x')"):
        refused(room, room.ada, statement)


def test_a_learner_cannot_connect_to_the_servers_other_databases(room: Room) -> None:
    for database in ("postgres", "template1"):
        url = room.url(room.ada).rsplit("/", 1)[0] + f"/{database}"
        with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
            psycopg.connect(url).close()
    other = room.server.url().rsplit("/", 1)[0] + "/postgres"
    psycopg.connect(other).close()  # the administrator still can


def test_a_learners_open_transaction_stalls_neither_setup_nor_the_room(
    room: Room, tmp_path: Path
) -> None:
    holder = psycopg.connect(room.url(room.ada))  # not autocommit: BEGIN, then idle inside it
    holder.execute("SELECT count(*) FROM workbench.answers")  # holds the table's lock
    try:
        t0 = time.monotonic()
        init_class(room.server.url(), [room.ada, room.bob], logins=tmp_path / "again.pgpass")
        setup_s = time.monotonic() - t0
        t0 = time.monotonic()
        PostgresStore(room.url(room.bob)).answers()
        read_s = time.monotonic() - t0
    finally:
        holder.close()
    print(
        f"\nclass init beside an open learner transaction: {setup_s:.2f} s; a read: {read_s:.2f} s"
    )
    assert setup_s < 10 and read_s < 5  # seconds, not the 30 s statement timeout
    assert "-c lock_timeout=5000" in connect_options()["options"]


def test_logins_name_the_server_and_the_password_goes_only_to_a_scram_server(
    room: Room,
) -> None:
    lines = room.logins.read_text().splitlines()[1:]
    assert lines and all(
        line.startswith(f"127.0.0.1:{room.server.port}:{room.database}:") for line in lines
    )
    fake = _FakeServer()  # asks for the password in clear text, as the fake server did
    url = room.url(room.ada).replace(f":{room.server.port}/", f":{fake.port}/")
    password = room.passwords[room.ada]
    with pytest.raises(Exception):  # noqa: B017 (the connection fails; what it sent matters)
        PostgresStore(url)
    sent = fake.received()  # once the fake server's side is done (it sets ``asked`` first)
    assert fake.asked and password.encode() not in sent
    # the control: libpq without require_auth hands the password to the same fake server
    control = _FakeServer()
    with pytest.raises(psycopg.Error):
        psycopg.connect(url.replace(f":{fake.port}/", f":{control.port}/"), connect_timeout=5)
    assert password.encode() in control.received()
    assert "require_auth" not in connect_options("postgresql:///class")  # a local socket


def _length(message: bytes) -> int:
    return struct.unpack("!i", message[1:5])[0]


class _FakeServer:
    """One connection: refuses TLS, reads the start-up message, asks for a cleartext password
    (AuthenticationCleartextPassword) and keeps whatever comes back."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(1)
        self.port = self._sock.getsockname()[1]
        self.asked = False
        self._data = b""
        self._done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self._sock.accept()
        conn.settimeout(5)
        try:
            length, code = struct.unpack("!ii", conn.recv(8))
            if code == 80877103:  # SSLRequest: no TLS here
                conn.sendall(b"N")
                length = struct.unpack("!i", conn.recv(4))[0]
                conn.recv(length - 4)
            else:
                conn.recv(length - 8)
            conn.sendall(b"R" + struct.pack("!ii", 8, 3))
            self.asked = True
            while len(self._data) < 5 or len(self._data) < 1 + _length(self._data):
                chunk = conn.recv(4096)  # one message back (the password), or the hang-up
                if not chunk:
                    break
                self._data += chunk
        except OSError:
            pass
        finally:
            conn.close()
            self._sock.close()
            self._done.set()

    def received(self) -> bytes:
        self._done.wait(10)
        return self._data
