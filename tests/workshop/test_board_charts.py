"""The board's charts, read from their Vega-Lite specs: the room's numbers reach the marks."""

from __future__ import annotations

import pandas as pd

from workbench.workshop.board import charts as board_charts
from workbench.workshop.board import figures


def _values(chart, layer: int = -1) -> list[dict]:
    """The rows of one layer (the last: the marks over the rules), wherever Altair put them."""
    spec = chart.to_dict()
    data = spec.get("layer", [spec])[layer].get("data", spec.get("data", {}))
    return data["values"] if "values" in data else spec["datasets"][data["name"]]


ANSWERS = figures.answers_frame([  # verdicts the class store's server computed (verified)
    {"id": 1, "learner": "ann", "host": "h1", "exercise": "03-precision", "ok": True,
     "message": "", "prediction": 2.0, "measured": 1.6, "verified": True},
    {"id": 2, "learner": "bob", "host": "h2", "exercise": "03-precision", "ok": False,
     "message": "", "prediction": None, "measured": 2.4, "verified": True},
    {"id": 3, "learner": "ann", "host": "h1", "exercise": "05-verdict", "ok": True,
     "message": "", "prediction": "balanced", "measured": "data-bound", "verified": True},
])  # fmt: skip


def test_correct_chart_has_one_bar_per_exercise_with_its_share():
    chart = board_charts.correct(figures.exercise_summary(ANSWERS))
    rows = {r["exercise"]: r["correct_pct"] for r in _values(chart)}
    assert rows == {"03-precision": 50.0, "05-verdict": 100.0}
    assert chart.to_dict()["mark"]["type"] == "bar"


def test_answers_chart_shows_numbers_as_points_and_choices_as_counts():
    numbers = board_charts.answers(figures.exercise_answers(ANSWERS, "03-precision"), "03")
    points = sorted((r["learner"], r["kind"], r["value"]) for r in _values(numbers))
    assert points == [("ann", "measured", 1.6), ("ann", "prediction", 2.0),
                      ("bob", "measured", 2.4)]  # fmt: skip
    choices = board_charts.answers(figures.exercise_answers(ANSWERS, "05-verdict"), "05")
    counts = sorted((r["value"], r["kind"], r["learners"]) for r in _values(choices))
    assert counts == [("balanced", "prediction", 1), ("data-bound", "measured", 1)]


def test_a_late_or_edited_prediction_is_marked_on_the_learners_chart():
    room = figures.answers_frame([
        {"id": 1, "learner": "ann", "host": "h1", "exercise": "03", "ok": None, "message": "",
         "kind": "prediction", "prediction": 2.0, "late": False},
        {"id": 2, "learner": "bob", "host": "h2", "exercise": "03", "ok": None, "message": "",
         "kind": "prediction", "prediction": 1.7, "late": True},
        {"id": 3, "learner": "ann", "host": "h1", "exercise": "03", "ok": False, "message": "",
         "kind": "check", "prediction": 2.0, "measured": 1.6, "late": False, "changed_to": 1.6},
    ])  # fmt: skip
    chart = board_charts.answers(figures.exercise_answers(room, "03"), "03")
    marks = {(r["learner"], r["kind"]): r["note"] for r in _values(chart)}
    assert marks[("ann", "prediction")] == "changed after the burst to 1.6"
    assert marks[("bob", "late prediction")] == "committed after a burst had run"
    assert "late prediction" in chart.to_dict()["encoding"]["color"]["scale"]["domain"]


def test_empty_views_say_what_fills_them():
    empty = figures.exercise_summary(figures.answers_frame([]))
    assert "no answers yet" in str(board_charts.correct(empty).to_dict())
    assert "no successful burst" in str(board_charts.best(pd.DataFrame()).to_dict())
    none = pd.DataFrame(columns=["learner", "host", "ratio"])
    assert "both bf16 and default" in str(
        board_charts.effect(none, "precision", "bf16", "default").to_dict()
    )
    for name in ("correct", "answers", "best", "effect"):
        assert board_charts.waiting_chart(name).to_dict()["layer"]


def test_effect_chart_plots_each_machine_on_a_log_axis_with_a_rule_at_one():
    effects = pd.DataFrame([
        {"learner": "ann", "host": "h1", "device_name": "H100", "workload": "cnn",
         "held": "defaults", "ratio": 2.4, "new_per_s": 240.0, "old_per_s": 100.0},
        {"learner": "bob", "host": "h2", "device_name": "T4", "workload": "cnn",
         "held": "defaults", "ratio": 0.9, "new_per_s": 180.0, "old_per_s": 200.0},
    ])  # fmt: skip
    chart = board_charts.effect(effects, "precision", "bf16", "default")
    assert _values(chart, 0) == [{"ratio": 1.0}]
    assert chart.to_dict()["layer"][1]["encoding"]["x"]["scale"]["type"] == "log"
    assert [r["machine"] for r in _values(chart, 1)] == ["ann @ h1", "bob @ h2"]


def test_best_chart_shows_the_workload_most_learners_ran():
    best = pd.DataFrame([
        {"learner": "ann", "host": "h1", "workload": "cnn", "device_name": "x",
         "samples_per_s": 300.0, "knobs": "batch_size=64", "id": 4},
        {"learner": "bob", "host": "h2", "workload": "cnn", "device_name": "y",
         "samples_per_s": 200.0, "knobs": "defaults", "id": 6},
        {"learner": "bob", "host": "h2", "workload": "gpt", "device_name": "y",
         "samples_per_s": 50.0, "knobs": "defaults", "id": 9},
    ])  # fmt: skip
    chart = board_charts.best(best)
    assert [r["samples_per_s"] for r in _values(chart)] == [300.0, 200.0]
    assert "cnn" in chart.to_dict()["title"]["text"]
    assert [r["learner"] for r in _values(board_charts.best(best, "gpt"))] == ["bob"]


def test_an_unverified_claim_is_grey_beside_the_correct_share_and_marked_per_learner():
    claim = figures.answers_frame([
        {"id": 1, "learner": "ann", "host": "h1", "exercise": "12-bf16", "ok": True,
         "message": "", "prediction": 2.0, "measured": 1.9, "verified": True},
        {"id": 2, "learner": "bob", "host": "h2", "exercise": "12-bf16", "ok": True,
         "message": "", "prediction": 9.0, "measured": 1.8, "verified": False},
    ])  # fmt: skip
    chart = board_charts.correct(figures.exercise_summary(claim))
    (row,) = _values(chart)
    assert (row["correct_pct"], row["unverified_pct"], row["unverified"]) == (50.0, 50.0, 1)
    spec = chart.to_dict()
    assert spec["encoding"]["color"]["scale"]["range"][1] == "#8c8c8c"  # grey: not correct
    points = board_charts.answers(figures.exercise_answers(claim, "12-bf16"), "12-bf16")
    verdicts = {(r["learner"], r["kind"]): r["verdict"] for r in _values(points)}
    assert verdicts[("ann", "measured")] == "correct (server)"
    assert verdicts[("bob", "measured")] == "correct, unverified"
    assert "unverified" in str(points.to_dict()["encoding"]["shape"])  # marked on the chart
