"""Does the self-tuning loader reach the tuned throughput from a poor start, and leave a good one?

A plain production loop (fidelity.py's small convnet on the JPEG sample set, SGD, the main
thread) iterates ``cfg.dataloader(dataset, autotune=...)`` for ``--seconds``, epoch after epoch,
each run with a fresh ``$WORKBENCH_HOME`` (no cached answer: every autotuned run tunes). The
model runs on ``--threads`` threads (default 1: what torchrun gives each rank, OMP_NUM_THREADS=1),
so a loader worker has a core of its own on a 2-core machine.

Two comparisons, each in ``--pairs`` interleaved pairs whose order alternates:

- **poor start**: saved ``num_workers=0`` with ``autotune=AutotuneOptions(cap_s=--cap)`` against
  the tuned-by-hand ``--best`` workers without autotune; ratio of samples/s after the cap
  (the answer running) and over the whole run (the tuning's cost included).
- **good start**: ``--best`` workers with autotune against the same without: not slower.

    python benchmarks/autotune_loader.py --pairs 3 --seconds 16 --cap 6 --best 1 --out X.json
    python benchmarks/autotune_loader.py --table benchmarks/results/autotune-loader-cpu-*.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity import JpegFolder, Net, make_optimizer, provenance
from kept_runs import keep, markdown_table, pairs_parser, print_table_if_asked, spread

from workbench.config import TunedConfig
from workbench.config.autotune import AutotuneOptions
from workbench.core.knobs import Knobs


def run(dataset: JpegFolder, workers: int, autotune: bool, args: argparse.Namespace) -> dict:
    """One production run: samples/s overall and after the cap, and the loader's decision."""
    os.environ["WORKBENCH_HOME"] = tempfile.mkdtemp(prefix="wb-autotune-")  # no cached answer
    torch.manual_seed(0)
    cfg = TunedConfig(Knobs(batch_size=args.batch, num_workers=workers))
    option = AutotuneOptions(cap_s=args.cap) if autotune else False
    loader = cfg.dataloader(dataset, autotune=option, shuffle=True, drop_last=True)
    model = Net(len(dataset.classes))
    optimizer = make_optimizer(model.parameters())
    start = time.perf_counter()
    arrivals: list[float] = []
    while not arrivals or arrivals[-1] - start < args.seconds:
        for x, y in loader:
            arrivals.append(time.perf_counter())
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if arrivals[-1] - start >= args.seconds:
                break
    end = time.perf_counter()
    after = [t for t in arrivals if t >= start + args.cap]
    decision = getattr(loader, "decision", None)
    return {
        "sps": args.batch * len(arrivals) / (end - start),
        "sps_after_cap": args.batch * len(after) / (end - start - args.cap),
        "chosen_workers": decision.num_workers if decision else workers,
        "reason": decision.reason if decision else None,
    }


def pair(dataset, a: tuple[int, bool], b: tuple[int, bool], args, a_first: bool) -> dict:
    order = (a, b) if a_first else (b, a)
    got = {side: run(dataset, *side, args) for side in order}
    ra, rb = got[a], got[b]
    return {"autotuned": ra, "reference": rb, "autotuned_first": a_first,
            "ratio": ra["sps"] / rb["sps"],
            "ratio_after_cap": ra["sps_after_cap"] / rb["sps_after_cap"]}  # fmt: skip


def compare(dataset, name: str, a: tuple[int, bool], b: tuple[int, bool], args) -> dict:
    pairs = [pair(dataset, a, b, args, a_first=i % 2 == 0) for i in range(args.pairs)]
    row = {"comparison": name, "autotuned": list(a), "reference": list(b), "pairs": pairs}
    for key in ("ratio", "ratio_after_cap"):
        row[key] = spread([p[key] for p in pairs])
    row["chosen_workers"] = [p["autotuned"]["chosen_workers"] for p in pairs]
    shown = ("comparison", "ratio", "ratio_after_cap", "chosen_workers")
    print(json.dumps({k: row[k] for k in shown}), file=sys.stderr, flush=True)
    return row


def table(paths: list[Path]) -> str:
    """The published table (docs/production.md), every figure read from the kept JSON."""
    columns = [("run (commit, date, load)", "---"), ("comparison", "---"),
               ("after the cap: autotuned / reference, median (range)", "---:"),
               ("whole run (range)", "---:"), ("workers chosen", "---")]  # fmt: skip
    return markdown_table(paths, columns, _run_name, _cells)


def _run_name(path: Path, doc: dict) -> str:
    load = doc["machine"]["load_avg"][0]
    return f"`{path.name}` ({doc['commit'][:7]}, {doc['date'][:10]}, load {load:.2f})"


def _cells(row: dict) -> list[str]:
    after, whole = row["ratio_after_cap"], row["ratio"]
    return [row["comparison"],
            f"{after['median']:.3f} ({after['min']:.3f}-{after['max']:.3f})",
            f"{whole['median']:.3f} ({whole['min']:.3f}-{whole['max']:.3f})",
            ", ".join(str(w) for w in row["chosen_workers"])]  # fmt: skip


def main() -> None:
    if print_table_if_asked(table):
        return
    ap = pairs_parser(__doc__, pairs=4, seconds=16.0)
    ap.add_argument("--cap", type=float, default=6.0, help="autotune's cap_s")
    ap.add_argument("--best", type=int, default=1, help="the workers tuned by hand")
    ap.add_argument("--threads", type=int, default=1, help="the model's torch threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    source = provenance()  # the commit whose code this process loaded: read before measuring
    if args.data is None:
        import workbench as wb

        args.data = wb.ensure_datasets().images
    dataset = JpegFolder(args.data)
    run(dataset, args.best, False, argparse.Namespace(**{**vars(args), "seconds": 3.0}))  # warm
    rows = [
        compare(dataset, "poor start (0 workers)", (0, True), (args.best, False), args),
        compare(
            dataset,
            f"good start ({args.best} workers)",
            (args.best, True),
            (args.best, False),
            args,
        ),
    ]
    doc = {**source, "args": {k: str(v) for k, v in vars(args).items()}, "rows": rows,
           "load_avg_end": os.getloadavg()}  # fmt: skip
    keep(doc, args.out)


if __name__ == "__main__":
    main()
