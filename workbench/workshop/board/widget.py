"""The instructor's class board: the room's answers, best configs and one knob across machines.

``Board(...).show()`` reads the store (``open_store()``: the class's PostgreSQL store where
``WORKBENCH_STORE`` names one) and draws three views from ``figures``' tables (``charts``).
A Refresh button reads again; an optional timer refreshes on a background thread, so the
kernel stays free for the instructor's own cells. A store that cannot be read shows as a red
line on the board, never as a traceback: in front of a room, the board keeps its last figures.

Correct means the class store's server computed the verdict (``figures``): an answer whose
``ok`` only the learner's kernel gave (or a hand-typed row) shows as "claims correct,
unverified", in grey on the chart, never among the correct.

The board says plainly when it is not looking at the room: a local SQLite file holds only this
machine's bursts, and a board that is not shared (``store.share_board()``) shows each learner
only their own rows in their own kernel.
"""

from __future__ import annotations

import html
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ipywidgets as w
import pandas as pd

from workbench.analysis.sweeps import sweep
from workbench.core.knobs import Knobs
from workbench.history.identity import is_instructor
from workbench.history.store import HistoryStore, open_store
from workbench.notebook.chart_widget import PanelChart
from workbench.workshop import checks as workshop
from workbench.workshop.board import charts as board_charts
from workbench.workshop.board import figures
from workbench.workshop.predictions import BOOK

__all__ = ["Board", "BoardView", "fill_demo_store", "read_board", "store_note"]

DEFAULT_REFRESH_S = 10.0
_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@\s]+@")


@dataclass(frozen=True, slots=True)
class BoardView:
    """One reading of the store, as the board shows it."""

    answers: pd.DataFrame
    summary: pd.DataFrame
    best: pd.DataFrame
    effects: pd.DataFrame
    spread: figures.EffectSpread
    bursts: int
    read_at: str


def read_board(
    store: Any, knob: str, new: Any, old: Any, resets: Mapping[str, int] | None = None
) -> BoardView:
    """Read the answers and the bursts once and compute the three views' tables. ``resets``:
    exercise -> the newest answer id when the instructor started it over
    (:meth:`Board.reset_exercise`): the rows up to it are left out."""
    answers = figures.since_resets(figures.answers_frame(store.answers()), resets or {})
    bursts = store.frame()
    effects = figures.knob_effect(bursts, knob, new, old)
    devices = figures.seat_devices(bursts)  # a CPU seat's figures never join a GPU seat's
    return BoardView(answers=answers, summary=figures.exercise_summary(answers, devices),
                     best=figures.best_configs(bursts), effects=effects,
                     spread=figures.effect_spread(effects), bursts=len(bursts),
                     read_at=time.strftime("%H:%M:%S"))  # fmt: skip


def store_note(store: Any) -> tuple[str, bool]:
    """A sentence on what the board reads, and whether it is a class store (the password of a
    connection string never shows)."""
    if isinstance(store, HistoryStore):
        return (f"Local SQLite file {store.path}: not a class store. It holds this machine's "
                "bursts only; for a room, set WORKBENCH_STORE=postgresql://... in every kernel "
                "(notebooks/README.md, \"The class board\").", False)  # fmt: skip
    where = store.where() if callable(getattr(store, "where", None)) else repr(store)
    safe = _PASSWORD.sub(r"\1***@", str(where))  # where() has no password; a repr may
    return f"Class store: {safe}.", True


def _visibility_note(store: Any) -> str:
    """Who sees what: the board is the room's only when it reads every learner's rows."""
    try:
        # a class store knows from the login (history/roles.py); other stores from the variable
        asks = getattr(store, "is_instructor", is_instructor)
        shared, instructor = bool(store.board_shared()), bool(asks())
    except Exception as exc:  # a board that cannot tell still shows what it reads
        return f"Cannot tell whether the board is shared ({exc})."
    if shared:
        return "The board is shared: every learner can see the room's rows."
    note = "The board is not shared: each learner sees only their own rows (store.share_board())."
    if not instructor:
        note += (" This kernel is not the instructor's (the instructor's login, or"
                 " WORKBENCH_ROLE=instructor where the store has no class logins), so it shows"
                 " only its own learner's rows.")  # fmt: skip
    return note


