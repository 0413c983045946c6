r"""Run the lessons headless on this machine (a lent GPU box), each under its own timeout, within
a total budget, and keep a JSON record of each as it ends: its outcome, its time and where the
time went (each cell's).

On the box (CPython 3.12, torch, no network, no Jupyter packages) the GPU session's lessons
steps run them (``bash benchmarks/gpu_session.sh --steps lessons --budget-s 570``), after
``make wheelhouse`` here has filled ``.wheelhouse/`` (carried along). By hand, from the
repository root:

    python3 -m pip install -q --no-index --no-deps --target /tmp/wb-site .wheelhouse/*.whl
    PYTHONPATH=/tmp/wb-site:$PWD python3 benchmarks/run_lessons.py core \
        --images-per-class 300 --budget-s 570 --json "$OUT/lessons.json"

The workbench is imported from the checkout (``PYTHONPATH``; nothing is pip-installed there),
and the kernel is this interpreter: the ``python3`` kernel spec (ipykernel's own, or the
fallback jupyter_client builds from ipykernel) starts ``sys.executable``, with this process's
environment, ``PYTHONPATH`` included.

Which lessons: numbers or names (``03``, ``03_precision``) and the words ``core`` (the half
day's lessons, ``CORE``, in the guide's order), ``optional`` (``OPTIONAL``: lessons 6 and 9 and
the instructor's board), ``all`` and ``unmeasured`` (every lesson that no kept GPU run has run
yet: what the next session should run first); default ``core``. ``--all`` runs every notebook
in file order.

All the lessons take longer than one call to the box (10 minutes) and most of a session's
device time (15 minutes), so they run over several sessions and the guide reads each lesson
from the newest kept run that ran it (``gpu_record.lesson_runs``). A lesson starts only while
what is left of the budget covers ``--min-s`` and what it is expected to take (on a GPU: its
time in the newest kept run on the same device where it passed, else ``GPU_EST_S``), else it
is recorded as "skipped: no time" and the next one is tried; its timeout is ``--timeout-s`` or
what is left, whichever is less, applied to the whole notebook. With ``--images-per-class N``
the sample data is built first as a GPU room builds it (the guide: 300, 3,000 JPEGs, so that
lesson 4 reaches the OOM edge), into the lessons' data root.

Each record: lesson, outcome (passed, failed, timeout, skipped: no time), error (the error's
last line, or None), wall_s, timeout_s, device, expected_s, start_s (the kernel's start, before
the first cell) and cells (per executed code cell: its index in the notebook, its first line,
seconds, ok | error | stopped) and unjudged. ``--json`` is rewritten after every lesson.
The run plays a learner who predicts (``lesson_predictions``: the lessons ship with every
prediction empty): each measuring cell must commit its prediction and each check judge it; a
lesson where one did not (``unjudged`` lists where) has failed. Lessons run in a
fresh folder each (their working directory); ``WORKBENCH_HOME`` defaults to a temporary
folder. Exit code 0 when no lesson failed or timed out (skipped ones are listed, not failed).
"""

from __future__ import annotations

import time

_STARTED = time.monotonic()  # the budget counts the imports too

import argparse  # noqa: E402
import atexit  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable, Collection, Mapping, Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_record, run as a script
import gpu_record  # noqa: E402
import lesson_predictions  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
CORE = ("01", "02", "03", "04", "05", "11", "12", "07", "10", "08")
"""The half day's lessons, in its order (notebooks/README.md, "The half day"; a test holds the
two together). Lesson 10 is there for its core part, cost per run; its notebook runs whole."""
CORE_PART = {"10": "core part: cost per run"}
"""Core lessons of which the half day teaches a part (the rest is optional)."""
OPTIONAL = ("06", "09", "00")
"""Lessons 6 and 9, and the instructor's board (00: a preview store of its own tiny bursts)."""
GROUPS: dict[str, tuple[str, ...]] = {"core": CORE, "optional": OPTIONAL, "all": CORE + OPTIONAL}
GPU_EST_S: dict[str, float] = {
    "00": 30, "01": 40, "02": 70, "03": 40, "04": 70, "05": 80, "06": 160, "07": 45, "08": 40,
    "09": 190, "10": 40, "11": 130, "12": 260,
}  # fmt: skip
"""What a lesson is expected to take on one GPU until a kept run has timed it there: its bursts
at the first GPU session's costs (a resnet50 burst with set-up and warm-up ~7 s, a gpt burst
~5 s, a torchrun job ~21 s, compiling the gpt 15-18 s, ResNet-50 about a minute) plus ~10 s
for the kernel's start and imports. Lesson 12 runs ``gpt:124m``, which no kept run has timed:
seven eager bursts at ``gpu_transformer.EAGER_S`` (~12 s), three cold compiles (both modes,
and float8 with ``default``) at twice the tiny gpt's kept 15-18 s (twice the layers at twice
the width) with a burst each, and its memory section on the CPU (two bursts and a two-rank
gloo job, ~30 s). Only for planning (what to start in the time left); the guide's GPU minutes
come from the kept runs, never from here."""
BUDGET_S = 570.0
"""A call to the box runs 600 s at most; the session's own start-up needs the rest."""
TIMEOUT_S = 300.0
MIN_S = 30.0
SKIPPED = "skipped: no time"
KERNEL = "python3"  # this interpreter: see the module docstring


