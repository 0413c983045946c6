"""Input a person can correct: one error type, the CLI's exit code 2.

Every refusal of what a person typed or passed (a knob value, a window length, a budget, a
workload name, a data folder, a saved config) is an ``InputError``: the CLI prints its message
as one line and exits 2, with no traceback; in Python it is a ``ValueError``, so existing
``except ValueError`` code keeps working. ``KnobError`` is the case that names a knob; the
message always says what was refused and what is allowed, so nobody has to read the source.
"""

from __future__ import annotations

from typing import Any


class InputError(ValueError):
    """Input that cannot be used, with ``name``/``value``/``allowed`` where the input is named."""

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        value: Any = None,
        allowed: str | None = None,
    ) -> None:
        super().__init__(message)
        self.name, self.value, self.allowed = name, value, allowed

    @classmethod
    def not_allowed(cls, name: str, value: Any, allowed: str) -> InputError:
        """``name=value is not allowed: allowed``, the form every named refusal takes."""
        return InputError(_words(name, value, allowed), name=name, value=value, allowed=allowed)


class KnobError(InputError):
    """A knob value or combination that is not allowed; the message names knob and value."""

    def __init__(self, knob: str, value: Any, allowed: str) -> None:
        super().__init__(_words(knob, value, allowed), name=knob, value=value, allowed=allowed)

    @property
    def knob(self) -> str:
        return self.name or ""

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes, like ValueError
        return (type(self), (self.name, self.value, self.allowed))


def _words(name: str, value: Any, allowed: str) -> str:
    return f"{name}={value!r} is not allowed: {allowed}"


__all__ = ["InputError", "KnobError"]
