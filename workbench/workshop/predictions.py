"""Predictions that count: each exercise's first prediction, committed when its burst starts.

A prediction is worth something only when it was made before the numbers were seen. So a
lesson's measuring cell starts with ``workshop.commit_prediction(prediction, exercise=...)``,
and the book here keeps, per exercise, what that line saw:

- the **first** prediction committed (its value and time): the one the exercise's check judges;
- whether a burst of that exercise had already run without one before it: a prediction made
  after the numbers is **late**, judged but never counted as correct;
- every **later change** (a new value at a later burst, or a different value handed to the
  check): shown as an edit, while the first still counts;
- how many bursts of the exercise started, with or without a prediction.

Why a book of first commits and not the variable's value at check time: the check cell runs
after the table is on screen, so whatever ``prediction`` holds then may have been copied from
it. Only what existed when the burst started is a prediction.

"Per kernel": the book lives in this process (``BOOK``). A restarted kernel starts a new one;
in class mode every commit also goes to the class store as it happens, and the instructor's
board takes each learner's earliest prediction across kernels and marks late and changed ones
(``workbench.workshop.board.figures``). The book knows nothing about stores or checks:
``checks`` sends the rows and judges the predictions.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BOOK",
    "Commit",
    "CommitEvent",
    "Entry",
    "PredictionBook",
    "Standing",
    "same_prediction",
    "shown",
    "standing",
]


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

    @property
    def latest(self) -> Any:
        """The newest value committed (the first one when it was never changed)."""
        if self.edits:
            return self.edits[-1].value
        return None if self.first is None else self.first.value


@dataclass(frozen=True, slots=True)
class CommitEvent:
    """What one ``commit`` did, and the line it prints.

    ``kind``: ``"none"`` (a burst with no prediction, none committed before), ``"kept"`` (no
    prediction now, an earlier one still counts), ``"first"``, ``"same"`` (the value already
    committed) or ``"edit"`` (a different value: recorded, the first still counts).
    """

    kind: str
    entry: Entry
    value: Any

    @property
    def changed(self) -> bool:
        """Whether the book's newest value now differs from the first."""
        first = self.entry.first
        return first is not None and not same_prediction(self.entry.latest, first.value)

    def line(self) -> str:
        """One line for the learner, printed when the burst starts."""
        name, first = self.entry.exercise, self.entry.first
        if first is None:
            return (
                f"No prediction for {name}: the burst runs, and a prediction made after it "
                "does not count."
            )
        value = shown(first.value)
        if self.kind == "first" and first.late:
            return (
                f"Prediction for {name}: {value}, committed after a burst of it had already "
                "run: it will be judged, but it cannot count as correct."
            )
        if self.kind == "first":
            return (
                f"Prediction for {name} committed: {value} at {first.clock}. The first one counts."
            )
        if self.kind == "edit":
            return (
                f"You changed the prediction for {name} after the burst: first {value}, now "
                f"{shown(self.value)}; the first counts."
            )
        return f"Prediction for {name}: {value}, committed at {first.clock} (the first one counts)."


class PredictionBook:
    """Per exercise: the first prediction, whether it was late, and the later changes.

    Safe from several threads (a lock around every change); ``clock`` is swappable in tests.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()

    def commit(self, exercise: str, prediction: Any) -> CommitEvent:
        """Record that a burst of ``exercise`` starts now, with ``prediction`` (None: none)."""
        if not isinstance(exercise, str) or not exercise.strip():
            raise ValueError(f"exercise must name the exercise (e.g. '03-precision'), got "
                             f"{exercise!r}")  # fmt: skip
        value = copy.deepcopy(prediction)
        with self._lock:
            entry = self._entries.get(exercise, Entry(exercise))
            kind, entry = _next(entry, value, self._clock())
            self._entries[exercise] = entry
        return CommitEvent(kind, entry, value)

    def entry(self, exercise: str) -> Entry:
        """What the book holds for ``exercise`` (an empty entry when nothing was committed)."""
        with self._lock:
            return self._entries.get(exercise, Entry(exercise))

    def clear(self) -> None:
        """Forget every exercise (a fresh kernel's book)."""
        with self._lock:
            self._entries.clear()


def _next(entry: Entry, value: Any, now: float) -> tuple[str, Entry]:
    bursts = entry.bursts + 1
    if value is None:
        kind = "none" if entry.first is None else "kept"
        return kind, dataclasses.replace(entry, bursts=bursts)
    if entry.first is None:
        first = Commit(value, now, late=entry.bursts > 0)
        return "first", dataclasses.replace(entry, bursts=bursts, first=first)
    if same_prediction(value, entry.latest):
        return "same", dataclasses.replace(entry, bursts=bursts)
    edits = (*entry.edits, Commit(value, now, late=True))
    return "edit", dataclasses.replace(entry, bursts=bursts, edits=edits)


BOOK = PredictionBook()
"""This kernel's book: what ``workshop.commit_prediction`` writes and the checks read."""


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
        if not self.entry.bursts:
            return (
                f"make a prediction first: set {v} to {what}, run the cell that measures it "
                "(its first line commits the prediction), then run this cell again"
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
