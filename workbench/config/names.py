"""Functions a saved config names by import path: the workload's collate_fn, loss and optimizer.

A production script is another process: it reads a name (``package.module:function``) and
imports it, so a function is saved only under a name that imports back to that very function.
A lambda, a function defined inside another, a callable object and a function in ``__main__``
(a notebook, the script that runs) have no such name; the messages say how to give them one.

Light: no torch here, and a named module is imported only when its function is asked for.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.config.yaml_text import ConfigError

__all__ = ["FUNCTION_NAME", "checked_name", "import_named", "saved_name", "unnamed_problem"]

FUNCTION_NAME = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
"""How a saved config names a function: ``package.module:function``."""
_MOVE = "define it at the top level of an importable module and pass that function"


def checked_name(fn: Callable[..., Any] | str, key: str, path: str | Path | None = None) -> str:
    """The ``module:function`` name a saved config keeps ``fn`` under (a function, or a name
    as spelled by ``engine.workloads.source_names``), checked by importing it now, where it
    was measured. ConfigError naming ``key`` when production code could not import it by that
    name: what it is and how to give it one."""
    spelled = fn if isinstance(fn, str) else _spelled(fn)
    problem = unnamed_problem(spelled, key)
    if problem is not None:
        raise ConfigError(path, key, problem)
    if not FUNCTION_NAME.match(spelled):
        raise ConfigError(path, key, f"{spelled!r} is not allowed: 'module:function'")
    found = import_named(spelled, key, path)
    if not isinstance(fn, str) and found is not fn:
        raise ConfigError(path, key, f"{spelled!r} names another object than this {_what(key)}")
    return spelled


def unnamed_problem(spelled: str, key: str) -> str | None:
    """Why a function spelled ``module:qualname`` (or ``<partial object>``, the mark of a
    callable without a name of its own) cannot be imported by another process, with the fix;
    None when the name may import."""
    module, _, qualname = spelled.partition(":")
    if spelled.startswith("<"):
        kind = spelled.strip("<>").removesuffix(" object")
        return f"a callable {kind} object cannot be saved by name: wrap it in a function ({_MOVE})"
    if "<lambda>" in qualname:
        return f"a lambda ({spelled}) cannot be saved by name: {_MOVE}"
    if "<locals>" in qualname:
        return f"{qualname} (defined inside a function) cannot be saved by name: {_MOVE}"
    if module == "__main__":
        example = "collate.py" if key.endswith("collate_fn") else "training.py"
        return (f"{qualname} is defined in __main__ (a notebook or the script that runs), which "
                f"production code cannot import: move it into a module (e.g. {example}) and "
                f"import it from there")  # fmt: skip
    return None


def import_named(name: str, key: str, path: str | Path | None = None) -> Callable[..., Any]:
    """The function a saved ``module:function`` names; ConfigError (``key``, the name) when it
    does not import here or is not callable."""
    module_name, _, attr = name.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        problem = f"{name!r} cannot be imported here ({exc}): put its module on the path"
        raise ConfigError(path, key, problem) from None
    if not callable(target):
        raise ConfigError(path, key, f"{name!r} is not a function")
    return target


def saved_name(name: Any, key: str, path: str | Path | None = None) -> str:
    """A name read from a file, checked for its form only (``package.module:function``): it is
    imported when production asks for the function, not when the file loads."""
    if not isinstance(name, str) or not FUNCTION_NAME.match(name):
        problem = f"{name!r} is not allowed: a 'package.module:function' name"
        raise ConfigError(path, key, problem)
    return name


def _spelled(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(qualname, str) or not module:  # an instance with __call__, a partial
        return f"<{type(fn).__name__} object>"
    return f"{module}:{qualname}"


def _what(key: str) -> str:
    return key.rpartition(".")[2]
