"""The GPU session: the open questions answered in order, every figure kept as it is measured.

    bash benchmarks/gpu_session.sh [OUT_DIR] [--budget-s 480] [--steps a,b] [--lessons L]
                                   [--dry] [--plan]

Runs the steps of ``gpu_steps.py`` in order, each in its own process under its own timeout
(a step that hangs or segfaults costs only itself), within ``--budget-s`` (default 480 s: 8
minutes on one GPU). Before a step starts, one whose estimate does not fit what is left is
skipped and says so; ``check``, ``pytest-gpu``, ``transformer`` and the lessons steps are
given the time that is left. The lessons take longer than a call to the box, so each lessons
step is a call of its own, and what it skips for time runs in a later session:

    bash benchmarks/gpu_session.sh --steps lessons --budget-s 570
    bash benchmarks/gpu_session.sh --steps lessons-optional --budget-s 570
    bash benchmarks/gpu_session.sh --steps lessons --lessons unmeasured --budget-s 570

(``--lessons``: numbers, core, optional, all or unmeasured: ``run_lessons.select``.)
The transformer step (``gpt:124m``: bf16 eager, compiled, CUDA graphs, the attention
backends) is a call of its own too: ``--steps transformer --budget-s 570``.
After every step the kept run (``gpu_record``: one JSON file named by date and device) is
rewritten under ``--results-dir`` (default ``benchmarks/results``) and copied to OUT_DIR, so
a run stopped anywhere keeps every step that ended. Commit that file; ``publish_gpu.py``
generates the published tables from it.

Without CUDA the session runs its dry path (``--dry``): the same steps on the CPU with the
cnn workload and short windows, the GPU-only steps skipped with the reason, and the file
written under OUT_DIR (never among the kept runs). It passes when every step that ran passed.

The estimates (``--plan`` prints them) come from the first GPU session's measured costs on one
H200: a resnet50 burst on a resident batch ~7 s (the precision row: 4 in 28 s), a burst on
JPEGs with 8 workers ~5 s, a one-rank torchrun job ~21 s, start-up with CUDA and NVML ~6 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_record
import gpu_transformer
import run_lessons

HERE = Path(__file__).resolve().parent
DEFAULT_BUDGET_S = 480.0
LOG_TAIL_CHARS = 3000
KILL_GRACE_S = 5.0


@dataclass(frozen=True)
class Step:
    name: str
    est_s: float  # wall seconds on one H200, start-up included
    timeout_s: float  # a step past this is killed (its process group)
    why: str  # how est_s was reached
    timed: bool = False  # given the time left (check, pytest-gpu, transformer, lessons)
    min_s: float | None = None  # a timed step that skips its own parts for time starts with
    # this much left (its first part), not its whole estimate (the lessons: one call each)


LESSONS_SETUP_S = 25.0
"""The lessons steps' set-up: the wheelhouse installed offline ~15 s, the room's 3,000 JPEGs
drawn over 16 cores ~10 s (an estimate: not yet timed on a box)."""
LESSONS_CALL_S = 570.0
"""A lessons step is a call to the box of its own: 600 s at most, less the session's start-up."""


def _lessons_step(name: str, group: str) -> Step:
    """A lessons step: its lessons' expected times (``run_lessons.GPU_EST_S``) and the set-up;
    it starts when the set-up and its first lesson fit, and skips by lesson what does not."""
    lessons = run_lessons.GROUPS[group]
    est = [run_lessons.GPU_EST_S[n] for n in lessons]
    why = (f"the {group} lessons ({', '.join(lessons)}) on the GPU, each from its kernel's "
           f"start: ~{sum(est):.0f} s from their bursts (run_lessons.GPU_EST_S), and the "
           f"wheelhouse and the room's data ~{LESSONS_SETUP_S:.0f} s; a call of its own "
           f"(--steps {name} --budget-s {LESSONS_CALL_S:.0f}): a lesson that does not fit is "
           "skipped and said, for a later session (--lessons unmeasured)")  # fmt: skip
    return Step(name, LESSONS_SETUP_S + sum(est), LESSONS_CALL_S, why, timed=True,
                min_s=LESSONS_SETUP_S + est[0])  # fmt: skip


def _transformer_step() -> Step:
    """The transformer step: its rows' estimates (``gpu_transformer.plan``: the compile rows
    from the kept runs' cold compiles); it starts when its set-up and first row fit."""
    est, first, why = gpu_transformer.plan()
    return Step("transformer", est, TRANSFORMER_CALL_S, why, timed=True, min_s=first)


TRANSFORMER_CALL_S = 480.0
"""The transformer step's timeout: about twice its estimate, inside a call of its own."""


