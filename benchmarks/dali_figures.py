"""DALI's figures (issue: "NVIDIA DALI as a loader knob"), measured on whatever machine runs this.

1. Loader alone: images/s delivered by the torch DataLoader and by DALI over the same files,
   with the same knobs (batch size, ``num_workers`` = torch worker processes = DALI threads),
   through ``run_loader_burst`` (warm-up outside a time-boxed window, no model).
2. Training: ``cnn`` and ``resnet50`` samples/s with each loader (``run_burst``), and the
   device memory DALI's own pools held (``loader_device_mem_mib``): torch's ``peak_mem_mib``
   never sees it, so a DALI speed-up is shown beside the memory it costs.

Repeats are interleaved (every configuration once, then again) so that drift on a shared
machine lands on all of them alike; each cell is the median of the repeats, with the min-max
range beside it. On a CUDA device DALI's decode is ``auto`` (mixed, nvJPEG on the GPU) unless
``--decode`` says otherwise; on a CPU it is ``cpu``.

Usage: python benchmarks/dali_figures.py [--data DIR] [--device D] [--seconds S] [--repeats N]
       [--workers 1,2] [--decode auto|cpu|mixed] [--only loader,train] [--json FILE]
Results go to stdout as tables; nothing is written to the user's history.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from workbench import Knobs, run_burst
from workbench.analysis.loader_ceiling import run_loader_burst, settled_warmup
from workbench.engine import hardware
from workbench.engine.datasets import ensure_datasets, read_manifest
from workbench.engine.loaders.dali import dali_available

LOADERS = ("torch", "dali")


def _knobs(loader: str, workers: int, batch: int, decode: str) -> Knobs:
    return Knobs(batch_size=batch, num_workers=workers, loader=loader, dali_decode=decode)


def _repeat(configs: list[Any], measure: Callable[[Any], float | None], repeats: int) -> dict:
    """Interleaved repeats: every config once per round; returns config -> value per round
    (None where a run failed), so values of one round can be paired."""
    values: dict[Any, list[float | None]] = {c: [] for c in configs}
    for round_ in range(repeats):
        for config in configs:
            value = measure(config)
            values[config].append(value)
            print(f"  round {round_ + 1}: {config} -> {_fmt(value)}", file=sys.stderr)
    return values


def loader_figures(args: argparse.Namespace, workers: list[int]) -> list[dict[str, Any]]:
    """Images/s of each loader alone, per workload and worker/thread count."""
    configs = [(wl, w, ld) for wl in args.workloads for w in workers for ld in LOADERS]

    def measure(config: tuple[str, int, str]) -> float | None:
        wl, w, loader = config
        knobs = _knobs(loader, w, args.batch, args.decode)
        r = run_loader_burst(
            wl,
            knobs,
            seconds=args.seconds,
            warmup_batches=max(3, settled_warmup(knobs, 3)),
            device=args.device,
            data_dir=args.data,
        )
        if not r.ok:
            print(f"  {config}: {r.status}: {r.error}", file=sys.stderr)
        return r.samples_per_s

    return _rows(_repeat(configs, measure, args.repeats), ("workload", "workers", "loader"))


def train_figures(args: argparse.Namespace, workers: list[int]) -> list[dict[str, Any]]:
    """Training samples/s with each loader (cnn and resnet50 by default), with the device
    memory DALI's pools held beside each row (None on a CPU, or with the torch loader)."""
    configs = [(wl, w, ld) for wl in args.workloads for w in workers for ld in LOADERS]
    loader_mem: dict[Any, list[float | None]] = {c: [] for c in configs}

    def measure(config: tuple[str, int, str]) -> float | None:
        wl, w, loader = config
        batch = args.batch if wl == "cnn" else args.resnet_batch
        knobs = _knobs(loader, w, batch, args.decode)
        r = run_burst(
            wl,
            knobs,
            seconds=args.seconds if wl == "cnn" else args.resnet_seconds,
            warmup_steps=settled_warmup(knobs, 2),
            min_steps=3,
            device=args.device,
            data_dir=args.data,
            record=False,
        )
        if not r.ok:
            print(f"  {config}: {r.status}: {r.error}", file=sys.stderr)
            return None
        held = getattr(r, "loader_device_mem_mib", None)
        loader_mem[config].append(held)
        print(f"    no_effect: {r.no_effect}, data wait {_fmt(r.data_wait_pct)}%, "
              f"peak mem {_fmt(r.peak_mem_mib)} MiB, loader's own {_fmt(held)} MiB",
              file=sys.stderr)  # fmt: skip
        return r.samples_per_s

    rows = _rows(_repeat(configs, measure, args.repeats), ("workload", "workers", "loader"))
    for row in rows:
        held = [
            m for m in loader_mem[(row["workload"], row["workers"], row["loader"])] if m is not None
        ]
        row["loader_device_mem_mib"] = statistics.median(held) if held else None
    return rows


