"""The GPU check: one script, under 5 minutes on a CUDA machine, one table.

Runs bursts across precision modes, pin_memory, channels_last, compile and a workers sweep on
resnet50 and gpt, plus the synthetic (compute-only) ceiling, a deliberate OOM, a one-rank
torchrun job on the NCCL path and the all-reduce benchmark, and checks that NVML telemetry and
MFU are filled in. Needs only the engine's dependencies (torch,
nvidia-ml-py, pyyaml, psutil, pandas): no UI packages, no DALI, no network.

Usage: python benchmarks/gpu_check.py [--seconds S] [--quick] [--json FILE]
Exit code 0 when every check passed, 1 otherwise (the table says which).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import torch

from workbench import Knobs, hardware, run_burst
from workbench.data import ensure_datasets
from workbench.distributed import comm_bench
from workbench.telemetry import nvml_status


def _r50(**kw) -> Knobs:
    """resnet50 at batch 128 with 8 persistent workers (as a training run keeps them)."""
    base = {"batch_size": 128, "num_workers": 8, "persistent_workers": True, "precision": "bf16"}
    base.update(kw)
    if base["num_workers"] == 0 or base.get("loader") == "synthetic":
        base.pop("persistent_workers")
        base["num_workers"] = 0
    return Knobs(**base)


def _gpt(**kw) -> Knobs:
    return Knobs(**{"batch_size": 32, "num_workers": 2, "precision": "bf16", **kw})


ROWS: list[tuple[str, str, Knobs]] = [
    ("resnet50", "fp32", _r50(precision="fp32")),
    ("resnet50", "tf32", _r50(precision="tf32")),
    ("resnet50", "bf16", _r50()),
    ("resnet50", "fp16 + GradScaler", _r50(precision="fp16")),
    ("resnet50", "bf16 + pin_memory", _r50(pin_memory=True)),
    ("resnet50", "bf16 + channels_last", _r50(channels_last=True, pin_memory=True)),
    ("resnet50", "bf16 synthetic ceiling", _r50(channels_last=True, loader="synthetic")),
    ("resnet50", "workers=0", _r50(num_workers=0)),
    ("resnet50", "workers=4", _r50(num_workers=4)),
    ("resnet50", "workers=12", _r50(num_workers=12)),
    ("gpt", "fp32", _gpt(precision="fp32")),
    ("gpt", "bf16", _gpt()),
    ("gpt", "bf16 + compile", _gpt(compile="default")),
    # several hundred GiB of fp32 activations, yet fewer samples than the token file holds
    ("gpt", "OOM on purpose", Knobs(batch_size=8192, precision="fp32")),
    ("gpt", "after the OOM", _gpt()),
    ("resnet50", "torchrun 1 rank, NCCL_ALGO", _r50(nccl={"NCCL_ALGO": "Ring"})),
]

QUICK = {"fp32", "bf16", "bf16 synthetic ceiling", "workers=0", "OOM on purpose", "after the OOM",
         "torchrun 1 rank, NCCL_ALGO"}  # fmt: skip


def check(label: str, r) -> list[str]:
    """What must hold for a row; returns the failures."""
    problems = []
    if label == "OOM on purpose":
        return [] if r.status == "oom" else [f"expected oom, got {r.status}"]
    if r.status != "ok":
        return [f"{r.status}: {r.error}"]
    if r.telemetry != "nvml" or r.gpu_util_pct is None or r.power_w is None:
        problems.append("NVML telemetry missing")
    if r.mfu_pct is None and hardware.peak_flops(r.device_name or "", r.knobs.precision):
        problems.append("MFU missing although the peak is known")
    if r.peak_mem_mib is None or r.peak_reserved_mib is None:
        problems.append("CUDA memory missing")
    if r.knobs.compile != "off" and not r.compile_s:
        problems.append("compile_s missing")
    if r.knobs.nccl and (r.backend != "nccl" or len(r.ranks) != r.knobs.world_size):
        problems.append(f"expected a torchrun NCCL job, got backend {r.backend}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--quick", action="store_true", help="a few rows only")
    ap.add_argument("--json", help="also write every BurstResult to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; nothing to check", file=sys.stderr)
        return 1
    os.environ.setdefault("WORKBENCH_HOME", tempfile.mkdtemp(prefix="wb-gpu-"))
    t0 = time.perf_counter()
    # 200 images a class: at batch 128 an epoch is 15 steps, so the workers rows measure
    # steady loading rather than epoch ends (workers persist across epochs, as in training).
    paths = ensure_datasets(images_per_class=200, progress=lambda m: print(m, file=sys.stderr))
    print(f"# GPU check: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA "
          f"{torch.version.cuda}, NVML: {nvml_status() or 'ok'}, data built/reused in "
          f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
    header = (f"| {'workload':<8} | {'knobs':<24} | {'status':<6} | {'samples/s':>9} | "
              f"{'step ms':>7} | {'IQR':>5} | {'wait %':>6} | {'peak MiB':>8} | {'util %':>6} |"
              f" {'W':>4} | {'MFU %':>5} | {'warm s':>6} | check")  # fmt: skip
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|---")
    results, failures = [], 0
    for workload, label, knobs in ROWS:
        if args.quick and label not in QUICK:
            continue
        r = run_burst(workload, knobs, seconds=args.seconds, data_dir=paths.root, record=False)
        problems = check(label, r)
        failures += bool(problems)
        results.append(r.to_dict())
        print(_row(workload, label, r, problems), flush=True)
    comm = comm_bench(torch.cuda.device_count(), timeout_s=120)
    print("\n" + comm.table())
    comm_ok = comm.ok and all(row["correct"] for row in comm.rows)
    print(f"\n{len(results) - failures}/{len(results)} rows passed, comm benchmark "
          f"{'ok' if comm_ok else 'FAILED'}, in {time.perf_counter() - t0:.0f} s")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f)
    return 1 if failures or not comm_ok else 0


def _row(workload: str, label: str, r, problems: list[str]) -> str:
    def f(x, spec=".1f"):
        return "-" if x is None else format(x, spec)

    return (f"| {workload:<8} | {label:<24} | {r.status:<6} | {f(r.samples_per_s):>9} | "
            f"{f(r.step_ms_p50):>7} | {f(r.step_ms_iqr):>5} | {f(r.data_wait_pct):>6} | "
            f"{f(r.peak_mem_mib, '.0f'):>8} | {f(r.gpu_util_pct, '.0f'):>6} | "
            f"{f(r.power_w, '.0f'):>4} | {f(r.mfu_pct):>5} | {f(r.warmup_s):>6} | "
            f"{'ok' if not problems else '; '.join(problems)}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
