"""``workbench sweep``: one burst per value of one knob, interleaved, with the first value run
again to measure drift."""

from __future__ import annotations

import argparse
from typing import Any

from workbench.analysis.drift import check_every, with_references
from workbench.analysis.sweeps import REFERENCE_EVERY, sweep
from workbench.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_money,
    add_run_args,
    burst_line,
    checked_path,
    json_doc,
    parse_values,
)
from workbench.core.knobs import Knobs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--knob", required=True, help="the knob to sweep, e.g. num_workers")
    p.add_argument("--values", required=True, metavar="V1,V2,...", help="e.g. 0,1,2")
    p.add_argument("--repeats", type=int, default=1, help="bursts per value, interleaved")
    p.add_argument(
        "--reference-every", type=int, default=None, metavar="N",
        help="run the first value again after every N bursts and at the end, to measure drift "
        "(default 5; 0: never)",
    )  # fmt: skip
    p.add_argument("--plot", metavar="FILE", help="save the charts (.html, .png, .svg, .json)")
    add_run_args(p, seconds=3.0)
    add_money(p)


def run(args: argparse.Namespace) -> int:
    base, values = Knobs().with_text(args.set), parse_values(args.knob, args.values)
    plot = checked_path("plot", args.plot, (".html", ".png", ".svg", ".json"))
    every = REFERENCE_EVERY if args.reference_every is None else args.reference_every or None
    extra = [x for _, x in with_references(values * max(1, args.repeats), check_every(every))]
    results: list[Any] = []

    def landed(r: Any) -> None:  # each row once, as it lands (not again at the end)
        results.append(r)
        if not args.json:
            again = extra[len(results) - 1] if len(results) <= len(extra) else False
            print(burst_line(r, args.knob) + ("  (again, for drift)" if again else ""),
                  flush=True)  # fmt: skip

    df = sweep(args.workload, args.knob, values, base, seconds=args.seconds,
               repeats=args.repeats, reference_every=every, device=args.device,
               data_dir=args.data, record=not args.no_record, store=args.store, progress=landed,
               price_per_hour=args.price_per_hour, epoch_samples=args.epoch_samples)  # fmt: skip
    if plot is not None:
        from workbench.notebook import plots  # Altair: only when a chart file is asked for

        plots.save(plots.sweep(df, args.knob), plot)
    drift = df.attrs["drift"]
    if args.json:
        columns = ("reference", "drift_factor", "samples_per_s_corrected")
        bursts = [{**r.to_dict(), **{c: _plain(row[c]) for c in columns}}
                  for r, (_, row) in zip(results, df.iterrows(), strict=True)]  # fmt: skip
        doc = {"knob": args.knob, "values": values, "bursts": bursts, "drift": drift}
        print(json_doc(doc, args))
    elif drift["drift_pct"] is not None:
        print(f"drift: {drift['sentence'] or _held(drift['drift_pct'])}")
    return EXIT_FAILED if results and all(r.status == "error" for r in results) else EXIT_OK


def _held(drift_pct: float) -> str:
    return f"the first value held within {drift_pct:.1f}% over the sweep"


def _plain(value: Any) -> Any:
    """A frame cell as JSON: numpy scalars as Python ones, NaN as null."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and value != value else value
