r"""Run the lessons headless on this machine (a lent GPU box), each under its own timeout, within
a total budget, and keep a JSON record of each as it ends.

On the box (CPython 3.12, torch, no network, no Jupyter packages) the session runs, from the
repository root, after ``make wheelhouse`` here has filled ``.wheelhouse/`` (carried along):

    python3 -m pip install -q --no-index --no-deps --target /tmp/wb-site .wheelhouse/*.whl
    PYTHONPATH=/tmp/wb-site:$PWD python3 benchmarks/run_lessons.py \
        --budget-s 300 --json "$OUT/lessons.json"

The workbench is imported from the checkout (``PYTHONPATH``; nothing is pip-installed there),
and the kernel is this interpreter: the ``python3`` kernel spec (ipykernel's own, or the
fallback jupyter_client builds from ipykernel) starts ``sys.executable``, with this process's
environment, ``PYTHONPATH`` included.

The core lessons (``CORE``) are those whose steps change on a GPU, in the order they run:
01 (quickstart: the first user's promise), 03 (precision: TF32, bf16), 04 (batch size and
memory: peak memory, OOM), 05 (the bottleneck: loader against GPU), 02 (the data pipeline
feeding a GPU), 07 (profiling CUDA kernels), 11 (compute and monitoring: NVML) and 10 (memory
and money). Others run when named: ``run_lessons.py 06 08``, or ``--all``.

A lesson starts only while at least ``--min-s`` of the budget is left (else it is recorded as
"skipped: no time"); its timeout is ``--timeout-s`` or what is left of the budget, whichever
is less, applied to the whole notebook (each cell's timeout is the time the lesson has left).
Each record: lesson, outcome (passed, failed, timeout, skipped: no time), error (the error's
last line, or None), wall_s, timeout_s, device. ``--json`` is rewritten after every lesson.
Lessons run in a fresh folder each (their working directory); ``WORKBENCH_HOME`` defaults to a
temporary folder, where the first lesson that needs the sample data builds it.
Exit code 0 when no lesson failed or timed out (skipped ones are listed, not failed).
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
from collections.abc import Sequence  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402
from nbclient.exceptions import CellExecutionError, CellTimeoutError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
CORE = ("01", "03", "04", "05", "02", "07", "11", "10")
BUDGET_S = 300.0
TIMEOUT_S = 180.0
MIN_S = 30.0
KERNEL = "python3"  # this interpreter: see the module docstring


@dataclass(frozen=True, slots=True)
class LessonRecord:
    """How one lesson ended."""

    lesson: str
    outcome: str  # passed | failed | timeout | skipped: no time
    error: str | None
    wall_s: float
    timeout_s: float
    device: str


def find_lessons(notebooks: Path, names: Sequence[str]) -> list[Path]:
    """The notebooks that ``names`` ("03", "03_precision" or a file name) select, in order."""
    found = []
    for name in names:
        matches = sorted(notebooks.glob(f"{Path(name).stem}*.ipynb"))
        if not matches:
            raise SystemExit(f"lesson {name!r}: no notebook {notebooks}/{name}*.ipynb")
        found.extend(m for m in matches[:1] if m not in found)
    return found


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


def run_lesson(
    path: Path, timeout_s: float, workdir: Path, env: dict[str, str]
) -> tuple[str, str | None]:
    """Execute ``path`` top to bottom in ``workdir``; (outcome, error's last line or None)."""
    deadline = time.monotonic() + timeout_s

    def cell_timeout(_cell: Any) -> int:  # the lesson's time left, so the lesson ends in time
        return max(1, math.ceil(deadline - time.monotonic()))

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name=KERNEL, timeout_func=cell_timeout,
                            startup_timeout=60,  # a slow start is not the lesson's fault
                            shutdown_kernel="immediate",  # a cell stuck in CUDA may not listen
                            resources={"metadata": {"path": str(workdir)}})  # fmt: skip
    try:
        client.execute(env=env)
    except CellTimeoutError:
        return "timeout", f"ran past its {timeout_s:.0f} s"
    except CellExecutionError as error:  # the traceback's last line: "ValueError: ..."
        return "failed", _one_line(f"{error.ename}: {error.evalue}")
    except Exception as error:  # a dead kernel, a kernel that did not start: the lesson failed
        lines = str(error).strip().splitlines() or [""]
        return "failed", _one_line(f"{type(error).__name__}: {lines[-1]}")
    finally:  # a kernel that never started leaves nbclient's exit hook, which then fails loudly
        atexit.unregister(client._cleanup_kernel)
    return "passed", None


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
    lessons: Sequence[Path], args: argparse.Namespace, command: str
) -> list[LessonRecord]:
    """Run ``lessons`` in order within ``args.budget_s``, writing ``args.json`` after each."""
    device = device_name()
    env = kernel_env()
    workroot = Path(tempfile.mkdtemp(prefix="wb-lessons-"))
    run: dict[str, Any] = {
        "command": command,
        "device": device,
        "python": sys.version.split()[0],
        "budget_s": args.budget_s,
        "lessons": [],
    }
    records = []
    for path in lessons:
        left = args.budget_s - (time.monotonic() - _STARTED)
        timeout_s = min(args.timeout_s, left)
        if left < args.min_s:
            record = LessonRecord(path.stem, "skipped: no time", None, 0.0, 0.0, device)
        else:
            workdir = workroot / path.stem
            workdir.mkdir()
            t0 = time.monotonic()
            outcome, error = run_lesson(path, timeout_s, workdir, env)
            wall_s = round(time.monotonic() - t0, 2)
            record = LessonRecord(path.stem, outcome, error, wall_s, round(timeout_s, 1), device)
        records.append(record)
        run["lessons"].append(asdict(record))
        if args.json:
            write_json(args.json, run)
        print(_line(record), flush=True)
    return records


def _line(record: LessonRecord) -> str:
    if record.outcome.startswith("skipped"):
        return f"{record.lesson}: {record.outcome}"
    why = f": {record.error}" if record.error else ""
    return f"{record.lesson}: {record.outcome} in {record.wall_s:.1f} s on {record.device}{why}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "lessons", nargs="*", help=f"lesson numbers or names (default: {' '.join(CORE)})"
    )
    parser.add_argument("--all", action="store_true", help="every lesson, in file order")
    parser.add_argument(
        "--budget-s", type=float, default=BUDGET_S, help="for all lessons, from start-up"
    )
    parser.add_argument("--timeout-s", type=float, default=TIMEOUT_S, help="for one lesson")
    parser.add_argument(
        "--min-s", type=float, default=MIN_S, help="start a lesson only with this much left"
    )
    parser.add_argument("--json", type=Path, help="the records, rewritten after each lesson")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, help="where the lessons are")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    command = shlex.join([Path(sys.executable).name, "benchmarks/run_lessons.py", *argv])
    if args.all:
        lessons = sorted(args.notebooks.glob("*.ipynb"))
    else:
        lessons = find_lessons(args.notebooks, args.lessons or CORE)
    records = run_lessons(lessons, args, command)
    return 1 if any(r.outcome in ("failed", "timeout") for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
