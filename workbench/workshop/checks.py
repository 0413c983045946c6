"""The workshop's helpers: exercise checks that compare a prediction with what was measured.

Each lesson notebook (``notebooks/01_...`` to ``12_...``) has predict-then-measure exercises
(lesson 10's own checks are in ``memory_lesson``, lesson 11's in ``compute_lesson``, lesson
12's in ``transformer_lesson``; the lessons' plans and starting knobs in ``lesson_plans``,
re-exported here). The lessons import this module as ``workshop``.
The cell that measures starts with ``commit_prediction(prediction, exercise=...)``, which keeps
the first prediction made before the burst (``predictions.py`` says why and how); the
exercise's check judges that first prediction against the learner's own measurement (a sweep,
a diagnosis, a profile, a saved config), so the right answer is whatever this machine showed,
not a number from a GPU somewhere else. A prediction committed after a burst had run is judged
but never correct, a changed one shows as an edit (the first counts), and an ``answer`` read off
the table gets a sentence of its own, never the verdict. A check returns a :class:`Check` (true
when right, with a sentence saying why) and never raises: a measurement that cannot be checked
(no successful burst, a knob the sweep did not vary) becomes a verdict that says so.

Bursts are noisy, so "the best value" accepts any value within ``tolerance`` of the best
median (or of this seat's noise, when larger): a short burst cannot tell those apart, and the
check says so. Before grading a ratio or a ranking, a check asks what this seat's noise is
(``workbench.workshop.noise``: repeats, drift, or what the seat showed earlier); when the
noise is at least the effect, it says "this machine is too busy to tell" and what to do, and
grades nothing. A knob that could not act here (``no_effect``) is never graded as a speed-up:
the right answer is then 1, no change.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch
from torch.utils.data import DataLoader

from workbench.analysis.diagnosis import BALANCE_BAND, classify
from workbench.config.saved import load_config
from workbench.engine import hardware
from workbench.engine.workloads import resolve_workload
from workbench.history.dsn import scrub
from workbench.history.exercise_rules import BLIND, Rule, rule_for
from workbench.history.store import StoreError, store_url_from_environment
from workbench.workshop import classroom, noise
from workbench.workshop.lesson_plans import (
    LessonPlan,
    gpu_verdicts,
    lesson_knobs,
    lesson_plan,
    lesson_workload,
    loader_ceiling_estimate,
)
from workbench.workshop.predictions import (
    BOOK,
    SKIP,
    Commit,
    PredictionBook,
    PredictionNeeded,
    standing,
)

if TYPE_CHECKING:
    from workbench.analysis.diagnosis import Diagnosis
    from workbench.analysis.profiling import ProfileResult
    from workbench.config.tuned_config import TunedConfig
    from workbench.core.results import BurstResult
    from workbench.distributed.allreduce import CommResult

__all__ = [
    "BOOK",
    "SKIP",
    "Check",
    "ClassBoardWarning",
    "Commit",
    "LessonPlan",
    "PredictionBook",
    "PredictionNeeded",
    "ceilings",
    "check_best",
    "check_comm_peak",
    "check_format",
    "check_knee",
    "check_loader",
    "check_prediction",
    "check_scale_out",
    "check_speedup",
    "check_top_operator",
    "check_verdict",
    "class_mode",
    "commit_prediction",
    "example_script",
    "gpu_verdicts",
    "graded_by",
    "lesson_knobs",
    "lesson_plan",
    "lesson_workload",
    "loader_ceiling_estimate",
    "on_gpu",
    "prediction_note",
    "record",
    "reset_exercise",
    "run_example",
    "sample_dataset",
    "sample_model",
    "start",
]


@dataclass(frozen=True, slots=True)
class Check:
    """The verdict on one answer: ``ok`` and a sentence that says why.

    It is true when the answer is right (``bool(check)``) and prints as its verdict. The other
    fields are for a class board (and for the learner's own record): which exercise it was, what
    the learner predicted before the burst ran, and what the measurement said (the right answer
    read from this machine). They default to empty so a check built by hand stays two fields.
    """

    ok: bool
    message: str
    exercise: str = ""
    """Which exercise this verdict is for, e.g. ``"03-precision"``; empty when not named."""
    prediction: Any = None
    """What the learner predicted before measuring (None: no prediction was made)."""
    measured: Any = None
    """What this machine measured: the value the answer is compared with (None: nothing)."""
    answered: bool = True
    """False for "set `answer` first": no answer was given, so nothing goes to a class board."""
    late: bool | None = None
    """The judged prediction was committed after a burst of the exercise had run (it cannot
    count as correct); None where no committed prediction was judged."""
    changed_to: Any = None
    """The learner's later prediction when it differs from the first committed one (an edit
    after the burst: the first still counts); None when unchanged."""

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return f"{'Correct' if self.ok else 'Not yet'}: {self.message}"

    __repr__ = __str__


def _no_answer(what: str, variable: str = "answer", **fields: Any) -> Check:
    return Check(False, f"set `{variable}` to {what}, then run this cell again", answered=False,
                 **fields)  # fmt: skip


def _never_raises(check: Callable[..., Check] | None = None, /, *, exercise: str = "") -> Any:
    """A check in a room full of learners ends in a verdict, never a traceback: a measurement
    that cannot be checked (no successful burst, one rank, a frame without the column) becomes
    a ``Check`` that says so and what to do. In class mode the verdict is also recorded for the
    instructor's board (:func:`record`), once: by the outermost check when checks nest.

    ``@_never_raises(exercise="10-frees-most")`` names the exercise of a check that takes no
    ``exercise`` argument (a verdict's own name wins)."""
    if check is None:
        return functools.partial(_never_raises, exercise=exercise)

    @functools.wraps(check)
    def wrapper(*args: Any, **kwargs: Any) -> Check:
        name = str(kwargs.get("exercise") or exercise)
        outermost = not getattr(_NESTING, "depth", 0)
        _NESTING.depth = getattr(_NESTING, "depth", 0) + 1
        try:
            verdict = check(*args, **kwargs)
        except Exception as exc:  # the point: any failure becomes a verdict
            verdict = Check(
                False,
                f"this measurement cannot be checked ({exc}); run the measuring cell again, "
                "or ask the instructor",
                exercise=name,
                prediction=kwargs.get("prediction"),
            )
        finally:
            _NESTING.depth -= 1
        if name and not verdict.exercise:
            verdict = dataclasses.replace(verdict, exercise=name)
        if outermost:
            record(verdict)
        return verdict

    return wrapper


_NESTING = threading.local()
"""How deep in nested checks this thread is (``check_format`` calls ``check_best``)."""


def class_mode() -> bool:
    """True where learners' answers go to a class store: ``WORKBENCH_STORE`` (or
    ``WORKBENCH_STORE_FILE``, which names a file holding it) is set."""
    names = ("WORKBENCH_STORE", "WORKBENCH_STORE_FILE")
    return any(os.environ.get(name, "").strip() for name in names)


def record(check: Check, *, store: Any = None) -> int | None:
    """Record an answered check with an exercise name on the class board, in class mode (or
    into ``store`` when one is given); returns the answer's id, or None when not recorded.

    Never raises: a class store that is down costs the board answers, never the lesson. The
    learner gets one readable warning (the verdict still shows); for ``RETRY_S`` after it, the
    checks do not try the store again, so a store that times out (``connect_timeout``) does not
    make every later verdict wait for it.
    """
    if not check.exercise or not check.answered or not _board_wanted(store):
        return None
    answer = {"exercise": check.exercise, "ok": check.ok, "message": check.message,
              "prediction": check.prediction, "measured": check.measured, "kind": "check",
              "late": check.late, "changed_to": check.changed_to}  # fmt: skip
    return _send(answer, store, f"your answer to {check.exercise}", "your verdict below", 4)


def _send(
    row: dict[str, Any], store: Any, what: str, unaffected: str, stacklevel: int
) -> int | None:
    """``classroom.record_answer(row)``, never raising: one warning, then a pause (``record``);
    ``stacklevel`` names the learner's cell in the warning."""
    try:
        return classroom.record_answer(row, store=store)
    except Exception as exc:  # the point: recording never breaks a lesson
        if store is None:
            _down_until[0] = time.monotonic() + RETRY_S
        warnings.warn(
            f"{what} was not sent to the class board ({scrubbed(str(exc))}); {unaffected} is "
            f"unaffected. Answers are not sent for the next {RETRY_S:.0f} s; tell the "
            "instructor if this repeats.",
            ClassBoardWarning,
            stacklevel=stacklevel,
        )
        return None


def commit_prediction(prediction: Any, *, exercise: str, store: Any = None) -> Commit | None:
    """Commit ``prediction`` for ``exercise`` as its burst starts: the first line of the cell
    that measures it. Prints one line; returns the first committed prediction (None: none).

    With no prediction (``None``) and no earlier skip the burst does not start: the cell stops
    here with one line (:class:`PredictionNeeded`), and nothing is counted, so a Shift-Enter
    too many never makes the learner's prediction late. ``SKIP`` runs the burst without one, on
    purpose, and records it (so does ``None`` under ``WORKBENCH_PREDICTIONS=skip``, for an
    instructor's unattended run). The first prediction is the one the exercise's check judges;
    one made after a skipped burst is late (judged, never counted as correct); a later
    different value is kept as an edit (``workbench.workshop.predictions``).

    In class mode (or into ``store`` when one is given) the commit goes to the class board at
    once, so the board shows first predictions even when the check is never run; a store that
    is down costs the board that row, never the lesson (as ``record``).
    """
    if prediction is None and os.environ.get(SKIP_VARIABLE, "").strip().lower() == "skip":
        prediction = SKIP
    event = BOOK.commit(exercise, prediction)
    if not event.runs:
        raise PredictionNeeded(event.line())
    print(event.line())
    if event.kind in ("skip", "first", "edit") and _board_wanted(store):
        first = event.entry.first
        row = {"exercise": exercise, "ok": None, "message": event.line(), "measured": None,
               "kind": "prediction", "prediction": None if first is None else first.value,
               "late": None if first is None else first.late,
               "changed_to": event.value if event.kind == "edit" else None}  # fmt: skip
        _send(row, store, f"your prediction for {exercise}", "the burst", 3)
    return event.entry.first


SKIP_VARIABLE = "WORKBENCH_PREDICTIONS"
"""``WORKBENCH_PREDICTIONS=skip``: every empty prediction counts as an explicit, recorded skip
(an instructor's unattended run of the lessons; a learner sets ``SKIP`` instead)."""


def reset_exercise(exercise: str | None = None, *, store: Any = None) -> str:
    """Start ``exercise`` over without restarting the kernel (default: the exercise committed
    most recently): its first prediction, edits, skips and bursts are forgotten, the reset is
    counted, and the next prediction is marked as made after a reset. Prints and returns one
    line. In class mode the reset goes to the class store too, and the board starts the
    exercise over for this learner there."""
    name = exercise or BOOK.last_exercise()
    if not name:
        line = "Nothing to start over: no exercise has a prediction or a burst yet."
        print(line)
        return line
    entry = BOOK.reset(name)
    line = (f"{name} starts over (reset {entry.resets}): set your prediction, then run its "
            "measuring cell; the check will say the prediction came after a reset.")  # fmt: skip
    print(line)
    if _board_wanted(store):
        row = {"exercise": name, "ok": None, "message": line, "measured": None, "kind": "reset",
               "prediction": None, "late": None, "changed_to": None}  # fmt: skip
        _send(row, store, f"the reset of {name}", "the reset", 3)
    return line


def _board_wanted(store: Any) -> bool:
    """Whether a row goes to a board now: a store given, or class mode outside the pause."""
    if store is not None:
        return True
    return class_mode() and time.monotonic() >= _down_until[0]


RETRY_S = 60.0
"""After the class store failed, checks leave it alone this long (their verdicts still show)."""
_down_until = [0.0]
"""``time.monotonic()`` before which the class store is not tried again (one list: mutable)."""


def scrubbed(text: str) -> str:
    """``text`` with the class store's password masked (a driver's message may quote it)."""
    try:
        url = store_url_from_environment(check_mode=False)
    except StoreError:  # its file cannot be read: then no message quotes its password
        url = None
    return scrub(text, url) if url else text


class ClassBoardWarning(UserWarning):
    """An answer could not be recorded on the class board (the store is down or refused it)."""


def _says(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def prediction_note(
    prediction: Any, measured: Any, *, right: bool | None = None, choice: bool = False
) -> str:
    """One sentence on how far the prediction was from the measurement.

    Numbers: the relative distance (and direction). Choices (``choice``: a knob value, a
    verdict, even when it is a number): whether it matched; ``right`` decides when the
    measurement accepts ties."""
    if prediction is None:
        return "No prediction was made: next time, commit to one before the burst runs."
    if measured is None:
        return f"You predicted {_says(prediction)}; nothing was measured to compare it with."
    numbers = all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in (prediction, measured)
    )
    if numbers and not choice and measured != 0:
        off = prediction / measured - 1
        if abs(off) < 0.005:
            return f"You predicted {_says(prediction)}: spot on (measured {_says(measured)})."
        side = "above" if off > 0 else "below"
        return (f"You predicted {_says(prediction)}, {abs(off):.0%} {side} the measured "
                f"{_says(measured)}.")  # fmt: skip
    matched = (str(prediction).strip().lower() == str(measured).strip().lower()
               if right is None else right)  # fmt: skip
    if matched:
        return f"You predicted {_says(prediction)}: the measurement agrees ({_says(measured)})."
    return f"You predicted {_says(prediction)}; the measurement says {_says(measured)}."


def _with_prediction(
    check: Check, prediction: Any, predicted_right: bool | None, choice: bool
) -> Check:
    """``check`` with the prediction sentence appended (when an answer was judged) and the
    prediction recorded."""
    message = check.message
    if prediction is not None:
        note = prediction_note(prediction, check.measured, right=predicted_right, choice=choice)
        message += f". {note}"
    return Check(check.ok, message, exercise=check.exercise, prediction=prediction,
                 measured=check.measured)  # fmt: skip


def _judge(
    judge: Callable[[Any], Check],
    answer: Any,
    prediction: Any,
    exercise: str,
    question: str,
    *,
    choice: bool = True,
    predict: Callable[[Any], Check] | None = None,
    variable: str = "prediction",
) -> Check:
    """The common shape of predict-then-measure. With an exercise name, the verdict is the
    first prediction committed before the burst (``_judge_first``). Without one (the checks
    used as plain functions, never in a lesson), the answer is judged, else the prediction
    handed in: there is no burst to have committed it. ``predict`` judges a prediction where
    it differs from ``judge`` (a wider band: a prediction is made blind)."""
    predict = predict or judge
    if exercise:
        return _judge_first(predict, prediction, exercise=exercise, what=question,
                            variable=variable, choice=choice, answer=answer,
                            read=judge)  # fmt: skip
    if answer is None and prediction is None:
        return _no_answer(question, "prediction", exercise=exercise)
    if answer is None:
        verdict = predict(prediction)
        note = prediction_note(prediction, verdict.measured, right=verdict.ok, choice=choice)
        return Check(verdict.ok, f"your prediction, against the measurement: {verdict.message}"
                     f". {note}",
                     exercise=exercise, prediction=prediction,
                     measured=verdict.measured)  # fmt: skip
    verdict = judge(answer)
    right = predict(prediction).ok if prediction is not None else None
    return _with_prediction(verdict, prediction, right, choice)


_UNSET: Any = object()


def _judge_first(
    predict: Callable[[Any], Check],
    prediction: Any,
    *,
    exercise: str,
    what: str,
    variable: str = "prediction",
    choice: bool = True,
    answer: Any = None,
    read: Callable[[Any], Check] | None = None,
    measured: Any = _UNSET,
    note: bool = True,
) -> Check:
    """Judge the first prediction committed for ``exercise`` before its burst (``predict``
    says whether a value is right), whatever ``prediction`` holds now.

    - None committed: "make a prediction first", and how; not correct.
    - Committed late (after a burst of the exercise had run): judged, never correct.
    - A current value that differs from the first: shown as an edit; the first counts.
    - ``answer`` (read off the table after the burst) is judged by ``read`` in a sentence of
      its own and never makes the verdict correct: a value copied from the table must not pass.

    ``measured`` is the right answer for the board; by default, what ``predict`` reports.
    ``note``: add the sentence on how far the prediction was (False where ``predict``'s own
    message says it).
    """
    stand = standing(exercise, prediction, variable=variable)
    reading = None if answer is None or read is None else read(answer)
    first = stand.first
    judged = predict(first.value if first is not None else None)
    truth = judged.measured if measured is _UNSET else measured
    fields: dict[str, Any] = {"exercise": exercise, "measured": truth,
                              "changed_to": stand.now if stand.changed else None}  # fmt: skip
    if first is None:
        parts = [stand.missing(what)]
        ok = False
    else:
        parts = [f"your prediction, against the measurement: {judged.message}"]
        if note:
            parts.append(prediction_note(first.value, truth, right=judged.ok, choice=choice))
        ok = judged.ok and not first.late
        if first.late:
            parts.insert(0, stand.late_sentence())
        elif first.reset:
            parts.insert(0, stand.reset_sentence())
        if stand.changed:
            parts.append(stand.edit_sentence())
        fields.update(prediction=first.value, late=first.late)
    if reading is not None:
        parts.append(_reading(answer, reading))
    return Check(ok, _sentences(parts), **fields)


def _reading(answer: Any, reading: Check) -> str:
    """The sentence on an answer read off the table after the burst: it never decides."""
    said = "right" if reading.ok else "not right"
    return (f"Your answer read from the table ({_says(answer)}) is {said}: "
            f"{reading.message}. Reading the table after the burst does not make the verdict: "
            "the prediction made before it does")  # fmt: skip


def _sentences(parts: list[str]) -> str:
    """Sentences joined with one full stop between them (none doubled)."""
    text = ". ".join(p.strip().rstrip(".") for p in parts if p and p.strip())
    return text + "." if len(parts) > 1 else text


@_never_raises
def check_prediction(
    prediction: Any,
    measured: Any,
    *,
    exercise: str = "",
    what: str = "the measurement",
    rel_tol: float | None = None,
    abs_tol: float | None = None,
) -> Check:
    """A prediction against one measured number (or choice): right within ``rel_tol`` of it
    (or ``abs_tol`` in its own units, for shares near zero). A short burst is noisy and a
    prediction is an order of magnitude, so the band is wide (25% unless given). An exercise
    with a rule in ``exercise_rules.RULES`` is graded by that rule, the one the class store's
    server judges with (a tolerance given here must be the same). With an exercise name, the
    prediction judged is the first one committed before the burst (``commit_prediction``)."""
    rule = graded_by(exercise, Rule(rel_tol=0.25), rel_tol=rel_tol, abs_tol=abs_tol)
    if measured is None:
        return Check(False, f"{what} was not measured (the burst failed?): run it again",
                     exercise=exercise, prediction=prediction)  # fmt: skip
    number_measured = isinstance(measured, (int, float)) and not isinstance(measured, bool)

    def judge(guess: Any) -> Check:
        fields = {"exercise": exercise, "prediction": guess, "measured": measured}
        number = isinstance(guess, (int, float)) and not isinstance(guess, bool)
        if number_measured:
            if not number:
                return Check(False, f"predict {what} as a number, not {guess!r}", **fields)
            close = rule.accepts(guess, measured)
            band = f"within {rule.rel_tol:.0%}" + (f" or {rule.abs_tol:g}" if rule.abs_tol else "")
            verdict = "close enough" if close else "outside the band"
            return Check(close, f"{what}: {prediction_note(guess, measured)} ({verdict}: {band})",
                         **fields)  # fmt: skip
        right = str(guess).strip().lower() == str(measured).strip().lower()
        return Check(right, f"{what}: {prediction_note(guess, measured)}", **fields)

    if exercise:
        return _judge_first(judge, prediction, exercise=exercise, what=f"your prediction of "
                            f"{what}", measured=measured, note=False)  # fmt: skip
    if prediction is None:
        return _no_answer(f"your prediction of {what}", "prediction", exercise=exercise)
    return judge(prediction)


def graded_by(exercise: str, default: Rule, **given: float | None) -> Rule:
    """The rule ``exercise`` is graded by: its row of ``exercise_rules.RULES`` (the one
    ``workbench class init`` stores for the server), else ``default`` with the tolerances the
    caller gave (``given``; None: not given). A tolerance given for an exercise that has a
    rule must be the rule's: two bands for one exercise would grade the learner by one and
    the board by the other."""
    rule = rule_for(exercise) if exercise else None
    asked = {name: value for name, value in given.items() if value is not None}
    if rule is None:
        return dataclasses.replace(default, **asked)
    differs = {name: value for name, value in asked.items() if getattr(rule, name) != value}
    if differs:
        raise ValueError(f"{exercise} is graded by its rule in workbench/history/"
                         f"exercise_rules.py ({rule}); {differs} differs from it")  # fmt: skip
    return rule


# -- lesson set-up ---------------------------------------------------------------------------


def start() -> str:
    """Draw Altair charts as static SVG here (offline, by vl-convert) and say where we run.

    JupyterLab 4.6 renders Vega-Lite only up to v5 by itself; SVG output shows everywhere,
    also in a notebook saved with its outputs. Returns (and prints) one line about the device.
    """
    # Altair only for the lessons that draw
    import altair as alt

    alt.renderers.enable("svg")
    dev = hardware.resolve_device(None)
    info = hardware.device_info(dev)
    where = "a GPU" if dev.type == "cuda" else "a CPU: slower, same code path"
    line = f"This lesson runs on {info.name or dev.type} ({dev}), {where}."
    print(line)
    return line


def on_gpu() -> bool:
    """True where a CUDA device is available: the cells that need one check this."""
    return torch.cuda.is_available()


def sample_dataset(workload: str = "cnn") -> Any:
    """The training dataset of a built-in workload (the sample JPEGs for ``cnn``)."""
    return resolve_workload(workload).dataset()


def sample_model(workload: str = "cnn") -> Any:
    """A fresh model of a built-in workload (``cnn``, ``resnet50``, ``gpt``...), untrained."""
    return resolve_workload(workload).model()


def example_script() -> Path:
    """``examples/train.py``, the production script: the wheel's copy (``workbench/examples``,
    mapped from the repository's ``examples/`` by setup.py), else the checkout's."""
    package = Path(__file__).resolve().parents[1]
    for path in (package / "examples" / "train.py", package.parent / "examples" / "train.py"):
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"examples/train.py is in neither {package / 'examples'} nor {package.parent / 'examples'}:"
        " reinstall the package"
    )


