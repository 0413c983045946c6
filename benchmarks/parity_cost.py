"""What the tuner's loss-parity check costs (issue 40: at most 20% of a tune at the default
budget), measured on whatever machine runs this.

1. A tune of ``--workload`` (default ``cnn``) at the default budget (16 bursts) over batch size,
   workers and precision (default and bf16), with the parity check on (steps sized to
   ``parity_gate.SHARE`` of the tune so far).
2. If the tune's pick changed rounding, the check ran inside it: its time is ``parity_s``. If
   it did not (on a CPU, bf16 is rarely the fastest), the check a rounding pick would get is
   run now, as the tune runs it: the fastest bf16 candidate against the start's numerics at
   its batch, steps sized from the tune's wall time and that candidate's bursts.
3. The share: the check's seconds over the tune's seconds without it.

Usage: python benchmarks/parity_cost.py [--workload W] [--seconds S] [--budget N] [--out F]
Bursts go to a temporary history store, not the user's. Writes a JSON with the command, the
commit, the tune's and the check's figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workbench import tune
from workbench.engine.workloads import resolve_target
from workbench.tuning import parity_gate

SPACE = {"batch_size": [16, 32, 64], "num_workers": [0, 1, 2], "precision": ["default", "bf16"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="cnn")
    p.add_argument("--seconds", type=float, default=3.0, help="each burst's window (default 3)")
    p.add_argument("--budget", type=int, default=16, help="the tune's bursts (default 16)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, help="where to write the JSON (default: print it)")
    args = p.parse_args(argv)
    store = Path(tempfile.mkdtemp()) / "history.sqlite"
    began = time.perf_counter()
    t = tune(args.workload, space=SPACE, budget=args.budget, seconds=args.seconds,
             device=args.device, store=store)  # fmt: skip
    tune_s = time.perf_counter() - began
    doc = {
        "command": " ".join([sys.executable, *sys.argv]),
        "commit": _commit(),
        "workload": args.workload,
        "device": t.device,
        "budget": args.budget,
        "seconds": args.seconds,
        "space": SPACE,
        "tune_wall_s": round(tune_s, 2),
        "bursts": len(t.bursts),
        "pick": t.best.changes() if t.best else None,
        "parity_in_tune_s": t.parity_s,
        "parity_in_tune": t.parity.evidence() if t.parity is not None else None,
        "refused": t.parity_refused,
        "notes": t.notes,
    }
    if t.parity_s is not None:
        doc["parity_s"], doc["share_pct"] = t.parity_s, 100 * t.parity_s / (tune_s - t.parity_s)
    else:
        doc |= _check_as_the_tune_would(t, args, tune_s)
    text = json.dumps(doc, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


def _check_as_the_tune_would(t, args, tune_s: float) -> dict:
    """The check the fastest fitting bf16 candidate would have got, timed now."""
    rounding = [
        c for c in t.candidates if c.fits and parity_gate.rounding_changes(t.start, c.knobs)
    ]
    if not rounding:
        return {"parity_s": None, "share_pct": None, "why": "no candidate changed rounding"}
    pick = rounding[0]
    wl, dev = resolve_target(args.workload, args.device)
    results = {c.knobs: c.representative for c in t.candidates}
    check = parity_gate.MeasuredCheck(wl, dev, time.perf_counter() - tune_s, results.get)
    began = time.perf_counter()
    result = check(parity_gate.reference_for(t.start, pick.knobs), pick.knobs)
    spent = time.perf_counter() - began
    return {
        "checked_pick": pick.knobs.changes(),
        "parity_steps": result.steps,
        "parity_s": round(spent, 2),
        "share_pct": round(100 * spent / tune_s, 1),
        "parity": result.evidence(),
        "parity_reason": result.reason,
    }


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    raise SystemExit(main())
