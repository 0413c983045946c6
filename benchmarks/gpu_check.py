"""The GPU check: the GPU paths on first contact, in the few minutes a lent GPU gives.

Runs the rows of ``gpu_rows.py`` riskiest first: compile=default (TF32), every precision, an
OOM then a full-size burst, a one-rank torchrun job with an NCCL variable on cuda:0, a profiled
burst, cudnn_benchmark in both orders, grad_accum with fp16, NVML on real data, the all-reduce
benchmark, and last compile=max-autotune in the same process (the second compile; last because
it takes minutes, see ``gpu_rows``). Every burst is also checked for its self-checks,
its event-timed steps against the host-clock window, and the TF32 state after it.

Time: ``--budget-s`` (default 250) counts from start-up, data set build included. Before each
row, a row whose estimate no longer fits is skipped and says so; the estimates sum to less
than the default budget, so on paper nothing is skipped. ``--json FILE`` is rewritten after
every row (temporary file, then ``os.replace``) with every row so far, so a run killed by a
timeout keeps what it measured, and names the row it was in.

Needs only the engine's dependencies (torch, nvidia-ml-py, pyyaml, psutil, pandas): no UI
packages, no DALI, no network. Usage:
    python benchmarks/gpu_check.py [--budget-s S] [--seconds S] [--json FILE] [--plan]
``--plan`` prints the rows in order with their estimates (docs/development.md's table), exits.
``--resume`` (with ``--json``) continues a check whose process died (a segfault in a library:
the first GPU session lost every row after ``compile=max-autotune`` that way): the rows in the
file are kept, the row it was in is recorded as failed ("the process died in this row"), and
the rows not yet run get the new ``--budget-s``. ``faulthandler`` prints the Python stack of
such a crash to stderr.
Exit code 0 when no row failed (skipped rows are listed, not failed), 1 otherwise.
"""

from __future__ import annotations

import time

_STARTED = time.monotonic()  # the budget counts the imports too

import argparse  # noqa: E402
import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable, Iterable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_rows, run as a script or loaded
import gpu_proc  # noqa: E402
from gpu_rows import (  # noqa: E402
    REHEARSAL,
    REHEARSALS,
    ROW_SETS,
    ROWS,
    SECONDS,
    SETUP_EST_S,
    SETUP_WHY,
    Row,
    RowRun,
    Tools,
    step_sum_gap,
)

from workbench.engine.datasets import ensure_datasets  # noqa: E402
from workbench.engine.telemetry import nvml_status  # noqa: E402

DEFAULT_BUDGET_S = 250.0
"""The check run by itself (``make gpu-check``): every row but max-autotune with room to spare.
The GPU session gives it what is left of its own budget instead (``--budget-s``)."""

Clock = Callable[[], float]
Write = Callable[[list[dict[str, Any]], str | None], None]


def plan(rows: Iterable[Row] = ROWS) -> list[Row]:
    """Riskiest first; a tie keeps the listed order."""
    return sorted(rows, key=lambda r: r.risk)


def planned_s(rows: Iterable[Row] = ROWS, setup_s: float = SETUP_EST_S) -> float:
    """The whole check on paper: set-up and every row's estimate."""
    return setup_s + sum(r.est_s for r in rows)


def plan_table(rows: Sequence[Row]) -> str:
    """The plan as docs/development.md's table: each row's estimate and how it was reached."""
    lines = ["| risk | row | est s | why |", "| ---: | --- | ---: | --- |",
             f"| - | set-up | {SETUP_EST_S:.0f} | {SETUP_WHY} |"]  # fmt: skip
    lines += [f"| {r.risk} | {r.label} | {r.est_s:.0f} | {r.why} |" for r in rows]
    lines.append(f"| | total | {planned_s(rows):.0f} | default budget {DEFAULT_BUDGET_S:.0f} s |")
    return "\n".join(lines)


