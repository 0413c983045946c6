"""benchmarks/run_lessons.py runs the lessons on a lent GPU box, in minutes that cannot be spent
twice: its records (outcome, time, the error's last line), its timeouts, its budget and the
kernel it starts are checked here on small notebooks written for the test."""

import importlib.util
import json
import sys
from pathlib import Path

import nbformat
import pytest

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
_REPO = _BENCH.parent


@pytest.fixture(scope="module")
def runner():
    spec = importlib.util.spec_from_file_location("run_lessons", _BENCH / "run_lessons.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def _notebook(folder: Path, name: str, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture
def lessons(tmp_path) -> Path:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    # the kernel is this interpreter, imports workbench from the checkout, runs in a folder
    # of its own and has a WORKBENCH_HOME: what the lessons rely on, on a box with no install
    _notebook(folder, "01_ok", "import os, sys\nfrom pathlib import Path\nimport workbench",
              f"assert sys.executable == {sys.executable!r}, sys.executable\n"
              f"assert Path(workbench.__file__).parents[1] == Path({str(_REPO)!r})\n"
              "assert Path.cwd().name == '01_ok'\nassert os.environ['WORKBENCH_HOME']")  # fmt: skip
    _notebook(folder, "02_broken", "x = 1", "raise ValueError('the lesson broke\\nat its end')")
    _notebook(folder, "03_slow", "import time\ntime.sleep(60)")
    return folder


@pytest.mark.concurrent  # waits on kernels and a timeout
def test_each_lesson_is_recorded_with_its_outcome_time_and_error(runner, lessons, tmp_path):
    out = tmp_path / "lessons.json"
    argv = ["01", "02", "03", "--notebooks", str(lessons), "--timeout-s", "4",
            "--budget-s", "120", "--json", str(out)]  # fmt: skip
    assert runner.main(argv) == 1  # a failed and a timed-out lesson fail the run
    run = json.loads(out.read_text())
    assert run["device"] == "cpu" and run["budget_s"] == 120
    assert run["command"].endswith("benchmarks/run_lessons.py " + " ".join(argv))
    ok, broken, slow = run["lessons"]
    assert [r["lesson"] for r in run["lessons"]] == ["01_ok", "02_broken", "03_slow"]
    assert (ok["outcome"], ok["error"], ok["device"]) == ("passed", None, "cpu")
    assert (broken["outcome"], broken["error"]) == (
        "failed",
        "ValueError: the lesson broke at its end",
    )
    assert slow["outcome"] == "timeout" and slow["timeout_s"] == 4
    assert 3 <= slow["wall_s"] < 60  # stopped by its timeout, not by the cell's end
    assert all(0 < r["wall_s"] < 60 for r in (ok, broken))


def test_a_lesson_that_does_not_fit_the_budget_is_skipped_and_said(runner, lessons, tmp_path):
    out = tmp_path / "lessons.json"
    argv = ["--all", "--notebooks", str(lessons), "--budget-s", "1", "--min-s", "30",
            "--json", str(out)]  # fmt: skip
    assert runner.main(argv) == 0  # skipped is listed, not failed
    records = json.loads(out.read_text())["lessons"]
    assert [r["lesson"] for r in records] == ["01_ok", "02_broken", "03_slow"]
    assert {r["outcome"] for r in records} == {"skipped: no time"}


def test_lessons_are_found_by_number_and_an_unknown_one_is_named(runner, lessons):
    assert [p.name for p in runner.find_lessons(lessons, ["03", "01_ok"])] == [
        "03_slow.ipynb",
        "01_ok.ipynb",
    ]
    with pytest.raises(SystemExit, match="'09'"):
        runner.find_lessons(lessons, ["09"])


def test_the_core_lessons_are_notebooks_of_the_repository(runner):
    core = runner.find_lessons(runner.NOTEBOOKS, runner.CORE)
    assert [p.name[:2] for p in core] == list(runner.CORE)
