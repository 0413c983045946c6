"""Predictions that count: each exercise's first prediction, committed when its burst starts.

A prediction is worth something only when it was made before the numbers were seen. So a
lesson's measuring cell starts with ``workshop.commit_prediction(prediction, exercise=...)``,
and the book here keeps, per exercise, what that line saw:

- the **first** prediction committed (its value and time): the one the exercise's check judges;
- whether a burst of that exercise had already run without one (an explicit skip,
  ``prediction = workshop.SKIP``) before it: a prediction made after the numbers is **late**,
  judged but never counted as correct;
- every **later change** (a new value at a later burst, or a different value handed to the
  check): shown as an edit, while the first still counts;
- how many bursts of the exercise started, and how many times it was started over
  (``reset``, ``workshop.reset_exercise``).

A measuring cell whose exercise has no prediction (``None``, what every lesson ships with) and
no recorded skip does **not** start its burst: ``commit`` answers ``"wait"``, and the lessons'
``commit_prediction`` stops the cell with one line (:class:`PredictionNeeded`). So one
Shift-Enter too many costs nothing: no numbers were seen, so nothing later is late.

Why a book of first commits and not the variable's value at check time: the check cell runs
after the table is on screen, so whatever ``prediction`` holds then may have been copied from
it. Only what existed when the burst started is a prediction.

The book outlives the kernel: it is kept in the learner's own ``$WORKBENCH_HOME``
(``predictions.json``, mode 0600, read and rewritten whole at every change, so two kernels of
one learner agree), so a restart does not turn a late guess into an on-time one. Starting an
exercise over is ``reset``: the exercise's entry is emptied and its reset counted; the next
prediction is marked as made after a reset. In class mode every commit and reset also goes to
the class store as it happens, and the instructor's board starts the learner's exercise over at
a reset too (``workbench.workshop.board.figures``). The book knows nothing about stores or
checks: ``checks`` sends the rows and judges the predictions.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.core.private import private_output, workbench_home

__all__ = [
    "BOOK",
    "SKIP",
    "Commit",
    "CommitEvent",
    "Entry",
    "PredictionBook",
    "PredictionNeeded",
    "Standing",
    "same_prediction",
    "shown",
    "standing",
]


class _Skip:
    """``workshop.SKIP``: measure without a prediction, on purpose (recorded as a skip)."""

    def __repr__(self) -> str:
        return "workshop.SKIP"

    def __deepcopy__(self, memo: Any) -> _Skip:
        return self

    def __reduce__(self) -> str:
        return "SKIP"


SKIP = _Skip()
"""Set a prediction to this to run its burst without one: the skip is recorded, and any
prediction made after that burst is late."""


class PredictionNeeded(Exception):
    """The measuring cell stops before its burst: the exercise has no prediction yet.

    IPython prints an exception's ``_render_traceback_()`` in place of a traceback, so the
    learner reads one line, not a stack; *Run All* stops there too (a prediction cannot be
    skipped by running past it)."""

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


def same_prediction(a: Any, b: Any) -> bool:
    """Whether two predictions say the same thing: equal, or equal as trimmed lowercase text
    (``2`` and ``2.0``; ``"Data-bound"`` and ``"data-bound"``)."""
    if a is None or b is None:
        return a is b
    return bool(a == b) or str(a).strip().lower() == str(b).strip().lower()


def shown(value: Any) -> str:
    """A prediction as a learner typed it: text quoted, numbers plain."""
    if isinstance(value, str):
        return repr(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True, slots=True)
class Commit:
    """One prediction as it was committed: its value, when, and whether it came late."""

    value: Any
    at: float
    """``time.time()`` of the commit."""
    late: bool
    """A burst of the exercise had already run without a prediction: made after the numbers."""
    reset: bool = False
    """Committed after the exercise was started over (``reset``): the earlier bursts' numbers
    may have been on screen; the check and the board say so."""

    @property
    def clock(self) -> str:
        """The local time of the commit, ``HH:MM:SS``."""
        return time.strftime("%H:%M:%S", time.localtime(self.at))


@dataclass(frozen=True, slots=True)
class Entry:
    """What the book knows about one exercise in this kernel."""

    exercise: str
    bursts: int = 0
    """Bursts of the exercise started (commit calls), with or without a prediction."""
    first: Commit | None = None
    """The first prediction committed: the one the check judges."""
    edits: tuple[Commit, ...] = ()
    """Later commits whose value differed from the one before them, oldest first."""
    skipped_at: float | None = None
    """``time.time()`` of the last burst run with ``SKIP`` (no prediction, on purpose)."""
    resets: int = 0
    """How many times the exercise was started over (``reset``)."""

    @property
    def latest(self) -> Any:
        """The newest value committed (the first one when it was never changed)."""
        if self.edits:
            return self.edits[-1].value
        return None if self.first is None else self.first.value


@dataclass(frozen=True, slots=True)
class CommitEvent:
    """What one ``commit`` did, and the line it prints.

    ``kind``: ``"wait"`` (no prediction and no skip: the burst must not start, nothing is
    counted), ``"skip"`` (a burst run without a prediction, on purpose: ``SKIP``), ``"kept"``
    (no prediction now, an earlier one still counts), ``"first"``, ``"same"`` (the value
    already committed) or ``"edit"`` (a different value: recorded, the first still counts).
    """

    kind: str
    entry: Entry
    value: Any

    @property
    def runs(self) -> bool:
        """Whether the burst may start: anything but ``"wait"``."""
        return self.kind != "wait"

    @property
    def changed(self) -> bool:
        """Whether the book's newest value now differs from the first."""
        first = self.entry.first
        return first is not None and not same_prediction(self.entry.latest, first.value)

    def line(self) -> str:
        """One line for the learner, printed when the burst starts."""
        name, first = self.entry.exercise, self.entry.first
        if self.kind == "wait":
            return (
                f"No prediction for {name} yet, so its burst has not started: set your "
                "prediction in the cell above (or SKIP to measure without one), then run this "
                "cell again."
            )
        if first is None:
            return (
                f"No prediction for {name}: skipped, as you asked. The burst runs, and a "
                "prediction made after it is judged but cannot count as correct."
            )
        value = shown(first.value)
        if self.kind == "first" and first.late:
            return (
                f"Prediction for {name}: {value}, committed after a burst of it had already "
                "run: it will be judged, but it cannot count as correct."
            )
        if self.kind == "first":
            again = " (the exercise was started over)" if first.reset else ""
            return (
                f"Prediction for {name} committed: {value} at {first.clock}{again}. The first "
                "one counts."
            )
        if self.kind == "edit":
            return (
                f"You changed the prediction for {name} after the burst: first {value}, now "
                f"{shown(self.value)}; the first counts."
            )
        return f"Prediction for {name}: {value}, committed at {first.clock} (the first one counts)."


