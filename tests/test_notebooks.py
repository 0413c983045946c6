"""Every notebook runs top to bottom on a CPU, headless, and is stored without outputs."""

import json
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    assert not [c for c in nb["cells"] if c.get("outputs") or c.get("execution_count")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, tiny_data, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DATA", str(tiny_data))  # the kernel inherits the env
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})  # fmt: skip
    t0 = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - t0
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert elapsed < 180, f"{path.name} took {elapsed:.0f} s on this CPU (limit 3 min)"
