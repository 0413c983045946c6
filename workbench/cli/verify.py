"""``workbench verify FILE.yaml``: rerun a saved config's burst on this machine and answer
whether its figures hold (``workbench.analysis.verify``): holds; slower by X% (or more memory),
naming the environment fields that differ as the likely causes; or cannot run here, and why.

Exit 0: holds; 1: does not hold, or cannot run here; 2: bad input."""

from __future__ import annotations

import argparse
import sys

from workbench.analysis.verify import DEFAULT_RUNS, verify
from workbench.cli.common import EXIT_FAILED, EXIT_OK, WORKLOAD_HELP, fmt, json_doc


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a config written by save_config (workbench tune, the panel)")
    p.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="bursts to run here")
    p.add_argument("--workload", metavar="NAME|MODULE:FUNCTION",
                   help=f"instead of the file's: {WORKLOAD_HELP}")  # fmt: skip
    p.add_argument("--seconds", type=float, help="measured window (default: the saved one)")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: the saved kind)")
    p.add_argument("--data", help="data folder (an ImageFolder, or a root with images/, tokens/)")
    p.add_argument("--store", help="history file or postgresql:// URL")
    p.add_argument("--no-record", action="store_true", help="do not append to the history")
    p.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    def landed(r) -> None:
        if not args.json:
            print(f"  {r.status:<9} {fmt(r.samples_per_s)} samples/s", file=sys.stderr)

    result = verify(args.file, runs=args.runs, device=args.device, data_dir=args.data,
                    workload=args.workload, seconds=args.seconds, record=not args.no_record,
                    store=args.store, progress=landed)  # fmt: skip
    print(json_doc(result.to_dict(), args) if args.json else result.summary())
    return EXIT_OK if result.holds else EXIT_FAILED