class PredictionBook:
    """Per exercise: the first prediction, whether it was late, the later changes, the skips
    and the resets, kept in ``path`` (default ``$WORKBENCH_HOME/predictions.json``, resolved at
    every call) so that they outlive the kernel.

    Safe from several threads (a lock around every change); ``clock`` is swappable in tests;
    ``path=False`` keeps the book in this process only. A file that cannot be read or written
    costs the persistence, never the lesson: one warning, and the book goes on in memory.
    """

    FILE = "predictions.json"

    def __init__(
        self, clock: Callable[[], float] = time.time, path: str | Path | bool | None = None
    ) -> None:
        self._clock = clock
        self._path = path
        self._entries: dict[str, Entry] = {}
        self._warned = False
        self._lock = threading.Lock()

    def file(self) -> Path | None:
        """Where the book is kept, or None when it lives in this process only."""
        if self._path is False:
            return None
        if self._path is None or self._path is True:
            return workbench_home() / self.FILE
        return Path(self._path)

    def commit(self, exercise: str, prediction: Any) -> CommitEvent:
        """Record that a burst of ``exercise`` is about to start with ``prediction`` (None:
        none; ``SKIP``: none, on purpose). ``"wait"`` when there is neither a prediction nor a
        skip: nothing is counted, and the burst must not start."""
        _named(exercise)
        value = copy.deepcopy(prediction)
        with self._lock:
            self._load()
            entry = self._entries.get(exercise, Entry(exercise))
            kind, entry = _next(entry, value, self._clock())
            if kind != "wait":
                self._entries[exercise] = entry
                self._save()
        return CommitEvent(kind, entry, value)

    def reset(self, exercise: str) -> Entry:
        """Start ``exercise`` over: its predictions, skips and bursts are forgotten, its reset
        counted (the next prediction is marked as made after a reset). Returns the new entry."""
        _named(exercise)
        with self._lock:
            self._load()
            old = self._entries.get(exercise, Entry(exercise))
            entry = Entry(exercise, resets=old.resets + 1)
            self._entries[exercise] = entry
            self._save()
        return entry

    def last_exercise(self) -> str | None:
        """The exercise committed (or skipped) most recently, or None."""
        with self._lock:
            self._load()
            touched = {name: _touched(e) for name, e in self._entries.items()}
        touched = {name: at for name, at in touched.items() if at is not None}
        return max(touched, key=touched.__getitem__) if touched else None

    def entry(self, exercise: str) -> Entry:
        """What the book holds for ``exercise`` (an empty entry when nothing was committed)."""
        with self._lock:
            self._load()
            return self._entries.get(exercise, Entry(exercise))

    @contextlib.contextmanager
    def apart(self) -> Iterator[PredictionBook]:
        """This book, empty and in memory only, for the block; what it held before, and its
        file, are back as they were after it (the board's preview commits its demo predictions
        here, never into the instructor's own book)."""
        with self._lock:
            saved = self._path, self._entries
            self._path, self._entries = False, {}
        try:
            yield self
        finally:
            with self._lock:
                self._path, self._entries = saved

    def clear(self) -> None:
        """Forget every exercise, in this process and in the book's file."""
        with self._lock:
            self._entries.clear()
            self._save()

    def _load(self) -> None:
        path = self.file()
        if path is None:
            return
        try:
            text = path.read_text()
        except FileNotFoundError:
            self._entries = {}
            return
        except OSError as exc:
            self._warn(f"cannot read {path} ({exc})")
            return
        try:
            self._entries = {name: _entry_from(name, row)
                             for name, row in json.loads(text).items()}  # fmt: skip
        except (ValueError, TypeError, AttributeError) as exc:
            self._warn(f"{path} is not a prediction book ({exc}); it is left as it is")
            self._path = False

    def _save(self) -> None:
        path = self.file()
        if path is None:
            return
        rows = {name: _entry_row(e) for name, e in self._entries.items()}
        try:
            with private_output(path) as out:
                out.write_text(json.dumps(rows, indent=1, default=str))
        except OSError as exc:
            self._warn(f"cannot write {path} ({exc})")

    def _warn(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"the prediction book {why}: predictions are kept in this kernel "
                          "only, and a restart forgets them", stacklevel=4)  # fmt: skip


