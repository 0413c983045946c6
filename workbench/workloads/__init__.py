"""Workloads: a model, a dataset, a loss and an optimizer, run by a burst.

A workload is the *what* of a burst; the knobs are the *how*. The built-in ones (``cnn``,
``resnet50``, ``gpt``) read real files from the sample datasets every step; a user's own model
and data plug in the same way, through :class:`Workload` or a factory that returns one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workbench.workloads.base import Workload, count_train_flops, default_optimizer
from workbench.workloads.gpt import gpt
from workbench.workloads.vision import cnn, resnet50

WorkloadFactory = Callable[..., Workload]
_REGISTRY: dict[str, WorkloadFactory] = {"cnn": cnn, "resnet50": resnet50, "gpt": gpt}


class UnknownWorkload(ValueError):
    """A workload name that is not registered."""


def register_workload(name: str, factory: WorkloadFactory) -> None:
    """Make ``factory(data_dir=None) -> Workload`` available by name (CLI, panel, sweeps)."""
    _REGISTRY[name] = factory


def workload_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def default_workload_name(device_type: str) -> str:
    """``cnn`` on a CPU (fast enough to be interactive), ``resnet50`` on a GPU."""
    return "resnet50" if device_type == "cuda" else "cnn"


def resolve_workload(
    workload: str | Workload | WorkloadFactory, data_dir: str | Path | None = None
) -> Workload:
    """A Workload from a registered name, a Workload, or a factory returning one."""
    if isinstance(workload, Workload):
        return workload
    if isinstance(workload, str):
        factory = _REGISTRY.get(workload)
        if factory is None:
            known = ", ".join(_REGISTRY)
            raise UnknownWorkload(f"workload={workload!r} is not allowed: one of {known}")
        return factory(data_dir=data_dir)
    if callable(workload):
        made = workload()
        if not isinstance(made, Workload):
            raise TypeError(f"workload factory returned {type(made).__name__}, not a Workload")
        return made
    raise TypeError(f"workload must be a name, a Workload or a factory, not {workload!r}")


__all__ = [
    "UnknownWorkload",
    "Workload",
    "count_train_flops",
    "default_optimizer",
    "default_workload_name",
    "register_workload",
    "resolve_workload",
    "workload_names",
]