def run_example(config: str | Path, *args: str) -> None:
    """Run ``examples/train.py --config CONFIG ARGS...`` with this Python and print its output.

    The command is printed first: it is what a training job would run."""
    command = [sys.executable, str(example_script()), "--config", str(config), *args]
    print("$", shlex.join(["python", *command[1:]]))
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    output = (done.stdout + done.stderr).strip()
    print(output)
    if done.returncode != 0:
        raise RuntimeError(f"examples/train.py exited with {done.returncode}")


# -- reading a sweep ---------------------------------------------------------------------------


def _medians(frame: pd.DataFrame, knob: str, metric: str) -> dict[Any, float]:
    """Median ``metric`` of the successful bursts at each value of ``knob``. A sweep's extra
    runs of its first value for drift (``reference``) are left out: each value counts its own
    repeats (``metric="samples_per_s_corrected"`` reads the drift-corrected figures)."""
    for column in (knob, metric):
        if column not in frame.columns:
            raise ValueError(f"{column!r} is not a column of this frame: pass the sweep's frame")
    if "reference" in frame.columns:
        frame = frame[~frame["reference"].eq(True)]
    ok = frame[(frame["status"] == "ok") & frame[metric].notna()] if len(frame) else frame
    values: dict[Any, list[float]] = {}
    for value, measured in zip(ok[knob], ok[metric], strict=True):
        values.setdefault(_plain(value), []).append(float(measured))
    if not values:
        raise ValueError(f"no successful burst with {metric} to check against: run the sweep")
    return {value: statistics.median(runs) for value, runs in values.items()}


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _measured_value(answer: Any, medians: Mapping[Any, float], knob: str) -> Any | Check:
    """The answer as one of the measured values, or a Check saying it was not measured."""
    for value in medians:
        if answer == value or str(answer).strip().lower() == str(value).lower():
            return value
    listed = ", ".join(str(v) for v in medians)
    return Check(False, f"{knob}={answer!r} was not measured: the sweep has {listed}")