@dataclass(frozen=True, slots=True)
class LessonRecord:
    """How one lesson ended, and where its time went."""

    lesson: str
    outcome: str  # passed | failed | timeout | skipped: no time
    error: str | None
    wall_s: float
    timeout_s: float
    device: str
    expected_s: float | None = None  # what it was expected to take (GPU only), for planning
    start_s: float | None = None  # the kernel's start: from the run's start to the first cell
    cells: list[dict[str, Any]] = field(default_factory=list)  # ``cell_times``
    unjudged: list[str] = field(default_factory=list)  # ``lesson_predictions.unjudged``


@dataclass(frozen=True)
class Limits:
    """The time a run of lessons may take."""

    budget_s: float = BUDGET_S  # every lesson, from the start (imports included)
    timeout_s: float = TIMEOUT_S  # one lesson
    min_s: float = MIN_S  # a lesson starts only with this much left (and its expected time)


def select(names: Sequence[str], measured: Collection[str] = ()) -> list[str]:
    """The lessons that ``names`` ask for, in order, each once: a number or a name, or a word
    (``GROUPS``' or ``unmeasured``: the lessons not in ``measured``, core first); a name may
    hold several, comma-separated."""
    out: list[str] = []
    for name in names:
        for part in filter(None, (p.strip() for p in name.split(","))):
            if part == "unmeasured":
                chosen: Sequence[str] = [n for n in GROUPS["all"] if n not in measured]
            else:
                chosen = GROUPS.get(part, (part,))
            out += [c for c in chosen if c not in out]
    return out


def part(lesson: str) -> str:
    """Where ``lesson`` sits in the half day: "core", its core part, or "optional"."""
    key = gpu_record.lesson_key(lesson)
    return CORE_PART.get(key, "core") if key in CORE else "optional"


def find_lessons(notebooks: Path, names: Sequence[str]) -> list[Path]:
    """The notebooks that ``names`` ("03", "03_precision" or a file name) select, in order."""
    found = []
    for name in names:
        matches = sorted(notebooks.glob(f"{Path(name).stem}*.ipynb"))
        if not matches:
            raise SystemExit(f"lesson {name!r}: no notebook {notebooks}/{name}*.ipynb")
        found.extend(m for m in matches[:1] if m not in found)
    return found


def expected_s(lesson: str, kept: Mapping[str, gpu_record.LessonRun], device: str) -> float | None:
    """What ``lesson`` should take here: None on a CPU (the estimates are a GPU's); its time in
    the newest kept run that ran it on this device and passed, else its estimate."""
    if device == "cpu":
        return None
    key = gpu_record.lesson_key(lesson)
    ran = kept.get(key)
    if ran and ran.record.get("outcome") == "passed" and ran.record.get("device") == device:
        return float(ran.record["wall_s"])
    return GPU_EST_S.get(key)


