"""The ``workbench`` command (``workbench.cli:main``): a dispatcher and one module a command."""

from workbench.cli.dispatch import build_parser, main

__all__ = ["build_parser", "main"]