@_never_raises
def check_best(
    answer: Any,
    frame: pd.DataFrame,
    knob: str,
    *,
    metric: str = "samples_per_s",
    tolerance: float = 0.05,
    prediction: Any = None,
    exercise: str = "",
) -> Check:
    """Is ``answer`` the value of ``knob`` with the highest median ``metric`` in ``frame``?

    Values within ``tolerance`` of the best count as right: a short burst cannot rank them.
    ``prediction`` (made before the sweep ran) is judged in place of a missing answer.
    """
    medians = _medians(frame, knob, metric)
    best = max(medians, key=medians.__getitem__)
    busy = _too_busy(frame, knob, metric, medians, exercise, prediction)
    if busy is not None:
        return busy
    tolerance = _widened(tolerance, frame, knob, metric)

    def judge(guess: Any) -> Check:
        fields = {"exercise": exercise, "measured": best}
        value = _measured_value(guess, medians, knob)
        if isinstance(value, Check):
            return Check(False, value.message, **fields)
        got, top = medians[value], medians[best]
        if value == best:
            return Check(True, f"{knob}={value} gave {got:,.1f} {metric}, the most in this "
                               "sweep", **fields)  # fmt: skip
        if got >= top * (1 - tolerance):
            return Check(True, f"{knob}={value} gave {got:,.1f}, within {tolerance:.0%} of the "
                               f"best ({knob}={best}: {top:,.1f}); bursts this short on this "
                               "machine cannot tell them apart", **fields)  # fmt: skip
        return Check(False, f"{knob}={value} gave {got:,.1f} {metric}, but {knob}={best} gave "
                            f"{top:,.1f} ({top / got - 1:.0%} more); compare the {metric} "
                            "column", **fields)  # fmt: skip

    question = f"the {knob} value you expect to give the highest {metric}"
    return _judge(judge, answer, prediction, exercise, question)


