"""Lessons run in the ways the guide plans them besides top to bottom: lesson 10's core part
(cost per run) on its own, as the half day teaches it, and lesson 6 with one rank, as on a
machine with one GPU (the GPU session runs it so), where it falls back and says why. Each
plays a learner who predicts (``benchmarks/lesson_predictions.py``): a measuring cell with no
prediction does not start its burst."""

from pathlib import Path

import nbformat
import pytest
from benchmark_modules import load_benchmark
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).parents[2] / "notebooks"
CORE_HEADING = "## 3. Money: cost per run (the core part)"
ONE_RANK = "ranks = torch.cuda.device_count() if gpu else 2"


rehearsal = load_benchmark("lesson_predictions")


def _run(nb, tmp_path, lesson) -> list:
    nb = rehearsal.with_predictions(nb, lesson)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    return [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]


def _text(cell) -> str:
    return "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                   for o in cell.get("outputs", []))  # fmt: skip


@pytest.mark.concurrent  # a kernel waiting on bursts
def test_lesson_10s_core_part_runs_after_the_set_up_cell_alone(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DATA", str(tiny_data))
    nb = nbformat.read(NOTEBOOKS / "10_memory_and_money.ipynb", as_version=4)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    start = next(i for i, c in enumerate(nb.cells) if c.source.startswith(CORE_HEADING))
    nb.cells = [setup, *nb.cells[start:]]
    assert not _run(nb, tmp_path, "10")
    printed = "\n".join(_text(c) for c in nb.cells)
    assert "start:" in printed and "tuned:" in printed and "per million samples" in printed


@pytest.mark.concurrent  # torchrun jobs, mostly start-up
def test_lesson_6_with_one_rank_falls_back_and_finishes(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DATA", str(tiny_data))
    nb = nbformat.read(NOTEBOOKS / "06_distributed_and_nccl.ipynb", as_version=4)
    setup = next(c for c in nb.cells if ONE_RANK in c.source)
    setup.source = setup.source.replace(ONE_RANK, "ranks = 1  # as on a machine with one GPU")
    assert not _run(nb, tmp_path, "06")
    printed = "\n".join(_text(c) for c in nb.cells)
    assert "one process here (one GPU): no ranks to compare" in printed
    assert "1 rank(s)" in printed and "one rank: nothing crosses a link" in printed


@pytest.mark.concurrent  # a kernel waiting on bursts
def test_lesson_12s_sections_run_without_the_ones_before_them(tiny_data, tmp_path, monkeypatch):
    """Section 3 (memory, core) right after the set-up cell: it measures the eager burst
    section 1 would have left, instead of raising KeyError (every section does so through
    ``lesson.baseline``)."""
    monkeypatch.setenv("WORKBENCH_DATA", str(tiny_data))
    nb = nbformat.read(NOTEBOOKS / "12_transformer_on_a_gpu.ipynb", as_version=4)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    start = next(i for i, c in enumerate(nb.cells) if c.source.startswith("## 3."))
    end = next(i for i, c in enumerate(nb.cells) if "## 4." in c.source)
    nb.cells = [setup, *nb.cells[start:end]]
    assert not _run(nb, tmp_path, "12")
    printed = "\n".join(_text(c) for c in nb.cells)
    assert "not measured yet (its section did not run here): measuring it now" in printed
    assert "Prediction for 12-memory committed" in printed and "12-memory" in printed
