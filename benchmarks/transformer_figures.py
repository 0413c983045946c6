"""The transformer knobs' effects on a CPU, measured interleaved: the CPU side of issue 32.

    python benchmarks/transformer_figures.py [--batch 1] [--threads 1] [--repeats 2] [--out F]
    python benchmarks/transformer_figures.py --table benchmarks/results/transformer-cpu-*.json

The tiny ``gpt`` (6 layers x 384, 256 byte tokens: the size a CPU trains) in fp32 (bf16
autocast is ~20x slower than fp32 on an AVX2-only CPU), on one resident batch
(``loader=synthetic``: the model alone), one burst a row of ``ROWS``. Method: one unmeasured
burst first (a process's first burst pays for imports and kernel caches), then ``--repeats``
pairs of rounds, the rows in order then reversed (A B C, C B A: every pair of rows A-B-B-A), so a
drift linear in time hits every row alike. Per row: the median tokens/s of its bursts, and its
ratio to the first row as the median (and range) of the per-round ratios, each against the
same round's first row. The load average before each burst is kept beside it: on a shared
machine it says how much of the two cores the bursts had. ``--threads`` (default 1) sets
PyTorch's intra-op threads: on a 2-core machine that other jobs share, two OpenMP threads wait
for each other at every barrier, and a neighbour's time slice stalls both (step medians of
one config from 143 to 1,397 ms in one such run); one thread shares the machine more evenly,
and a kernel's effect relative to another is what is measured here, not the machine's peak.

Writes one JSON (``--out``, default ``benchmarks/results/transformer-cpu-YYYYMMDD.json``):
the command, commit, machine, settings, every burst and the rows. ``--table`` prints the
markdown table ``docs/figures.md`` holds (``tests/test_transformer_figures.py`` checks that the
page still holds it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_record

SCHEMA = "workbench-transformer-cpu/1"
WORKLOAD = "gpt"
ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("attention=auto", {}),
    ("attention=flash", {"attention": "flash"}),
    ("attention=math", {"attention": "math"}),
    # The knobs issue 32 adds next get their CPU rows here, one line each, when they are
    # fields of Knobs: packed sequences against padded ones, FSDP against DDP (two gloo ranks:
    # memory per rank), and float8 (refused on a CPU, and the row keeps the reason).
)
"""(label, knobs changed over the base): the first row is what the others are read against."""


def order(repeats: int, rows: int = len(ROWS)) -> list[tuple[int, int]]:
    """(round, row index) in the order they run: each round the rows forward, the next one
    reversed; ``repeats`` such pairs of rounds."""
    out = []
    for r in range(2 * repeats):
        idx = range(rows) if r % 2 == 0 else reversed(range(rows))
        out += [(r, i) for i in idx]
    return out


def summarize(
    bursts: Sequence[Mapping[str, Any]], labels: Sequence[str] = tuple(r[0] for r in ROWS)
) -> list[dict[str, Any]]:
    """Per row: its tokens/s (median, all, in order), step p50 median, the kernel that ran, and
    ``over_first``: per round its tokens/s over the same round's first row, their median and
    range (a pure function of the kept bursts)."""
    ok = [b for b in bursts if b.get("status") == "ok" and b.get("tokens_per_s")]
    first = {b["round"]: b["tokens_per_s"] for b in ok if b["label"] == labels[0]}
    rows = []
    for label in labels:
        mine = [b for b in ok if b["label"] == label]
        tps = [b["tokens_per_s"] for b in mine]
        ratios = [b["tokens_per_s"] / first[b["round"]] for b in mine if b["round"] in first]
        said = [b.get("no_effect") for b in bursts if b["label"] == label and b.get("no_effect")]
        rows.append({
            "label": label, "bursts": len(mine),
            "tokens_per_s_median": statistics.median(tps) if tps else None,
            "tokens_per_s": tps,
            "step_ms_p50_median": (statistics.median(b["step_ms_p50"] for b in mine)
                                   if mine else None),
            "attention_backend": sorted({b.get("attention_backend") or "-" for b in mine}),
            "over_first_median": statistics.median(ratios) if ratios else None,
            "over_first_range": [min(ratios), max(ratios)] if ratios else None,
            "no_effect": said[0] if said else None,
        })  # fmt: skip
    return rows


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The bursts in ``order``, kept as they end (the file is rewritten after each one)."""
    import torch

    from workbench import Knobs, run_burst

    torch.set_num_threads(args.threads)
    base = Knobs(batch_size=args.batch, loader="synthetic")
    window = {"seconds": args.seconds, "min_steps": args.min_steps,
              "warmup_steps": args.warmup_steps}  # fmt: skip
    commit, dirty = gpu_record.git_state()
    doc: dict[str, Any] = {
        "schema": SCHEMA, "command": gpu_record.command_line(), "git_commit": commit,
        "git_dirty": dirty, "started_at": gpu_record.utc_now(), "ended_at": None,
        "device": "cpu", "cores": gpu_record.cores(),
        "versions": {"torch": torch.__version__, "python": sys.version.split()[0]},
        "settings": {"workload": WORKLOAD, "batch_size": args.batch,
                     "precision": base.precision, "loader": base.loader,
                     "tokens_per_sample": 256, "repeats": args.repeats,
                     "threads": torch.get_num_threads(), **window},
        "warmup_burst": None, "bursts": [], "rows": [],
    }  # fmt: skip
    out = Path(args.out)
    first = run_burst(WORKLOAD, base, record=False, device="cpu", **window)
    doc["warmup_burst"] = {"status": first.status, "tokens_per_s": first.tokens_per_s}
    for rnd, i in order(args.repeats):
        label, change = ROWS[i]
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        r = run_burst(WORKLOAD, base.replace(**change), record=False, device="cpu", **window)
        doc["bursts"].append({
            "round": rnd, "label": label, "change": change, "status": r.status,
            "error": r.error, "tokens_per_s": r.tokens_per_s, "samples_per_s": r.samples_per_s,
            "step_ms_p50": r.step_ms_p50, "step_ms_iqr": r.step_ms_iqr, "steps": r.steps,
            "noisy": r.noisy, "attention_backend": r.attention_backend,
            "no_effect": r.no_effect or None, "load_before": round(load, 2),
            "wall_s": round(time.perf_counter() - t0, 1),
        })  # fmt: skip
        print(f"round {rnd} {label}: {r.summary().splitlines()[0]} (load {load:.1f})", flush=True)
        doc["rows"] = summarize(doc["bursts"])
        gpu_record.write_atomic(out, doc)
    doc["ended_at"] = gpu_record.utc_now()
    doc["load_after"] = round(os.getloadavg()[0], 2)
    gpu_record.write_atomic(out, doc)
    return doc