def _too_busy(frame: pd.DataFrame, knob: str, metric: str, medians: Mapping[Any, float],
              exercise: str, prediction: Any) -> Check | None:  # fmt: skip
    """Says "too busy to tell" when this seat's noise covers the whole spread between the values
    (no ranking of them can be read), else None."""
    low, high = min(medians.values()), max(medians.values())
    seat = noise.seat_noise(frame, knob, metric)
    if low <= 0 or len(medians) < 2:
        return None
    effect = 100.0 * (high / low - 1)
    if not seat.hides(effect):
        return None
    said = f"the values of {knob} measured {low:,.1f} to {high:,.1f} {metric}"
    return Check(False, noise.busy_message(seat, effect, said), exercise=exercise,
                 prediction=prediction, answered=False)  # fmt: skip


def _widened(tolerance: float, frame: pd.DataFrame, knob: str, metric: str) -> float:
    """``tolerance``, or this seat's noise when larger: values within it cannot be ranked."""
    seat = noise.seat_noise(frame, knob, metric)
    return max(tolerance, (seat.pct or 0.0) / 100)


@_never_raises
def check_format(
    answer: Any,
    frame: pd.DataFrame,
    *,
    mode: str = "loader",
    cache: str = "cold",
    tolerance: float = 0.05,
    prediction: Any = None,
    exercise: str = "",
) -> Check:
    """Lesson 9: is ``answer`` the fastest ``data_format`` in ``compare_formats``'s frame, for
    one mode (loader alone or full burst) and one cache state?"""
    for column, value in (("mode", mode), ("cache", cache)):
        if column not in frame.columns or value not in set(frame[column]):
            raise ValueError(f"{column}={value!r} was not measured: pass compare_formats' frame")
    chosen = frame[(frame["mode"] == mode) & (frame["cache"] == cache)]
    return check_best(answer, chosen, "data_format", tolerance=tolerance,
                      prediction=prediction, exercise=exercise)  # fmt: skip


