"""The prediction book and ``workshop.commit_prediction``: no burst starts without a prediction
or an explicit skip, the first prediction is kept with its time, a late one is marked, later
changes are kept as edits, the book outlives the kernel (the learner's own file), an exercise
can be started over, and in class mode each commit reaches the class store as it happens (a
store that is down never stops the burst)."""

from __future__ import annotations

import itertools

import pytest

from workbench.history.store import HistoryStore
from workbench.workshop import checks as workshop
from workbench.workshop import classroom, predictions
from workbench.workshop.predictions import (
    BOOK,
    SKIP,
    PredictionBook,
    PredictionNeeded,
    same_prediction,
    standing,
)


def _clock():
    ticks = itertools.count(1000.0, 60.0)
    return lambda: next(ticks)


def test_the_first_prediction_counts_and_later_changes_are_edits():
    book = PredictionBook(clock=_clock())
    first = book.commit("03-precision", 1.5)
    assert first.kind == "first" and not first.entry.first.late
    assert first.entry.first.value == 1.5 and first.entry.first.at == 1000.0
    assert book.commit("03-precision", 1.5).kind == "same"  # the burst cell run again
    assert book.commit("03-precision", "1.50").kind == "edit"  # text, not the same value
    edit = book.commit("03-precision", 0.4)
    assert edit.kind == "edit" and edit.changed and "first 1.5, now 0.4" in edit.line()
    entry = book.entry("03-precision")
    assert entry.first.value == 1.5 and entry.latest == 0.4 and entry.bursts == 4
    assert [c.value for c in entry.edits] == ["1.50", 0.4]
    kept = book.commit("03-precision", None)
    assert kept.kind == "kept" and "1.5" in kept.line() and book.entry("03-precision").bursts == 5


def test_no_prediction_waits_and_counts_nothing_so_the_next_one_is_on_time():
    book = PredictionBook(clock=_clock())
    for _ in range(3):  # Shift-Enter on the measuring cell, three times, with prediction = None
        wait = book.commit("02-workers", None)
        assert wait.kind == "wait" and not wait.runs and wait.entry.bursts == 0
    assert wait.line().startswith("No prediction for 02-workers yet, so its burst has not started")
    assert "\n" not in wait.line()
    on_time = book.commit("02-workers", 2)
    assert on_time.kind == "first" and not on_time.entry.first.late and on_time.runs


def test_a_prediction_after_a_skipped_burst_is_late():
    book = PredictionBook(clock=_clock())
    skip = book.commit("02-workers", SKIP)
    assert skip.kind == "skip" and skip.runs and skip.entry.first is None
    assert skip.entry.skipped_at == 1000.0 and skip.entry.bursts == 1
    assert "skipped, as you asked" in skip.line() and "cannot count as correct" in skip.line()
    again = book.commit("02-workers", None)  # after a skip, the empty prediction runs skipped
    assert again.kind == "skip" and again.entry.bursts == 2
    late = book.commit("02-workers", 2)
    assert late.kind == "first" and late.entry.first.late
    assert "cannot count as correct" in late.line()
    assert not book.commit("05-verdict", "data-bound").entry.first.late  # per exercise
    book.clear()
    assert book.entry("02-workers").first is None and book.entry("02-workers").bursts == 0


def test_a_committed_value_is_a_copy_and_the_exercise_must_be_named():
    book = PredictionBook()
    guess = [1, 2]
    book.commit("x", guess)
    guess.append(3)  # changing the list afterwards changes nothing committed
    assert book.entry("x").first.value == [1, 2]
    for bad in ("", "  ", None, 3):
        with pytest.raises(ValueError, match="exercise must name the exercise"):
            book.commit(bad, 1)


def test_same_prediction_reads_numbers_and_words_alike():
    assert same_prediction(2, 2.0) and same_prediction(" Data-bound", "data-bound")
    assert not same_prediction(2, 3) and not same_prediction(None, 0)
    assert same_prediction(None, None)