class Board:
    """The live board. ``knob``, ``new``, ``old``: the comparison of the third view."""

    def __init__(self, store: Any = None, *, knob: str = "precision", new: Any = "bf16",
                 old: Any = "default", refresh_s: float | None = None) -> None:  # fmt: skip
        # a store object as is (SQLite or the class's PostgreSQL); a path or None opened
        self.store = (
            open_store(store) if store is None or isinstance(store, (str, os.PathLike)) else store
        )
        self.knob, self.new, self.old = knob, new, old
        self.refresh_s = DEFAULT_REFRESH_S if refresh_s is None else float(refresh_s)
        if self.refresh_s <= 0:
            raise ValueError(f"refresh_s must be > 0 seconds, got {refresh_s}")
        self.view: BoardView | None = None
        self.resets: dict[str, int] = {}
        """Exercises the instructor started over on the board: exercise -> newest answer id."""
        self.reads = 0
        """Successful reads of the store so far (the status line counts them)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self.ui = _BoardWidgets(self)
        self.refresh()
        if refresh_s is not None:
            self.ui.auto.value = True  # starts the timer through its observer

    def show(self) -> w.Widget:
        """The board's widget (also what the notebook displays for a ``Board``)."""
        return self.ui.root

    def _ipython_display_(self) -> None:
        from IPython.display import display  # IPython only in a kernel

        display(self.ui.root)

    def refresh(self) -> BoardView | None:
        """Read the store and redraw; on failure say so on the board and keep the last view."""
        with self._lock:
            try:
                view = read_board(self.store, self.knob, self.new, self.old, self.resets)
            except Exception as exc:  # the point: the board stays up when the store is not
                self.ui.status.value = _red(f"could not read the store at "
                                            f"{time.strftime('%H:%M:%S')}: "
                                            f"{workshop.scrubbed(str(exc))}")  # fmt: skip
                return None
            self.view, self.reads = view, self.reads + 1
            self.ui.draw(view, self)
            return view

    def reset_exercise(self, exercise: str) -> str:
        """Start ``exercise`` over on the board, for the room (a second round of it): the
        answers and predictions stored so far are left out of every view from now on, and the
        board says so. The store keeps them; each learner's own prediction book is theirs
        (``workshop.reset_exercise()`` in their notebook starts it over there)."""
        answers = self.store.answers()
        ids = [int(a["id"]) for a in answers if a.get("exercise") == exercise and a.get("id")]
        self.resets[exercise] = max(ids, default=0)
        line = (f"{exercise} starts over on the board at {time.strftime('%H:%M:%S')} (reset): "
                f"{len(ids)} earlier row(s) left out; learners run workshop.reset_exercise("
                f"{exercise!r}) to start over in their own notebooks.")  # fmt: skip
        self.refresh()
        return line

    def start(self, every_s: float | None = None) -> None:
        """Refresh every ``every_s`` seconds on a background thread (the kernel stays free)."""
        self.stop()
        self.refresh_s = float(every_s or self.refresh_s)
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._tick, args=(self._stop,), daemon=True,
                                       name="workbench-board")  # fmt: skip
        self._timer.start()

    def stop(self) -> None:
        """Stop the timer (a refresh under way finishes first)."""
        self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(timeout=30)
        self._timer = None

    @property
    def running(self) -> bool:
        return self._timer is not None and self._timer.is_alive()

    def _tick(self, stop: threading.Event) -> None:
        while not stop.wait(self.refresh_s):
            self.refresh()


