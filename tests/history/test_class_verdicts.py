"""The server's verdicts after ``workbench class init`` (issue 41), against the suite's real
PostgreSQL: every workshop exercise's rule is registered from the table the checks grade with
(``history/exercise_rules.py``), a learner's hand-written ``ok`` on a registered exercise is
overruled, the check in the learner's kernel and the server agree at the band's edges, and an
unregistered exercise's answer reads unverified, on the board too. A class of its own: these
tests write answers that other modules count."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import pytest
from class_room import Room, open_room
from postgres_server import PgServer

from workbench.history.exercise_rules import RULES, UNVERIFIED
from workbench.history.postgres import PostgresStore
from workbench.workshop import checks as workshop
from workbench.workshop.board import Board, read_board
from workbench.workshop.predictions import BOOK

ANSWER = ("INSERT INTO workbench.answers (created_at, learner, exercise, ok, prediction, "
          "measured, late) VALUES ('now', %s, %s, %s, %s::json, %s::json, %s)")  # fmt: skip


@pytest.fixture(scope="module")
def room(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Room]:
    with open_room(pg_server, tmp_path_factory) as made:
        yield made


def _stored(room: Room, exercise: str) -> list[tuple[bool, bool]]:
    """``(ok, verified)`` of every answer to ``exercise``, oldest first, as the server kept it."""
    store = PostgresStore(room.url(room.instructor))
    return [(a["ok"], a["verified"]) for a in store.answers(exercise)]


def test_class_init_registers_every_rule_the_checks_grade_with(room: Room) -> None:
    rows = room.sql(room.instructor, "SELECT exercise, rel_tol, abs_tol, choice FROM "
                    "workbench.checks ORDER BY exercise")  # fmt: skip
    assert rows == sorted((name, r.rel_tol, r.abs_tol, r.choice) for name, r in RULES.items())
    assert not set(RULES) & set(UNVERIFIED)
    assert "verdicts the server computes: 01-data-wait" in room.stdout


def test_a_hand_written_verdict_on_a_registered_exercise_is_the_servers(room: Room) -> None:
    learner = PostgresStore(room.url(room.ada))  # the learner's own client
    learner.record_answer({"exercise": "12-bf16", "ok": True, "prediction": 9.0,
                           "measured": 1.8})  # fmt: skip
    cases = [  # as psql sends them: (ok typed, prediction, measured, late)
        (False, "2.0", "1.8", False),  # within 25%: right, whatever was typed
        (True, "2.0", "1.8", True),  # right, but committed after the burst: never correct
        (True, '"2.0"', "1.8", False),  # a word where the rule asks for a number
        (True, None, "1.8", False),  # no prediction: nothing right
    ]
    for ok, guess, truth, late in cases:
        room.sql(room.ada, ANSWER, (room.ada, "12-bf16", ok, guess, truth, late))
    assert _stored(room, "12-bf16") == [(False, True), (True, True), (False, True),
                                        (False, True), (False, True)]  # fmt: skip
    mine = [(a["ok"], a["verified"]) for a in learner.answers("12-bf16")]
    assert mine[0] == (False, True)  # the learner reads the server's verdict too


@pytest.mark.parametrize("prediction", [25.0, 24.9, 55.0, 55.1, 40])
def test_the_check_in_the_kernel_and_the_server_agree_at_the_bands_edges(
    room: Room, prediction: float
) -> None:
    learner = PostgresStore(room.url(room.bob))
    measured = 40.0  # data_wait_pct: the rule's band is 15 points here (25% of 40 is 10)
    with BOOK.apart():
        workshop.commit_prediction(prediction, exercise="01-data-wait", store=learner)
        check = workshop.check_prediction(prediction, measured, what="data_wait_pct",
                                          exercise="01-data-wait")  # fmt: skip
        answer_id = workshop.record(check, store=learner)
    (row,) = [a for a in learner.answers("01-data-wait") if a["id"] == answer_id]
    assert (row["ok"], row["verified"]) == (check.ok, True)
    assert check.ok == (abs(prediction - measured) <= 15)


def test_an_unregistered_exercise_reads_unverified_and_the_board_says_so(room: Room) -> None:
    learner = PostgresStore(room.url(room.ada))
    learner.record_answer({"exercise": "02-workers", "ok": True, "prediction": 4,
                           "measured": 2})  # fmt: skip
    assert _stored(room, "02-workers") == [(True, False)]  # the claim, kept unverified
    teacher = PostgresStore(room.url(room.instructor))
    view = read_board(teacher, "precision", "bf16", "default")
    rows = view.summary.set_index("exercise")
    assert (rows.loc["02-workers", "correct"], rows.loc["02-workers", "unverified"]) == (0, 1)
    assert rows.loc["12-bf16", "unverified"] == 0  # only the server's verdicts there
    with contextlib.redirect_stdout(io.StringIO()):
        board = Board(teacher)
    assert "claims correct, unverified" in board.ui.answers.value
