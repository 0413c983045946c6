"""Tests for workbench.history.base on both stores (SQLite, and a real PostgreSQL): learner
and host on every row, the learner's view, the instructor's view, the shared board, answers."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from postgres_server import PgServer

from workbench.history.base import Store, StoreError
from workbench.history.store import open_store


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a store lives: an SQLite file, or a fresh PostgreSQL database's URL."""
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    pg_db: PgServer = request.getfixturevalue("pg_db")
    return pg_db.url()


def as_(monkeypatch: pytest.MonkeyPatch, learner: str, role: str = "learner") -> None:
    monkeypatch.setenv("WORKBENCH_LEARNER", learner)
    monkeypatch.setenv("WORKBENCH_ROLE", role)


def burst(tag: str) -> dict[str, object]:
    return {"workload": "cnn", "status": "ok", "device": "cpu", "tag": tag}


def answer(exercise: str, ok: bool) -> dict[str, object]:
    return {"exercise": exercise, "ok": ok, "message": "m", "prediction": 2, "measured": 3.5}


def fill(where: str, monkeypatch: pytest.MonkeyPatch) -> Store:
    """Two learners, two bursts and one answer each; returns the store."""
    for learner in ("ada", "bob"):
        as_(monkeypatch, learner)
        store = open_store(where)
        store.append(burst(f"{learner}-1"))
        store.append(burst(f"{learner}-2"))
        store.record_answer(answer("03.precision", learner == "ada"))
    return store


def tags(store: Store) -> list[str]:
    return [r["tag"] for r in store.records()]


def test_every_row_carries_learner_and_host(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    as_(monkeypatch, "ada")
    store = open_store(where)
    burst_id = store.append(burst("a"))
    row = store.get(burst_id)
    assert (row["learner"], row["host"]) == ("ada", socket.gethostname())
    frame = store.frame()
    assert frame["learner"].tolist() == ["ada"] and frame["host"].tolist() == [row["host"]]


def test_a_learner_sees_only_their_rows(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = fill(where, monkeypatch)  # now bob
    assert tags(store) == ["bob-1", "bob-2"]
    assert len(store) == 2
    assert store.frame()["learner"].unique().tolist() == ["bob"]
    assert [a["learner"] for a in store.answers()] == ["bob"]
    ada_first = 1
    with pytest.raises(KeyError):
        store.get(ada_first)
    as_(monkeypatch, "ada")
    assert tags(store) == ["ada-1", "ada-2"]
    assert store.get(ada_first)["tag"] == "ada-1"


def test_the_instructor_sees_the_room(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = fill(where, monkeypatch)
    as_(monkeypatch, "teacher", role="instructor")
    assert tags(store) == ["ada-1", "ada-2", "bob-1", "bob-2"]
    assert len(store) == 4
    assert [r["tag"] for r in store.records(learner="bob")] == ["bob-1", "bob-2"]
    got = store.answers("03.precision")
    assert [(a["learner"], a["ok"]) for a in got] == [("ada", True), ("bob", False)]
    assert got[0]["prediction"] == 2 and got[0]["measured"] == 3.5
    assert store.answers("03.precision", learner="ada")[0]["ok"] is True
    assert store.answers("no.such.exercise") == []


def test_a_shared_board_shows_every_learner_the_room(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(where, monkeypatch)
    as_(monkeypatch, "teacher", role="instructor")
    instructor = open_store(where)
    assert not instructor.board_shared()
    instructor.share_board()

    as_(monkeypatch, "bob")
    learner = open_store(where)  # another store object: the switch is in the database
    assert learner.board_shared()
    assert tags(learner) == ["ada-1", "ada-2", "bob-1", "bob-2"]
    assert len(learner.answers()) == 2

    as_(monkeypatch, "teacher", role="instructor")
    instructor.share_board(False)
    as_(monkeypatch, "bob")
    assert not learner.board_shared()
    assert tags(learner) == ["bob-1", "bob-2"]


def test_another_process_sees_the_shared_board(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A learner's kernel is another process: it reads the switch from the store itself."""
    fill(where, monkeypatch)
    code = (
        "import sys; from workbench.history.store import open_store; "
        "print(len(open_store(sys.argv[1]).records()))"
    )
    env = {"WORKBENCH_LEARNER": "bob", "WORKBENCH_ROLE": "learner"}

    def learner_count() -> str:
        done = subprocess.run(
            [sys.executable, "-c", code, where],
            capture_output=True, text=True, timeout=120, check=True,
            env={**_inherited(), **env},
        )  # fmt: skip
        return done.stdout.strip()

    assert learner_count() == "2"
    as_(monkeypatch, "teacher", role="instructor")
    open_store(where).share_board()
    assert learner_count() == "4"


def _inherited() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_")}


def test_only_the_instructor_shares_the_board(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    as_(monkeypatch, "bob")
    store = open_store(where)
    with pytest.raises(StoreError, match="WORKBENCH_ROLE=instructor"):
        store.share_board()
    assert not store.board_shared()
    as_(monkeypatch, "teacher", role="instructor")
    with pytest.raises(TypeError, match="True or False"):
        store.share_board("yes")  # type: ignore[arg-type]