class _BoardWidgets:
    """The board's widgets; ``Board`` decides what they show."""

    def __init__(self, board: Board) -> None:
        note, is_class = store_note(board.store)
        self.store = _css(w.HTML(_para(note, warn=not is_class)), "wb-board-store")
        self.shared = _css(w.HTML(_para(_visibility_note(board.store))), "wb-board-shared")
        self.refresh = _css(w.Button(description="Refresh", icon="refresh"), "wb-board-refresh")
        self.refresh.on_click(lambda _b: board.refresh())
        self.auto = _css(w.Checkbox(value=False, indent=False,
                                    description=f"refresh every {board.refresh_s:g} s"),
                         "wb-board-auto")  # fmt: skip
        self.auto.observe(lambda c: board.start() if c["new"] else board.stop(), names="value")
        self.status = _css(w.HTML(), "wb-board-status")
        self.answers = _css(w.HTML(), "wb-board-answers")
        self.exercise = _css(w.Dropdown(description="exercise", options=[]), "wb-board-exercise")
        self.exercise.observe(lambda _c: self._draw_exercise(board), names="value")
        self.best = _css(w.HTML(), "wb-board-best")
        self.effect = _css(w.HTML(), "wb-board-effect")
        # PanelChart: Vega from the kernel, once per page (no CDN in a classroom network), not
        # a 925 KB copy of it in every chart: a saved preview board weighed 3.78 MB, now 0.12
        self.charts = {name: _css(PanelChart(board_charts.waiting_chart(name)),
                                  f"wb-board-chart-{name}")
                       for name in ("correct", "answers", "best", "effect")}  # fmt: skip
        c = self.charts
        self.root = _css(w.VBox([
            w.HTML("<h3>Class board</h3>"), self.store, self.shared,
            w.HBox([self.refresh, self.auto, self.status]),
            w.HTML("<h4>1. Each exercise: the room's answers and measurements</h4>"),
            self.answers, w.HBox([c["correct"], w.VBox([self.exercise, c["answers"]])]),
            w.HTML("<h4>2. The best config per learner</h4>"), self.best, c["best"],
            w.HTML(f"<h4>3. One knob across machines: {html.escape(board.knob)}</h4>"),
            self.effect, c["effect"],
        ]), "wb-board")  # fmt: skip

    def draw(self, view: BoardView, board: Board) -> None:
        learners = view.answers["learner"].nunique()
        commits = int((view.answers["kind"] == "prediction").sum())
        self.status.value = _para(f"read {board.reads} at {view.read_at}: "
                                  f"{len(view.answers) - commits} answer(s) from {learners} "
                                  f"learner(s), {view.bursts} burst(s); {commits} "
                                  "prediction(s) committed")  # fmt: skip
        self.answers.value = _table(view.summary, _SUMMARY, "no answers yet")
        self.charts["correct"].chart = board_charts.correct(view.summary)
        exercises = list(pd.unique(view.summary["exercise"]))
        keep = self.exercise.value if self.exercise.value in exercises else None
        self.exercise.options = exercises
        self.exercise.value = keep or (exercises[-1] if exercises else None)
        self._draw_exercise(board)
        self.best.value = _table(view.best, _BEST, "no successful burst yet")
        self.charts["best"].chart = board_charts.best(view.best)
        sentence = view.spread.sentence(board.knob, board.new, board.old)
        self.effect.value = _para(sentence) + _table(view.effects, _EFFECT, "")
        self.charts["effect"].chart = board_charts.effect(view.effects, board.knob, board.new,
                                                          board.old)  # fmt: skip

    def _draw_exercise(self, board: Board) -> None:
        view, exercise = board.view, self.exercise.value
        if view is None or exercise is None:
            self.charts["answers"].chart = board_charts.waiting_chart("answers")
            return
        rows = figures.exercise_answers(view.answers, exercise)
        self.charts["answers"].chart = board_charts.answers(rows, exercise)


# -- tables ----------------------------------------------------------------------------------

_SUMMARY = {"exercise": "exercise", "device": "seats on", "learners": "learners",
            "correct_pct": "% correct (server)", "unverified": "claims correct, unverified",
            "measured": "measured (median)", "measured_min": "min",
            "measured_max": "max",
            "spread_pct": "spread %", "predicted": "predicted", "late": "late",
            "edited": "edited after", "prediction": "first prediction",
            "close_pct": "% first predictions close", "answers": "attempts"}  # fmt: skip
