"""One JSON-safe encoding for everything the workbench writes: results, history, job files.

JSON has no NaN or infinity, and ``json.dumps`` writes them as bare ``NaN`` that strict readers
(browsers, ``jq``, ``allow_nan=False``) refuse. A measurement that could not be taken is
unknown, so a non-finite float becomes ``null``, never 0 (a 0 would plot as a real number).
NumPy and torch scalars become plain numbers; anything else that JSON cannot hold is refused
with the place it was found, rather than written as something that will not read back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def jsonable(value: Any, where: str = "value") -> Any:
    """A copy of ``value`` that ``json.dumps(allow_nan=False)`` accepts: NaN/inf -> None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int)):  # bool is an int
        return value
    if isinstance(value, Mapping):
        return {_key(k, where): jsonable(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item):
        try:
            return jsonable(item(), where)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise TypeError(
        f"{where} is a {type(value).__name__}, which cannot be saved as JSON; "
        "convert it to a number, string, list or dict first"
    )


def _key(key: Any, where: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"{where} has a non-string key {key!r}; JSON object keys are strings")
    return key


__all__ = ["jsonable"]
