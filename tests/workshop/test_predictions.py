"""The prediction book and ``workshop.commit_prediction``: the first prediction is kept with
its time, a late one is marked, later changes are kept as edits, and in class mode each commit
reaches the class store as it happens (a store that is down never stops the burst)."""

from __future__ import annotations

import itertools

import pytest

from workbench.history.store import HistoryStore
from workbench.workshop import checks as workshop
from workbench.workshop import classroom, predictions
from workbench.workshop.predictions import BOOK, PredictionBook, same_prediction, standing


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


def test_a_prediction_after_a_burst_without_one_is_late():
    book = PredictionBook(clock=_clock())
    none = book.commit("02-workers", None)
    assert none.kind == "none" and none.entry.first is None
    assert "No prediction for 02-workers" in none.line() and "does not count" in none.line()
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
    book.commit("04-knee", None)
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


def test_commit_prediction_prints_one_line_and_keeps_the_first(capsys):
    assert workshop.commit_prediction(None, exercise="01-data-wait") is None
    assert "No prediction for 01-data-wait" in capsys.readouterr().out
    first = workshop.commit_prediction(40, exercise="01-data-wait")
    out = capsys.readouterr().out
    assert first.value == 40 and first.late and out.count("\n") == 1
    assert workshop.BOOK is BOOK and predictions.BOOK.entry("01-data-wait").first == first


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
    workshop.commit_prediction(None, exercise="03-precision")  # a burst with no prediction
    workshop.commit_prediction(1.5, exercise="03-precision")  # late
    workshop.commit_prediction(1.5, exercise="03-precision")  # the same: no new row
    workshop.commit_prediction(0.3, exercise="03-precision")  # an edit
    rows = [(a["kind"], a["ok"], a["prediction"], a["late"], a["changed_to"])
            for a in class_store.answers()]  # fmt: skip
    assert rows == [("prediction", None, None, None, None), ("prediction", None, 1.5, True, None),
                    ("prediction", None, 1.5, True, 0.3)]  # fmt: skip
    assert all(a["learner"] == "ann" and a["measured"] is None for a in class_store.answers())


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
