"""Tests for workbench.history.postgres against a real PostgreSQL (tests/history/conftest.py):
round trips, schema, 30 concurrent writers, and a password that never shows."""

from __future__ import annotations

import logging
import pickle
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest
from postgres_server import PgServer, free_port
from store_writers import run_writers

from workbench.history import postgres as pg_mod
from workbench.history.postgres import PostgresStore
from workbench.history.store import StoreError, open_store

WRITERS, PER_WRITER = 30, 20


def burst(**fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "status": "ok",
        "workload": "cnn",
        "device": "cpu",
        "knobs": {"batch_size": 64, "num_workers": 2, "nccl": {}},
        "samples_per_s": 1234.5,
        "peak_mem_mib": 512.0,
    }
    record.update(fields)
    return record


def test_round_trip_and_filters(pg_db: PgServer) -> None:
    store = PostgresStore(pg_db.url())
    record = burst(step_ms_iqr=float("nan"), extra={"deep": [1, 2.5, float("inf"), (3, 4)]})
    first = store.append(record)
    second = store.append(burst(workload="gpt", status="oom"))

    got = store.get(first)
    assert got["step_ms_iqr"] is None and got["extra"] == {"deep": [1, 2.5, None, [3, 4]]}
    assert list(got)[: len(record)] == list(record)  # key order kept (json, not jsonb)
    assert [r["id"] for r in store.records()] == [first, second]
    assert [r["id"] for r in store.records(workload="gpt")] == [second]
    assert [r["id"] for r in store.records(limit=1)] == [second]
    assert len(store) == 2
    assert store.frame()["samples_per_s"].tolist()[0] == 1234.5
    with pytest.raises(KeyError, match="no burst with id 999"):
        store.get(999)


def test_created_at_kept_as_the_result_made_it(pg_db: PgServer) -> None:
    store = PostgresStore(pg_db.url())
    stamp = "2026-12-03T18:00:00.123456+00:00"
    assert store.get(store.append(burst(created_at=stamp)))["created_at"] == stamp


