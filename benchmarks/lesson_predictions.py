"""The rehearsal's learner: the predictions a run of the lessons types before each burst.

The notebooks ship with every prediction empty (``prediction = None``), so a run that leaves
them so only ever shows "make a prediction first" and never the path a learner who predicts
takes: the commit as the burst starts, the check that judges it. A rehearsal (the notebook
test on a CPU, ``run_lessons.py`` on a lent GPU) plays a learner who predicts: one line is
added after each prediction cell's own (``prediction = ...  # set by the rehearsal``), so the
stored line still runs first. The values are ordinary guesses of the right kind, not the
answers: a check may still say "Not yet", and on a GPU the verdicts differ from a CPU's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

PREDICTED: dict[str, dict[str, Any]] = {  # per lesson ("03") and prediction variable
    "01": {"prediction": 50},
    "02": {"prediction": 1},
    "03": {"prediction": 0.5, "prediction_parity": 0.001},
    "04": {"prediction": 16},
    "05": {"prediction": "data-bound"},
    "06": {"prediction": 64 * 1024, "prediction_nodes": "same"},
    "07": {"prediction": "convolution"},
    "08": {"prediction": 1.0},
    "09": {"prediction": "lmdb"},
    "10": {"prediction": "activation_checkpointing"},
    "11": {"prediction": "never", "prediction_layout": "same", "prediction_peak": 10},
    "12": {
        "prediction_bf16": 2.0,
        "prediction_compile": "default",
        "prediction_attention": 0.8,
        "prediction_memory": 40,
        "prediction_fp8": 1.2,
        "prediction_packing": 1.5,
    },
}
ASSIGNED = re.compile(r"^(prediction\w*) = (.*?)(\s+#.*)?$", re.MULTILINE)
"""A prediction cell's line: ``prediction = None  # what to predict``."""
COMMITTED = re.compile(r'commit_prediction\((\w+), exercise="([^"]+)"\)')
"""The first line of a measuring cell: ``workshop.commit_prediction(prediction, exercise=...)``."""
MARK = "# set by the rehearsal"


def with_predictions(nb: Any, lesson: str) -> Any:
    """``nb`` (an nbformat notebook) with the rehearsal's predictions for ``lesson`` set after
    each prediction cell's own line. A lesson without predictions is returned unchanged."""
    values = PREDICTED.get(lesson[:2], {})
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        names = [m.group(1) for m in ASSIGNED.finditer(cell.source) if m.group(1) in values]
        extra = [f"{name} = {values[name]!r}  {MARK}" for name in names]
        cell.source = "\n".join([cell.source, *extra])
    return nb


def unjudged(cells: list[Mapping[str, Any]]) -> list[str]:
    """What went wrong with the predictions in an executed notebook's ``cells``: a commit that
    did not print that it committed, a check that still asked for a prediction (the commit and
    the check name different exercises). Empty when every prediction was committed and judged."""
    problems = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", ""))
        said = _printed(cell)
        for _name, exercise in COMMITTED.findall(source):
            if f"Prediction for {exercise} committed" not in said:
                problems.append(f"cell {index}: the prediction for {exercise} was not committed")
        if re.search(r"(workshop|lesson)\.check_", source) and "make a prediction first" in said:
            problems.append(f"cell {index}: the check asked for a prediction")
    return problems


def _printed(cell: Mapping[str, Any]) -> str:
    parts = []
    for out in cell.get("outputs") or []:
        parts.append(out.get("text", "") or (out.get("data") or {}).get("text/plain", ""))
    return "".join(parts)