@_never_raises
def check_speedup(
    answer: float | None,
    frame: pd.DataFrame,
    knob: str,
    new: Any,
    old: Any,
    *,
    metric: str = "samples_per_s",
    rel_tol: float = 0.1,
    prediction: float | None = None,
    exercise: str = "",
    limit: float | None = None,
) -> Check:
    """Is ``answer`` the ratio ``metric(new) / metric(old)`` of the medians, within ``rel_tol``?

    Above 1 means ``new`` is faster, below 1 slower (0.25: four times slower). A prediction
    judged in place of a missing answer gets a wider band (25%): it was made blind.

    Noise first (``workbench.workshop.noise``): when ``new`` could not act here, both bursts
    ran the same computation and the right answer is 1 (the measured ratio is named as noise);
    when this seat's noise is at least the ratio's distance from 1, or the ratio passes
    ``limit`` (the most the knob can give here, e.g. packing's 1 / (1 - padding share)) by
    more than the noise, nothing is graded: "this machine is too busy to tell".
    """
    medians = _medians(frame, knob, metric)
    for value in (new, old):
        if value not in medians:
            raise ValueError(f"{knob}={value!r} has no successful burst in this frame")
    ratio = medians[new] / medians[old]
    words = f"{knob}={new} ran at {ratio:.2f}x the {metric} of {knob}={old}"
    words += f" ({medians[new]:,.1f} vs {medians[old]:,.1f})"
    why_not = noise.cannot_act(frame, knob, new) or noise.cannot_act(frame, knob, old)
    if why_not:
        words = (f"{knob}={new} could not act here ({why_not}), so both bursts ran the same "
                 f"computation: the measured {ratio:.2f}x is this machine's noise, not a "
                 "speed-up, and the right answer here is 1 (no change)")  # fmt: skip
        ratio = 1.0
    else:
        seat = noise.seat_noise(frame, knob, metric)
        effect = noise.effect_pct(ratio)
        beyond = limit is not None and ratio > limit * (1 + (seat.pct or 0.0) / 100)
        if seat.hides(effect) or beyond:
            said = words + (f", above the {limit:.2f}x the most it can give here"
                            if beyond else "")  # fmt: skip
            why = (noise.busy_message(seat, effect, said) if not beyond else
                   f"{noise.BUSY}: {said}, so the bursts measured a disturbance, not the "
                   f"knob. {noise.WHAT_TO_DO}")  # fmt: skip
            return Check(False, why, exercise=exercise, prediction=prediction,
                         answered=False)  # fmt: skip

    shown = round(ratio, 3)  # what the row carries: the server judges against this value
    blind = graded_by(exercise, Rule(rel_tol=max(rel_tol, PREDICTION_TOL)))
    read = Rule(rel_tol=rel_tol)

    def judge(guess: Any, rule: Rule = read) -> Check:
        fields = {"exercise": exercise, "measured": shown}
        if isinstance(guess, bool) or not isinstance(guess, (int, float)) or guess <= 0:
            return Check(False, f"the answer is a ratio (a number > 0), not {guess!r}", **fields)
        if rule.accepts(guess, shown):
            return Check(True, words, **fields)
        return Check(False, f"{guess:g} is off: {words}", **fields)

    question = f"{metric} at {knob}={new} divided by {metric} at {knob}={old}"
    return _judge(judge, answer, prediction, exercise, question, choice=False,
                  predict=lambda g: judge(g, blind))  # fmt: skip