def _named(exercise: Any) -> None:
    if not isinstance(exercise, str) or not exercise.strip():
        raise ValueError(f"exercise must name the exercise (e.g. '03-precision'), got "
                         f"{exercise!r}")  # fmt: skip


def _touched(entry: Entry) -> float | None:
    times = [c.at for c in (entry.first, *entry.edits) if c is not None]
    if entry.skipped_at is not None:
        times.append(entry.skipped_at)
    return max(times) if times else None


def _commit_row(c: Commit | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"value": c.value, "at": c.at, "late": c.late, "reset": c.reset}


def _commit_from(row: dict[str, Any] | None) -> Commit | None:
    if row is None:
        return None
    return Commit(row["value"], float(row["at"]), bool(row["late"]), bool(row.get("reset")))


def _entry_row(e: Entry) -> dict[str, Any]:
    return {"bursts": e.bursts, "first": _commit_row(e.first),
            "edits": [_commit_row(c) for c in e.edits], "skipped_at": e.skipped_at,
            "resets": e.resets}  # fmt: skip


def _entry_from(name: str, row: dict[str, Any]) -> Entry:
    edits = tuple(c for c in (_commit_from(r) for r in row.get("edits", [])) if c is not None)
    return Entry(name, int(row.get("bursts", 0)), _commit_from(row.get("first")), edits,
                 row.get("skipped_at"), int(row.get("resets", 0)))  # fmt: skip


