"""Every notebook runs top to bottom on a CPU, headless, and is stored without outputs.

Their wall time is checked against the targets (the quickstart under 2 minutes) and reported
as a warning when over: on a loaded 2-core machine the clock says more about the neighbours
than about the notebook. WORKBENCH_STRICT_TIMING=1 makes it a failure (for a quiet machine).

Predictions: the notebooks ship with every prediction empty (``prediction = None``; checked
on the files as stored). A learner who keeps it so gets "make a prediction first" from every
check (tested per checker in test_checks_count_predictions.py). The run here plays a learner
who predicts (``benchmarks/lesson_predictions.py``, which the lessons' GPU run uses too): one
line is added after each prediction cell's own (``prediction = ...  # set by the rehearsal``),
so the stored line still runs, and then each measuring cell must print that its prediction
was committed and each check judge it. That also proves each
notebook's commit and check name the same exercise. The values are ordinary guesses of the
right kind, not the answers: a check may say "Not yet".
"""

import json
import os
import time
import warnings
from pathlib import Path

import nbformat
import pytest
from benchmark_modules import load_benchmark
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))
QUICKSTART = "01_quickstart.ipynb"
LIMIT_S = 180.0  # any notebook, top to bottom on a CPU
QUICKSTART_LIMIT_S = 120.0  # the promise to a first-time user: under 2 minutes on a CPU


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    assert not [c for c in nb["cells"] if c.get("outputs") or c.get("execution_count")]


rehearsal = load_benchmark("lesson_predictions")
PREDICTED, _ASSIGNED, _COMMIT = rehearsal.PREDICTED, rehearsal.ASSIGNED, rehearsal.COMMITTED


def _code(path):
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]
            if c["cell_type"] == "code"]  # fmt: skip


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_prediction_ships_empty_and_is_committed_where_its_burst_starts(path):
    code = _code(path)
    assigned = [m.group(1, 2) for t in code for m in _ASSIGNED.finditer(t)]
    assert all(value == "None" for _, value in assigned), assigned
    assert all(m.group(3) for t in code for m in _ASSIGNED.finditer(t)), "say what to predict"
    committed = {m.group(1) for t in code for m in _COMMIT.finditer(t)}
    assert committed == {name for name, _ in assigned}
    assert set(PREDICTED.get(path.name[:2], {})) == committed
    for cell in code:  # the commit is the first line of the cell that measures
        assert all(line.startswith("workshop.commit_prediction(")
                   for line in cell.splitlines()[: cell.count("commit_prediction(")])  # fmt: skip


@pytest.mark.concurrent  # a kernel waiting on bursts of fixed length: two at a time in make test
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, tiny_data, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DATA", str(tiny_data))  # the kernel inherits the env
    nb = rehearsal.with_predictions(nbformat.read(path, as_version=4), path.name)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})  # fmt: skip
    t0 = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - t0
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert not rehearsal.unjudged(nb.cells)
    limit_s = QUICKSTART_LIMIT_S if path.name == QUICKSTART else LIMIT_S
    if elapsed >= limit_s:  # wall time on a shared, loaded machine is a figure, not a verdict
        message = f"{path.name} took {elapsed:.0f} s on this CPU (target {limit_s:g} s)"
        if os.environ.get("WORKBENCH_STRICT_TIMING") == "1":
            pytest.fail(message)
        warnings.warn(message, stacklevel=1)


def test_the_quickstart_is_among_the_timed_notebooks():
    assert QUICKSTART in [p.name for p in NOTEBOOKS]