PREDICTION_TOL = BLIND.rel_tol
"""A predicted ratio within 25% of the measured one is right: it was made blind, before the
burst (an answer read off the table gets the tighter ``rel_tol``). A lesson's exercise takes
its band from ``exercise_rules.RULES``, which the class store's server judges with."""


@_never_raises
def check_knee(
    answer: Any,
    frame: pd.DataFrame,
    knob: str = "batch_size",
    *,
    share: float = 0.9,
    metric: str = "samples_per_s",
    tolerance: float = 0.05,
    prediction: Any = None,
    exercise: str = "",
) -> Check:
    """Is ``answer`` the smallest value of ``knob`` that reaches ``share`` of the best metric?

    Right when the answer reaches the bar within ``tolerance`` and no smaller value clearly
    clears it (by more than ``tolerance``): near the bar, noise decides, and both are accepted.
    """
    medians = _medians(frame, knob, metric)
    busy = _too_busy(frame, knob, metric, medians, exercise, prediction)
    if busy is not None:
        return busy
    tolerance = _widened(tolerance, frame, knob, metric)
    bar = share * max(medians.values())
    ordered = sorted(medians)
    expected = next(v for v in ordered if medians[v] >= bar)

    def judge(guess: Any) -> Check:
        fields = {"exercise": exercise, "measured": expected}
        value = _measured_value(guess, medians, knob)
        if isinstance(value, Check):
            return Check(False, value.message, **fields)
        got = medians[value]
        if got < bar * (1 - tolerance):
            return Check(False, f"{knob}={value} gave {got:,.1f} {metric}, under {share:.0%} "
                                f"of the best ({bar:,.1f}); try a larger {knob}",
                         **fields)  # fmt: skip
        smaller = [v for v in ordered if v < value and medians[v] > bar * (1 + tolerance)]
        if smaller:
            return Check(False, f"{knob}={smaller[0]} already reached "
                                f"{medians[smaller[0]]:,.1f} (the bar is {bar:,.1f}); a "
                                f"smaller {knob} leaves more memory free",
                         **fields)  # fmt: skip
        note = "" if value == expected else f" (near the bar, like {knob}={expected})"
        return Check(True, f"{knob}={value} reached {got:,.1f} of the bar {bar:,.1f}{note}",
                     **fields)  # fmt: skip

    question = f"the smallest {knob} you expect to reach {share:.0%} of the best {metric}"
    return _judge(judge, answer, prediction, exercise, question)


@_never_raises
def check_comm_peak(
    answer: Any,
    result: CommResult,
    *,
    tolerance: float = 0.05,
    prediction: Any = None,
    exercise: str = "",
) -> Check:
    """Is ``answer`` the message size (bytes) at which the all-reduce's bus bandwidth peaked?

    ``result`` is ``wb.comm_bench(...)``; sizes within ``tolerance`` of the peak count. One
    rank (one GPU, or none) sends nothing: the verdict says so, and what to run instead.
    """
    fields = {"exercise": exercise, "prediction": prediction}
    if not result.ok or not result.rows:
        return Check(False, f"the benchmark measured nothing ({result.status}: {result.error});"
                            " run it again", **fields)  # fmt: skip
    if result.world_size < 2:
        return Check(
            False,
            "one rank sends nothing: an all-reduce over 1 rank copies no bytes, so there is no "
            "bus bandwidth to read. On one GPU (or a CPU) this exercise needs 2 ranks: "
            "wb.comm_bench(2) on a CPU uses two gloo processes; on one GPU read the reference "
            "table instead. Nothing is wrong with your answer or your machine.",
            **fields,
        )
    frame = result.frame().assign(status="ok")
    return check_best(answer, frame, "size_bytes", metric="busbw_gbps", tolerance=tolerance,
                      prediction=prediction, exercise=exercise)  # fmt: skip


