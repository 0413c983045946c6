"""Workloads: a model, a dataset, a loss and an optimizer, run by a burst.

A workload is the *what* of a burst; the knobs are the *how*. The built-in ones (``cnn``,
``resnet50``, ``gpt``) read real files from the sample datasets every step; a user's own model
and data plug in the same way, through :class:`Workload` or a factory that returns one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from workbench.workloads.base import Workload, count_train_flops, default_optimizer
from workbench.workloads.gpt import gpt
from workbench.workloads.vision import cnn, resnet50

WorkloadFactory = Callable[..., Workload]
_REGISTRY: dict[str, WorkloadFactory] = {"cnn": cnn, "resnet50": resnet50, "gpt": gpt}
_BUILT_IN = frozenset(_REGISTRY)


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
        if ":" in workload and workload not in _REGISTRY:
            made = _call_factory(import_factory(workload))
        else:
            factory = _REGISTRY.get(workload)
            if factory is None:
                known = ", ".join(_REGISTRY)
                raise UnknownWorkload(
                    f"workload={workload!r} is not allowed: one of {known}, or 'module:factory'"
                )
            made = factory(data_dir=data_dir)
        # Where it came from, so a distributed burst's fresh processes can build it again.
        made.extras.setdefault("source", importable_name(workload))
        made.extras.setdefault("source_data_dir", str(data_dir) if data_dir else None)
        return made
    if callable(workload):
        return _call_factory(workload)
    raise TypeError(f"workload must be a name, a Workload or a factory, not {workload!r}")


def _call_factory(factory: WorkloadFactory) -> Workload:
    made = factory()
    if not isinstance(made, Workload):
        raise TypeError(f"workload factory returned {type(made).__name__}, not a Workload")
    return made


def import_factory(spec: str) -> WorkloadFactory:
    """``"package.module:function"`` -> the function (how fresh processes find a workload)."""
    module_name, _, attr = spec.partition(":")
    try:
        target: object = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise UnknownWorkload(
            f"workload={spec!r} is not allowed: cannot import it ({exc}); "
            "give 'package.module:factory' importable from this Python"
        ) from None
    if not callable(target):
        raise UnknownWorkload(f"workload={spec!r} is not allowed: it names no callable factory")
    return target  # type: ignore[return-value]


def importable_name(workload: object) -> str | None:
    """A name a fresh process can resolve to this workload, or None when there is none.

    Built-in and registered names resolve as they are when the registry holds a built-in
    factory; a module-level function resolves as ``module:qualname``; a Workload made by
    ``resolve_workload`` from a name remembers it. A Workload built by hand, a lambda or a
    function defined in a notebook cell (module ``__main__``) cannot be found by another
    process.
    """
    if isinstance(workload, Workload):
        return workload.extras.get("source")
    if isinstance(workload, str):
        factory = _REGISTRY.get(workload)
        if factory is None or workload in _BUILT_IN:
            return workload
        workload = factory
    module = getattr(workload, "__module__", None)
    qualname = getattr(workload, "__qualname__", "")
    if not callable(workload) or isinstance(workload, Workload):
        return None
    if not module or module == "__main__" or "<" in qualname:
        return None
    return f"{module}:{qualname}"


__all__ = [
    "UnknownWorkload",
    "Workload",
    "count_train_flops",
    "default_optimizer",
    "default_workload_name",
    "import_factory",
    "importable_name",
    "register_workload",
    "resolve_workload",
    "workload_names",
]
