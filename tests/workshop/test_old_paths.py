"""The modules that moved to the workshop tier keep their old paths for one release: importing
one warns with the new path (at the line that imported it, so a notebook shows it) and gives the
same objects (workbench/core/moved.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from workbench.workshop import checks

MOVED = {
    "workbench.notebook.workshop": "workbench.workshop.checks",
    "workbench.notebook.workshop_memory": "workbench.workshop.memory_lesson",
    "workbench.notebook.workshop_compute": "workbench.workshop.compute_lesson",
    "workbench.notebook.workshop_transformer": "workbench.workshop.transformer_lesson",
    "workbench.notebook.reference": "workbench.workshop.reference",
    "workbench.notebook.slices": "workbench.workshop.slices",
    "workbench.notebook.predictions": "workbench.workshop.predictions",
    "workbench.notebook.lesson_plans": "workbench.workshop.lesson_plans",
    "workbench.notebook.room": "workbench.workshop.room",
    "workbench.notebook.format_charts": "workbench.workshop.format_charts",
    "workbench.notebook.board": "workbench.workshop.board",
    "workbench.notebook.board_charts": "workbench.workshop.board.charts",
    "workbench.analysis.board": "workbench.workshop.board.figures",
    "workbench.history.classroom": "workbench.workshop.classroom",
}


def _import_fresh(old: str, monkeypatch) -> tuple[object, list[warnings.WarningMessage]]:
    monkeypatch.delitem(sys.modules, old, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    return module, [w for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize(("old", "new"), MOVED.items(), ids=list(MOVED))
def test_an_old_path_warns_with_the_new_one_and_gives_the_same_objects(old, new, monkeypatch):
    shim, caught = _import_fresh(old, monkeypatch)
    assert [str(w.message) for w in caught] == [
        f"{old} has moved to {new}: import it from there ({old} goes in the next release)"
    ]
    assert caught[0].filename == __file__  # the importing line, not the shim or importlib
    moved = importlib.import_module(new)
    assert shim.__all__ == moved.__all__ and moved.__all__
    for name in moved.__all__:
        assert getattr(shim, name) is getattr(moved, name), name


def test_names_outside_all_are_handed_on_and_unknown_ones_say_where_they_were_looked_for(
    monkeypatch,
):
    shim, _ = _import_fresh("workbench.notebook.workshop", monkeypatch)
    assert shim.PREDICTION_TOL == checks.PREDICTION_TOL  # not in __all__: still there
    assert shim._judge_first is checks._judge_first
    with pytest.raises(
        AttributeError, match=r"'workbench\.workshop\.checks' has no attribute 'nope'"
    ):
        _ = shim.nope


def test_a_notebook_cell_that_imports_an_old_path_shows_the_warning():
    """Python shows a DeprecationWarning by default only when ``__main__`` triggered it: the
    warning must point at the importing line, as it does in a kernel's cell."""
    code = "from workbench.notebook import workshop\nprint(workshop.Check is not None)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "True"
    assert "<string>:1: DeprecationWarning: workbench.notebook.workshop has moved to " \
           "workbench.workshop.checks" in p.stderr  # fmt: skip
