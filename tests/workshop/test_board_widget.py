"""The instructor's board over a store: it shows the room's figures, says what it reads, keeps
going when the store does not answer, and refreshes on a timer without holding the kernel.

Tests workbench/workshop/board/widget.py (test_board_figures.py and test_board_charts.py test the
board's tables and charts)."""

from __future__ import annotations

import threading
import time

import pytest

from workbench.history.store import HistoryStore
from workbench.workshop import classroom
from workbench.workshop.board import Board, store_note
from workbench.workshop.board import widget as board_module
from workbench.workshop.predictions import BOOK


def _burst(learner, precision, sps):
    return {"workload": "cnn", "device": "cuda:0", "device_name": "GPU", "status": "ok",
            "samples_per_s": sps, "knobs": {"batch_size": 32, "precision": precision}}  # fmt: skip


ROOM = {  # learner: (their answer to 03-precision, their bursts)
    "ann": ({"exercise": "03-precision", "ok": True, "message": "ok", "prediction": 2.0,
             "measured": 2.4}, [("default", 100.0), ("bf16", 240.0)]),
    "bob": ({"exercise": "03-precision", "ok": False, "message": "no", "prediction": 0.5,
             "measured": 0.9}, [("default", 200.0), ("bf16", 180.0)]),
}  # fmt: skip


@pytest.fixture
def room(tmp_path, monkeypatch):
    """A real SQLite store that two learners wrote to, read by the instructor's kernel."""
    store = HistoryStore(tmp_path / "class.sqlite")
    for learner, (answer, bursts) in ROOM.items():
        monkeypatch.setenv("WORKBENCH_LEARNER", learner)
        classroom.record_answer(answer, store=store)
        for precision, sps in bursts:
            store.append(_burst(learner, precision, sps))
    monkeypatch.setenv("WORKBENCH_LEARNER", "teacher")
    monkeypatch.setenv("WORKBENCH_ROLE", "instructor")
    return store


class Flaky:
    """A store (delegating to a real one) whose server can go away, and that counts reads."""

    def __init__(self, store):
        self.store, self.reads, self.down = store, 0, False

    def __getattr__(self, name):
        return getattr(self.store, name)

    def answers(self, *args, **kwargs):
        self.reads += 1
        if self.down:
            raise ConnectionError("server closed the connection unexpectedly")
        return self.store.answers(*args, **kwargs)

    def where(self):
        return "postgresql://teacher:***@db.example:5432/class"


def test_the_board_shows_the_rooms_answers_best_configs_and_knob_spread(room):
    board = Board(room)
    ui = board.ui
    assert "2 answer(s) from 2 learner(s), 4 burst(s)" in ui.status.value
    # a SQLite file has no server to compute verdicts: ann's ok=true is a claim, unverified
    assert "03-precision" in ui.answers.value and "claims correct, unverified" in ui.answers.value
    (row,) = board.view.summary.to_dict("records")
    assert (row["learners"], row["correct"], row["correct_pct"], row["unverified"]) == (2, 0, 0, 1)
    assert ui.exercise.value == "03-precision"
    assert "ann" in ui.best.value and "240" in ui.best.value  # ann's best: bf16, 240
    assert "median 1.65x, from 0.90x to 2.40x; faster on 1 of 2" in ui.effect.value
    for name in ("correct", "answers", "best", "effect"):
        assert "no answers yet" not in str(ui.charts[name].chart.to_dict())
    assert "Local SQLite file" in ui.store.value and "not a class store" in ui.store.value
    assert "teacher:***@db.example" in Board(Flaky(room)).ui.store.value


def test_the_instructor_starts_an_exercise_over_for_the_room(room):
    board = Board(room)
    line = board.reset_exercise("03-precision")
    assert "03-precision starts over on the board" in line and "2 earlier row(s)" in line
    assert "03-precision" not in board.ui.answers.value  # nothing answered since
    assert "0 answer(s)" in board.ui.status.value and len(room.answers()) == 2  # kept in store


def test_the_board_says_when_it_is_not_looking_at_the_room(room, monkeypatch):
    note, is_class = store_note(room)
    assert not is_class and "not a class store" in note and "WORKBENCH_STORE" in note
    assert "is not shared" in Board(room).ui.shared.value
    room.share_board()
    assert "is shared" in Board(room).ui.shared.value
    room.share_board(False)
    monkeypatch.setenv("WORKBENCH_ROLE", "learner")
    learner = Board(room).ui
    assert "not the instructor's" in learner.shared.value
    assert "0 answer(s) from 0 learner(s), 0 burst(s)" in learner.status.value  # teacher's own


def test_a_store_that_stops_answering_leaves_the_last_figures_and_a_red_line(room):
    store = Flaky(room)
    board = Board(store)
    before = board.ui.answers.value
    store.down = True
    assert board.refresh() is None  # no exception in front of the room
    assert "could not read the store" in board.ui.status.value
    assert "closed the connection" in board.ui.status.value
    assert board.ui.answers.value == before and board.view is not None


def test_the_timer_refreshes_in_the_background_and_stops(room):
    store = Flaky(room)
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


def test_the_boards_charts_carry_a_small_loader_not_a_copy_of_vega_each(room):
    """A saved board notebook keeps each chart's ``_esm``: the panel's loader (about 10 KB),
    which asks the kernel for Vega once, never the 925 KB bundle per chart."""
    from workbench.notebook.chart_widget import PanelChart

    board = Board(room)
    for chart in board.ui.charts.values():
        assert isinstance(chart, PanelChart) and len(chart._esm) < 50_000


def test_a_refresh_interval_must_be_positive(room):
    with pytest.raises(ValueError, match="refresh_s must be > 0"):
        Board(room, refresh_s=0)
    assert board_module.DEFAULT_REFRESH_S == 10.0


def test_the_preview_store_holds_real_bursts_and_checked_answers(tmp_path, tiny_data, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DATA", str(tiny_data))  # replayed batches: one is read
    BOOK.commit("03-precision", 2.0)  # the instructor's own book, kept in WORKBENCH_HOME
    book = BOOK.file()
    kept = book.read_bytes()
    store = board_module.fill_demo_store(tmp_path / "preview.sqlite", seconds=0.2)
    # the preview's predictions went to a book of its own: the instructor's is as it was
    assert book.read_bytes() == kept and BOOK.entry("demo-speedup").first is None
    assert BOOK.entry("03-precision").first.value == 2.0
    bursts = store.frame()
    assert list(bursts["batch_size"]) == [4, 8] and (bursts["status"] == "ok").all()
    assert (bursts["samples_per_s"] > 0).all() and (bursts["steps"] >= 3).all()
    answers = store.answers()
    assert [(a["exercise"], a["kind"]) for a in answers] == [
        ("demo-best-batch", "prediction"), ("demo-speedup", "prediction"),
        ("demo-best-batch", "check"), ("demo-speedup", "check")]  # fmt: skip
    assert [a["prediction"] for a in answers] == [4, 1.5, 4, 1.5]  # committed before the sweep
    speedup = answers[3]
    measured = bursts["samples_per_s"].iloc[1] / bursts["samples_per_s"].iloc[0]
    assert speedup["measured"] == pytest.approx(measured, 0.01) and speedup["late"] is False
    board = Board(store, knob="batch_size", new=8, old=4)
    assert "2 answer(s) from 1 learner(s), 2 burst(s); 2 prediction(s) committed" in (
        board.ui.status.value)  # fmt: skip
    view = board.view
    assert view.spread.machines == 1
    assert view.spread.ratio_median == pytest.approx(measured)
