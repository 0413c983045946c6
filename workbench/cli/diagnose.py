"""``workbench diagnose``: the full pipeline against loader-only and compute-only, with a
verdict (data-bound, compute-bound or balanced) and advice."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workbench.analysis.diagnosis import diagnose
from workbench.cli.common import EXIT_FAILED, EXIT_OK, add_run_args, fmt, json_doc
from workbench.core.knobs import Knobs


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_args(p, seconds=3.0)


def run(args: argparse.Namespace) -> int:
    def landed(stage: str, r: Any) -> None:
        if not args.json:
            print(f"  {stage:<8} {r.status:<9} {fmt(r.samples_per_s)} samples/s", file=sys.stderr)

    d = diagnose(args.workload, Knobs().with_text(args.set), seconds=args.seconds,
                 device=args.device, data_dir=args.data, record=not args.no_record,
                 store=args.store, progress=landed)  # fmt: skip
    print(json_doc(d.to_dict(), args) if args.json else d.summary())
    parts = (d.full, d.loader, d.compute)
    return EXIT_FAILED if any(p is not None and p.status == "error" for p in parts) else EXIT_OK
