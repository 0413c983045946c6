"""``workbench tune``: the joint search for the highest measured throughput under a memory
margin; writes the tuned config."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from workbench.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    add_money,
    add_run_args,
    burst_line,
    checked_path,
    json_doc,
    parse_values,
)
from workbench.config.marks import OverwriteRefused, remeasure
from workbench.config.saved import collate_fn_name, save_config
from workbench.core.errors import KnobError
from workbench.core.knobs import Knobs
from workbench.engine.hardware import resolve_device
from workbench.engine.workloads import default_workload_name, resolve_workload
from workbench.tuning.speedup import WIDE_FACTOR
from workbench.tuning.tuner import tune


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Search knobs for the highest measured throughput under a memory margin."
    p.epilog = (
        "--json: the best config, every candidate and burst, and the speed-up over the start: "
        "speedup, speedup_low and speedup_high (its 95% interval, widened by the start's "
        "drift), start_runs, drift_pct_per_burst (the start's trend; null when it finished "
        "fewer than two runs) and speedup_uncertain (true when the runs cannot tell the "
        "speed-up: no interval, one that holds 1 or spans more than "
        f"{WIDE_FACTOR:g}x, or drift larger than the speed-up; speedup_doubt says why, and "
        "the text summary then gives those words instead of the figures)"
    )
    p.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="KNOB=V1,V2,...",
        help="a knob and its values to search (repeatable; default: a space for this device)",
    )
    p.add_argument("--budget", type=int, default=16, help="most bursts to run (default 16)")
    p.add_argument("--margin", type=float, default=0.1, help="memory share kept free (0-0.9)")
    p.add_argument("--out", required=True, metavar="FILE.yaml", help="the tuned config")
    p.add_argument(
        "--force", action="store_true",
        help="overwrite --out even when it holds a config an earlier tune could tell and this "
        "tune cannot (speedup_uncertain); refused by default",
    )  # fmt: skip
    p.add_argument(
        "--parity-steps", type=int, default=None, metavar="N",
        help="steps of the loss-parity check a pick that changes rounding gets before it is "
        "reported (default: sized to ~15%% of the tune; 0: no check)",
    )  # fmt: skip
    add_run_args(p, seconds=3.0)
    add_money(p, tune=True)


def run(args: argparse.Namespace) -> int:
    out = checked_path("out", args.out, (".yaml", ".yml"))
    start, space = Knobs().with_text(args.set), _parse_space(args.space)
    dev = resolve_device(args.device)
    wl = resolve_workload(args.workload or default_workload_name(dev.type), args.data)
    if (
        wl.collate_fn is not None
    ):  # one production cannot import by name: bad input, before the tune
        collate_fn_name(wl.collate_fn, out)

    def landed(p: Any) -> None:
        if not args.json:
            print(f"  [{p.bursts}/{p.budget}] {p.stage:<28} {burst_line(p.result)}",
                  file=sys.stderr)  # fmt: skip

    t = tune(wl, space, budget=args.budget, memory_margin=args.margin, base=start,
             seconds=args.seconds, device=dev, data_dir=args.data,
             record=not args.no_record, store=args.store, progress=landed,
             price_per_hour=args.price_per_hour, epoch_samples=args.epoch_samples,
             hours_per_month=args.hours_per_month,
             parity_steps=args.parity_steps)  # fmt: skip
    # the median claimed, and the collate function every burst batched with
    written, refused = None, None
    if t.best_result is not None:
        try:
            written = save_config(t, out, collate_fn=wl.collate_fn, force=args.force)
        except OverwriteRefused as exc:  # the tune's result is still printed below
            refused = str(exc)
    if args.json:
        print(json_doc({**t.to_dict(), "out": str(written) if written else None,
                        **({"not_written": refused} if refused else {})}, args))  # fmt: skip
    else:
        print(t.summary())
        spec = args.workload or default_workload_name(dev.type)
        print(_outcome(t, written, refused, spec, out))
    if t.stopped == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if written else EXIT_FAILED


def _outcome(t: Any, written: Any, refused: str | None, workload: str, out: Any) -> str:
    """The lines after the summary: an uncertain tune says so, and how to re-measure, before
    the path it wrote (or why it wrote none)."""
    lines = []
    if t.speedup_uncertain and (written or refused):
        again = remeasure({"tune": {"bursts": len(t.bursts)}, "workload": workload}, str(out))
        lines.append(f"UNCERTAIN: the runs cannot tell the best from the start; {again}")
    if refused:
        lines.append(f"not written: {refused}")
    elif written:
        marked = " (marked uncertain in its first lines)" if t.speedup_uncertain else ""
        lines.append(f"wrote {written}{marked}")
    else:
        lines.append("nothing written")
    return "\n".join(lines)


def _parse_space(items: Sequence[str]) -> dict[str, list[Any]] | None:
    """``--space KNOB=V1,V2`` options as a space; None when none were given (the default)."""
    space: dict[str, list[Any]] = {}
    for item in items:
        name, sep, text = (part.strip() for part in item.partition("="))
        if not sep or not name:
            raise KnobError(name or "space", item, "KNOB=V1,V2,..., e.g. batch_size=32,64")
        if name in space:
            raise KnobError(name, item, "one --space per knob (this one is given twice)")
        space[name] = parse_values(name, text)
    return space or None
