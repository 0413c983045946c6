"""The distributed figures (issue: "Distributed bursts and the NCCL knobs").

1. ``cnn`` samples/s with world_size 1 (this process) vs 2 (a torchrun DDP job; gloo on a CPU,
   NCCL on GPUs), interleaved repeats, medians, plus each job's wall time with start-up.
2. The all-reduce benchmark's table (``workbench comm``) for world_size 2 on a CPU, or for
   every GPU on a CUDA machine.

Usage: python benchmarks/distributed_figures.py [--seconds S] [--repeats N] [--batch B]
Nothing is written to the user's history.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import workbench as wb
from workbench.distributed.jobs import comm_bench
from workbench.engine.datasets import ensure_datasets


def burst_row(world_size: int, args: argparse.Namespace) -> dict:
    knobs = wb.Knobs(batch_size=args.batch, num_workers=args.workers, world_size=world_size)
    t0 = time.perf_counter()
    r = wb.run_burst("cnn", knobs, seconds=args.seconds, record=False)
    wall = time.perf_counter() - t0
    if not r.ok:
        raise SystemExit(f"world_size={world_size}: {r.status}: {r.error}")
    return {"sps": r.samples_per_s, "wall_s": wall, "step_ms": r.step_ms_p50,
            "ranks": [round(x["step_ms_p50"], 1) for x in r.ranks]}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=0)
    args = p.parse_args()
    ensure_datasets()
    rows: dict[int, list[dict]] = {1: [], 2: []}
    for _ in range(args.repeats):  # interleaved: drift on a shared machine hits both alike
        for world in (1, 2):
            rows[world].append(burst_row(world, args))
    print(f"cnn, batch {args.batch} per rank, {args.workers} workers, {args.seconds:g} s windows")
    print(f"{'world_size':>10} {'samples/s (each)':>34} {'median':>8} {'job wall s':>10}")
    for world, runs in rows.items():
        each = ", ".join(f"{r['sps']:.1f}" for r in runs)
        med = statistics.median(r["sps"] for r in runs)
        wall = statistics.median(r["wall_s"] for r in runs)
        print(f"{world:>10} {each:>34} {med:>8.1f} {wall:>10.1f}")
    for r in rows[2]:
        print(f"  world_size 2 per-rank step p50 ms: {r['ranks']}")
    ratio = statistics.median(r["sps"] for r in rows[2]) / statistics.median(
        r["sps"] for r in rows[1]
    )
    print(f"scaling 1 -> 2 ranks: {ratio:.2f}x")
    world = torch.cuda.device_count() if torch.cuda.is_available() else 2
    print()
    print(comm_bench(world).table())


if __name__ == "__main__":
    main()
