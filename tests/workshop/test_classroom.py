"""Tests for workbench.workshop.classroom: exercise answers, stamped with learner and host."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from workbench.history import identity
from workbench.history.store import HistoryStore
from workbench.workshop import classroom
from workbench.workshop.classroom import record_answer


def test_classroom_offers_the_identity_functions() -> None:
    assert classroom.learner_name is identity.learner_name
    assert classroom.is_instructor is identity.is_instructor


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
        "kind": "check",  # the default: a check's verdict
        "late": None,
        "changed_to": None,
        "verified": None,  # no server judged it: a SQLite file
    }


def test_a_committed_prediction_and_an_edit_round_trip(tmp_path: Path) -> None:
    """A prediction committed as its burst started (no verdict yet), then a check that judged
    that first prediction while the learner had changed it: both read back as written."""
    store = HistoryStore(tmp_path / "h.sqlite")
    commit = {"exercise": "03-precision", "ok": None, "message": "committed", "kind": "prediction",
              "prediction": 1.5, "late": False}  # fmt: skip
    check = {"exercise": "03-precision", "ok": False, "message": "off", "kind": "check",
             "prediction": 1.5, "measured": 1.4, "late": True, "changed_to": 1.4}  # fmt: skip
    record_answer(commit, store=store)
    record_answer(check, store=store)
    first, second = store.answers()
    assert (first["kind"], first["ok"], first["prediction"], first["late"]) == (
        "prediction", None, 1.5, False)  # fmt: skip
    assert first["changed_to"] is None and first["measured"] is None
    assert (second["kind"], second["late"], second["changed_to"]) == ("check", True, 1.4)


def test_record_answer_refuses_what_is_not_an_answer(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.sqlite")
    with pytest.raises(ValueError, match="'exercise'"):
        record_answer({"ok": True}, store=store)
    with pytest.raises(ValueError, match="unknown keys \\['score'\\]"):
        record_answer({"exercise": "x", "score": 3}, store=store)
    with pytest.raises(ValueError, match="'ok' must be True, False or None"):
        record_answer({"exercise": "x", "ok": "yes"}, store=store)
    with pytest.raises(
        ValueError, match="'kind' must be one of \\['check', 'prediction', 'reset'\\]"
    ):
        record_answer({"exercise": "x", "kind": "guess"}, store=store)
    with pytest.raises(ValueError, match="'late' must be True, False or None"):
        record_answer({"exercise": "x", "late": "yes"}, store=store)
    assert store.answers() == []
