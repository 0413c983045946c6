"""The instructor guide's half day (notebooks/README.md): its arithmetic holds (240 minutes,
each row starting where the one before it ended, the sums its sentence states), its lessons are
the ones the GPU session runs as the core (``benchmarks/run_lessons.py``'s ``CORE``, in the
same order), lesson 10's core part (cost per run) is in it, and the table of minutes per lesson
agrees with it."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
GUIDE = _ROOT / "notebooks" / "README.md"


@pytest.fixture(scope="module")
def run_lessons():
    spec = importlib.util.spec_from_file_location(
        "run_lessons", _ROOT / "benchmarks" / "run_lessons.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _section(title: str, text: str | None = None) -> str:
    text = GUIDE.read_text() if text is None else text
    body = text.split(f"\n## {title}", 1)[1]
    return body.split("\n## ", 1)[0]


def _rows(section: str) -> list[list[str]]:
    """The first table's rows in ``section``, header and rule left out, cells stripped."""
    table = section[section.index("\n|") + 1 :].split("\n\n", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")
    return 60 * int(hours) + int(minutes)


def plan_rows(text: str | None = None) -> list[tuple[int, int, str]]:
    """The half day's rows: (start minute, minutes, what)."""
    return [(_minutes(t), int(m), what) for t, m, what in _rows(_section("The half day", text))]


def _lesson(what: str) -> str | None:
    """The lesson a plan row teaches ("**10** cost per run" -> "10"), or None."""
    m = re.match(r"\*\*(\d+)\*\*", what)
    return f"{int(m.group(1)):02d}" if m else None


def check_plan(text: str | None = None) -> dict[str, int]:
    """The plan's sums by kind, after checking that each row starts where the one before it
    ended and that the day is 240 minutes; AssertionError naming the row that breaks it."""
    rows = plan_rows(text)
    clock = 0
    sums = {"teaching": 0, "breaks": 0, "welcome and wrap-up": 0, "slack": 0}
    for start, minutes, what in rows:
        assert start == clock, f"{what!r} starts at minute {start}, the row before ends at {clock}"
        clock += minutes
        if _lesson(what):
            sums["teaching"] += minutes
        elif what == "break":
            sums["breaks"] += minutes
        elif what.startswith(("welcome", "wrap-up")):
            sums["welcome and wrap-up"] += minutes
        else:
            assert what == "slack", f"a row that is no lesson, break, welcome or slack: {what!r}"
            sums["slack"] += minutes
    assert clock == 240, f"the day ends at minute {clock}, not 240"
    return sums


def test_the_half_day_is_240_minutes_and_says_its_sums():
    sums = check_plan()
    said = (f"Teaching {sums['teaching']} minutes, breaks {sums['breaks']}, welcome and wrap-up "
            f"{sums['welcome and wrap-up']}, slack {sums['slack']}: 240.")  # fmt: skip
    assert said in _section("The half day")
    assert sums["slack"] >= 10 and sums["breaks"] >= 30  # a room runs over; people need air


def test_a_plan_that_does_not_add_up_is_caught():
    text = GUIDE.read_text()
    longer = text.replace("| 3:15 | 10 | **10** cost per run", "| 3:15 | 15 | **10** cost per run")
    assert longer != text
    with pytest.raises(AssertionError, match="starts at minute 205, the row before ends at 210"):
        check_plan(longer)


def test_the_plan_carries_lesson_10s_core_part_cost_per_run():
    rows = {_lesson(what): (minutes, what) for _, minutes, what in plan_rows() if _lesson(what)}
    minutes, what = rows["10"]
    assert minutes == 10 and "cost per run" in what and "core part" in what


def test_the_session_runs_the_plans_lessons_as_its_core(run_lessons):
    taught = [_lesson(what) for _, _, what in plan_rows() if _lesson(what)]
    assert list(run_lessons.CORE) == taught
    notebooks = sorted(p.name[:2] for p in (_ROOT / "notebooks").glob("*.ipynb"))
    assert sorted(run_lessons.CORE + run_lessons.OPTIONAL) == notebooks  # every one runs
    assert run_lessons.part("10") == "core part: cost per run"


def test_the_minutes_per_lesson_agree_with_the_plan(run_lessons):
    plan = {_lesson(what): minutes for _, minutes, what in plan_rows() if _lesson(what)}
    for number, notebook, core, teaching, *_ in _rows(_section("Minutes per lesson")):
        key = f"{int(number):02d}"
        assert notebook.startswith(f"`{key}_"), (number, notebook)
        if key not in run_lessons.CORE:
            assert core == "optional", notebook
        elif key in run_lessons.CORE_PART:
            assert core.startswith(f"{run_lessons.CORE_PART[key]} ({plan[key]} min)"), notebook
        else:
            assert (core, teaching) == ("yes", f"{plan[key]} min"), notebook


def test_lesson_10_marks_its_core_and_optional_parts():
    cells = json.loads((_ROOT / "notebooks" / "10_memory_and_money.ipynb").read_text())["cells"]
    headings = ["".join(c["source"]).splitlines()[0] for c in cells if c["cell_type"] == "markdown"]
    assert "## 3. Money: cost per run (the core part)" in headings
    assert "## 1. One burst, and where its memory went (memory: the optional part)" in headings
