"""Does a burst of a Lightning module read what Lightning's own Trainer.fit gets? Interleaved.

Each pair trains the same LightningModule (examples/lightning_example.py's small convnet,
AdamW and a per-step OneCycle schedule) on the same DataModule with the same knobs twice in
one process: once as production does, ``Trainer(**cfg.lightning_trainer_kwargs(),
max_steps=W+N, accelerator="cpu", logger=False, ...)`` over a DataLoader built from
``cfg.dataloader_kwargs()``, its samples/s taken over the N steps after W warm-up steps
(``on_train_batch_end`` stamps: the Trainer's start-up and first steps are outside, as a
burst's warm-up is); and once as ``wb.run_burst(Workload.from_lightning(...), knobs)``. The
order alternates from pair to pair, so a drift of the shared machine falls on both sides;
one unmeasured pair runs first (the first run of a process reads low). The figure is the median
of the per-pair ratios burst/Trainer, with its spread (lowest and highest ratio); and the same
for the median step times (Trainer's over burst's: a ratio of speeds too), which a shared
machine's bursts of load disturb less than a window's mean. The load average is printed with
them: on a machine others are using, read the figures with it.

A burst of a Lightning workload is now ``Trainer.fit`` itself (``workbench.engine.lightning_fit``:
the Trainer built from the knobs, timed by a callback), so the Trainer's per-step work (its
loop, ``self.log``'s result tracking, hooks and callbacks) is on both sides and the ratio
should be 1 within the noise; before, the burst called ``training_step`` in its own loop and a
ratio above 1 was what that work costs. Where a loop runs matters as much on a CPU (issue 25,
benchmarks/fidelity.py): ``--trainer-thread`` runs ``Trainer.fit`` on a fresh thread too, so
both sides meet the same OpenMP conditions. On a loaded machine ``OMP_NUM_THREADS=1`` takes
the OpenMP team out of both sides (with ``OMP_WAIT_POLICY=PASSIVE`` under load both sides'
steps snapped to 16.0 ms, the scheduler's slice, hiding any difference); ``--steps 200`` gives
the Trainer's side a window as long as the burst's 2 s.

Seen on the 2-core test VM (2026-12-05, commit 77124eb, bursts still on a fresh thread):
- cores busy with others' work (load average about 5): the burst read 5-20x above the Trainer
  on the main thread (the thread effect, amplified by the load);
- quiet cores (load about 1.2): 0.82 (0.81-0.82), the main thread's OpenMP team now the faster;
- quiet, ``OMP_WAIT_POLICY=PASSIVE`` (the same OpenMP conditions on both sides): 1.14
  (1.11-1.19) over 5 pairs, median steps 7.7 ms against 9.0: the Trainer's own work per step
  (its loop about 0.35 ms, each ``self.log`` about 0.35 ms, its optimizer closure and hooks).

Seen on the same VM (2026-12-05, cores shared with others' tests, load average 2.5-3,
``OMP_NUM_THREADS=1 ... --pairs 5 --steps 200``, interleaved runs of the two trees):
- before (cc664d5: the burst calls ``training_step`` in its own loop): 1.100 (1.09-1.42),
  1.084 (0.97-1.20), 1.101 (1.05-1.15); median steps 7.8-8.8 ms against the Trainer's
  8.8-9.9 (p50 ratios 1.13, 1.15, 1.13);
- after (the burst is ``Trainer.fit``): 0.986 (0.79-1.48: a load spike in two pairs), 0.998
  (0.98-1.02), 0.978 (0.96-1.01); median steps 9.0-9.5 ms on both sides (p50 ratios 1.00,
  1.02, 1.00);
- after, on this branch merged with afe80fd (a CPU burst on the caller's thread, as the
  Trainer): 0.980 (0.93-1.01), p50 ratio 1.00; without ``OMP_NUM_THREADS=1`` at a load of
  4.6, 1.000 (0.71-1.86), both sides' steps about 205 ms (OpenMP threads spinning against
  others' work), p50 ratio 0.99.

Usage: python benchmarks/lightning_fidelity.py [--pairs 3] [--steps 40] [--warmup 5]
       [--batch 32] [--workers 0] [--seconds 2] [--trainer-thread]
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lightning as L  # noqa: E402

import workbench as wb  # noqa: E402
from examples.lightning_example import LitClassifier, ShapesData  # noqa: E402
from workbench.config.tuned_config import TunedConfig  # noqa: E402


class _Stamps(L.Callback):
    """perf_counter at the end of every training batch."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_end(self, *args: Any) -> None:
        self.times.append(time.perf_counter())