def run_rows(
    rows: Sequence[Row],
    budget_s: float,
    write: Write,
    *,
    make_run: Callable[[], RowRun] = RowRun,
    clock: Clock = time.monotonic,
    started: float | None = None,
    say: Callable[[str], None] = print,
    done: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Run ``rows`` in order within ``budget_s`` (counted from ``started``); returns a record
    per row. ``done``: records of an earlier run (``resumed``), kept; their rows are not
    rerun. Before each row, one whose estimate exceeds what is left is skipped and says so.
    ``write(records, running)`` gets every record so far before a row starts (``running`` =
    its label) and after it ends (``running`` = None): a run killed mid-row keeps the rest."""
    started = clock() if started is None else started
    records: list[dict[str, Any]] = list(done)
    finished = {r["label"] for r in records}
    for row in (r for r in rows if r.label not in finished):
        left_s = budget_s - (clock() - started)
        if row.est_s > left_s:
            reason = f"would not fit (est {row.est_s:.0f} s, {max(left_s, 0):.0f} s left)"
            say(f"{row.label}: skipped: {reason}")
            records.append(_record(row, "skipped", reason=reason))
            write(records, None)
            continue
        write(records, row.label)
        records.append(_run_one(row, make_run(), clock, say))
        write(records, None)
    return records


def _run_one(row: Row, run: RowRun, clock: Clock, say: Callable[[str], None]) -> dict[str, Any]:
    t0 = clock()
    try:
        row.run(run)
    except Exception as exc:  # a row that crashes is a failed row; the next one still runs
        run.expect("ran without raising", False, f"{type(exc).__name__}: {exc}")
    wall_s = clock() - t0
    shown: set[str] = set()
    for label, r in run.bursts:
        own = [p for p in run.problems if p.startswith(f"{label}: ")]
        shown.update(own)
        say(table_line(f"{row.label}: {label}", r, own))
    for line in run.text:
        say(line)
    status = "failed" if run.problems else "passed"
    rest = [p for p in run.problems if p not in shown]
    said = "FAILED" if run.problems else "passed"
    say(
        f"= {row.label}: {said} in {wall_s:.0f} s (est {row.est_s:.0f} s), "
        f"{len(run.checks)} checks" + (f": {'; '.join(rest)}" if rest else "")
    )
    return _record(row, status, run=run, wall_s=wall_s)


def _record(row: Row, status: str, *, run: RowRun | None = None, wall_s: float | None = None,
            reason: str | None = None) -> dict[str, Any]:  # fmt: skip
    rec: dict[str, Any] = {"label": row.label, "risk": row.risk, "est_s": row.est_s,
                           "status": status, "wall_s": wall_s, "reason": reason}  # fmt: skip
    if run is not None:
        rec["checks"] = [c.to_dict() for c in run.checks]
        rec["problems"] = run.problems
        rec["facts"] = run.facts
        rec["bursts"] = [{"label": label, **r.to_dict()} for label, r in run.bursts]
    return rec


def json_writer(path: str | os.PathLike[str] | None, meta: dict[str, Any]) -> Write:
    """A ``write`` for ``run_rows`` that replaces ``path`` atomically each time (a reader, or
    a kill, never sees half a file); no path, no file."""

    def write(records: list[dict[str, Any]], running: str | None) -> None:
        if path is None:
            return
        doc = {**meta, "running": running, "rows": records, "summary": summary(records)}
        target = Path(path)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1, default=str)
        os.replace(tmp, target)

    return write


def resumed(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of an earlier run's JSON file, the row it died in recorded as failed; empty
    when there is no such file (nothing ran: start from the first row)."""
    target = Path(path)
    if not target.exists():
        return []
    doc = json.loads(target.read_text())
    records = list(doc.get("rows", []))
    running = doc.get("running")
    if running:
        rows = {r.label: r for r in ROWS}
        row = rows.get(running)
        records.append({
            "label": running, "risk": row.risk if row else None,
            "est_s": row.est_s if row else None, "status": "failed", "wall_s": None,
            "reason": "the process died in this row (a crash, not a timeout: see the log for "
                      "faulthandler's stack)",
        })  # fmt: skip
    return records


def summary(records: Sequence[dict[str, Any]]) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for rec in records:
        counts[rec["status"]] += 1
    return counts


def summary_line(records: Sequence[dict[str, Any]], wall_s: float) -> str:
    c = summary(records)
    return (f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped of "
            f"{len(records)} rows, in {wall_s:.0f} s")  # fmt: skip


HEADER = (f"| {'row: burst':<52} | {'status':<6} | {'samples/s':>9} | {'step ms':>7} | "
          f"{'IQR':>5} | {'sum/win':>7} | {'peak MiB':>8} | {'util %':>6} | {'W':>4} | "
          f"{'MFU %':>5} | {'compile s':>9} | check")  # fmt: skip


def table_line(label: str, r, problems: list[str]) -> str:
    """One burst: its figures, and its own problems (or ok) in the last column. ``sum/win``
    is how far the event-timed steps are from the host-clock window, in percent."""

    def f(x: float | None, spec: str = ".1f") -> str:
        return "-" if x is None else format(x, spec)

    gap = step_sum_gap(r)
    return (f"| {label:<52} | {r.status:<6} | {f(r.samples_per_s):>9} | {f(r.step_ms_p50):>7} | "
            f"{f(r.step_ms_iqr):>5} | {f(None if gap is None else 100 * gap, '.2f'):>7} | "
            f"{f(r.peak_mem_mib, '.0f'):>8} | {f(r.gpu_util_pct, '.0f'):>6} | "
            f"{f(r.power_w, '.0f'):>4} | {f(r.mfu_pct):>5} | {f(r.compile_s):>9} | "
            f"{'ok' if not problems else '; '.join(problems)}")  # fmt: skip


def _with_planted_fault(write: Write) -> Write:
    """A rehearsal's ``write`` that dies as planted (``gpu_proc.rehearse_fault``, step
    ``check``) as the second row starts: after its name is written, before it runs."""

    def write_then_maybe_die(records: list[dict[str, Any]], running: str | None) -> None:
        write(records, running)
        if running is not None:
            gpu_proc.rehearse_fault("check", len(records) + 1, dry=True)

    return write_then_maybe_die


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                    help="wall seconds for the whole check, start-up included")  # fmt: skip
    ap.add_argument("--seconds", type=float, default=SECONDS, help="each burst's window")
    ap.add_argument("--json", help="rewritten after every row with every row so far")
    ap.add_argument("--plan", action="store_true", help="print the plan and its estimates")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows in --json; the row it died in is failed")  # fmt: skip
    ap.add_argument("--rows", choices=sorted(ROW_SETS), default="all",
                    help="all; first (the GPU session's first call: all but max-autotune); "
                    "max-autotune (a call of its own); parity (loss parity, a call of its "
                    "own)")  # fmt: skip
    ap.add_argument("--rehearse", action="store_true", help="the GPU session's CPU rehearsal: "
                    "small CPU rows through the same loop and the same writing")  # fmt: skip
    ap.add_argument("--data-dir", default=None, help="where the data set is built")
    args = ap.parse_args(argv)
    rows = plan(REHEARSALS.get(args.rows, REHEARSAL) if args.rehearse else ROW_SETS[args.rows])
    if args.plan:
        print(plan_table(rows))
        return 0
    if not torch.cuda.is_available() and not args.rehearse:
        print("gpu_check: no CUDA device here; nothing to check", file=sys.stderr)
        return 1
    os.environ.setdefault("WORKBENCH_HOME", tempfile.mkdtemp(prefix="wb-gpu-"))
    print(f"# plan: setup {SETUP_EST_S:.0f} s + {len(rows)} rows = {planned_s(rows):.0f} s on "
          f"paper, budget {args.budget_s:.0f} s")  # fmt: skip
    # Any complete build is used as it is (a build with other sizes is never replaced); on a
    # fresh box the default one (800 JPEGs) is made, and pytest -m gpu then reuses it.
    small = {"images_per_class": 8} if args.rehearse else {}
    paths = ensure_datasets(args.data_dir, progress=lambda m: print(m, file=sys.stderr), **small)
    device = "cpu" if args.rehearse else None
    name = torch.cuda.get_device_name() if device is None else "cpu (a rehearsal)"
    meta = {"device": name, "torch": torch.__version__,
            "cuda": torch.version.cuda, "nvml": nvml_status() or "ok",
            "budget_s": args.budget_s, "planned_s": planned_s(rows)}  # fmt: skip
    print(
        f"# GPU check: {meta['device']}, torch {meta['torch']}, CUDA {meta['cuda']}, NVML: "
        f"{meta['nvml']}, data ready {time.monotonic() - _STARTED:.0f} s after start"
    )
    print(HEADER)
    print("|" + "|".join("-" * len(c) for c in HEADER.split("|")[1:-1]) + "|---")
    tools = Tools()
    done = resumed(args.json) if args.resume and args.json else []
    for rec in done:
        print(f"= {rec['label']}: {rec['status']} (earlier run)"
              + (f": {rec['reason']}" if rec.get("reason") else ""))  # fmt: skip
    write = json_writer(args.json, meta)
    if args.rehearse and not args.resume and args.rows not in REHEARSALS:  # the check's own
        write = _with_planted_fault(write)
    seconds = min(args.seconds, 0.25) if args.rehearse else args.seconds
    records = run_rows(rows, args.budget_s, write,
                       make_run=lambda: RowRun(paths.root, seconds, tools, device=device),
                       started=_STARTED, done=done)  # fmt: skip
    print(summary_line(records, time.monotonic() - _STARTED))
    return 1 if summary(records)["failed"] else 0


if __name__ == "__main__":
    faulthandler.enable()  # a segfault in a library prints the Python stack it happened in
    sys.exit(main())
