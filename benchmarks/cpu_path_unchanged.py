"""Is the CPU-decode path as fast as before the decode knob? Bursts in fresh processes, A-B-B-A.

    python benchmarks/cpu_path_unchanged.py [--rounds 4] [--seconds 3] [--workers 2] \\
        [--before 46d334c~1] [--out benchmarks/results/cpu-path-unchanged-DATE.json]

``decode=gpu`` (issue 29) changed the loader's build, the burst's result and the format
datasets that every CPU burst goes through. This checks that ``decode=cpu``, the default, kept
its speed: the same burst (the cnn workload on the JPEG sample set, ``--workers`` DataLoader
workers decoding with Pillow, batch ``--batch``, a ``--seconds`` window, on the CPU) measured on

- **A**, the commit before the knob (``--before``, default ``46d334c~1``), checked out into a
  temporary ``git worktree`` outside this repository and removed afterwards (it has no decode
  knob: the workers' decode is its only path), and
- **B**, this tree as it is (uncommitted changes included), with ``decode="cpu"`` set.

Every burst runs in a fresh Python process (its own torch import, allocator and workers) with
its tree first on ``PYTHONPATH`` (the JSON records which ``workbench`` it imported), a fresh
``WORKBENCH_HOME`` and the same image folder (the sample set, built once by this tree before
the first burst). The order is A-B-B-A per round, so that a drift linear in time cancels in a
round's ratio ``(B1 + B2) / (A1 + A2)``; each neighbouring pair's B/A is kept too. The machine
is shared: the load average and the runnable-task count are read before every burst and kept
beside it. The JSON keeps every burst's whole result, the per-round and per-pair ratios, and
their median and range; it is the figure's source (no figure from it is typed elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
KNOB_COMMIT = "46d334c"
"""The commit that added the decode knob: A is its parent."""
ORDER = ("A", "B", "B", "A")

CHILD = """
import json, sys
import workbench as wb
knobs, seconds, data, out = json.loads(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
r = wb.run_burst("cnn", wb.Knobs(**knobs), seconds=seconds, device="cpu", data_dir=data,
                 record=False)
with open(out, "w") as f:
    json.dump({"workbench": wb.__file__, "result": r.to_dict()}, f, default=str)
"""
"""One burst, in the process this script starts for it: only the API both trees share."""


def git(*argv: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def load() -> dict[str, Any]:
    """The machine's load now: 1/5/15-minute averages and runnable/total tasks."""
    fields = Path("/proc/loadavg").read_text().split()
    running, total = fields[3].split("/")
    return {"avg": [float(x) for x in fields[:3]], "runnable": int(running), "tasks": int(total)}


def knobs_for(side: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same burst on both sides; B names ``decode="cpu"``, which A's knobs do not have."""
    knobs: dict[str, Any] = {"batch_size": args.batch, "num_workers": args.workers,
                             "persistent_workers": True}  # fmt: skip
    return {**knobs, "decode": "cpu"} if side == "B" else knobs


def burst(side: str, tree: Path, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One burst of ``side`` in a fresh process; its whole result, or why there is none."""
    with tempfile.TemporaryDirectory(prefix="wb-cpu-path-") as home:
        out = Path(home) / "burst.json"
        env = {**os.environ, "PYTHONPATH": str(tree), "WORKBENCH_HOME": home}
        argv = [sys.executable, "-c", CHILD, json.dumps(knobs_for(side, args)),
                str(args.seconds), str(data), str(out)]  # fmt: skip
        before = load()
        t0 = time.monotonic()
        p = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
        rec: dict[str, Any] = {"side": side, "load_before": before,
                               "wall_s": round(time.monotonic() - t0, 1)}  # fmt: skip
        if out.exists():
            rec.update(json.loads(out.read_text()))
        else:
            rec["error"] = f"exit {p.returncode}: {(p.stdout + p.stderr)[-2000:]}"
    return rec


def speed(rec: Mapping[str, Any]) -> float | None:
    r = rec.get("result") or {}
    return r.get("samples_per_s") if r.get("status") == "ok" else None


def summarize(bursts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per round (A-B-B-A) the ratio (B1 + B2) / (A1 + A2), per neighbouring pair B/A, and the
    median and range of each; a round with a failed burst is left out and counted."""
    rounds, pairs, failed = [], [], 0
    for i in range(0, len(bursts) - len(ORDER) + 1, len(ORDER)):
        got = [speed(b) for b in bursts[i : i + len(ORDER)]]
        if None in got:
            failed += 1
            continue
        a1, b1, b2, a2 = got
        rounds.append((b1 + b2) / (a1 + a2))
        pairs += [b1 / a1, b2 / a2]
    return {"round_ratio": _spread(rounds), "pair_ratio": _spread(pairs),
            "rounds_failed": failed}  # fmt: skip


def _spread(xs: Sequence[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0, "median": None, "min": None, "max": None, "values": []}
    return {"n": len(xs), "median": round(statistics.median(xs), 4), "min": round(min(xs), 4),
            "max": round(max(xs), 4), "values": [round(x, 4) for x in xs]}  # fmt: skip


def checked(rec: Mapping[str, Any], tree: Path) -> list[str]:
    """What would make a burst not the one meant: another tree's workbench, another path."""
    problems = []
    if rec.get("workbench") and not str(rec["workbench"]).startswith(str(tree)):
        problems.append(f"{rec['side']} imported {rec['workbench']}, not {tree}")
    r = rec.get("result") or {}
    if rec["side"] == "B" and r.get("decode") not in (None, "cpu"):
        problems.append(f"B decoded on {r.get('decode')}")
    return problems


def sample_images() -> Path:
    """The sample JPEG folder, built by this tree if it is missing (both sides read it)."""
    sys.path.insert(0, str(ROOT))
    from workbench.engine.datasets import ensure_datasets

    return ensure_datasets().images


def run(args: argparse.Namespace) -> dict[str, Any]:
    before = git("rev-parse", args.before)
    data = Path(args.data) if args.data else sample_images()
    doc: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "A": {"rev": args.before, "commit": before},
        "B": {"tree": str(ROOT), "commit": git("rev-parse", "HEAD"),
              "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))},
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "data": str(data),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_start": load()},
        "bursts": [],
    }  # fmt: skip
    old = Path(tempfile.mkdtemp(prefix="wb-before-knob-"))
    git("worktree", "add", "--detach", str(old), before)
    try:
        trees = {"A": old, "B": ROOT}
        for r in range(args.rounds):
            for side in ORDER:
                rec = burst(side, trees[side], data, args)
                rec["round"] = r + 1
                rec["problems"] = checked(rec, trees[side])
                doc["bursts"].append(rec)
                print(f"round {r + 1} {side}: {speed(rec) or 0:,.1f} samples/s, load "
                      f"{rec['load_before']['avg'][0]:.2f}" + (f" {rec.get('error', '')[-200:]}"
                                                               if speed(rec) is None else ""),
                      flush=True)  # fmt: skip
    finally:
        git("worktree", "remove", "--force", str(old))
    doc["machine"]["load_end"] = load()
    doc["summary"] = summarize(doc["bursts"])
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="A-B-B-A rounds")
    ap.add_argument("--seconds", type=float, default=3.0, help="each burst's window")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--before", default=f"{KNOB_COMMIT}~1", help="A: the commit before the knob")
    ap.add_argument("--data", default=None, help="an image folder (default: the sample set)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    doc = run(args)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M")
    out = Path(args.out) if args.out else RESULTS / f"cpu-path-unchanged-{stamp}.json"
    out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    s = doc["summary"]
    print(f"B/A per round: {s['round_ratio']}; per pair: {s['pair_ratio']}; kept: {out}")
    return 1 if s["rounds_failed"] or any(b["problems"] for b in doc["bursts"]) else 0


if __name__ == "__main__":
    sys.exit(main())
