"""``workbench history``: past bursts from the history store (a file or the class's
PostgreSQL), and the bursts kept while the store could not be reached."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workbench.cli.common import EXIT_OK, fmt, json_doc
from workbench.core.errors import InputError
from workbench.history.store import open_store, pending_results, retry_pending


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", help="only bursts of this workload (its name, e.g. cnn)")
    p.add_argument("--status", choices=["ok", "oom", "error", "cancelled"])
    p.add_argument("--limit", type=int, help="only the newest N")
    p.add_argument(
        "--learner", help="only this learner's bursts (class mode; an instructor's view)"
    )
    p.add_argument(
        "--store",
        help="history file or postgresql:// URL (default: $WORKBENCH_STORE, $WORKBENCH_HISTORY, "
        "$WORKBENCH_HOME)",
    )
    p.add_argument(
        "--retry", action="store_true",
        help="first store the bursts kept while the store could not be reached",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print a JSON list of bursts")


def run(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise InputError.not_allowed("limit", args.limit, "an integer >= 1")
    store = open_store(args.store)
    if args.retry:
        print(f"workbench history: stored {retry_pending(store)} kept burst(s)", file=sys.stderr)
    _note_pending(store)
    rows = store.records(
        workload=args.workload, status=args.status, learner=args.learner, limit=args.limit
    )
    if args.json:
        print(json_doc(rows, args))
        return EXIT_OK
    room = len({r.get("learner") for r in rows}) > 1  # an instructor's view: say whose row
    who = f" {'learner':<12}" if room else ""
    print(
        f"{'id':>5} {'created_at':<25}{who} {'workload':<9} {'status':<9} {'samples/s':>10} knobs"
    )
    for r in rows:
        knobs = {k: v for k, v in (r.get("knobs") or {}).items() if v not in (None, {}, False)}
        sps = fmt(r.get("samples_per_s"))
        who = f" {r.get('learner') or '-':<12}" if room else ""
        print(f"{r['id']:>5} {r['created_at']:<25}{who} {r['workload']:<9} {r['status']:<9} "
              f"{sps:>10} {knobs}")  # fmt: skip
    return EXIT_OK


def _note_pending(store: Any) -> None:
    """One line on stderr when bursts kept for this store wait for ``--retry``."""
    kept = pending_results(store)
    if kept:
        print(f"workbench history: {len(kept)} burst(s) measured while this store could not "
              f"record them are not listed yet (newest error: {kept[-1]['error']}); "
              "'workbench history --retry' stores them", file=sys.stderr)  # fmt: skip
