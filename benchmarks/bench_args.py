"""The command line every benchmark script shares: one numeric option per keyword."""

from __future__ import annotations

import argparse


def parser(doc: str, **numbers: float | int) -> argparse.ArgumentParser:
    """A parser described by the script's docstring's first line, with ``--name`` options of
    the type and default given (``seconds=2.0`` is ``--seconds``, a float, default 2.0)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    for name, default in numbers.items():
        ap.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return ap