def trainer_samples_per_s(cfg: TunedConfig, warmup: int, steps: int) -> tuple[float, float]:
    """(samples/s over the steps after the warm-up, median step time in ms)."""
    stamps = _Stamps()
    trainer = L.Trainer(
        **cfg.lightning_trainer_kwargs(), max_steps=warmup + steps, accelerator="cpu",
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[stamps],
    )  # fmt: skip
    data = ShapesData(n=64 * cfg.knobs.batch_size, loader_kwargs=cfg.dataloader_kwargs("cpu"))
    trainer.fit(LitClassifier(), datamodule=data)
    times = stamps.times[warmup - 1 :]
    window = times[-1] - times[0]
    step_ms = statistics.median(b - a for a, b in itertools.pairwise(times)) * 1e3
    return steps * cfg.knobs.batch_size * cfg.knobs.grad_accum / window, step_ms


def on_fresh_thread(run: Any, *args: Any) -> Any:
    """``run(*args)`` on a new thread, as a burst runs today; its result or its error."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = run(*args)
        except BaseException as exc:  # handed to the caller
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def burst_samples_per_s(knobs: wb.Knobs, warmup: int, seconds: float) -> tuple[float, float]:
    """(the burst's samples/s, its median step time in ms)."""
    wl = wb.Workload.from_lightning(
        LitClassifier, lambda: ShapesData(n=64 * knobs.batch_size), name="lightning_fidelity"
    )
    r = wb.run_burst(wl, knobs, seconds=seconds, warmup_steps=warmup, record=False, device="cpu")
    if r.status != "ok":
        raise SystemExit(f"burst failed: {r.error}")
    return r.samples_per_s, r.step_ms_p50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40, help="the Trainer's measured steps")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=2.0, help="the burst's window")
    parser.add_argument("--trainer-thread", action="store_true",
                        help="run Trainer.fit on a fresh thread, as a burst runs")  # fmt: skip
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # Lightning's tips and hints: stdout is one JSON document
    knobs = wb.Knobs(batch_size=args.batch, num_workers=args.workers)
    cfg = TunedConfig(knobs)

    def fit() -> tuple[float, float]:
        if args.trainer_thread:
            return on_fresh_thread(trainer_samples_per_s, cfg, args.warmup, args.steps)
        return trainer_samples_per_s(cfg, args.warmup, args.steps)

    def pair(burst_first: bool) -> dict[str, float]:
        if burst_first:
            burst = burst_samples_per_s(knobs, args.warmup, args.seconds)
            trainer = fit()
        else:
            trainer = fit()
            burst = burst_samples_per_s(knobs, args.warmup, args.seconds)
        return {"burst": round(burst[0], 1), "trainer": round(trainer[0], 1),
                "ratio": round(burst[0] / trainer[0], 3), "burst_step_ms_p50": round(burst[1], 2),
                "trainer_step_ms_p50": round(trainer[1], 2),
                "p50_ratio": round(trainer[1] / burst[1], 3)}  # fmt: skip

    pair(True)  # unmeasured: the first runs of a process read low
    rows = [pair(i % 2 == 0) for i in range(args.pairs)]
    ratios = [r["ratio"] for r in rows]
    p50s = [r["p50_ratio"] for r in rows]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    print(json.dumps({
        "command": " ".join(["python", "benchmarks/lightning_fidelity.py", *sys.argv[1:]]),
        "commit": commit, "knobs": {"batch_size": args.batch, "num_workers": args.workers},
        "trainer_thread": "fresh" if args.trainer_thread else "main",
        "trainer_steps": args.steps, "warmup_steps": args.warmup, "burst_seconds": args.seconds,
        "pairs": rows, "median_ratio": round(statistics.median(ratios), 3),
        "spread": [min(ratios), max(ratios)],
        "median_p50_ratio": round(statistics.median(p50s), 3), "p50_spread": [min(p50s), max(p50s)],
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