SCALE_OUT_SAME = 0.10
"""Two nodes within 10% of one node's samples/s read as "same"; 3 points either side of that
edge accept both neighbouring answers (two short bursts on a shared machine can land on
either side)."""


def scale_out_label(ratio: float) -> str:
    """``faster``, ``same`` or ``slower`` for two nodes' samples/s over one node's."""
    if ratio > 1 + SCALE_OUT_SAME:
        return "faster"
    return "slower" if ratio < 1 - SCALE_OUT_SAME else "same"


@_never_raises
def check_scale_out(
    prediction: Any, one_node: BurstResult, two_nodes: BurstResult, *, exercise: str = ""
) -> Check:
    """Did two "nodes" of the same total ranks run ``faster``, the ``same`` or ``slower`` than
    one? Both results are ``wb.run_burst``'s (the second with ``nodes=2``). A failed burst, or
    no prediction, ends in a verdict that says what to do, never an exception."""
    fields: dict[str, Any] = {"exercise": exercise, "prediction": prediction}
    for name, r in (("one node", one_node), ("two nodes", two_nodes)):
        if r is None or not getattr(r, "ok", False) or not r.samples_per_s:
            why = getattr(r, "error", None) or "no result"
            return Check(False, f"the {name} burst measured nothing ({why}); run it again",
                         **fields)  # fmt: skip
    ratio = two_nodes.samples_per_s / one_node.samples_per_s
    measured = scale_out_label(ratio)
    near = {scale_out_label(ratio - EDGE_BAND), scale_out_label(ratio + EDGE_BAND)}
    said = f"two nodes ran at {ratio:.2f}x one node's samples/s ({measured})"
    start = _start_cost(one_node, two_nodes)
    choices = '"faster", "same" or "slower"'

    def judge(guess: Any) -> Check:
        if str(guess).strip().lower() not in ("faster", "same", "slower"):
            return Check(False, f"{guess!r} is not one of {choices}: {said}",
                         exercise=exercise, measured=measured)  # fmt: skip
        right = str(guess).strip().lower() in near
        return Check(right, f"{said}; {start}", exercise=exercise, measured=measured)

    if exercise:
        return _judge_first(judge, prediction, exercise=exercise, what=choices,
                            variable="prediction_nodes")  # fmt: skip
    if prediction is None:
        return _no_answer(choices, "prediction", **{**fields, "measured": measured})
    verdict = judge(prediction)
    note = prediction_note(prediction, measured, right=verdict.ok, choice=True)
    return dataclasses.replace(verdict, message=f"{verdict.message} {note}",
                               prediction=prediction)  # fmt: skip


def _start_cost(one_node: BurstResult, two_nodes: BurstResult) -> str:
    """The rendezvous shows in the job's start, not in its window."""
    a, b = one_node.launch_s, two_nodes.launch_s
    if a is None or b is None:
        return "the window excludes start-up, so the rendezvous does not count in samples/s."
    return (f"starting took {b:.1f} s against {a:.1f} s: the rendezvous of the agents is paid "
            "once, before the window, never in samples/s.")  # fmt: skip


# -- diagnosis, profile, config ----------------------------------------------------------------

_VERDICT_WORDS = {
    "data-bound": "data-bound",
    "data": "data-bound",
    "compute-bound": "compute-bound",
    "compute": "compute-bound",
    "balanced": "balanced",
}
EDGE_BAND = 0.03
"""Ceilings whose gap sits within 3 points of the 15% balance band's edge: a second pair of
bursts could land on either side, so both neighbouring verdicts count as right there."""


def ceilings(diagnosis: Diagnosis) -> pd.DataFrame:
    """The diagnosis's three measurements, without its verdict: for reading them first."""
    rows = [
        ("full pipeline", diagnosis.full_sps, "loader and model together"),
        ("loader alone", diagnosis.loader_sps, "what the data pipeline can deliver"),
        ("compute alone", diagnosis.compute_sps, "what the model can consume"),
    ]
    return pd.DataFrame(rows, columns=["measurement", "samples_per_s", "what it is"])


def verdicts_at_edge(loader_sps: float, compute_sps: float, band: float = EDGE_BAND) -> set[str]:
    """Every verdict the two ceilings support: the rule's (``classify``), and both sides of
    the 15% balance band when their gap is within ``band`` of its edge."""
    found = {classify(loader_sps, compute_sps)}
    gap = 1 - min(loader_sps, compute_sps) / max(loader_sps, compute_sps)
    if abs(gap - BALANCE_BAND) <= band:
        found |= {"balanced", "data-bound" if loader_sps < compute_sps else "compute-bound"}
    return found


