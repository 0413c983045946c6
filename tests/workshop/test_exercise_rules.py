"""One table of what each exercise accepts (workbench/history/exercise_rules.py): every
exercise the lessons name is in it, judged by the server or listed as unverified with a reason,
and the checks grade with the very rule ``workbench class init`` stores for the server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from workbench.history.exercise_rules import RULES, UNVERIFIED, Rule
from workbench.workshop import checks as workshop
from workbench.workshop import compute_lesson, memory_lesson, transformer_lesson

ROOT = Path(__file__).resolve().parents[2]
_NAMED = re.compile(r"""exercise=["']([0-9]{2}-[a-z0-9-]+)["']""")


def _lesson_exercises() -> set[str]:
    """Every exercise a lesson notebook or a lesson module names."""
    found: set[str] = set()
    for notebook in sorted((ROOT / "notebooks").glob("[01][0-9]_*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        found |= {name for c in cells for name in _NAMED.findall("".join(c["source"]))}
    for module in sorted((ROOT / "workbench" / "workshop").glob("*.py")):
        found |= set(_NAMED.findall(module.read_text()))
    return (
        found
        | set(compute_lesson.EXERCISES)
        | {memory_lesson.FREES_MOST, transformer_lesson.MEMORY, transformer_lesson.FP8}
    )


def test_every_lesson_exercise_is_judged_by_the_server_or_listed_with_a_reason():
    named = _lesson_exercises()
    assert "01-data-wait" in named and "12-fp8" in named and "03-parity" in named
    assert not set(RULES) & set(UNVERIFIED)
    assert named == set(RULES) | set(UNVERIFIED), named ^ (set(RULES) | set(UNVERIFIED))
    assert all(len(reason) > 20 for reason in UNVERIFIED.values())


def test_a_tolerance_other_than_the_exercises_rule_is_refused_never_used():
    workshop.commit_prediction(40, exercise="01-data-wait")
    same = workshop.check_prediction(40, 50.0, abs_tol=15, exercise="01-data-wait")
    assert same.ok  # the notebook's own tolerance: the rule's
    other = workshop.check_prediction(40, 50.0, abs_tol=30, exercise="01-data-wait")
    assert not other.ok and "exercise_rules.py" in other.message


@pytest.mark.parametrize("prediction", [1.49, 1.5, 2.0, 2.5, 2.51, "2.0"])
def test_a_predicted_ratio_is_graded_as_the_server_grades_it(prediction):
    frame = pd.DataFrame([{"precision": p, "samples_per_s": s, "status": "ok"}
                          for p, s in (("default", 30.0), ("bf16", 60.0))])  # fmt: skip
    workshop.commit_prediction(prediction, exercise="03-precision")
    check = workshop.check_speedup(None, frame, "precision", "bf16", "default",
                                   prediction=prediction, exercise="03-precision")  # fmt: skip
    assert check.measured == 2.0
    assert check.ok == RULES["03-precision"].accepts(prediction, check.measured)
    assert check.ok == (prediction in (1.5, 2.0, 2.5))  # 25% either side of 2.0, not "2.0"


def test_a_rule_judges_numbers_by_their_band_and_choices_by_name():
    band = Rule(rel_tol=0.25, abs_tol=15.0)
    assert band.accepts(25, 40.0) and not band.accepts(24.9, 40.0)
    assert not band.accepts(True, 1) and not band.accepts(None, 40.0)
    assert Rule(choice=True).accepts(" Data-bound", "data-bound")
    assert not Rule(choice=True).accepts("balanced", "data-bound")


def test_class_mode_docs_list_the_exercises_the_server_judges():
    text = (ROOT / "docs" / "class-mode.md").read_text()
    (row,) = [line for line in text.splitlines() if line.startswith("| the server's")]
    assert set(re.findall(r"`(\d{2}-[a-z0-9-]+)`", row)) == set(RULES)
