"""The multi-node figures (issue 17: "Beyond one machine").

1. ``cnn`` bursts of ``--world-size`` ranks (gloo on this CPU): one node (torchrun
   ``--standalone``) vs ``--nodes`` local "nodes" (one agent each, a c10d rendezvous whose
   store this process hosts), interleaved repeats, medians: samples/s, the job's wall time
   with start-up (``launch_s``: what the rendezvous adds shows as the difference), and each
   node's figures.
2. The comm benchmark on the same ranks: one node (every rank within it: ``intra``) vs the
   local nodes (``inter`` rows: one rank per node; ``intra`` rows too when a node has two
   ranks or more).
3. Two local nodes of two ranks each, ``intra`` vs ``inter`` busbw, median of
   ``--comm-repeats`` runs. ``comm_bench`` refuses more ranks than this CPU's cores, so on a
   machine with fewer than 4 the job is run one level down (``MultiNodeJob``) and the ranks
   share the cores: the table says so.

Usage: python benchmarks/multinode_figures.py [--seconds S] [--repeats N] [--batch B]
       [--world-size W] [--nodes N] [--comm-repeats N]
Nothing is written to the user's history.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from bench_args import parser

import workbench as wb
from workbench.distributed.allreduce import CPU_SIZES, CommResult
from workbench.distributed.jobs import comm_bench, worker_env
from workbench.distributed.launchers import LocalLauncher
from workbench.distributed.multinode import MultiNodeJob
from workbench.distributed.torchrun import JobSpec
from workbench.engine.datasets import ensure_datasets


def burst_row(nodes: int, args: argparse.Namespace) -> dict:
    knobs = wb.Knobs(batch_size=args.batch, world_size=args.world_size, nodes=nodes)
    r = wb.run_burst("cnn", knobs, seconds=args.seconds, record=False, device="cpu",
                     launcher="local" if nodes > 1 else None)  # fmt: skip
    if not r.ok:
        raise SystemExit(f"nodes={nodes}: {r.status}: {r.error}")
    return {"sps": r.samples_per_s, "launch_s": r.launch_s, "nodes": r.nodes,
            "ranks": [(x["rank"], round(x["step_ms_p50"], 1)) for x in r.ranks]}  # fmt: skip


def comm_two_by_two(sizes: list[int], repeats: int) -> CommResult:
    """Two local nodes of two ranks: the median time per size and scope over ``repeats``."""
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as out:
            spec = JobSpec(mode="comm", out_dir=out, device="cpu", parent_pid=0, timeout_s=300,
                           sizes_bytes=sizes, nodes=2)  # fmt: skip
            outcome = MultiNodeJob(spec, LocalLauncher(), 2, 2, worker_env({}, 4)).run()
        if outcome.result is None:
            raise SystemExit(f"2 x 2 comm: {outcome.status}: {outcome.error}")
        runs.append(outcome.result["rows"])
    rows = []
    for i, row in enumerate(runs[0]):
        median_us = statistics.median(run[i]["time_us"] for run in runs)
        factor = row["busbw_gbps"] / row["algbw_gbps"] if row["algbw_gbps"] else 0.0
        algbw = row["size_bytes"] / (median_us * 1e-6) / 1e9
        correct = all(run[i]["correct"] for run in runs)
        rows.append({**row, "time_us": median_us, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * factor, "correct": correct})  # fmt: skip
    return CommResult(world_size=4, nodes=2, backend="gloo", device="cpu", rows=rows)


def main() -> None:
    args = parser(__doc__, seconds=3.0, repeats=3, batch=16, world_size=2, nodes=2,
                  comm_repeats=3).parse_args()  # fmt: skip
    ensure_datasets()
    rows: dict[int, list[dict]] = {1: [], args.nodes: []}
    order = list(rows)
    for _ in range(args.repeats):  # interleaved: drift on a shared machine hits both alike
        for nodes in order:
            rows[nodes].append(burst_row(nodes, args))
        order.reverse()  # and neither always goes first
    print(f"cnn, {args.world_size} ranks, batch {args.batch} per rank, gloo on the CPU, "
          f"{args.seconds:g} s windows, {args.repeats} runs each (median)")  # fmt: skip
    print(f"{'nodes':>5} {'samples/s (each)':>28} {'median':>8} {'launch_s (each)':>22} "
          f"{'median':>7}")  # fmt: skip
    for nodes, runs in rows.items():
        each = ", ".join(f"{r['sps']:.1f}" for r in runs)
        launch = ", ".join(f"{r['launch_s']:.1f}" for r in runs)
        print(f"{nodes:>5} {each:>28} {statistics.median(r['sps'] for r in runs):>8.1f} "
              f"{launch:>22} {statistics.median(r['launch_s'] for r in runs):>7.1f}")  # fmt: skip
    for nodes, runs in rows.items():
        print(f"  nodes={nodes} per-rank step p50 ms: {[r['ranks'] for r in runs]}")
    print("  per node (the median run of nodes > 1):")
    mid = sorted(rows[args.nodes], key=lambda r: r["sps"])[len(rows[args.nodes]) // 2]
    for n in mid["nodes"]:
        print(f"    {n['node']:<8} ranks {n['ranks']} samples/s {n['samples_per_s']:.1f} "
              f"step p50 {n['step_ms_p50']:.1f} ms data wait {n['data_wait_pct']:.0f}% "
              f"peak {n['peak_mem_mib']:.0f} MiB")  # fmt: skip
    print()
    sizes = list(CPU_SIZES)
    one = comm_bench(args.world_size, sizes=sizes, device="cpu")
    across = comm_bench(args.world_size, sizes=sizes, device="cpu", nodes=args.nodes,
                        launcher="local")  # fmt: skip
    print(f"one node ({one.elapsed_s:.1f} s):\n{one.table()}\n")
    print(f"{args.nodes} local nodes ({across.elapsed_s:.1f} s):\n{across.table()}\n")
    cores = os.cpu_count() or 1
    shared = f", 4 ranks on {cores} cores: they share them" if cores < 4 else ""
    print(f"2 local nodes x 2 ranks, median of {args.comm_repeats} runs{shared}:")
    print(comm_two_by_two(sizes, args.comm_repeats).table())


if __name__ == "__main__":
    main()