PLAN: tuple[Step, ...] = (
    Step("environment", 8, 60, "nvidia-smi -q ~1 s; Python, torch, CUDA and NVML start ~6 s"),
    Step("drift", 110, 200, "14 resnet50 bursts on a resident batch at ~7 s (the first "
         "session's precision row: 4 in 28 s) and a fresh process ~12 s"),
    Step("loader", 120, 270, "start-up ~6 s; 12,800 JPEGs drawn on the box (195 s of CPU "
         "measured on the 2-core test machine: ~15-25 s over 16 cores) ~20 s; the ceiling "
         "before and after the paths, 2 resident-batch bursts at ~7 s; per path the loader "
         "alone ~4 s and a JPEG burst ~5 s (the first session's real-data row: 5 s): CPU "
         "decode at 8 and 16 workers, GPU decode with overlap on and off, ~36 s; the set "
         "predecoded at 256 px ~30 s and its 2 rows ~9 s, built only when they fit the "
         "step's budget: ~119 s; DALI's 2 rows add ~12 s where it is installed (not on the "
         "lent box)"),
    Step("paths", 60, 180, "3 resnet50 bursts ~7 s, a dict burst ~5 s, a snapshot burst "
         "~10 s, a one-rank torchrun ~21 s (the first session's torchrun row)"),
    Step("check", 120, 300, "gpu_check.py's rows in the time left: 151 s for every row but "
         "max-autotune (its --plan), which is skipped unless time is left", timed=True),
    Step("tune", 170, 300, "a tune at the default budget (16 bursts) from PyTorch's defaults "
         "on JPEGs ~7 s each ~112 s, then its pick against a hand grid of 5: 7 bursts ~50 s; "
         "in the time left, else in a second call (--steps tune,pytest-gpu)",
         timed=True),
    Step("pytest-gpu", 90, 150, "87 s measured in the first session", timed=True),
    _transformer_step(),
    Step("fp8", 240, 420, "gpt:124m compiled at batch 16, four bursts (bf16, two float8 "
         "recipes, bf16), each with a cold compile: no kept run has compiled gpt:124m, so "
         "~50 s a burst is a guess; in the time left, else a call of its own (--steps fp8)",
         timed=True),
    *(_lessons_step(name, group) for name, group in (("lessons", "core"),
                                                     ("lessons-optional", "optional"))),
)  # fmt: skip


def plan_table(plan: tuple[Step, ...] = PLAN, budget_s: float = DEFAULT_BUDGET_S) -> str:
    lines = ["| step | est s | timeout s | why |", "| --- | ---: | ---: | --- |"]
    lines += [f"| {s.name} | {s.est_s:.0f} | {s.timeout_s:.0f} | {s.why} |" for s in plan]
    total = sum(s.est_s for s in plan)
    lines.append(f"| total | {total:.0f} | | budget {budget_s:.0f} s: what does not fit is "
                 "skipped, and says so |")  # fmt: skip
    return "\n".join(lines)


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def time_for(step: Step, left_s: float, dry: bool) -> tuple[float | None, str | None]:
    """The seconds a step gets, or why it is skipped. A dry run skips nothing for time."""
    if dry:
        return step.timeout_s, None
    need = step.est_s if step.min_s is None else step.min_s
    if need > left_s:
        what = f"est {step.est_s:.0f} s" if step.min_s is None else \
            f"its first part ~{step.min_s:.0f} s"  # fmt: skip
        return None, f"would not fit ({what}, {max(left_s, 0):.0f} s left)"
    return (min(step.timeout_s, left_s) if step.timed else step.timeout_s), None