def table(path: Path) -> str:
    """The markdown table of one kept file: per row its median tokens/s, range, ratio to the
    first row and the kernel that ran, under a line that says what and where."""
    doc = json.loads(Path(path).read_text())
    s = doc["settings"]
    loads = [b["load_before"] for b in doc["bursts"]]
    precision = "fp32 (precision=default)" if s["precision"] == "default" else s["precision"]
    head = (f"| CPU: `{s['workload']}`, {precision}, batch {s['batch_size']} x "
            f"{s['tokens_per_sample']} tokens | tokens/s, median | range | over "
            f"{doc['rows'][0]['label']}, median (range) | kernel that ran |")  # fmt: skip
    lines = [head, "| --- | ---: | ---: | ---: | --- |"]
    for row in doc["rows"]:
        tps = row["tokens_per_s"]
        spread = f"{min(tps):,.0f}-{max(tps):,.0f}" if tps else "-"
        ratio = "-"
        if row["over_first_median"] is not None:
            lo, hi = row["over_first_range"]
            ratio = f"{row['over_first_median']:.2f} ({lo:.2f}-{hi:.2f})"
        median = "-" if row["tokens_per_s_median"] is None else f"{row['tokens_per_s_median']:,.0f}"
        lines.append(f"| {row['label']} ({row['bursts']} bursts) | {median} | {spread} | "
                     f"{ratio} | {', '.join(row['attention_backend'])} |")  # fmt: skip
    rounds = 2 * s["repeats"]
    lines += ["", f"`benchmarks/results/{Path(path).name}` ({(doc['git_commit'] or '?')[:7]}"
              f"{' + changes' if doc.get('git_dirty') else ''}, {doc['started_at'][:10]}, torch "
              f"{doc['versions']['torch']}, {doc['cores']['usable']} usable cores, "
              f"{s.get('threads', '?')} PyTorch thread(s)): {rounds} "
              f"rounds, the rows in order then reversed, {s['seconds']:g} s windows; load "
              f"average before the bursts {min(loads):.1f}-{max(loads):.1f}."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, help="print the docs table of a kept file")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--min-steps", type=int, default=2)
    ap.add_argument("--warmup-steps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="PyTorch's intra-op threads")
    ap.add_argument("--repeats", type=int, default=2, help="pairs of rounds (forward, reversed)")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d")
    ap.add_argument("--out", default=str(gpu_record.RESULTS / f"transformer-cpu-{stamp}.json"))
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table), end="")
        return 0
    doc = measure(args)
    print(json.dumps(doc["rows"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