def device_name() -> str:
    """What the lessons' default device is here: the GPU's name, or "cpu"."""
    import torch  # the engine's dependency; imported here so --help stays quick

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def kernel_env(repo: Path = REPO) -> dict[str, str]:
    """This environment with the checkout on ``PYTHONPATH`` (the kernel imports ``workbench``
    from it) and a ``WORKBENCH_HOME`` of its own unless one is set."""
    env = dict(os.environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(repo) not in paths:
        paths.append(str(repo))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("WORKBENCH_HOME", tempfile.mkdtemp(prefix="wb-lessons-home-"))
    return env


def lesson_data_root(env: Mapping[str, str]) -> Path:
    """Where the lessons' kernels find the sample data: ``WORKBENCH_DATA``, else
    ``$WORKBENCH_HOME/data`` (each lesson runs in a fresh folder, so there is no ``./data``)."""
    if env.get("WORKBENCH_DATA"):
        return Path(env["WORKBENCH_DATA"])
    return Path(env["WORKBENCH_HOME"]) / "data"


def build_room_data(env: Mapping[str, str], images_per_class: int) -> dict[str, Any]:
    """The sample data as a GPU room builds it before the workshop (the guide's
    ``workbench data --images-per-class 300``), where the lessons will read it."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from workbench.engine.datasets import ensure_datasets

    t0 = time.monotonic()
    paths = ensure_datasets(lesson_data_root(env), images_per_class=images_per_class)
    images = sum(1 for p in paths.images.rglob("*") if p.is_file())
    return {"images_per_class": images_per_class, "images": images,
            "build_s": round(time.monotonic() - t0, 1), "root": str(paths.root)}  # fmt: skip


@dataclass(frozen=True)
class Executed:
    """One notebook's execution: how it ended, and its cells' times."""

    outcome: str
    error: str | None
    cells: list[dict[str, Any]]
    start_s: float | None
    unjudged: list[str] = field(default_factory=list)


def run_lesson(path: Path, timeout_s: float, workdir: Path, env: dict[str, str]) -> Executed:
    """Execute ``path`` top to bottom in ``workdir``: how it ended, the error's last line, and
    each executed cell's time."""
    import nbformat  # from the wheelhouse on the box: imported once it is on the path
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    deadline = time.monotonic() + timeout_s

    def cell_timeout(_cell: Any) -> int:  # the lesson's time left, so the lesson ends in time
        return max(1, math.ceil(deadline - time.monotonic()))

    nb = lesson_predictions.with_predictions(nbformat.read(path, as_version=4), path.stem)
    client = NotebookClient(nb, kernel_name=KERNEL, timeout_func=cell_timeout,
                            startup_timeout=60,  # a slow start is not the lesson's fault
                            shutdown_kernel="immediate",  # a cell stuck in CUDA may not listen
                            resources={"metadata": {"path": str(workdir)}})  # fmt: skip
    started = datetime.now(timezone.utc)
    outcome, error = "passed", None
    try:
        client.execute(env=env)
    except CellTimeoutError:
        outcome, error = "timeout", f"ran past its {timeout_s:.0f} s"
    except CellExecutionError as exc:  # the traceback's last line: "ValueError: ..."
        outcome, error = "failed", _one_line(f"{exc.ename}: {exc.evalue}")
    except Exception as exc:  # a dead kernel, a kernel that did not start: the lesson failed
        lines = str(exc).strip().splitlines() or [""]
        outcome, error = "failed", _one_line(f"{type(exc).__name__}: {lines[-1]}")
    finally:  # a kernel that never started leaves nbclient's exit hook, which then fails loudly
        atexit.unregister(client._cleanup_kernel)
    cells, start_s = cell_times(nb.cells, started, datetime.now(timezone.utc))
    unjudged = lesson_predictions.unjudged(nb.cells) if outcome == "passed" else []
    if unjudged:  # the commit and the check of an exercise do not meet: the lesson is broken
        outcome, error = "failed", _one_line(f"predictions: {unjudged[0]}")
    return Executed(outcome, error, cells, start_s, unjudged)


def cell_times(
    cells: Sequence[Mapping[str, Any]], started: datetime, now: datetime
) -> tuple[list[dict[str, Any]], float | None]:
    """Where a lesson's time went, from the timestamps nbclient writes into each executed
    cell's ``metadata.execution``: per code cell that started, its index in the notebook, its
    first line (to find it), its seconds and how it ended (``stopped``: no reply came, as for
    the cell a timeout or a dead kernel stopped, timed until ``now``); and the kernel's start,
    from ``started`` to the first cell."""
    out: list[dict[str, Any]] = []
    first: datetime | None = None
    for index, cell in enumerate(cells):
        times = (cell.get("metadata") or {}).get("execution") or {}
        begin = times.get("iopub.execute_input") or times.get("iopub.status.busy")
        if cell.get("cell_type") != "code" or not begin:
            continue
        t0 = _timestamp(begin)
        first = first or t0
        reply = times.get("shell.execute_reply")
        end = reply or times.get("iopub.status.idle")
        t1 = _timestamp(end) if end else now
        error = any(o.get("output_type") == "error" for o in cell.get("outputs") or [])
        status = "error" if error else ("ok" if reply else "stopped")
        out.append({"index": index, "source": first_line(cell.get("source", "")),
                    "s": round(max(0.0, (t1 - t0).total_seconds()), 2),
                    "status": status})  # fmt: skip
    start_s = round((first - started).total_seconds(), 2) if first else None
    return out, start_s


def _timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def first_line(source: str | Sequence[str], limit: int = 60) -> str:
    """A cell as a person finds it: its first line of code (comments and blank lines skipped,
    unless that is all there is)."""
    text = source if isinstance(source, str) else "".join(source)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    code = [line for line in lines if not line.startswith("#")]
    line = (code or lines or [""])[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def write_json(path: Path, run: dict[str, Any]) -> None:
    """Replace ``path`` at once, so a run stopped mid-lesson leaves the lessons before it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(run, indent=2) + "\n")
    os.replace(tmp, path)


def run_lessons(
    lessons: Sequence[Path],
    limits: Limits,
    *,
    command: str,
    started: float = _STARTED,
    env: dict[str, str] | None = None,
    kept: Mapping[str, gpu_record.LessonRun] | None = None,
    images_per_class: int | None = None,
    on_update: Callable[[dict[str, Any]], None] | None = None,
) -> list[LessonRecord]:
    """Run ``lessons`` in order within ``limits`` (counted from ``started``); ``on_update``
    gets the whole document after the data is built and after every lesson. ``kept``: the
    lessons' newest kept records (``gpu_record.lesson_runs``), for their expected times."""
    device = device_name()
    env = kernel_env() if env is None else env
    workroot = Path(tempfile.mkdtemp(prefix="wb-lessons-"))
    run: dict[str, Any] = {"command": command, "device": device,
                           "python": sys.version.split()[0], "budget_s": limits.budget_s,
                           "lessons": []}  # fmt: skip
    update = on_update or (lambda _doc: None)
    if images_per_class:
        run["data"] = build_room_data(env, images_per_class)
        update(run)
    records = []
    for path in lessons:
        record = _run_one(path, limits, started, device, env, workroot, kept or {})
        records.append(record)
        run["lessons"].append(asdict(record))
        update(run)
        print(_line(record), flush=True)
    return records


def _run_one(path: Path, limits: Limits, started: float, device: str, env: dict[str, str],
             workroot: Path, kept: Mapping[str, gpu_record.LessonRun]) -> LessonRecord:  # fmt: skip
    left = limits.budget_s - (time.monotonic() - started)
    expected = expected_s(path.stem, kept, device)
    if left < max(limits.min_s, expected or 0.0):
        return LessonRecord(path.stem, SKIPPED, None, 0.0, 0.0, device, expected)
    timeout_s = min(limits.timeout_s, left)
    workdir = workroot / path.stem
    workdir.mkdir()
    t0 = time.monotonic()
    done = run_lesson(path, timeout_s, workdir, env)
    return LessonRecord(path.stem, done.outcome, done.error, round(time.monotonic() - t0, 2),
                        round(timeout_s, 1), device, expected, done.start_s,
                        done.cells, done.unjudged)  # fmt: skip


def slowest_cells(record: Mapping[str, Any], n: int = 3) -> list[dict[str, Any]]:
    """The ``n`` cells that took longest, slowest first: where a lesson's minutes go."""
    return sorted(record.get("cells") or [], key=lambda c: -c["s"])[:n]


def _line(record: LessonRecord) -> str:
    if record.outcome == SKIPPED:
        expected = f" (expected {record.expected_s:.0f} s)" if record.expected_s else ""
        return f"{record.lesson}: {record.outcome}{expected}"
    why = f": {record.error}" if record.error else ""
    slow = "; ".join(f"cell {c['index']} {c['s']:.1f} s" for c in slowest_cells(asdict(record)))
    return (f"{record.lesson}: {record.outcome} in {record.wall_s:.1f} s on {record.device}"
            f"{why}" + (f" (slowest: {slow})" if slow else ""))  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("lessons", nargs="*", help="numbers, names, core, optional, all or "
                        "unmeasured (default: core)")  # fmt: skip
    parser.add_argument("--all", action="store_true", help="every notebook, in file order")
    parser.add_argument(
        "--budget-s", type=float, default=BUDGET_S, help="for all lessons, from start-up"
    )
    parser.add_argument("--timeout-s", type=float, default=TIMEOUT_S, help="for one lesson")
    parser.add_argument(
        "--min-s", type=float, default=MIN_S, help="start a lesson only with this much left"
    )
    parser.add_argument("--json", type=Path, help="the records, rewritten after each lesson")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, help="where the lessons are")
    parser.add_argument("--images-per-class", type=int, default=None,
                        help="build the sample data first, this big (a GPU room: 300)")  # fmt: skip
    parser.add_argument("--results-dir", type=Path, default=gpu_record.RESULTS,
                        help="the kept runs (lessons' measured times, 'unmeasured')")  # fmt: skip
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    command = shlex.join([Path(sys.executable).name, "benchmarks/run_lessons.py", *argv])
    kept = gpu_record.lesson_runs(gpu_record.load_kept(args.results_dir))
    if args.all:
        lessons = sorted(args.notebooks.glob("*.ipynb"))
    else:
        lessons = find_lessons(args.notebooks, select(args.lessons or ["core"], kept))
    limits = Limits(args.budget_s, args.timeout_s, args.min_s)
    records = run_lessons(lessons, limits, command=command, kept=kept,
                          images_per_class=args.images_per_class,
                          on_update=(lambda doc: write_json(args.json, doc)) if args.json
                          else None)  # fmt: skip
    return 1 if any(r.outcome in ("failed", "timeout") for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