def test_open_store_takes_the_url_and_the_variable(
    pg_db: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(open_store(pg_db.url()), PostgresStore)
    monkeypatch.setenv("WORKBENCH_STORE", pg_db.url())
    store = open_store()
    assert isinstance(store, PostgresStore)
    store.append(burst())
    assert len(open_store()) == 1


def test_open_store_refuses_a_store_variable_that_is_not_a_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORKBENCH_STORE", "/tmp/history.sqlite")
    with pytest.raises(StoreError, match="WORKBENCH_STORE must be a postgresql://"):
        open_store()


def test_schema_created_once_with_a_version(pg_db: PgServer) -> None:
    import psycopg

    PostgresStore(pg_db.url())
    PostgresStore(pg_db.url())  # again: nothing to create
    with psycopg.connect(pg_db.url()) as conn:
        version = conn.execute("SELECT value FROM workbench.meta").fetchall()
    assert version == [(str(pg_mod.PG_SCHEMA_VERSION),)]


def test_newer_schema_refused(pg_db: PgServer) -> None:
    import psycopg

    PostgresStore(pg_db.url())
    with psycopg.connect(pg_db.url()) as conn:
        conn.execute("UPDATE workbench.meta SET value = '99'")
    with pytest.raises(StoreError, match="schema version 99; this workbench knows up to 2"):
        PostgresStore(pg_db.url())


# Schema 1 as released: what a room's store looked like before answers had kinds.
SCHEMA_V1 = tuple(pg_mod._DDL)


def _version_1_store(url: str) -> None:
    """A store at schema 1 with one answer, as an earlier workbench left it."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for statement in SCHEMA_V1:
            conn.execute(statement)
        conn.execute("INSERT INTO workbench.meta (key, value) VALUES ('schema_version', '1')")
        conn.execute(
            "INSERT INTO workbench.answers (created_at, learner, host, exercise, ok, message,"
            " prediction, measured) VALUES ('2026-12-01T10:00:00+00:00', 'ada', 'h1',"
            " '03-precision', true, 'right', '2.0'::json, '1.9'::json)"
        )


def _meta_version(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT value FROM workbench.meta").fetchone()[0]


def test_a_version_1_store_upgrades_and_keeps_its_answers_readable(
    pg_db: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _version_1_store(pg_db.url())
    monkeypatch.setenv("WORKBENCH_ROLE", "instructor")
    store = PostgresStore(pg_db.url())
    assert _meta_version(pg_db.url()) == str(pg_mod.PG_SCHEMA_VERSION) == "2"
    (old,) = store.answers()
    assert (old["kind"], old["late"], old["changed_to"]) == ("check", None, None)
    assert (old["ok"], old["prediction"], old["measured"]) == (True, 2.0, 1.9)
    store.record_answer({"exercise": "03-precision", "kind": "prediction", "prediction": 1.2,
                         "late": False, "changed_to": None})  # fmt: skip
    new = store.answers()[-1]
    assert (new["kind"], new["late"], new["prediction"], new["ok"]) == (
        "prediction", False, 1.2, None)  # fmt: skip
    PostgresStore(pg_db.url())  # at the current version: nothing more to do
    assert _meta_version(pg_db.url()) == "2"


def test_a_login_that_does_not_own_the_tables_is_told_who_upgrades_them(pg_db: PgServer) -> None:
    """A learner's login (no ALTER on the instructor's tables) opening a store not yet upgraded
    gets one clear error and changes nothing; the owner's next open upgrades it."""
    import secrets

    import psycopg

    _version_1_store(pg_db.url())
    role, password = f"lrn_{secrets.token_hex(4)}", f"Pw-{secrets.token_hex(8)}"
    with psycopg.connect(pg_db.url(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        conn.execute(f"GRANT USAGE ON SCHEMA workbench TO {role}")
        conn.execute(f"GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA workbench TO {role}")
    learner = f"postgresql://{role}:{password}@127.0.0.1:{pg_db.port}/{pg_db.database}"
    try:
        with pytest.raises(StoreError, match=r"may not upgrade it to 2 .*nothing was changed"):
            PostgresStore(learner)
        assert _meta_version(pg_db.url()) == "1"
        PostgresStore(pg_db.url())
        assert _meta_version(pg_db.url()) == "2"
    finally:
        with psycopg.connect(pg_db.url(), autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_thirty_writers_at_once(pg_db: PgServer) -> None:
    """30 processes append at the same moment: every row lands once, ids unique, no error."""
    ids = run_writers(pg_db.url(), WRITERS, PER_WRITER)

    rows = PostgresStore(pg_db.url()).records()
    assert len(rows) == len(ids) == WRITERS * PER_WRITER
    assert len(set(ids)) == WRITERS * PER_WRITER
    assert sorted(ids) == [r["id"] for r in rows]
    for tag in range(WRITERS):
        assert [r["i"] for r in rows if r["writer"] == tag] == list(range(PER_WRITER))


def test_a_store_pickles_for_worker_processes(pg_db: PgServer) -> None:
    store = PostgresStore(pg_db.url())
    store.append(burst())
    assert len(pickle.loads(pickle.dumps(store))) == 1


def test_missing_driver_names_the_variable_and_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now raises ImportError
    monkeypatch.setenv("WORKBENCH_STORE", "postgresql://ada:pw@127.0.0.1:1/class")
    with pytest.raises(StoreError) as info:
        open_store()
    message = str(info.value)
    assert "WORKBENCH_STORE" in message
    assert "pip install 'throughput-workbench[class]'" in message


# -- the password never shows --------------------------------------------------------------


def _everything_shown(exc: BaseException) -> str:
    """All a person could see of an error: message, repr and the full printed traceback."""
    return "\n".join(
        [
            str(exc),
            repr(exc),
            "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        ]
    )


def _assert_hidden(text: str, server: PgServer, password: str) -> None:
    from urllib.parse import quote

    for form in {password, quote(password, safe=""), quote(password)}:
        assert form not in text, f"password shown as {form!r} in: {text}"
    assert f"{server.user}:***@127.0.0.1" in text or "***" in text


def test_repr_and_attributes_hide_the_password(pg_db: PgServer) -> None:
    store = PostgresStore(pg_db.url())
    shown = [repr(store), str(store), store.url, store.where(), repr(vars(store))]
    for text in shown:
        _assert_hidden(text, pg_db, pg_db.password)
    assert repr(store) == f"PostgresStore('postgresql://{pg_db.user}:***@127.0.0.1:" + (
        f"{pg_db.port}/{pg_db.database}')"
    )


def test_wrong_password_error_hides_it(pg_db: PgServer) -> None:
    wrong = "Wrong-Pw-8c1e@x"
    with pytest.raises(StoreError, match="password authentication failed") as info:
        PostgresStore(pg_db.url(password=wrong))
    _assert_hidden(_everything_shown(info.value), pg_db, wrong)
    _assert_hidden(_everything_shown(info.value), pg_db, pg_db.password)


def test_connection_refused_error_hides_it(pg_db: PgServer) -> None:
    with pytest.raises(StoreError, match="cannot be reached") as info:
        PostgresStore(pg_db.url(port=free_port()))  # nothing listens there
    assert "Connection refused" in str(info.value) or "connection" in str(info.value)
    _assert_hidden(_everything_shown(info.value), pg_db, pg_db.password)


def test_unknown_database_error_hides_it(pg_db: PgServer) -> None:
    url = pg_db.url().rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(StoreError, match="no_such_db") as info:
        PostgresStore(url)
    _assert_hidden(_everything_shown(info.value), pg_db, pg_db.password)


def test_cli_error_and_logs_hide_it(
    pg_db: PgServer, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The CLI's one-line error (exit 2) and anything logged on the way."""
    from workbench.cli import main

    caplog.set_level(logging.DEBUG)
    code = main(["history", "--store", pg_db.url(password="Wrong-Pw-cli")])
    out, err = capsys.readouterr()
    assert code == 2
    assert "password authentication failed" in err
    for text in (out, err, caplog.text):
        assert "Wrong-Pw-cli" not in text


def test_pgpassfile_instead_of_a_password_in_the_url(
    pg_db: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The URL names no password; libpq reads it from PGPASSFILE (docs/class-mode.md)."""
    passfile = tmp_path / "pgpass"
    escaped = pg_db.password.replace("\\", "\\\\").replace(":", "\\:")
    passfile.write_text(f"127.0.0.1:{pg_db.port}:{pg_db.database}:{pg_db.user}:{escaped}\n")
    passfile.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    store = PostgresStore(pg_db.url_without_password())
    store.append(burst())
    assert len(store) == 1
    assert "***" not in repr(store)  # nothing to hide: the URL has no password


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://ada:Pw-Malformed-9f@127.0.0.1:notaport/class",
        "postgresql://ada:Pw-Malformed-9f@127.0.0.1:1/class?nosuchoption=1",
    ],
)
def test_malformed_url_error_hides_it(url: str) -> None:
    with pytest.raises(StoreError) as info:
        PostgresStore(url)
    assert "Pw-Malformed-9f" not in _everything_shown(info.value)
    assert "ada:***@127.0.0.1" in str(info.value)


def test_a_burst_in_class_mode_reaches_the_room_and_shows_no_password(
    pg_db: PgServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """End to end: WORKBENCH_STORE set, a real burst lands in PostgreSQL with the learner's
    name; its result, the history frame and the saved config never contain the password."""
    import json

    from workloads_for_tests import tensor_workload

    from workbench import Knobs, history, run_burst, save_config

    monkeypatch.setenv("WORKBENCH_STORE", pg_db.url())
    monkeypatch.setenv("WORKBENCH_LEARNER", "ada")
    result = run_burst(tensor_workload(), Knobs(batch_size=8), seconds=0.2, warmup_steps=1)
    assert result.status == "ok"

    row = PostgresStore(pg_db.url()).get(result.id)
    assert row["learner"] == "ada" and row["samples_per_s"] == result.samples_per_s
    saved = save_config(result, tmp_path / "tuned.yaml").read_text()
    shown = [
        json.dumps(result.to_dict()),
        history().to_json(date_format="iso"),
        saved,
        repr(result),
    ]
    for text in shown:
        assert pg_db.password not in text
        assert "WORKBENCH_STORE" not in text