_BEST = {"learner": "learner", "host": "host", "workload": "workload",
         "device_name": "device", "samples_per_s": "samples/s", "knobs": "knobs",
         "peak_mem_mib": "peak MiB", "bursts": "bursts", "id": "burst"}  # fmt: skip
_EFFECT = {"learner": "learner", "host": "host", "workload": "workload",
           "device_name": "device", "held": "other knobs", "new_per_s": "new samples/s",
           "old_per_s": "old samples/s", "ratio": "ratio"}  # fmt: skip


def _table(frame: pd.DataFrame, columns: dict[str, str], empty: str) -> str:
    """An HTML table of ``columns`` (escaped cells, figures right-aligned)."""
    if frame.empty:
        return _para(empty) if empty else ""
    head = "".join(f'<th style="{_style(True)}">{html.escape(t)}</th>' for t in columns.values())
    body = "".join(
        "<tr>" + "".join(_td(row.get(c)) for c in columns) + "</tr>"
        for row in frame.to_dict("records")
    )
    return (f'<table class="wb-board-table" style="border-collapse:collapse">'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")  # fmt: skip


def _td(value: Any) -> str:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if value is None or (isinstance(value, float) and pd.isna(value)):
        text = "n/a"
    elif isinstance(value, float):
        text = f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    else:
        text = str(value)
    return f'<td style="{_style(number)}">{html.escape(text)}</td>'


def _style(right: bool) -> str:
    return f"text-align:{'right' if right else 'left'};padding:2px 10px;white-space:nowrap"


def _para(text: str, warn: bool = False) -> str:
    colour = "#b35900" if warn else "inherit"
    return f'<p style="margin:2px 0;color:{colour}">{html.escape(text, quote=False)}</p>'


def _red(text: str) -> str:
    return f'<p style="margin:2px 0;color:#c0392b">{html.escape(text, quote=False)}</p>'


def _css(widget: Any, name: str) -> Any:
    widget.add_class(name)
    return widget


# -- a board before class --------------------------------------------------------------------


def fill_demo_store(store: Any, *, seconds: float = 0.3) -> Any:
    """Fill ``store`` with a few real tiny bursts and checked answers, so that an instructor
    sees the board before class: a ``batch_size`` sweep of the ``cnn`` workload on replayed
    batches (``loader="synthetic"``: no dataset needed) on this machine's CPU, two predictions
    committed as it starts, and the verdicts of two exercises on it. Every figure is measured
    here; nothing is made up. The predictions go to a book of the preview's own, in memory:
    the instructor's prediction book (``$WORKBENCH_HOME/predictions.json``) is left as it was."""
    store = open_store(store)
    with BOOK.apart():
        return _fill(store, seconds)


def _fill(store: Any, seconds: float) -> Any:
    # the predictions are committed as the sweep starts, as a lesson's measuring cell does
    workshop.commit_prediction(4, exercise="demo-best-batch", store=store)
    workshop.commit_prediction(1.5, exercise="demo-speedup", store=store)
    window = {"seconds": seconds, "min_steps": 3, "warmup_steps": 1, "device": "cpu"}
    # reference_every=None: a preview of two values, whose store the board reads as bursts
    # (an extra run of the first value for drift would be a third burst there)
    frame = sweep("cnn", "batch_size", [4, 8], base=Knobs(loader="synthetic"), store=store,
                  reference_every=None, **window)  # type: ignore[arg-type]  # fmt: skip
    checks = [
        workshop.check_best(8, frame, "batch_size", prediction=4, exercise="demo-best-batch"),
        workshop.check_speedup(None, frame, "batch_size", 8, 4, prediction=1.5,
                               exercise="demo-speedup"),
    ]  # fmt: skip
    for check in checks:
        workshop.record(check, store=store)
    return store