def _rows(values: dict[Any, list[float | None]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    for config, per_round in values.items():
        got = [v for v in per_round if v is not None]
        row = dict(zip(keys, config, strict=True))
        row.update(
            median=statistics.median(got) if got else None,
            low=min(got) if got else None,
            high=max(got) if got else None,
            n=len(got),
            rounds=per_round,
        )
        rows.append(row)
    return rows


def paired_ratio(torch_rounds: list[float | None], dali_rounds: list[float | None]) -> float | None:
    """Median over rounds of dali/torch measured back to back: on a shared machine the load
    moves between rounds more than between two neighbouring runs, so pairs cancel most of it."""
    ratios = [d / t for t, d in zip(torch_rounds, dali_rounds, strict=True) if t and d]
    return statistics.median(ratios) if ratios else None


def _table(title: str, rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per workload and worker count, torch and DALI side by side."""
    lines = [
        f"### {title}",
        "",
        "| workload | workers / threads | torch (median, range) | dali (median, range) "
        "| dali/torch (medians) | dali/torch (median of paired rounds) "
        "| DALI's device pools, MiB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    pairs: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for row in rows:
        pairs.setdefault((row["workload"], row["workers"]), {})[row["loader"]] = row
    for (wl, w), by_loader in pairs.items():
        t, d = by_loader.get("torch", {}), by_loader.get("dali", {})
        ratio = (
            f"{d['median'] / t['median']:.2f}x" if t.get("median") and d.get("median") else "n/a"
        )
        paired = paired_ratio(t.get("rounds", []), d.get("rounds", []))
        paired_text = f"{paired:.2f}x" if paired else "n/a"
        held = _fmt(d.get("loader_device_mem_mib"))  # n/a: CPU decode, or not measured
        lines.append(f"| {wl} | {w} | {_cell(t)} | {_cell(d)} | {ratio} | {paired_text} | {held} |")
    return "\n".join(lines)


def _cell(row: dict[str, Any]) -> str:
    if not row.get("median"):
        return "failed"
    return f"{_fmt(row['median'])} ({_fmt(row['low'])}-{_fmt(row['high'])}, n={row['n']})"


def _fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="data root (default: the sample datasets)")
    p.add_argument("--device", default=None)
    p.add_argument("--seconds", type=float, default=4.0, help="window of loader and cnn runs")
    p.add_argument("--resnet-seconds", type=float, default=8.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", default="1,2", help="torch workers = DALI threads")
    p.add_argument("--batch", type=int, default=64, help="batch of loader and cnn runs")
    p.add_argument("--resnet-batch", type=int, default=16)
    p.add_argument("--decode", default="auto", choices=("auto", "cpu", "mixed"))
    p.add_argument("--workloads", default="cnn,resnet50")
    p.add_argument("--only", default="loader,train")
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args(argv)
    reason = dali_available()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    args.workloads = args.workloads.split(",")
    workers = [int(w) for w in args.workers.split(",")]
    args.data = str(ensure_datasets(args.data).images.parent if args.data is None else args.data)
    dev = hardware.resolve_device(args.device)
    info = hardware.device_info(dev)
    manifest = read_manifest(args.data) or {}
    print(
        f"device {dev} ({info.name}), {info.cpu_count} CPUs, "
        f"{manifest.get('images', {}).get('count', '?')} images, "
        f"versions {json.dumps(hardware.versions())}"
    )
    started = time.perf_counter()
    out: dict[str, Any] = {"device": str(dev), "device_name": info.name}
    only = set(args.only.split(","))
    if "loader" in only:
        out["loader"] = loader_figures(args, workers)
        print(_table(f"Loader alone, images/s (batch {args.batch})", out["loader"]) + "\n")
    if "train" in only:
        out["train"] = train_figures(args, workers)
        batches = f"batch {args.batch} for cnn, {args.resnet_batch} for resnet50"
        print(_table(f"Training, samples/s ({batches})", out["train"]) + "\n")
    print(f"took {time.perf_counter() - started:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
