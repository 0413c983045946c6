"""``workbench io``: the data disk's read rates, cold and warm."""

from __future__ import annotations

import argparse
import json

from workbench.cli.common import EXIT_OK
from workbench.engine.storage import storage_check


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--path",
        help="a folder on the disk to test (a test file is written there), or a file of 1 MiB "
        "or more to read as it is, e.g. on a read-only dataset (default: your own folder, "
        "$WORKBENCH_FORMATS, else $WORKBENCH_HOME)",
    )
    p.add_argument("--size-mib", type=float, default=256.0, help="test file size (default 256)")
    p.add_argument("--seconds", type=float, default=2.0, help="limit per test (default 2)")
    p.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    check = storage_check(args.path, size_mib=args.size_mib, seconds=args.seconds)
    print(json.dumps(check.to_dict()) if args.json else check.summary())
    return EXIT_OK
