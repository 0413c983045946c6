"""The ``workbench`` command.

Exit codes: 0 a result was produced (``ok``, and ``oom``: running out of memory is a
measurement, not a crash); 1 the burst failed (``status: error``); 2 bad input (one line on
stderr naming the knob, the value and what is allowed; no traceback); 130 interrupted.
With ``--json`` stdout holds exactly one JSON document; everything else goes to stderr.
``--debug`` (or ``WORKBENCH_DEBUG=1``, the same switch) shows tracebacks: bad input's instead
of its one line, and a failed burst's ``traceback``, which ``--json`` otherwise leaves null.

Each command is a module here with ``add_arguments(parser)`` and ``run(args)``, imported only
when it is chosen (its options are read from it, so ``burst --help`` pays for burst's imports):
``--version``, ``--help`` and the light commands (show, history) load no other's.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Collection, Sequence
from types import ModuleType
from typing import Any, NoReturn

from workbench.cli import common

COMMANDS = {  # name: (its module in workbench.cli, its line in --help), in --help's order
    "burst": ("burst", "run one measured training burst"),
    "history": ("history", "list past bursts from the history store"),
    "data": ("data", "build the sample datasets, or convert a folder"),
    "io": ("io", "the data disk's read rates, cold and warm"),
    "lab": ("lab", "open JupyterLab on the quickstart notebook"),
    "show": ("show", "check a saved config; print env, DataLoader, torchrun"),
    "sweep": ("sweep", "one burst per value of one knob"),
    "diagnose": ("diagnose", "data-bound or compute-bound? with advice"),
    "tune": ("tune", "search knobs for the best measured throughput"),
    "comm": ("comm", "all-reduce benchmark: time, algbw, busbw by size"),
    "profile": ("profile", "a burst under torch.profiler; writes a trace"),
    "parity": ("parity", "does a faster config still train the same? loss step by step"),
    "verify": ("verify", "does a saved config's figure hold on this machine?"),
    "class": ("class_", "set up the room's PostgreSQL store (instructor)"),
}
_DEBUG_HELP = (
    "show tracebacks: a failed burst's (in --json too) and bad input's (as WORKBENCH_DEBUG=1)"
)


class _Version(argparse.Action):
    """``--version``, printed as one line (argparse's own wraps it at the terminal's width)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any) -> NoReturn:
        print(common.version_line())
        parser.exit(common.EXIT_OK)


def command_module(name: str) -> ModuleType:
    """The module of command ``name`` (imported now, the first time it is asked for)."""
    return importlib.import_module(f"workbench.cli.{COMMANDS[name][0]}")


def build_parser(chosen: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command (``--debug``, ``--trust-cwd`` after one too); with ``chosen``
    only those commands' options are read from their modules (the others: name and help)."""
    parser = common.Parser(prog="workbench", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=_Version, help="print the distribution and version")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    parser.add_argument("--trust-cwd", action="store_true", help=common.TRUST_CWD_HELP)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=common.Parser)
    for name, (_, help_line) in COMMANDS.items():
        command = sub.add_parser(name, help=help_line)
        if chosen is None or name in chosen:
            command_module(name).add_arguments(command)
        for flag, tip in (("--debug", _DEBUG_HELP), ("--trust-cwd", common.TRUST_CWD_HELP)):
            command.add_argument(flag, action="store_true", default=argparse.SUPPRESS, help=tip)
    return parser


def _chosen(argv: Sequence[str]) -> list[str]:
    """The command named in ``argv``: its first word that is not an option (the options
    before a command, ``--debug`` and ``--version``, take no value)."""
    return [word for word in argv if not word.startswith("-")][:1]


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    common.import_from_here(add=False)  # before the command's imports: no torch.py here is torch
    try:
        args = build_parser(_chosen(argv)).parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error already printed as one line
        return int(exit_.code or 0)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="workbench: %(message)s")
    args.debug = args.debug or bool(os.environ.get("WORKBENCH_DEBUG"))
    given = vars(args)
    common.warn_password_in_argv(given.get("store"))
    common.import_from_here(add=args.trust_cwd or common.workload_is_here(given.get("workload")))
    return common.run_command(command_module(args.command).run, args)