@_never_raises
def check_verdict(
    answer: str | None, diagnosis: Diagnosis, *, prediction: str | None = None,
    exercise: str = "",
) -> Check:  # fmt: skip
    """Is ``answer`` (data-bound, compute-bound or balanced) what the two ceilings say?

    At the edge of the balance band (within ``EDGE_BAND``) both neighbouring verdicts count:
    the ceilings are short bursts, and the next pair could fall on the other side."""
    loader, compute = diagnosis.loader_sps, diagnosis.compute_sps
    if diagnosis.verdict == "unknown" or not loader or not compute:
        reason = getattr(diagnosis, "reason", "") or "a ceiling was not measured"
        return Check(False, f"the diagnosis could not decide ({reason}): run it again",
                     exercise=exercise, prediction=prediction)  # fmt: skip
    numbers = f"loader alone {_num(loader)} samples/s, compute alone {_num(compute)} samples/s"
    truth = classify(loader, compute)
    accepted = verdicts_at_edge(loader, compute)

    def judge(guess: Any) -> Check:
        fields = {"exercise": exercise, "measured": truth}
        key = str(guess).strip().lower().replace(" ", "-").replace("_", "-")
        said = _VERDICT_WORDS.get(key)
        if said is None:
            return Check(False, f'{guess!r} is not a verdict: "data-bound", "compute-bound" or '
                                '"balanced"', **fields)  # fmt: skip
        if said == truth:
            return Check(True, f"{said}: {numbers}", **fields)
        if said in accepted:
            return Check(True, f"{said}, at the edge of the 15% band: {numbers} (the rule says "
                               f"{truth}; a second pair of bursts could say {said})",
                         **fields)  # fmt: skip
        return Check(False, f"the ceilings say {truth}: {numbers}; the slower side is the "
                            "limit", **fields)  # fmt: skip

    question = '"data-bound", "compute-bound" or "balanced"'
    return _judge(judge, answer, prediction, exercise, question)


@_never_raises
def check_top_operator(
    answer: str | None, profile: ProfileResult, *, tolerance: float = 0.1,
    prediction: str | None = None, exercise: str = "",
) -> Check:  # fmt: skip
    """Is the predicted operator the one that took the most time (or within ``tolerance``)?

    ``aten::`` may be left out. Time is what the table is sorted by: device time on CUDA,
    host self time on a CPU. A prediction names an operator, or a family ("convolution" for
    ``aten::convolution_backward`` and ``aten::mkldnn_convolution``) that is specific
    (``operator_family``): a part of every name ("aten", "a", "::", "") names nothing. An
    ``answer`` (read off the table after the profile) must be an exact operator name.
    """
    ops = profile.operators
    if ops is None or ops.empty:
        raise ValueError(f"this profile has no operators ({profile.status}: {profile.error})")
    column = str(ops.attrs.get("sort_by", "self_ms"))
    times = dict(zip(ops["operator"], ops[column], strict=True))
    top = str(ops["operator"].iloc[0])

    def judge(guess: Any, family: bool = False) -> Check:
        fields = {"exercise": exercise, "measured": top}
        name = str(guess).strip()
        match = name if name in times else f"aten::{name}" if f"aten::{name}" in times else None
        if match is None and family:
            found = operator_family(name, list(times))
            if isinstance(found, str):
                return Check(False, found, **fields)
            match = max(found, key=times.__getitem__)
        if match is None:
            return Check(False, f"{name!r} is not in the table: copy a name from its operator "
                                "column", **fields)  # fmt: skip
        if match == top or times[match] >= times[top] * (1 - tolerance):
            return Check(True, f"{match}: {times[match]:,.1f} ms of {column} in the window",
                         **fields)  # fmt: skip
        return Check(False, f"{match} took {times[match]:,.1f} ms, but {top} took "
                            f"{times[top]:,.1f} ms ({column})", **fields)  # fmt: skip

    question = "the name of the operator (or family) you expect at the top of the table"
    return _judge(judge, answer, prediction, exercise, question,
                  predict=lambda g: judge(g, family=True))  # fmt: skip


FAMILY_SHARE = 0.25
"""A family name may match at most a quarter of the profile table's operators (at least one):
"convolution" or "batch_norm" pick two of fifteen, "backward" four, "aten" all of them. A name
that matches more says too little about where the time goes to count as a prediction."""
_NAMESPACES = ("aten", "autograd", "engine", "cuda", "cudnn", "profiler", "torch")


def operator_family(name: str, operators: list[str]) -> list[str] | str:
    """The operators whose names contain ``name`` (case-insensitive), or why ``name`` is not a
    specific family: shorter than 3 letters, a namespace, or matching more than
    ``FAMILY_SHARE`` of ``operators``."""
    key = name.strip().lower()
    key = key.removeprefix("aten::")
    letters = sum(ch.isalpha() for ch in key)
    if letters < 3 or key.strip(":_ .") in _NAMESPACES:
        return (f"{name!r} names no operator family: give an operator's name, or a family of "
                'at least 3 letters such as "convolution" or "batch_norm"')  # fmt: skip
    found = [op for op in operators if key in op.lower()]
    if not found:
        return f"{name!r} is not in the table: no operator's name contains it"
    allowed = max(1, int(FAMILY_SHARE * len(operators)))
    if len(found) > allowed:
        return (f"{name!r} is too broad: it matches {len(found)} of the {len(operators)} "
                f"operators in the table (a family may match at most {allowed}); name one "
                "operator or a narrower family")  # fmt: skip
    return found


@_never_raises
def check_loader(
    loader: Any, config: TunedConfig | str | Path, *, prediction: Any = None,
    exercise: str = "",
) -> Check:  # fmt: skip
    """Does ``loader`` (a torch DataLoader) use the tuned arguments of ``config``?"""
    fields = {"exercise": exercise, "prediction": prediction}
    if loader is None:
        return _no_answer("a DataLoader built from the config", "loader", **fields)
    if not isinstance(loader, DataLoader):
        return Check(False, f"that is a {type(loader).__name__}, not a torch DataLoader",
                     **fields)  # fmt: skip
    if isinstance(config, (str, Path)):
        config = load_config(config)
    wanted = config.dataloader_kwargs()
    wrong = [
        f"{name}={getattr(loader, name, None)!r} (tuned: {value!r})"
        for name, value in wanted.items()
        if getattr(loader, name, None) != value
    ]
    fields["measured"] = wanted
    if wrong:
        return Check(False, "differs from the config: " + ", ".join(wrong), **fields)
    shown = ", ".join(f"{k}={v}" for k, v in wanted.items())
    return Check(True, f"the DataLoader runs as measured: {shown}", **fields)


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.1f}"
