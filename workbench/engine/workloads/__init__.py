"""Workloads: a model, a dataset, a loss and an optimizer, run by a burst.

A workload is the *what* of a burst; the knobs are the *how*. The built-in ones (``cnn``,
``resnet50``, ``gpt``, ``gpt:124m``, ``hf:gpt2``) read real files from the sample datasets
every step; a user's own model and data plug in the same way, through :class:`Workload` or a
factory that returns one (``hf_causal_lm(config)`` makes one of a Hugging Face config).

A distributed burst runs in fresh processes (torchrun's ranks), which receive a *name*, never
an object: a built-in name or ``"module:function"``. :func:`name_for_ranks` turns what the
caller gave into that name, or refuses before anything launches and says how to fix it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from workbench.core.errors import InputError
from workbench.engine import hardware
from workbench.engine.workloads.base import Workload, count_train_flops, default_optimizer
from workbench.engine.workloads.checks import Shown as _Shown
from workbench.engine.workloads.checks import WorkloadFieldError, WorkloadWarning
from workbench.engine.workloads.gpt import gpt, gpt_124m
from workbench.engine.workloads.hf import hf_causal_lm, hf_gpt2  # imports no transformers
from workbench.engine.workloads.lightning import is_lightning  # imports no lightning
from workbench.engine.workloads.vision import cnn, resnet50

WorkloadFactory = Callable[..., Workload]
WorkloadArg = str | Workload | WorkloadFactory | None
"""What every entry point takes as ``workload``: a name, a Workload, a factory, or None."""
_REGISTRY: dict[str, WorkloadFactory] = {
    "cnn": cnn, "resnet50": resnet50, "gpt": gpt, "gpt:124m": gpt_124m, "hf:gpt2": hf_gpt2,
}  # fmt: skip
"""Built-in names; ``gpt:124m`` and ``hf:gpt2`` are names too, never ``module:function``."""
_BUILT_IN = frozenset(_REGISTRY)
_FACTORY = "module:function that returns a Workload, importable from the current directory"


class UnknownWorkload(InputError):
    """A workload that cannot be found: an unknown name, a module that is not there, a
    function the module lacks, or a factory that returns something else."""

    def __init__(self, value: object, allowed: str):
        err = InputError.not_allowed("workload", value, allowed)
        super().__init__(str(err), name="workload", value=value, allowed=allowed)


def register_workload(name: str, factory: WorkloadFactory) -> None:
    """Make ``factory(data_dir=None) -> Workload`` available by name (CLI, panel, sweeps)."""
    _REGISTRY[name] = factory


def workload_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def default_workload_name(device_type: str) -> str:
    """``cnn`` on a CPU (fast enough to be interactive), ``resnet50`` on a GPU."""
    return "resnet50" if device_type == "cuda" else "cnn"


def resolve_target(
    workload: WorkloadArg, device: str | torch.device | None = None,
    data_dir: str | Path | None = None,
) -> tuple[Workload, torch.device]:  # fmt: skip
    """Which workload runs on which device: the one place that decides both.

    ``device`` None is the GPU where there is one; ``workload`` None is the default for that
    device (``default_workload_name``). Bad input raises an InputError naming it.
    """
    dev = hardware.resolve_device(device)
    return resolve_workload(workload or default_workload_name(dev.type), data_dir), dev


def resolve_workload(
    workload: str | Workload | WorkloadFactory, data_dir: str | Path | None = None
) -> Workload:
    """A Workload from a registered name, ``"module:function"``, a Workload, or a factory.

    A registered factory is called as ``factory(data_dir=data_dir)``; a ``module:function``
    gets ``data_dir`` when it has a ``data_dir`` parameter (and refuses one it cannot take).
    """
    if isinstance(workload, Workload):
        return workload
    if isinstance(workload, str):
        if ":" in workload and workload not in _REGISTRY:
            made = _call_factory(import_factory(workload), workload, data_dir)
        else:
            factory = _REGISTRY.get(workload)
            if factory is None:
                raise UnknownWorkload(workload, _unknown_name_help(workload))
            made = _checked(factory(data_dir=data_dir), workload)
        # Where it came from, so a distributed burst's fresh processes can build it again
        # (name_for_ranks judges whether they can).
        made.extras.setdefault("source", workload)
        made.extras.setdefault("source_data_dir", str(data_dir) if data_dir else None)
        return made
    if callable(workload):
        made = _checked(workload(), getattr(workload, "__qualname__", repr(workload)))
        made.extras.setdefault("source", _spelled_name(workload))  # judged by name_for_ranks
        return made
    raise TypeError(f"workload must be a name, a Workload or a factory, not {workload!r}")


def _allowed() -> str:
    """What a workload name may be (the registry's names, built-in first, or a factory)."""
    return f"one of {', '.join(_REGISTRY)}, or {_FACTORY}"


def _unknown_name_help(name: str) -> str:
    hint = ""
    if all(part.isidentifier() for part in name.split(".")) and _module_exists(name):
        found = _workload_functions(name)
        if found:
            hint = (f"; {name!r} is a module: name its function, one of "
                    f"{', '.join(f'{name}:{f}' for f in found)}")  # fmt: skip
        else:
            hint = f"; {name!r} is a module: add its function's name, e.g. '{name}:make'"
    return f"{_allowed()}{hint}"


def _workload_functions(module_name: str) -> list[str]:
    """The module's public functions that say they return a Workload (by annotation), else all
    its public functions; none when it does not import."""
    try:
        module = importlib.import_module(module_name)
    except Exception:  # its own error is not this message's: the plain hint stays
        return []
    own = [(n, f) for n, f in vars(module).items() if inspect.isfunction(f)
           and f.__module__ == module_name and not n.startswith("_")]  # fmt: skip
    typed = [n for n, f in own if "Workload" in str(f.__annotations__.get("return", ""))]
    return sorted(typed or [n for n, _ in own])


def _call_factory(factory: WorkloadFactory, spec: str, data_dir: str | Path | None) -> Workload:
    """``factory()``, or ``factory(data_dir=...)`` when it takes one: ``--data`` is never
    silently dropped."""
    if _takes_data_dir(factory):
        return _checked(factory(data_dir=data_dir), spec)
    _check_no_data_dir(spec, data_dir)
    return _checked(factory(), spec)


def _check_no_data_dir(spec: str, data_dir: str | Path | None) -> None:
    if data_dir is not None:
        raise InputError.not_allowed(
            "data_dir", str(data_dir),
            f"{spec} has no data_dir parameter to take it (add one, "
            "def make(data_dir=None), or leave the data folder out)",
        )  # fmt: skip


def _takes_data_dir(factory: WorkloadFactory) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return False
    return any(p.name == "data_dir" or p.kind is p.VAR_KEYWORD for p in params)


def _checked(made: object, spec: str) -> Workload:
    if not isinstance(made, Workload):
        raise UnknownWorkload(
            spec,
            f"{spec} returned {type(made).__name__}, not a Workload: the function must "
            "return workbench.Workload(name=..., model=..., dataset=...)",
        )
    return made


def import_factory(spec: str) -> WorkloadFactory:
    """``"package.module:function"`` -> the function (how fresh processes find a workload).

    Each way this can fail is said plainly: no such module on the import path, the module
    failed while importing (a package it needs is missing, an error in its code), the module
    has no such function, or what it names is not callable.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UnknownWorkload(spec, f"{_FACTORY}; give both parts, module:function")
    module = _import_module(spec, module_name)
    target: object = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise UnknownWorkload(spec, _missing_attr_help(module, module_name, attr))
        target = getattr(target, part)
    if not callable(target):
        raise UnknownWorkload(spec, f"{module_name}.{attr} is a {type(target).__name__}, "
                                    "not a function that returns a Workload")  # fmt: skip
    return target  # type: ignore[return-value]


def _import_module(spec: str, module_name: str) -> object:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            why = f"no module named {missing!r} {_where_imports_look()}; {_allowed()}"
            raise UnknownWorkload(spec, why) from None
        why = f"importing {module_name} failed: it needs {missing!r}, not installed here"
        raise UnknownWorkload(spec, why) from exc
    except Exception as exc:  # the user's module itself fails: one line, with what and where
        why = (
            f"importing {module_name} failed: {type(exc).__name__}: {exc} "
            "(WORKBENCH_DEBUG=1 shows the traceback)"
        )
        raise UnknownWorkload(spec, why) from exc


def _where_imports_look() -> str:
    here = os.getcwd()
    on_path = any(os.path.abspath(p or os.curdir) == here for p in sys.path)
    if on_path:
        return f"on the import path (which includes the current directory, {here})"
    return f"on the import path (the current directory, {here}, is not on it)"


def _missing_attr_help(module: object, module_name: str, attr: str) -> str:
    where = getattr(module, "__file__", None) or module_name
    own = sorted(
        name for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module_name
        and not name.startswith("_")
    )  # fmt: skip
    has = f"; its functions: {', '.join(own)}" if own else "; it defines no public function"
    return f"module {module_name} ({where}) has no {attr!r}{has}"


def importable_name(workload: object) -> str | None:
    """A name a fresh process can resolve to this workload, or None when there is none.

    Built-in and registered names resolve as they are when the registry holds a built-in
    factory; a module-level function resolves as ``module:qualname``; a Workload made by
    ``resolve_workload`` from a name or a function remembers it. A Workload built by hand, a
    lambda or a function defined in a script or notebook cell (module ``__main__``) cannot
    be found by another process.
    """
    if isinstance(workload, Workload):
        source = workload.extras.get("source")
        return importable_name(source) if isinstance(source, str) else None
    if isinstance(workload, str):
        if workload in _REGISTRY and workload not in _BUILT_IN:
            workload = _REGISTRY[workload]
        else:
            return None if _out_of_reach(workload) else workload
    name = _spelled_name(workload)
    return None if name is None or _out_of_reach(name) else name


SOURCE_KEYS = ("workload", "collate_fn", "loss", "optimizer")


def source_names(workload: Workload) -> dict[str, str | None]:
    """How a process that never saw this Workload builds its run again, by name (a burst
    result keeps it, and a saved config is written from it).

    ``workload``: :func:`importable_name` (a built-in name or ``module:function``; None for
    one built by hand or in ``__main__``). ``collate_fn``, ``loss``, ``optimizer``: the
    function's ``module:qualname`` when that name imports back to this very function; else
    how it spells itself (``__main__:pad``, ``m:make.<locals>.f``, ``m:<lambda>``) or, for an
    object with no name of its own (a partial, an ``nn.Module`` loss), ``<partial object>``,
    for the reader to refuse or leave out with the reason; ``collate_fn`` None is torch's
    default collate. Plain strings: the result stays JSON.

    A workload whose ``step`` hook computes the loss used no ``loss``: None. A Lightning
    workload also trained with its module's ``configure_optimizers``, not an optimizer a file
    could name: ``optimizer`` None and ``trainer`` ``"lightning"``, so a saved config says
    so and names no function that did not train.
    """
    lightning = is_lightning(workload)
    names = {
        "workload": importable_name(workload),
        "collate_fn": _function_name(workload.collate_fn),
        "loss": None if workload.step is not None else _function_name(workload.loss),
        "optimizer": None if lightning else _function_name(workload.optimizer),
    }
    return {**names, "trainer": "lightning"} if lightning else names


def _function_name(fn: object) -> str | None:
    if fn is None:
        return None
    name = _spelled_name(fn)
    if name is None or (not _out_of_reach(name) and not _imports_as(name, fn)):
        return f"<{type(fn).__name__} object>"  # a partial, a bound method, an instance
    return name


def _imports_as(name: str, fn: object) -> bool:
    """Whether ``module:qualname`` imports back to ``fn`` (its module is loaded already: the
    function lives there, so this is a lookup, not an import)."""
    module_name, _, attr = name.partition(":")
    try:
        target: object = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except Exception:  # a module that fails to import, a name rebound since: not importable
        return False
    return target is fn


def _out_of_reach(spec: str) -> bool:
    """A ``module:qualname`` no other process can import: ``__main__`` is that process's own
    script, and ``<lambda>`` or ``<locals>`` are no attribute of any module."""
    module_name, _, attr = spec.partition(":")
    return module_name == "__main__" or "<" in attr


def _spelled_name(obj: object) -> str | None:
    """``module:qualname`` as the object spells itself (None for objects without a name of
    their own: a partial, an instance); not yet judged importable."""
    if not callable(obj) or isinstance(obj, Workload):
        return None
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or not qualname:
        return None
    return f"{module}:{qualname}"


def name_for_ranks(
    workload: str | Workload | WorkloadFactory, data_dir: str | Path | None = None
) -> str:
    """The name each rank of a torchrun job will resolve ``workload`` from, checked here.

    Ranks are fresh processes: they get a name, import it and call it. Anything they could
    not import is refused now, before torchrun starts (launching costs seconds before a rank
    would fail), and a function defined in ``__main__`` (a script, a notebook cell) is refused
    with the fix: the module to move it into and the exact name to pass. The function is
    imported and called here too, as each rank will call it, so a typo, a ``data_dir`` it
    cannot take or a result that is not a Workload fails at once. That call is cheap: a
    Workload holds factories for its model and data, and those are not called here.
    """
    if isinstance(workload, Workload):
        source = workload.extras.get("source")
        if not isinstance(source, str):
            shown = _Shown(f"<Workload {workload.name!r}>")
            raise InputError.not_allowed("workload", shown, _fix_for_object(workload.name))
        return name_for_ranks(source, data_dir)
    if not isinstance(workload, str):
        return _checked_function(workload, data_dir)
    if ":" in workload and workload not in _REGISTRY:
        return _checked_spec(workload, workload, data_dir)
    if workload not in _REGISTRY:
        raise UnknownWorkload(workload, _unknown_name_help(workload))
    if workload in _BUILT_IN:
        return workload
    return _checked_function(_REGISTRY[workload], data_dir, shown=workload)


def _checked_function(factory: object, data_dir: str | Path | None, shown: object = None) -> str:
    name = _spelled_name(factory)
    if shown is None:
        shown = _Shown(f"<function {name.partition(':')[2]}>" if name else repr(factory))
    if name is None or (not _out_of_reach(name) and import_factory(name) is not factory):
        raise InputError.not_allowed(
            "workload", shown, _fix_for_object(None)
        )  # a partial, a bound method
    return _checked_spec(name, shown, data_dir)


def _checked_spec(spec: str, shown: object, data_dir: str | Path | None) -> str:
    if _out_of_reach(spec):
        raise InputError.not_allowed("workload", shown, _fix_for_function(spec.partition(":")[2]))
    _call_factory(import_factory(spec), spec, data_dir)
    return spec


_FRESH = "a distributed burst runs in fresh processes, which import the workload by name"


def _fix_for_function(attr: str) -> str:
    """Say where the function must go and the exact name to pass once it is there."""
    if "<" in attr:  # a lambda, or a function defined inside another function
        module = _module_name_for("make_workload")
        return (
            f"{_FRESH}, and a lambda or a function defined inside another function has no "
            f"such name: define def make_workload() -> Workload at the top of {module}.py "
            f"{_next_to_main()} and pass workload='{module}:make_workload'"
        )
    module = _module_name_for(attr)
    return (
        f"{_FRESH}, and {attr} is defined in {_main_described()}, which they cannot import: "
        f"move {attr} into {module}.py {_next_to_main()} and pass workload='{module}:{attr}'"
    )


def _fix_for_object(name: str | None) -> str:
    function = f"make_{name}" if name and name.isidentifier() else "make_workload"
    module = _module_name_for(function)
    return (
        f"{_FRESH}, and an object has no name to import: put the code that builds it in "
        f"def {function}() -> Workload at the top of {module}.py {_next_to_main()} and pass "
        f"workload='{module}:{function}'"
    )


def _main_described() -> str:
    main_file = _main_script()
    return f"{main_file.name} (__main__)" if main_file else "this notebook or session (__main__)"


def _next_to_main() -> str:
    """Where a new module is found by this process and by the ranks alike: next to the
    script (its folder is on sys.path, which the ranks inherit), else the current directory
    (a notebook kernel's folder; on the path here and first on every rank's path)."""
    main_file = _main_script()
    if main_file is not None:
        return f"next to {main_file.name} ({main_file.parent})"
    if "ipykernel" in sys.modules:
        return f"next to your notebook ({os.getcwd()})"
    return f"in the current directory ({os.getcwd()})"


def _main_script() -> Path | None:
    """The script run as ``python script.py``; None for a notebook, ``python -c`` or
    ``python -m`` (whose module's folder is not on the path: the current directory is)."""
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if getattr(main, "__spec__", None) is not None or not str(main_file).endswith(".py"):
        return None
    return Path(main_file).resolve()


def _module_name_for(function: str) -> str:
    """The function's own name, unless a module of that name exists already."""
    return function if not _module_exists(function) else f"{function}_workload"


def _module_exists(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


__all__ = [
    "SOURCE_KEYS",
    "UnknownWorkload",
    "Workload",
    "WorkloadArg",
    "WorkloadFieldError",
    "WorkloadWarning",
    "count_train_flops",
    "default_optimizer",
    "default_workload_name",
    "hf_causal_lm",
    "import_factory",
    "importable_name",
    "name_for_ranks",
    "register_workload",
    "resolve_target",
    "resolve_workload",
    "source_names",
    "workload_names",
]
