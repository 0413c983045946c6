"""Old import paths that keep working for one release: a shim module at the old path warns once
with the new path, re-exports the public names and hands any other name on.

A shim is three lines (``workbench/notebook/workshop.py`` is one)::

    from workbench.core.moved import moved
    from workbench.workshop.checks import *  # noqa: F403
    __all__, __getattr__ = moved(__name__, "workbench.workshop.checks")

Why the warning's stack level is searched for: the ``DeprecationWarning`` is shown by default
only where the code that triggered it is ``__main__`` (a notebook's cell, a script), so it must
name the line that imported the old path, not the shim or Python's import machinery.
``warnings`` itself skips the frames of ``importlib._bootstrap``; the others are counted.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

_PACKAGE = str(Path(__file__).resolve().parents[1]) + os.sep
_IMPORTLIB = str(Path(importlib.__file__).resolve().parent) + os.sep


def moved(old: str, new: str) -> tuple[list[str], Callable[[str], Any]]:
    """Warn that ``old`` is now ``new``; return the new module's ``__all__`` and a module
    ``__getattr__`` that hands every other name on to it (for the shim at ``old``)."""
    module = importlib.import_module(new)
    warnings.warn(f"{old} has moved to {new}: import it from there ({old} goes in the next "
                  "release)", DeprecationWarning, stacklevel=_importer_level())  # fmt: skip

    def __getattr__(name: str) -> Any:
        try:
            return getattr(module, name)
        except AttributeError:
            raise AttributeError(f"module {new!r} has no attribute {name!r}") from None

    return list(module.__all__), __getattr__


def _importer_level() -> int:
    """The ``stacklevel`` of the first frame outside this package and importlib: the import."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<frozen importlib"):  # warnings skips these without counting
            if not name.startswith((_PACKAGE, _IMPORTLIB)):
                return level
            level += 1
        frame = frame.f_back
    return level
