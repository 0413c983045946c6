"""``workbench class init``: the room's PostgreSQL store, set up by the instructor (roles,
grants and row-level security: ``history/roles.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from workbench.cli.common import EXIT_OK, json_doc
from workbench.history.roles import init_class, read_learners


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``workbench class init``: roles, grants and row-level security (history/roles.py)."""
    p.add_argument("action", choices=["init"], help="init: create or extend the class's roles")
    p.add_argument("--store", required=True, metavar="postgresql://ADMIN@HOST:PORT/DB",
                   help="the class database, as the server's administrator (password from "
                   "PGPASSFILE, never in the URL)")  # fmt: skip
    names = p.add_mutually_exclusive_group(required=True)
    names.add_argument("--learners", metavar="A,B,...", help="the learners' login names")
    names.add_argument("--learners-file", metavar="FILE", help="learner names, one a line")
    p.add_argument("--instructor", help="the instructor's login (default: <db>_instructor)")
    p.add_argument("--logins", default="class-logins.pgpass", metavar="FILE",
                   help="a new 0600 file for the new logins' passwords (PGPASSFILE format; "
                   "default class-logins.pgpass)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    text = args.learners if args.learners is not None else Path(args.learners_file).read_text()
    setup = init_class(args.store, read_learners(text), logins=args.logins,
                       instructor=args.instructor)  # fmt: skip
    print(json_doc(setup.to_dict(), args) if args.json else setup.summary())
    return EXIT_OK
