"""What each memory knob changes on this machine: docs/figures.md's "Memory knobs" table.

    python benchmarks/memory_figures.py [--workloads cnn,gpt] [--seconds 1]

For each workload, one burst per change against the same baseline. Memory figures are the
burst's ``memory_breakdown`` (tensor bytes: exact, the same on every run) and its peak (PSS of
the process tree on a CPU: noisy, it holds the interpreter too; peak allocated on CUDA);
throughput is one burst each, so read it against the machine's load (printed at the end).
"""

from __future__ import annotations

import argparse
import os

import workbench as wb

CHANGES = {
    "baseline": {},
    "activation_checkpointing=True": {"activation_checkpointing": True},
    "batch/2, grad_accum=2": {"half_batch": True, "grad_accum": 2},
    "precision=bf16": {"precision": "bf16"},
    "optimizer_impl=fused": {"optimizer_impl": "fused"},
    "optimizer_impl=for-loop": {"optimizer_impl": "for-loop"},
    "alloc_conf=expandable_segments:True": {"alloc_conf": "expandable_segments:True"},
}
BATCH = {"cnn": 32, "gpt": 4}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workloads", default="cnn,gpt")
    p.add_argument("--seconds", type=float, default=1.0)
    args = p.parse_args()
    print(
        "| workload | change | params+grads+optimizer MiB | activations MiB | peak MiB "
        "| fragmentation % | samples/s | no effect |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.workloads.split(","):
        batch = BATCH.get(name, 32)
        for label, change in CHANGES.items():
            change = dict(change)
            size = batch // 2 if change.pop("half_batch", False) else batch
            k = wb.Knobs(batch_size=size, **change)
            r = wb.run_burst(name, k, seconds=args.seconds, warmup_steps=2, min_steps=3,
                             record=False)  # fmt: skip
            b = r.memory_breakdown or {}
            fixed = sum(b.get(x) or 0 for x in ("params_mib", "grads_mib", "optimizer_mib"))
            print(f"| {name} (batch {batch}) | {label} | {fixed:,.1f} | "
                  f"{_n(b.get('activations_mib'))} | {_n(r.peak_mem_mib)} ({r.peak_mem_kind}) | "
                  f"{_n(r.fragmentation_pct)} | {_n(r.samples_per_s)} | "
                  f"{', '.join(r.no_effect) or '-'} |", flush=True)  # fmt: skip
    print(f"\nload average: {os.getloadavg()}")


def _n(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.1f}"


if __name__ == "__main__":
    main()
