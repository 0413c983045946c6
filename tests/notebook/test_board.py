"""The instructor's board over a store: it shows the room's figures, says what it reads, keeps
going when the store does not answer, and refreshes on a timer without holding the kernel."""

from __future__ import annotations

import sys
import threading
import time

import pytest

import workbench.history as history_pkg
from workbench.history.store import HistoryStore, records_frame
from workbench.notebook import board as board_module
from workbench.notebook.board import Board, store_note


def _burst(i, learner, precision, sps):
    return {"id": i, "created_at": f"2026-12-04T10:{i:02d}:00+00:00", "workload": "cnn",
            "device": "cuda:0", "device_name": "GPU", "status": "ok", "samples_per_s": sps,
            "learner": learner, "host": f"{learner}-host",
            "knobs": {"batch_size": 32, "precision": precision, "nccl": {}}}  # fmt: skip


class FakeStore:
    """The agreed class-store API (answers, frame, board_shared), counting its reads."""

    def __init__(self, shared=False):
        self.shared, self.reads, self.down = shared, 0, False
        self.rows = [
            {"id": 1, "created_at": "2026-12-04T10:00:00+00:00", "learner": "ann", "host": "h1",
             "exercise": "03-precision", "ok": True, "message": "ok", "prediction": 2.0,
             "measured": 2.4},
            {"id": 2, "created_at": "2026-12-04T10:01:00+00:00", "learner": "bob", "host": "h2",
             "exercise": "03-precision", "ok": False, "message": "no", "prediction": 0.5,
             "measured": 0.9},
        ]  # fmt: skip
        self.bursts = [
            _burst(1, "ann", "fp32", 100.0),
            _burst(2, "ann", "bf16", 240.0),
            _burst(3, "bob", "fp32", 200.0),
            _burst(4, "bob", "bf16", 180.0),
        ]

    def __repr__(self):
        return "PostgresStore('postgresql://teacher:s3cret@db.example:5432/class')"

    def answers(self, exercise=None):
        self.reads += 1
        if self.down:
            raise ConnectionError("server closed the connection unexpectedly")
        return list(self.rows)

    def frame(self):
        return records_frame(self.bursts)

    def board_shared(self):
        return self.shared


class _Classroom:
    def __init__(self, instructor):
        self.instructor = instructor

    def is_instructor(self):
        return self.instructor


@pytest.fixture
def instructor(monkeypatch):
    fake = _Classroom(True)
    monkeypatch.setitem(sys.modules, "workbench.history.classroom", fake)
    monkeypatch.setattr(history_pkg, "classroom", fake, raising=False)
    return fake


def test_the_board_shows_the_rooms_answers_best_configs_and_knob_spread(instructor):
    board = Board(FakeStore())
    ui = board.ui
    assert "2 answer(s) from 2 learner(s), 4 burst(s)" in ui.status.value
    assert "03-precision" in ui.answers.value and "50" in ui.answers.value  # 1 of 2 correct
    assert ui.exercise.value == "03-precision"
    assert "ann" in ui.best.value and "240" in ui.best.value  # ann's best: bf16, 240
    assert "median 1.65x, from 0.90x to 2.40x; faster on 1 of 2" in ui.effect.value
    for name in ("correct", "answers", "best", "effect"):
        assert "no answers yet" not in str(ui.charts[name].chart.to_dict())
    assert "Class store" in ui.store.value and "s3cret" not in ui.store.value
    assert "teacher:***@db.example" in ui.store.value


def test_the_board_says_when_it_is_not_looking_at_the_room(instructor, tmp_path):
    note, is_class = store_note(HistoryStore(tmp_path / "h.sqlite"))
    assert not is_class and "not a class store" in note and "WORKBENCH_STORE" in note
    assert "is not shared" in Board(FakeStore()).ui.shared.value
    assert "is shared" in Board(FakeStore(shared=True)).ui.shared.value
    instructor.instructor = False
    assert "not the instructor's" in Board(FakeStore()).ui.shared.value


def test_a_store_that_stops_answering_leaves_the_last_figures_and_a_red_line(instructor):
    store = FakeStore()
    board = Board(store)
    before = board.ui.answers.value
    store.down = True
    assert board.refresh() is None  # no exception in front of the room
    assert "could not read the store" in board.ui.status.value
    assert "closed the connection" in board.ui.status.value
    assert board.ui.answers.value == before and board.view is not None


def test_the_timer_refreshes_in_the_background_and_stops(instructor):
    store = FakeStore()
    board = Board(store, refresh_s=0.05)
    try:
        assert board.running and board.ui.auto.value
        t0 = time.perf_counter()
        while store.reads < 4 and time.perf_counter() - t0 < 10:
            time.sleep(0.02)  # the kernel's own thread is free meanwhile
        assert store.reads >= 4
        assert any(t.name == "workbench-board" for t in threading.enumerate())
    finally:
        board.ui.auto.value = False  # the checkbox stops it
    reads = store.reads
    time.sleep(0.2)
    assert not board.running and store.reads == reads


def test_a_refresh_interval_must_be_positive(instructor):
    with pytest.raises(ValueError, match="refresh_s must be > 0"):
        Board(FakeStore(), refresh_s=0)
    assert board_module.DEFAULT_REFRESH_S == 10.0
