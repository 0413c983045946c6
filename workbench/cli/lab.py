"""``workbench lab``: JupyterLab on the quickstart notebook and the lessons."""

from __future__ import annotations

import argparse

from workbench.notebook.lab import open_lab


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=None, help="port (default: Jupyter's choice)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.add_argument(
        "--notebooks",
        metavar="DIR",
        help="copy the lessons into DIR (your edits are kept) and open them there "
        "(default: a checkout's notebooks/, else $WORKBENCH_HOME/notebooks)",
    )


def run(args: argparse.Namespace) -> int:
    return open_lab(port=args.port, open_browser=not args.no_browser, notebooks=args.notebooks)
