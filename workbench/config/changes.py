"""What ``TunedConfig.apply()`` changes in a process, as data and as a short list to read.

A production script that applies a config changes process-wide state it did not write itself:
PyTorch's fp32 math switches (two APIs since torch 2.9, the legacy one and the per-backend
``fp32_precision``), ``cudnn.benchmark``, and environment variables read by NCCL, the CUDA
allocator and OpenMP. Each switch is read before and after, through every reader a user's code
(or Inductor) would call (``workbench.engine.training.precision_state``), and only what differs
is reported: a :class:`Change` per switch or variable, found value -> new value. Nothing
changed, nothing listed.

Some variables are read once, at start-up: ``PYTORCH_ALLOC_CONF`` when CUDA initializes, NCCL's
when a communicator is created. Set later, they do nothing in this process; the change then
says so in its ``note`` instead of pretending.

:func:`fresh_process_changes` is the dry run ``workbench show`` prints: what apply would change
in a fresh process, with PyTorch's default switches and none of the variables set.

Light imports: torch inside the functions that need it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from workbench.core.allocconf import ENV_VARS as ALLOC_VARS
from workbench.core.torch_math import TORCH_DEFAULTS

__all__ = ["KINDS", "PYTORCH_DEFAULTS", "UNSET", "Change", "apply_changes", "format_changes",
           "fresh_process_changes", "report"]  # fmt: skip

UNSET = "(unset)"
"""How a variable that was not set reads in the printed list."""

PYTORCH_DEFAULTS = TORCH_DEFAULTS
"""What every reader of the math switches returns in a fresh process
(:data:`workbench.core.torch_math.TORCH_DEFAULTS`; readers a torch version lacks are skipped)."""

KINDS = ("backend", "env", "nccl-suggestion", "model", "loop")
"""``backend``: a torch.backends switch; ``env``: an environment variable; ``nccl-suggestion``:
an NCCL variable NCCL documents for debugging only, set because it was asked for; ``model``: the
model's set-up (``cfg.prepare_model``); ``loop``: what the training loop must do itself
(gradient accumulation)."""


@dataclass(frozen=True, slots=True)
class Change:
    """One switch, variable or setting that apply changed: the value found, the value set."""

    name: str
    """The switch as a user's code reads it (``cudnn.benchmark``) or the variable's name."""
    before: Any
    """The value found; None for a variable that was not set."""
    after: Any
    """The value set."""
    kind: str
    """One of :data:`KINDS`."""
    note: str | None = None
    """What a person should know beyond the values (set too late to act here, debug-only)."""

    def __str__(self) -> str:
        line = f"{self.name}: {_shown(self.before)} -> {_shown(self.after)}"
        return f"{line} ({self.note})" if self.note else line

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (``workbench show --json``)."""
        return {"name": self.name, "before": self.before, "after": self.after,
                "kind": self.kind, "note": self.note}  # fmt: skip


def _shown(value: Any) -> str:
    return UNSET if value is None else str(value)


def format_changes(changes: list[Change]) -> list[str]:
    """One line per change, or the single line ``nothing changed``."""
    return [str(c) for c in changes] or ["nothing changed"]


def report(changes: list[Change]) -> None:
    """Print the list, on rank 0 only (every rank applies the same config).

    ``print``, not ``logging``: a plain training script configures no logging, and Python's
    default then drops INFO records and shows a WARNING as if something were wrong; the list is
    a record of what was set, which a person should see once at start-up whatever the script's
    logging. ``apply(quiet=True)`` prints nothing and returns the same list.
    """
    if os.environ.get("RANK", "0") != "0":
        return
    lines = format_changes(changes)
    if not changes:
        print(f"workbench: cfg.apply(): {lines[0]}")
        return
    print("workbench: cfg.apply() changed:")
    for line in lines:
        print(f"  {line}")


# -- applying -------------------------------------------------------------------------------


def apply_changes(
    write_backend: Callable[[], Any],
    env: Mapping[str, str],
    suggested: Mapping[str, str],
    environ: MutableMapping[str, str] | None = None,
    late: Mapping[str, str] | None = None,
) -> list[Change]:
    """Run ``write_backend`` (the config's math switches) and set ``env`` and ``suggested`` in
    ``environ`` (default ``os.environ``); the changes, backend switches first.

    The config's value wins over one already set (that is what was measured); the change shows
    the value it replaced. ``late``: which start-up readers already ran (default: asked of
    this process; the dry run passes none).
    """
    from workbench.engine.training import precision_state  # torch: only when applying

    before = precision_state()
    write_backend()
    changes = _backend_changes(before, precision_state())
    environ = os.environ if environ is None else environ
    late = _late_notes() if late is None else late
    for kind, variables in (("env", env), ("nccl-suggestion", suggested)):
        for name, value in variables.items():
            found = environ.get(name)
            if found == value:
                continue
            environ[name] = value
            note = "; ".join(filter(None, (_suggestion_note(kind), _late_note(name, late))))
            changes.append(Change(name, found, value, kind, note or None))
    return changes


def _backend_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    return [Change(name, before.get(name), value, "backend")
            for name, value in after.items() if before.get(name) != value]  # fmt: skip


def _suggestion_note(kind: str) -> str | None:
    if kind != "nccl-suggestion":
        return None
    return "NCCL documents it for debugging only; set because nccl_suggestions=True asked"


def _late_notes() -> dict[str, str]:
    """Which start-up readers already ran in this process, with what that means."""
    import torch  # torch: only when applying

    notes: dict[str, str] = {}
    if torch.cuda.is_initialized():
        notes["alloc"] = ("read when CUDA initializes, and CUDA is already initialized here: "
                          "no effect in this process, only in processes started after")  # fmt: skip
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        notes["nccl"] = ("read when a communicator is created, and a process group already "
                         "exists: only communicators created after see it")  # fmt: skip
    return notes


def _late_note(name: str, late: Mapping[str, str]) -> str | None:
    if name in ALLOC_VARS:
        return late.get("alloc")
    if name.startswith("NCCL_"):
        return late.get("nccl")
    return None


# -- the dry run ----------------------------------------------------------------------------


def fresh_process_changes(
    write_backend: Callable[[], Any], env: Mapping[str, str], suggested: Mapping[str, str]
) -> list[Change]:
    """What :func:`apply_changes` would return in a fresh process: the math switches at
    PyTorch's defaults (:data:`PYTORCH_DEFAULTS`) and none of the variables set.

    The switches are set to the defaults, written as apply writes them, read, and put back
    exactly as they were (whichever API set them); the environment is a scratch dict, never
    ``os.environ``. This process's own state is left as found.
    """
    # torch only here: the production side stays torch-free until a method needs it
    from workbench.engine.training import at_torch_defaults

    with at_torch_defaults():
        return apply_changes(write_backend, env, suggested, environ={}, late={})