def test_standing_says_how_to_commit_and_marks_late_and_changed():
    book = PredictionBook()
    fresh = standing("04-knee", None, book=book)
    assert fresh.first is None and "make a prediction first: set `prediction`" in fresh.missing(
        "a batch size"
    )
    assert "run the cell that measures it" in fresh.missing("a batch size")
    book.commit("04-knee", SKIP)
    after = standing("04-knee", 32, variable="prediction", book=book)
    assert "ran with no prediction committed" in after.missing("a batch size")
    book.commit("04-knee", 32)
    late = standing("04-knee", 32, book=book)
    assert late.first.late and not late.changed and "does not count" in late.late_sentence()
    book.commit("11-channels-last", "faster")
    moved = standing("11-channels-last", "same", variable="prediction_layout", book=book)
    assert moved.changed and moved.now == "same"
    assert (
        moved.edit_sentence()
        == "You changed it after the burst: first 'faster', now 'same'; the first counts"
    )


def test_commit_prediction_stops_the_cell_in_one_line_until_there_is_a_prediction(capsys):
    with pytest.raises(PredictionNeeded) as stopped:
        workshop.commit_prediction(None, exercise="01-data-wait")
    shown = stopped.value._render_traceback_()  # what IPython prints instead of a traceback
    assert len(shown) == 1 and shown[0].startswith("No prediction for 01-data-wait yet")
    assert BOOK.entry("01-data-wait").bursts == 0 and capsys.readouterr().out == ""
    first = workshop.commit_prediction(40, exercise="01-data-wait")
    out = capsys.readouterr().out
    assert first.value == 40 and not first.late and out.count("\n") == 1
    assert workshop.BOOK is BOOK and predictions.BOOK.entry("01-data-wait").first == first


def test_an_unattended_run_may_skip_every_prediction_on_purpose(monkeypatch, capsys):
    monkeypatch.setenv("WORKBENCH_PREDICTIONS", "skip")
    assert workshop.commit_prediction(None, exercise="03-precision") is None
    assert "skipped, as you asked" in capsys.readouterr().out
    assert BOOK.entry("03-precision").skipped_at is not None


def test_the_book_outlives_the_kernel_so_a_restart_does_not_make_a_late_guess_on_time(tmp_path):
    path = tmp_path / "home" / "predictions.json"
    before = PredictionBook(clock=_clock(), path=path)
    before.commit("03-precision", SKIP)  # the numbers were on screen
    assert oct(path.stat().st_mode & 0o777) == "0o600"  # the learner's private file
    restarted = PredictionBook(clock=_clock(), path=path)  # a new kernel, the same learner
    late = restarted.commit("03-precision", 0.5)
    assert late.kind == "first" and late.entry.first.late
    again = PredictionBook(path=path).entry("03-precision")
    assert again.first == late.entry.first and again.bursts == 2


def test_the_default_book_lives_in_the_learners_workbench_home(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "mine"))
    workshop.commit_prediction(2, exercise="02-workers")
    assert (tmp_path / "mine" / "predictions.json").is_file()
    assert PredictionBook().entry("02-workers").first.value == 2