def run_step(step: Step, seconds: float, out_dir: Path, dry: bool, extra: list[str],
             script: Path = HERE / "gpu_steps.py") -> dict[str, Any]:  # fmt: skip
    """One step in its own process group (``script STEP --json PART ...``); its record,
    however it ended: a step killed by its timeout keeps the bursts its JSON holds."""
    part = out_dir / f"step-{step.name}.json"
    part.unlink(missing_ok=True)
    log = out_dir / f"step-{step.name}.log"
    argv = [sys.executable, str(script), step.name, "--json", str(part),
            "--budget-s", str(int(seconds)), *extra] + (["--dry"] if dry else [])  # fmt: skip
    t0 = time.monotonic()
    status = None
    with log.open("w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc, status = None, "timeout"
    rec = json.loads(part.read_text()) if part.exists() else {"name": step.name, "bursts": []}
    text = log.read_text(errors="replace")
    print(text, end="", flush=True)
    rec.update(wall_s=round(time.monotonic() - t0, 1), est_s=step.est_s, timeout_s=seconds,
               exit_code=rc, log_tail=text[-LOG_TAIL_CHARS:])  # fmt: skip
    rec["status"] = status or _status(rec.get("status"), rc)
    if status == "timeout":
        rec["reason"] = f"stopped by its timeout after {seconds:.0f} s: the bursts above ran"
    elif (rc and rc > 128) or (rc and rc < 0):
        rec["reason"] = f"the process died (exit {rc}): see log_tail"
    return rec


def _status(written: str | None, rc: int | None) -> str:
    if written in ("skipped",):
        return "skipped"
    if rc == 0 and written == "passed":
        return "passed"
    return "failed"


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_session(args: argparse.Namespace) -> int:
    dry = args.dry or not cuda_available()
    steps = [s for s in PLAN if not args.steps or s.name in args.steps]
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = Path(args.results_dir) if args.results_dir else (out_dir if dry else
                                                               gpu_record.RESULTS)  # fmt: skip
    device = gpu_record.device_name()
    plan = [{"name": s.name, "est_s": s.est_s, "timeout_s": s.timeout_s, "why": s.why}
            for s in steps]  # fmt: skip
    doc = gpu_record.new_run(device=device, dry=dry, plan=plan)
    doc["budget_s"] = args.budget_s
    path = gpu_record.run_path(results, device, datetime.now(timezone.utc), dry=dry)
    print(f"# GPU session on {device}{' (dry: no CUDA)' if dry else ''}: {len(steps)} steps, "
          f"budget {args.budget_s:.0f} s; kept run: {path}", flush=True)  # fmt: skip
    started = time.monotonic()
    extra = ["--workdir", str(out_dir / "work")] + (["--seconds", str(args.seconds)]
                                                    if args.seconds else [])  # fmt: skip
    extra += ["--lessons", args.lessons] if args.lessons else []
    for step in steps:
        seconds, why_not = time_for(step, args.budget_s - (time.monotonic() - started), dry)
        if seconds is None:
            rec = {"name": step.name, "status": "skipped", "reason": why_not, "bursts": [],
                   "est_s": step.est_s}  # fmt: skip
            print(f"= {step.name}: skipped: {why_not}", flush=True)
        else:
            doc["running"] = step.name
            _save(doc, path, out_dir)
            rec = run_step(step, seconds, out_dir, dry, extra)
            print(f"= {step.name}: {rec['status']} in {rec['wall_s']:.0f} s "
                  f"(est {step.est_s:.0f} s)" + (f": {rec['reason']}" if rec.get("reason")
                                                 else ""), flush=True)  # fmt: skip
        if step.name == "environment" and rec.get("facts"):
            doc["environment"] = rec["facts"]
        doc["steps"].append(rec)
        doc["running"] = None
        doc["summary"] = gpu_record.summary(doc["steps"])
        _save(doc, path, out_dir)
    doc["ended_at"] = gpu_record.utc_now()
    doc["wall_s"] = round(time.monotonic() - started, 1)
    _save(doc, path, out_dir)
    return _report(doc, path, out_dir)


def _save(doc: dict[str, Any], path: Path, out_dir: Path) -> None:
    gpu_record.write_atomic(path, doc)
    if path.parent.resolve() != out_dir.resolve():
        shutil.copyfile(path, out_dir / path.name)  # OUT_DIR is what comes back from a lent box


def _report(doc: dict[str, Any], path: Path, out_dir: Path) -> int:
    lines = [f"{s['name']}: {s['status']}" + (f" ({s['reason']})" if s.get("reason") else "")
             for s in doc["steps"]]  # fmt: skip
    c = doc["summary"]
    lines.append(f"session {doc['wall_s']:.0f} s: {c['passed']} passed, {c['failed']} failed, "
                 f"{c['timeout']} timed out, {c['skipped']} skipped; kept run {path}")  # fmt: skip
    text = "\n".join(lines)
    (out_dir / "summary.txt").write_text(text + "\n")
    print(text, flush=True)
    return 1 if c["failed"] or c["timeout"] else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", default=os.environ.get("OUT") or "/tmp/gpu-session")
    ap.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    ap.add_argument(
        "--steps",
        type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
        default=None,
        help="comma-separated step names (default: all, in order)",
    )
    ap.add_argument("--results-dir", default=None, help="where the kept run goes")
    ap.add_argument("--seconds", type=float, default=None, help="each burst's window")
    ap.add_argument("--lessons", default=None, help="the lessons steps' lessons instead of "
                    "their own (numbers, core, optional, all, unmeasured)")  # fmt: skip
    ap.add_argument("--dry", action="store_true", help="the CPU rehearsal, even with CUDA")
    ap.add_argument("--plan", action="store_true", help="print the steps and estimates")
    args = ap.parse_args(argv)
    unknown = [s for s in args.steps or [] if s not in {p.name for p in PLAN}]
    if unknown:
        ap.error(f"--steps {','.join(unknown)}: not a step; steps: "
                 f"{', '.join(p.name for p in PLAN)}")  # fmt: skip
    if args.plan:
        print(plan_table(budget_s=args.budget_s))
        return 0
    return run_session(args)


if __name__ == "__main__":
    sys.exit(main())
