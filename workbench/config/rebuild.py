"""What a saved config keeps to rebuild the measured run, beside the knobs.

The knobs say *how* the bursts ran; a production script also needs *what* ran: the workload
(its ``module:function``), its collate_fn, its loss and its optimizer. A burst result carries
them by name (``BurstResult.workload_source``, taken where the burst had the Workload), so
saving a result from Python keeps them as the CLI does; ``save_config(..., workload=...)``
gives them for Knobs. The collate_fn changes what a batch is, so one without an importable
name is refused; a loss or an optimizer without one is left out (null) with a warning, and
``cfg.loss()``/``cfg.optimizer()`` then say why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from workbench.config.names import (
    FUNCTION_NAME,
    checked_name,
    import_named,
    saved_name,
    unnamed_problem,
)
from workbench.config.tuned_config import TRAINING_KEYS, TunedConfig
from workbench.config.yaml_text import ConfigError, check_keys

__all__ = ["read_training", "source_of", "unrebuildable", "with_source"]


def source_of(obj: Any, workload: Any) -> dict[str, str | None] | None:
    """The names to rebuild the run from: ``workload=``'s, else the result's (a TuneResult's
    best run's); None when neither says (Knobs, a TunedConfig, an older result)."""
    if workload is not None:
        # torch only when a workload is given: load_config stays torch-free
        from workbench.engine.workloads import resolve_workload, source_names

        wl = resolve_workload(workload)
        return {**source_names(wl), "display": wl.name}
    result = getattr(obj, "best_result", obj)
    source = getattr(result, "workload_source", None)
    return dict(source) if isinstance(source, Mapping) else None


def with_source(
    cfg: TunedConfig, source: Mapping[str, str | None] | None, target: Path
) -> tuple[TunedConfig, list[str]]:
    """The config with the workload's name, collate_fn and training functions; warnings for
    a loss or optimizer left out. A collate_fn without a name is refused: the file would
    otherwise batch differently from the bursts, and fail far from the cause."""
    if source is None:
        return cfg, []
    collate = source.get("collate_fn")
    if collate is not None:
        try:
            collate = checked_name(collate, "dataloader.collate_fn", target)
        except ConfigError as exc:
            alone = "or save the knobs alone (save_config(result.knobs, path)), without it"
            raise ConfigError(target, exc.key, f"the workload's collate_fn: {exc.problem}; "
                              f"{alone}") from None  # fmt: skip
    training, notes = {}, []
    for key in TRAINING_KEYS:
        training[key], note = _training_name(source.get(key), f"training.{key}")
        notes += [note] if note else []
    prov = dict(cfg.provenance)
    prov["workload"] = source.get("workload") or source.get("display") or prov.get("workload")
    if source.get("workload") is None and prov["workload"]:
        prov["workload_importable"] = False
        notes.append(unrebuildable(prov["workload"]))
    if source.get("trainer") == "lightning":  # its training_step and configure_optimizers
        prov["trainer"], training = "lightning", None
    return replace(cfg, collate_fn=collate, training=training, provenance=prov), notes


def unrebuildable(name: str) -> str:
    """Why ``provenance.workload`` cannot be run again by name, and the fix."""
    return (
        f"provenance.workload: {name!r} names a workload no other process can rebuild (a "
        "Workload object, or a name registered in this process only): `workbench burst/tune "
        "--workload` cannot run it again. Define a function returning the Workload at the top "
        "level of a module and pass 'module:function' (or save_config(..., "
        "workload=that_function))"
    )


def _training_name(spelled: str | None, key: str) -> tuple[str | None, str | None]:
    """A loss or optimizer's saved name, or (None, why it was left out)."""
    if spelled is None:
        return None, None
    problem = unnamed_problem(spelled, key)
    if problem is None and not FUNCTION_NAME.match(spelled):
        problem = f"{spelled!r} is not a 'module:function' name"
    if problem is None:
        try:
            import_named(spelled, key)
        except ConfigError as exc:
            problem = exc.problem
    if problem is None:
        return spelled, None
    return None, f"{key}: left out (null), production passes its own: {problem}"


def read_training(section: Any, path: str | Path) -> dict[str, str | None] | None:
    """A file's ``training``: the loss and optimizer as ``module:function`` names (null: not
    saved), not imported until ``cfg.loss()``/``cfg.optimizer()``; None when it has none."""
    if section is None:
        return None
    if not isinstance(section, Mapping):
        raise ConfigError(path, "training", f"expected a mapping, got {type(section).__name__}")
    check_keys(path, "training", section, TRAINING_KEYS)
    return {key: None if section.get(key) is None
            else saved_name(section[key], f"training.{key}", path)
            for key in TRAINING_KEYS}  # fmt: skip