def _next(entry: Entry, value: Any, now: float) -> tuple[str, Entry]:
    bursts = entry.bursts + 1
    if value is SKIP or (value is None and entry.first is None and entry.skipped_at is not None):
        if entry.first is not None:  # a prediction already counts: a skip changes nothing
            return "kept", dataclasses.replace(entry, bursts=bursts)
        return "skip", dataclasses.replace(entry, bursts=bursts, skipped_at=now)
    if value is None:
        if entry.first is None:
            return "wait", entry
        return "kept", dataclasses.replace(entry, bursts=bursts)
    if entry.first is None:
        first = Commit(value, now, late=entry.bursts > 0, reset=entry.resets > 0)
        return "first", dataclasses.replace(entry, bursts=bursts, first=first)
    if same_prediction(value, entry.latest):
        return "same", dataclasses.replace(entry, bursts=bursts)
    edits = (*entry.edits, Commit(value, now, late=True, reset=entry.resets > 0))
    return "edit", dataclasses.replace(entry, bursts=bursts, edits=edits)


BOOK = PredictionBook()
"""The learner's book (``$WORKBENCH_HOME/predictions.json``): what
``workshop.commit_prediction`` writes and the checks read."""


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a check stands with an exercise's prediction: what was committed before the
    burst, and what the learner hands the check now (``passed``)."""

    entry: Entry
    passed: Any
    variable: str = "prediction"
    """The notebook variable that holds this prediction (``prediction_layout`` ...)."""

    @property
    def first(self) -> Commit | None:
        return self.entry.first

    @property
    def now(self) -> Any:
        """The learner's current value: the one handed to the check, else the newest commit."""
        return self.passed if self.passed is not None else self.entry.latest

    @property
    def changed(self) -> bool:
        """Whether the current value differs from the first committed one (an edit)."""
        first = self.first
        return (
            first is not None
            and self.now is not None
            and not same_prediction(self.now, first.value)
        )

    def missing(self, what: str) -> str:
        """Why there is nothing to judge, and how to commit a prediction."""
        v, name = f"`{self.variable}`", self.entry.exercise
        if not self.entry.bursts and not self.entry.resets:
            return (
                f"make a prediction first: set {v} to {what}, run the cell that measures it "
                "(its first line commits the prediction), then run this cell again"
            )
        if not self.entry.bursts:
            return (
                f"make a prediction first: {name} was started over; set {v} to {what}, run the "
                "cell that measures it, then run this cell again"
            )
        return (
            f"make a prediction first: the burst of {name} ran with no prediction committed. "
            f"Set {v} to {what} and run the measuring cell again; a prediction made after the "
            "numbers is judged, but it cannot count as correct"
        )

    def late_sentence(self) -> str:
        first = self.first
        assert first is not None
        return (f"Your prediction ({shown(first.value)}) was committed after a burst of this "
                "exercise had already run: it is judged, but a prediction made after the "
                "numbers does not count as correct")  # fmt: skip

    def reset_sentence(self) -> str:
        """Said beside a verdict on a prediction committed after the exercise was started over."""
        return ("Your prediction was committed after you started this exercise over "
                "(workshop.reset_exercise): the earlier bursts' numbers may have been on "
                "screen")  # fmt: skip

    def edit_sentence(self) -> str:
        first = self.first
        assert first is not None
        return (f"You changed it after the burst: first {shown(first.value)}, now "
                f"{shown(self.now)}; the first counts")  # fmt: skip


def standing(
    exercise: str, passed: Any, *, variable: str = "prediction", book: PredictionBook | None = None
) -> Standing:
    """The standing of ``exercise``'s prediction in ``book`` (this kernel's by default)."""
    return Standing((book or BOOK).entry(exercise), passed, variable)
