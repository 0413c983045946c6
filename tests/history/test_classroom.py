"""Tests for workbench.history.classroom: who is measuring, the instructor's role, answers."""

from __future__ import annotations

import getpass
import socket
from pathlib import Path

import pytest

from workbench.core.errors import InputError
from workbench.history.classroom import host_name, is_instructor, learner_name, record_answer
from workbench.history.store import HistoryStore


def test_learner_name_from_the_variable_else_the_login(monkeypatch: pytest.MonkeyPatch) -> None:
    assert learner_name() == getpass.getuser()
    monkeypatch.setenv("WORKBENCH_LEARNER", "  ada ")
    assert learner_name() == "ada"
    monkeypatch.setenv("WORKBENCH_LEARNER", "")  # empty counts as unset
    assert learner_name() == getpass.getuser()


@pytest.mark.parametrize("bad", ["a\nb", "x" * 65])
def test_learner_name_refuses_unprintable_or_long(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv("WORKBENCH_LEARNER", bad)
    with pytest.raises(InputError, match="WORKBENCH_LEARNER"):
        learner_name()


def test_learner_name_without_a_passwd_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_user() -> str:
        raise KeyError("getpwuid(): uid not found: 4242")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert learner_name().startswith("uid")


def test_host_name() -> None:
    assert host_name() == socket.gethostname()


def test_is_instructor(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not is_instructor()
    monkeypatch.setenv("WORKBENCH_ROLE", "Instructor")
    assert is_instructor()
    monkeypatch.setenv("WORKBENCH_ROLE", "learner")
    assert not is_instructor()
    monkeypatch.setenv("WORKBENCH_ROLE", "teacher")
    with pytest.raises(InputError, match=r"WORKBENCH_ROLE.*learner or instructor"):
        is_instructor()


def test_record_answer_goes_to_the_default_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("WORKBENCH_HISTORY", str(tmp_path / "h.sqlite"))
    monkeypatch.setenv("WORKBENCH_LEARNER", "ada")
    answer = {
        "exercise": "03.precision",
        "ok": True,
        "message": "bf16 was 1.8x faster, as you predicted",
        "prediction": {"speedup": 1.5},
        "measured": {"speedup": 1.8},
    }
    answer_id = record_answer(answer)
    (got,) = HistoryStore(tmp_path / "h.sqlite").answers()
    assert got == {
        **answer,
        "id": answer_id,
        "created_at": got["created_at"],
        "learner": "ada",
        "host": socket.gethostname(),
    }


def test_record_answer_refuses_what_is_not_an_answer(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.sqlite")
    with pytest.raises(ValueError, match="'exercise'"):
        record_answer({"ok": True}, store=store)
    with pytest.raises(ValueError, match="unknown keys \\['score'\\]"):
        record_answer({"exercise": "x", "score": 3}, store=store)
    with pytest.raises(ValueError, match="'ok' must be True, False or None"):
        record_answer({"exercise": "x", "ok": "yes"}, store=store)
    assert store.answers() == []
