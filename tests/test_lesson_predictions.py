"""benchmarks/lesson_predictions.py: the rehearsal's learner sets a prediction after each
prediction cell's own line, and finds the exercises whose commit and check do not meet."""

from pathlib import Path

import nbformat
from benchmark_modules import load_benchmark

rehearsal = load_benchmark("lesson_predictions")


def _cell(source: str, *printed: str):
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=t) for t in printed]
    return cell


def test_the_prediction_is_set_after_the_stored_line_which_still_runs_first():
    nb = nbformat.v4.new_notebook(cells=[_cell("prediction = None  # a ratio"), _cell("x = 1")])
    rehearsal.with_predictions(nb, "03_precision")
    assert nb.cells[0].source.splitlines() == [
        "prediction = None  # a ratio",
        f"prediction = 0.5  {rehearsal.MARK}",
    ]
    assert nb.cells[1].source == "x = 1"


def test_a_lesson_without_predictions_is_left_as_it_is():
    nb = nbformat.v4.new_notebook(cells=[_cell("prediction = None  # a ratio")])
    rehearsal.with_predictions(nb, "00_instructor_board")
    assert nb.cells[0].source == "prediction = None  # a ratio"


def test_a_committed_and_judged_prediction_has_no_problem():
    measure = 'workshop.commit_prediction(prediction, exercise="03-precision")\ndf = 1'
    cells = [
        _cell(measure, "Prediction for 03-precision committed: 0.5 at 10:00:00."),
        _cell("workshop.check_speedup(None, df)", "Not yet: 0.5 is off"),
    ]
    assert rehearsal.unjudged(cells) == []


def test_a_commit_that_did_not_print_and_a_check_asking_for_a_prediction_are_found():
    measure = 'workshop.commit_prediction(prediction, exercise="03-precision")\ndf = 1'
    cells = [
        _cell(measure, "No prediction for 03-precision"),
        _cell("lesson.check_layout(p, a, b)", "Not yet: make a prediction first"),
    ]
    found = rehearsal.unjudged(cells)
    assert found == [
        "cell 0: the prediction for 03-precision was not committed",
        "cell 1: the check asked for a prediction",
    ]


def test_every_lesson_with_a_prediction_has_the_rehearsals_values():
    notebooks = Path(__file__).resolve().parents[1] / "notebooks"
    for path in sorted(notebooks.glob("[01][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        names = {m.group(1) for c in nb.cells if c.cell_type == "code"
                 for m in rehearsal.ASSIGNED.finditer(c.source)}  # fmt: skip
        assert names == set(rehearsal.PREDICTED.get(path.name[:2], {})), path.name
