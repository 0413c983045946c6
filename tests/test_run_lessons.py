"""benchmarks/run_lessons.py runs the lessons on a lent GPU box, in minutes that cannot be spent
twice: its records (outcome, time, the error's last line), its timeouts, its budget and the
kernel it starts are checked here on small notebooks written for the test."""

import importlib.util
import json
import sys
import time
from datetime import datetime, timezone
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
    # where the time went: each executed cell, by its index and first line, and the kernel start
    assert [(c["index"], c["source"], c["status"]) for c in broken["cells"]] == [
        (0, "x = 1", "ok"),
        (1, "raise ValueError('the lesson broke\\nat its end')", "error"),
    ]
    (sleeper,) = slow["cells"]
    assert (sleeper["source"], sleeper["status"]) == ("import time", "stopped")
    assert 3 <= sleeper["s"] <= slow["wall_s"]  # the cell the timeout stopped holds the time
    assert all(0 < r["start_s"] < r["wall_s"] for r in (ok, broken, slow))
    assert all(r["expected_s"] is None for r in run["lessons"])  # estimates are a GPU's


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


def test_words_select_lessons_and_unmeasured_leaves_out_what_a_kept_run_has(runner):
    assert runner.select(["core"]) == list(runner.CORE)
    assert runner.select(["03,01", "core"])[:3] == ["03", "01", "02"]  # each once, in order
    assert runner.select(["all"]) == [*runner.CORE, *runner.OPTIONAL]
    assert runner.select(["unmeasured"], {"01": None, "06": None}) == [
        n for n in [*runner.CORE, *runner.OPTIONAL] if n not in ("01", "06")]  # fmt: skip
    assert runner.select(["optional", "11_compute"]) == [*runner.OPTIONAL, "11_compute"]


def _kept(record: dict):
    return sys.modules["gpu_record"].LessonRun(Path("gpu-x.json"), {}, record)


def test_a_lesson_is_expected_to_take_its_kept_time_on_the_same_gpu_else_its_estimate(runner):
    h200 = "NVIDIA H200"
    kept = {"03": _kept({"lesson": "03_precision", "outcome": "passed", "wall_s": 61.5,
                         "device": h200}),
            "04": _kept({"lesson": "04_batch", "outcome": "failed", "wall_s": 9.0,
                         "device": h200})}  # fmt: skip
    assert runner.expected_s("03_precision", kept, h200) == 61.5
    assert (
        runner.expected_s("03_precision", kept, "NVIDIA H100 80GB HBM3") == (runner.GPU_EST_S["03"])
    )  # another GPU's time says little here
    assert runner.expected_s("04_batch", kept, h200) == runner.GPU_EST_S["04"]  # it failed
    assert runner.expected_s("03_precision", kept, "cpu") is None


def test_a_lesson_expected_to_take_longer_than_is_left_is_skipped_and_the_next_tried(
    runner, lessons, monkeypatch
):  # fmt: skip
    monkeypatch.setattr(runner, "device_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(runner, "GPU_EST_S", {"01": 10_000.0})  # 01_ok will not fit
    paths = runner.find_lessons(lessons, ["01", "02"])
    docs = []
    records = runner.run_lessons(paths, runner.Limits(budget_s=120, timeout_s=30, min_s=1),
                                 command="test", started=time.monotonic(),
                                 on_update=lambda doc: docs.append(json.dumps(doc)))  # fmt: skip
    assert [(r.lesson, r.outcome, r.expected_s) for r in records] == [
        ("01_ok", "skipped: no time", 10_000.0), ("02_broken", "failed", None)]  # fmt: skip
    assert len(docs) == 2 and json.loads(docs[-1])["device"] == "NVIDIA H200"


def test_cell_times_come_from_the_timestamps_nbclient_writes(runner):
    t = "2027-01-02T10:00:{:02d}.000000Z"
    cells = [
        {"cell_type": "markdown", "source": "# a title"},
        {"cell_type": "code", "source": ["# the set-up\n", "import workbench as wb\n"],
         "metadata": {"execution": {"iopub.status.busy": t.format(5),
                                    "iopub.execute_input": t.format(5),
                                    "shell.execute_reply": t.format(7)}}},
        {"cell_type": "code", "source": "r = wb.run_burst('cnn', k)", "outputs": [],
         "metadata": {"execution": {"iopub.execute_input": t.format(7)}}},  # no reply yet
        {"cell_type": "code", "source": "never ran", "metadata": {}},
    ]  # fmt: skip
    started = datetime(2027, 1, 2, 10, 0, 1, tzinfo=timezone.utc)
    now = datetime(2027, 1, 2, 10, 0, 30, tzinfo=timezone.utc)
    out, start_s = runner.cell_times(cells, started, now)
    assert start_s == 4.0  # the kernel's start, before the first cell
    assert out == [
        {"index": 1, "source": "import workbench as wb", "s": 2.0, "status": "ok"},
        {"index": 2, "source": "r = wb.run_burst('cnn', k)", "s": 23.0, "status": "stopped"},
    ]
    assert runner.slowest_cells({"cells": out}, 1) == [out[1]]


def test_the_core_lessons_are_notebooks_of_the_repository(runner):
    core = runner.find_lessons(runner.NOTEBOOKS, runner.CORE)
    assert [p.name[:2] for p in core] == list(runner.CORE)
