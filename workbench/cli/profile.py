"""``workbench profile``: a burst under torch.profiler: top operators, time shares, a trace."""

from __future__ import annotations

import argparse

from workbench.analysis.profiling import profile_burst
from workbench.cli.common import EXIT_FAILED, EXIT_OK, WORKLOAD_HELP, json_doc
from workbench.core.knobs import Knobs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", metavar="NAME|MODULE:FUNCTION", help=WORKLOAD_HELP)
    p.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", help="a knob")
    p.add_argument("--seconds", type=float, default=1.0, help="measured (profiled) window")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available)")
    p.add_argument("--data", help="data folder (an ImageFolder, or a root with images/, tokens/)")
    p.add_argument("--trace", help="trace file (.json) or folder (default: $WORKBENCH_HOME/traces)")
    p.add_argument("--top", type=int, default=15, help="operators in the table (default 15)")
    p.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    p = profile_burst(
        args.workload,
        Knobs().with_text(args.set),
        seconds=args.seconds,
        device=args.device,
        data_dir=args.data,
        trace=args.trace,
        top=args.top,
    )
    print(json_doc(p.to_dict(), args) if args.json else p.summary())
    return EXIT_FAILED if p.status == "error" else EXIT_OK
