"""A class store that stops answering against a real PostgreSQL (tests/history/conftest.py):
a burst's record fails with a warning and is stored once the server is back; a statement
that waits, or a server that accepts and never answers, ends within its timeout."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from postgres_server import PgServer, free_port

from workbench.history import postgres as pg_mod
from workbench.history.postgres import PostgresStore
from workbench.history.store import StoreError, StoreWarning, pending_results, record_result


class Proxy:
    """A TCP forwarder on its own port to the test server: ``stop()`` is the outage (the
    room's network gone: connections refused), ``start()`` brings it back on the same port."""

    def __init__(self, target: int) -> None:
        self.target, self.port = target, free_port()
        self.sockets: list[socket.socket] = []

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        self.sockets = [listener]
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(a: socket.socket, b: socket.socket) -> None:
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def proxy(pg_db: PgServer) -> Iterator[Proxy]:
    p = Proxy(pg_db.port)
    p.start()
    yield p
    p.stop()


class Result:
    def __init__(self, sps: float) -> None:
        self.samples_per_s, self.id = sps, None

    def to_dict(self) -> dict[str, Any]:
        return {"status": "ok", "workload": "cnn", "samples_per_s": self.samples_per_s}


def test_a_record_during_an_outage_is_kept_and_stored_once_after_it(
    pg_db: PgServer, proxy: Proxy
) -> None:
    url = pg_db.url(port=proxy.port)
    record_result(Result(1.0), True, url)  # the store is up: schema made, first row in
    proxy.stop()
    with pytest.warns(StoreWarning, match="could not record this burst") as caught:
        record_result(lost := Result(2.0), True, url)
    assert lost.id is None and pg_db.password not in str(caught[0].message)
    assert len(pending_results(url)) == 1

    proxy.start()
    record_result(Result(3.0), True, url)  # back: this one and the kept one are stored
    rows = PostgresStore(pg_db.url()).records()
    assert sorted(r["samples_per_s"] for r in rows) == [1.0, 2.0, 3.0]
    assert pending_results(url) == []


def test_a_statement_that_waits_too_long_ends_instead_of_hanging(
    pg_db: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another session holds the schema lock (a kernel frozen mid-creation): opening the
    store waits on it; statement_timeout ends the wait."""
    import psycopg

    monkeypatch.setattr(pg_mod, "_STATEMENT_TIMEOUT_MS", 1000, raising=False)
    outcome: list[BaseException | None] = []

    def open_it() -> None:
        try:
            PostgresStore(pg_db.url())
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    with psycopg.connect(pg_db.url(), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (pg_mod._LOCK_KEY,))
        t0 = time.monotonic()
        worker = threading.Thread(target=open_it, daemon=True)
        worker.start()
        worker.join(timeout=20)
        waited = time.monotonic() - t0
        assert not worker.is_alive(), "opening the store hung on a held lock"
    (exc,) = outcome
    assert isinstance(exc, StoreError) and "statement timeout" in str(exc)
    assert waited < 10


def test_a_server_that_accepts_and_never_answers_times_out(
    pg_db: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_mod, "_CONNECT_TIMEOUT_S", 2)  # libpq's minimum
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen()  # the kernel completes the handshake; nothing ever answers
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="cannot be reached") as info:
            PostgresStore(pg_db.url(port=mute.getsockname()[1]))
        waited = time.monotonic() - t0
    assert 1.5 < waited < 10
    assert pg_db.password not in str(info.value)


def test_every_connection_carries_the_timeouts(pg_db: PgServer) -> None:
    store = PostgresStore(pg_db.url())
    with store._connect() as conn:  # the store's own connection, as every call opens it
        names = ("statement_timeout", "idle_in_transaction_session_timeout")
        shown = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in names}
        libpq = conn.info.get_parameters()
    assert shown == {"statement_timeout": "30s", "idle_in_transaction_session_timeout": "1min"}
    assert {k: libpq.get(k) for k in ("keepalives", "keepalives_idle", "keepalives_interval",
            "keepalives_count", "connect_timeout", "tcp_user_timeout")} == {
        "keepalives": "1", "keepalives_idle": "30", "keepalives_interval": "10",
        "keepalives_count": "3", "connect_timeout": "10", "tcp_user_timeout": "60000"}  # fmt: skip