def test_a_book_that_cannot_be_written_warns_once_and_the_lesson_goes_on(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    book = PredictionBook(path=blocked / "predictions.json")  # its folder is a file
    with pytest.warns(UserWarning, match="kept in this kernel only") as said:
        book.commit("04-knee", 32)
        book.commit("04-knee", 64)
    assert len(said) == 1 and book.entry("04-knee").latest == 64


def test_reset_starts_an_exercise_over_marked_as_a_reset(capsys):
    workshop.commit_prediction(SKIP, exercise="11-layout")
    workshop.commit_prediction(1.2, exercise="11-layout")  # late: after the skipped burst
    assert BOOK.entry("11-layout").first.late
    line = workshop.reset_exercise()  # the exercise committed last
    assert line.startswith("11-layout starts over (reset 1)") and line in capsys.readouterr().out
    entry = BOOK.entry("11-layout")
    assert entry.first is None and entry.bursts == 0 and entry.resets == 1
    fresh = workshop.commit_prediction(1.1, exercise="11-layout")
    assert not fresh.late and fresh.reset and "started over" in capsys.readouterr().out
    verdict = workshop.check_prediction(1.1, 1.0, exercise="11-layout")
    assert verdict.ok and "after you started this exercise over" in verdict.message
    assert workshop.reset_exercise("02-workers").startswith("02-workers starts over")
    BOOK.clear()
    assert workshop.reset_exercise().startswith("Nothing to start over")


CLASS_URL = "postgresql://board:s3cret@127.0.0.1:1/class"  # port 1: nothing listens


@pytest.fixture
def class_store(monkeypatch, tmp_path):
    """Class mode with the rows going to a real SQLite store (as in test_checks.py)."""
    sqlite = HistoryStore(tmp_path / "class.sqlite")
    real = classroom.record_answer

    def to_sqlite(answer, *, store=None):
        return real(answer, store=store or sqlite)

    monkeypatch.setattr(classroom, "record_answer", to_sqlite)
    monkeypatch.setattr(workshop, "_down_until", [0.0])
    monkeypatch.setenv("WORKBENCH_STORE", CLASS_URL)
    monkeypatch.setenv("WORKBENCH_LEARNER", "ann")
    return sqlite


def test_in_class_mode_each_commit_reaches_the_board_as_the_burst_starts(class_store):
    with pytest.raises(PredictionNeeded):  # no burst, no row
        workshop.commit_prediction(None, exercise="03-precision")
    workshop.commit_prediction(SKIP, exercise="03-precision")  # a burst with no prediction
    workshop.commit_prediction(1.5, exercise="03-precision")  # late
    workshop.commit_prediction(1.5, exercise="03-precision")  # the same: no new row
    workshop.commit_prediction(0.3, exercise="03-precision")  # an edit
    rows = [(a["kind"], a["ok"], a["prediction"], a["late"], a["changed_to"])
            for a in class_store.answers()]  # fmt: skip
    assert rows == [("prediction", None, None, None, None), ("prediction", None, 1.5, True, None),
                    ("prediction", None, 1.5, True, 0.3)]  # fmt: skip
    assert all(a["learner"] == "ann" and a["measured"] is None for a in class_store.answers())
    workshop.reset_exercise("03-precision")
    assert class_store.answers()[-1]["kind"] == "reset"


def test_a_store_that_is_down_never_stops_the_burst(monkeypatch, capsys):
    monkeypatch.setenv("WORKBENCH_STORE", CLASS_URL)
    monkeypatch.setattr(workshop, "_down_until", [0.0])
    with pytest.warns(
        workshop.ClassBoardWarning, match="prediction for 04-knee was not sent"
    ) as said:
        first = workshop.commit_prediction(32, exercise="04-knee")
        workshop.commit_prediction(64, exercise="04-knee")  # within the pause: not tried
    assert first.value == 32 and len(said) == 1 and "s3cret" not in str(said[0].message)
    assert "the burst is unaffected" in str(said[0].message)
    assert "committed" in capsys.readouterr().out
    assert BOOK.entry("04-knee").latest == 64  # the book keeps it all the same


def test_outside_class_mode_nothing_is_sent(tmp_path, monkeypatch):
    sent = []
    monkeypatch.setattr(classroom, "record_answer", lambda row, *, store=None: sent.append(store))
    workshop.commit_prediction(2, exercise="02-workers")
    assert sent == []
    given = object()  # a store handed in (the board's preview) is always written
    workshop.commit_prediction(3, exercise="02-workers-b", store=given)
    assert sent == [given]
