"""Saved configs: the tuned knobs, and the production side that trains with them.

``save_config(knobs_or_result, path)`` writes a YAML file a person can read and diff: the
knobs, the environment of the training processes (NCCL_* and allocator variables), the
DataLoader keyword arguments, torchrun launch lines, and where it all came from (device,
versions, what the burst measured, when). ``load_config(path)`` returns a :class:`TunedConfig`
whose methods a plain training script calls: ``dataloader``, ``autocast``, ``grad_scaler``,
``apply_backend_flags``, ``env``, ``ddp_kwargs``, ``torchrun_command``.

The knobs are the source of truth. The env's NCCL_* part, the DataLoader kwargs and the launch
lines are copies written from them for people to read and paste; loading checks each copy
against the knobs, so an edit to a copy is an error that says which knob to change, never a
silent disagreement between what the file shows and what the script does. One entry of the
``dataloader`` section is not a copy: ``collate_fn``, the workload's collate function, saved by
its importable name (``module:function``) so ``cfg.dataloader(ds)`` runs the measured pipeline.
Nor is ``training``: the workload's loss and optimizer by the same kind of name, which
``cfg.loss()`` and ``cfg.optimizer(params)`` import (``provenance.workload`` names the workload
itself, ``module:function`` where it has one).

A config is trusted input, like a script: the variables it exports reach every rank, and some
load a library or write a file there; the names it keeps are imported and called. Loading
warns about each such variable (``workbench.core.trusted``) but refuses none.

Imports stay light: yaml and the knobs at import time, torch inside the methods that need it,
never ipywidgets, altair or DALI (a bare GPU box has torch and pyyaml, not the notebook stack).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from workbench.config import marks, model_setup, provenance
from workbench.config.comm_suggestions import check_comm
from workbench.config.names import checked_name, saved_name
from workbench.config.nccl_suggestions import check_suggestions, from_comm
from workbench.config.rebuild import read_training, source_of, with_source
from workbench.config.tuned_config import TunedConfig
from workbench.config.yaml_text import (
    ConfigError,
    ConfigWarning,
    Section,
    check_keys,
    load_text,
    read_yaml,
    render,
    write_text,
)
from workbench.core import allocconf, envvars, nccl, trusted
from workbench.core.knobs import (
    KNOB_NAMES,
    KnobError,
    Knobs,
    current_values,
    knob_specs,
    warn_renamed,
)
from workbench.core.results import BurstResult

__all__ = ["SCHEMA_VERSION", "ConfigError", "ConfigWarning", "TunedConfig", "collate_fn_name",
           "load_config", "load_knobs", "save_config"]  # fmt: skip

SCHEMA_VERSION = 3
"""3: adds ``training`` (the loss and the optimizer by name); a CPU config's sbatch script asks
for no GPU, and DALI's knobs at their defaults are left out unless loader is dali. 2 (knobs,
env, dataloader, launch, provenance) and 1 (knobs, measured, provenance, saved_at) still load."""
_TOP_KEYS = ("schema_version", "knobs", "env", "dataloader", "launch", "training", "provenance",
             "comm", "suggestions")  # fmt: skip
_DALI_KNOBS = tuple(name for name in KNOB_NAMES if name.startswith("dali_"))
"""Knobs that act only with ``loader=dali``: left out of another loader's file at their defaults."""


TRUSTED = "a config is trusted input, like a script: load only files whose author you trust"


# --------------------------------------------------------------------------- save


def save_config(
    knobs_or_result: Any,
    path: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    collate_fn: Callable[..., Any] | str | None = None,
    comm: Mapping[str, Any] | None = None,
    workload: Any = None,
    force: bool = False,
) -> Path:
    """Write Knobs, a BurstResult (with what it measured), a TuneResult (the median of its
    best config's runs and the speed-up with its interval, ``provenance.from_tune``) or a
    TunedConfig (a loaded one: re-saving gives the same bytes) to ``path`` as YAML.

    How to rebuild the run comes from the workload: a BurstResult (a TuneResult's best run)
    carries its names (``BurstResult.workload_source``, taken where the burst had the
    Workload); for Knobs, or to name another, pass ``workload=`` (a Workload, a name or a
    factory, resolved as a burst resolves it). From it the file keeps the workload's
    ``module:function`` (``provenance.workload``; a built-in name as it is), its
    ``collate_fn`` (``dataloader.collate_fn``: refused, naming it and the fix, when it has no
    name another process can import: a lambda, a nested function, a callable object, a
    function in ``__main__``), and its loss and optimizer (``training``, read back by
    ``cfg.loss()`` and ``cfg.optimizer(params)``; one without an importable name is left out
    as null, with a ConfigWarning). workbench's defaults are saved by their own names
    (``workbench.engine.workloads.base:default_loss``, ``...:default_optimizer``): a file
    says what trained, never "the default of some version". Knobs alone have no
    ``training`` section.

    ``env`` adds variables beside the NCCL knobs, e.g. ``{"PYTORCH_CUDA_ALLOC_CONF":
    "expandable_segments:True"}``. ``collate_fn`` (a function or ``"module:function"``) wins
    over the workload's. The text is checked by the loader before it is written, so every
    saved file loads; the write is atomic. Returns the path written.

    NCCL variables NCCL documents for debugging only (``workbench.core.nccl.DEBUG_ONLY``) are
    never saved among the variables applied: a knob ``nccl={...}`` of that kind (it acted in the
    bursts) and a comm sweep's winner over one go to ``suggestions.nccl`` with their figures,
    and a ConfigWarning says which moved.

    A TuneResult whose runs could not tell its pick from the start (``speedup_uncertain``) is
    saved marked so in the file's first lines, and never over a config an earlier tune could
    tell (ConfigError; ``force=True`` overwrites it).
    """
    target = Path(path).expanduser()
    given = _given_knobs(knobs_or_result)
    cfg = _as_config(knobs_or_result, env, target)
    cfg, notes = with_source(cfg, source_of(knobs_or_result, workload), target)
    if collate_fn is not None:
        cfg = replace(cfg, collate_fn=collate_fn_name(collate_fn, target))
    if comm is not None:  # a comm sweep's suggestions (CommSweep.suggestions())
        cfg = replace(cfg, comm=check_comm(comm, target))
        swept = from_comm(cfg.comm or {}, cfg.knobs.bucket_cap_mb)
        cfg = replace(cfg, nccl_suggestions={**cfg.nccl_suggestions, **swept})
    moved = sorted(n for n in (given.nccl if given else {}) if nccl.is_debug_only(n))
    notes += [_moved_note("knobs.nccl", moved, "saved")] if moved else []
    if not force:
        marks.refuse_uncertain_over_certain(cfg.provenance, target, _earlier_provenance(target))
    text = config_text(cfg)
    _, checked = _parse(load_text(text, target), target)
    _warn(target, notes + checked)
    write_text(target, text)
    return target


def _earlier_provenance(target: Path) -> dict[str, Any] | None:
    """The provenance of the config already at ``target``; None when there is none or it does
    not load (nothing there worth keeping from an overwrite)."""
    if not target.is_file():
        return None
    try:
        return dict(_parse(read_yaml(target), target)[0].provenance)
    except Exception:  # not a config of ours, or a broken one: save_config overwrites it
        return None


def _given_knobs(obj: Any) -> Knobs | None:
    """The knobs handed to save_config, before a TunedConfig moves its debug-only NCCL ones."""
    for knobs in (obj, getattr(obj, "best", None), getattr(obj, "knobs", None)):
        if isinstance(knobs, Knobs):
            return knobs
    return None


def _moved_note(where: str, names: list[str], done: str) -> str:
    """One line: which debug-only NCCL variables became suggestions, and how to use them."""
    return (f"{where}: {', '.join(names)}: NCCL documents {'it' if len(names) == 1 else 'them'} "
            f"for debugging only ({nccl.DEBUG_SOURCE}); {done} as suggestions.nccl, not applied "
            "unless asked (cfg.apply(nccl_suggestions=True), launch lines' "
            "nccl_suggestions=True)")  # fmt: skip


def _as_config(obj: Any, env: Mapping[str, str] | None, target: Path) -> TunedConfig:
    cfg = _as_config_raw(obj, env, target)
    return replace(cfg, extra_env=_alloc_env(dict(cfg.extra_env), cfg.knobs, target))


def _alloc_env(extra: dict[str, str], knobs: Knobs, path: str | Path) -> dict[str, str]:
    """With ``knobs.alloc_conf`` set, env's allocator variables are copies of it: they must
    agree, and are then left to ``cfg.env()`` to write; without it they stay as given."""
    if not knobs.alloc_conf:
        return extra
    for name in allocconf.ENV_VARS:
        if name in extra and "".join(str(extra[name]).split()) != knobs.alloc_conf:
            problem = (f"{extra[name]!r} disagrees with knobs.alloc_conf={knobs.alloc_conf!r}; "
                       "env is written from the knobs: change the knob")  # fmt: skip
            raise ConfigError(path, f"env.{name}", problem)
    return {k: v for k, v in extra.items() if k not in allocconf.ENV_VARS}


def _as_config_raw(obj: Any, env: Mapping[str, str] | None, target: Path) -> TunedConfig:
    extra = dict(env or {})
    for name in extra:
        if isinstance(name, str) and name.startswith("NCCL_"):
            problem = "NCCL variables are knobs: set them in Knobs(nccl=...) so bursts agree"
            raise ConfigError(target, f"env.{name}", problem)
    if isinstance(obj, TunedConfig):
        return TunedConfig(obj.knobs, {**obj.extra_env, **extra}, obj.provenance,
                           collate_fn=obj.collate_fn, comm=obj.comm, training=obj.training,
                           nccl_suggestions=obj.nccl_suggestions)  # fmt: skip
    if isinstance(obj, Knobs):
        return TunedConfig(obj, extra, provenance.from_knobs())
    if isinstance(getattr(obj, "best_result", None), BurstResult):  # a TuneResult
        if not hasattr(obj, "bursts"):
            obj = obj.best_result  # a TuneResult's shape without its runs: its best burst
        else:
            return TunedConfig(obj.best, extra, provenance.from_tune(obj))
    if isinstance(obj, BurstResult):
        if obj.status != "ok":
            problem = f"the burst ended with status {obj.status!r} ({obj.error})"
            raise ConfigError(target, None, f"{problem}: save one that ended ok, or its knobs")
        return TunedConfig(obj.knobs, extra, provenance.from_result(obj))
    if hasattr(obj, "best_result"):
        raise ConfigError(
            target, None, "the tune found no config that ran and fits: nothing to save"
        )
    kinds = "Knobs, a BurstResult, a TuneResult or a TunedConfig"
    raise TypeError(f"save_config takes {kinds}, not {type(obj).__name__}")


def collate_fn_name(collate_fn: Callable[..., Any] | str, path: str | Path | None = None) -> str:
    """The ``module:function`` name under which a saved config keeps ``collate_fn``; raises
    ConfigError (key ``dataloader.collate_fn``) for one that production code could not import
    by name: a lambda, a nested function, a callable object, or a function in ``__main__``."""
    return checked_name(collate_fn, "dataloader.collate_fn", path)


# --------------------------------------------------------------------------- load


def load_config(path: str | Path, *, check_machine: bool = True) -> TunedConfig:
    """Read and validate a saved config; bad content raises ConfigError (file, key, problem).

    Warns (ConfigWarning) instead of failing when this machine differs from the one that
    measured the config (GPU model, torch major version), or for a variable workbench does not
    know: the knobs are still the best starting point there.

    A config is trusted input, like a script: its variables reach every rank, and some load a
    library or touch a file there (``NCCL_NET_PLUGIN``, ``NCCL_DEBUG_FILE``, ``LD_PRELOAD``,
    ``PYTHONPATH``; ``workbench.core.trusted``), and its ``collate_fn`` and ``training`` names
    are imported and called. Each such variable is named in a ConfigWarning with what it can
    do; none is refused. Load only files whose author you trust.
    """
    cfg, notes = _parse(read_yaml(path), path)
    if check_machine:
        promise = "the tuned numbers are a starting point here, not a promise"
        notes += [f"{d}: {promise}" for d in cfg.machine_differences()]
    _warn(path, notes)
    return cfg


def load_knobs(path: str | Path) -> Knobs:
    """Only the knobs of a saved config (validated as by load_config, without its
    ConfigWarnings; an old value read under its new name still says so)."""
    return _parse(read_yaml(path), path)[0].knobs


def _warn(path: str | Path, notes: list[str]) -> None:
    for note in notes:
        warnings.warn(f"{path}: {note}", ConfigWarning, stacklevel=3)


def _parse(doc: Any, path: str | Path) -> tuple[TunedConfig, list[str]]:
    """Validate a loaded document, key by key; returns the config and warnings."""
    if not isinstance(doc, Mapping):
        got = "an empty file" if doc is None else f"a {type(doc).__name__}"
        raise ConfigError(
            path, None, f"expected a mapping with schema_version and knobs, got {got}"
        )
    version = _schema_version(doc, path)
    if version == 1:
        doc = _from_v1(doc, path)
    check_keys(path, "", doc, _TOP_KEYS)
    knobs_data = _mapping(doc, "knobs", path, required=True)
    env_data = _mapping(doc, "env", path)
    knobs, nccl_where = _knobs(knobs_data, env_data, path)
    extra_env, notes = _extra_env(env_data, path)
    extra_env = _alloc_env(extra_env, knobs, path)
    notes = _nccl_notes(knobs, nccl_where, path) + notes
    debug = sorted(n for n in knobs.nccl if nccl.is_debug_only(n))  # a file saved before
    notes += [_moved_note(nccl_where, debug, "loaded")] if debug else []
    saved = doc.get("suggestions")
    cfg = TunedConfig(
        knobs, extra_env, provenance.normalize(doc.get("provenance"), path), Path(path),
        collate_fn=_saved_collate(doc.get("dataloader"), path),
        comm=check_comm(doc["comm"], path) if doc.get("comm") is not None else None,
        training=read_training(doc.get("training"), path),
        nccl_suggestions=check_suggestions(saved, path) if saved is not None else {},
    )  # fmt: skip
    notes += provenance.ambient_warnings(cfg.provenance)
    notes += _trusted_notes(cfg, nccl_where)
    _check_copy(path, "dataloader", doc.get("dataloader"), _loader_section(cfg), "knobs.{key}")
    _check_copy(
        path,
        "launch",
        doc.get("launch"),
        cfg.launch_lines(),
        "knobs.world_size (the sbatch script also from env)",
        optional=_LAUNCH_ADDED,
        older=_older_launch(cfg, version, bool(debug)),
    )
    return cfg, notes


def _older_launch(cfg: TunedConfig, version: int, had_debug: bool) -> dict[str, list[Any]]:
    """Launch entries as older files wrote them, where they differ. Schema 1-2's sbatch script
    asked for GPUs even for a config measured on a CPU; a file saved with debug-only NCCL
    variables among the applied ones put them in its launch lines. Such files still load."""
    gpu_lines = (None, True) if version < 3 else (None,)
    asked = (False, True) if had_debug else (False,)
    older: dict[str, list[Any]] = {}
    for gpu, flag in itertools.product(gpu_lines, asked):
        older.setdefault("sbatch", []).append(cfg.sbatch_lines(gpu_line=gpu, nccl_suggestions=flag))
    if had_debug:
        for key, line in cfg.launch_lines(nccl_suggestions=True).items():
            older.setdefault(key, []).append(line)
    return older


def _saved_collate(section: Any, path: str | Path) -> str | None:
    """``dataloader.collate_fn``: a ``module:function`` name, not imported until used."""
    if not isinstance(section, Mapping) or section.get("collate_fn") is None:
        return None
    return saved_name(section["collate_fn"], "dataloader.collate_fn", path)


def _schema_version(doc: Mapping[str, Any], path: str | Path) -> int:
    if "schema_version" not in doc:
        raise ConfigError(
            path, "schema_version", f"missing (required; this workbench writes {SCHEMA_VERSION})"
        )
    v = doc["schema_version"]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(
            path, "schema_version", f"{v!r} is not allowed: an integer from 1 to {SCHEMA_VERSION}"
        )
    if v > SCHEMA_VERSION:
        problem = f"{v} is newer than this workbench understands (1 to {SCHEMA_VERSION})"
        raise ConfigError(path, "schema_version", f"{problem}: upgrade workbench to load it")
    return v


def _from_v1(doc: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    """Schema 1 (knobs, measured, provenance, saved_at) in schema 2's shape."""
    check_keys(path, "", doc, ("schema_version", "knobs", "measured", "provenance", "saved_at"))
    old = _mapping(doc, "provenance", path)
    measured = _mapping(doc, "measured", path)
    new: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    if "knobs" in doc:
        new["knobs"] = doc["knobs"]
    new["provenance"] = {
        "source": "burst" if measured else "knobs",
        "workload": old.get("workload"),
        "burst_id": old.get("burst_id"),
        "date": old.get("burst_at") or doc.get("saved_at"),
        "device": {"type": old.get("device"), "name": old.get("device_name")},
        "versions": old.get("versions") or {},
        "measured": {k: measured.get(k) for k in provenance.MEASURED_KEYS} if measured else None,
    }
    return new


def _mapping(
    doc: Mapping[str, Any], key: str, path: str | Path, required: bool = False
) -> dict[str, Any]:
    if key not in doc:
        if required:
            raise ConfigError(path, key, "missing (required)")
        return {}
    value = doc[key]
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(path, key, f"expected a mapping, got {type(value).__name__}")
    return dict(value)


def _knobs(data: dict[str, Any], env: dict[str, Any], path: str | Path) -> tuple[Knobs, str]:
    """Build the Knobs; NCCL values come from knobs.nccl, or from env when that is absent."""
    check_keys(path, "knobs", data, KNOB_NAMES)
    data, renamed = current_values(data)  # a file from before a rename: fp32 -> fp32-strict
    warn_renamed(renamed, str(path))
    env_nccl = {k: v for k, v in env.items() if isinstance(k, str) and k.startswith("NCCL_")}
    where = "knobs.nccl" if "nccl" in data else "env"
    data["nccl"] = env_nccl if where == "env" else (data["nccl"] or {})
    try:
        knobs = Knobs(**data)
    except KnobError as exc:
        name = exc.knob
        key = f"{where}.{name}" if name.startswith("NCCL_") else f"knobs.{name}"
        raise ConfigError(path, key, f"{exc.value!r} is not allowed: {exc.allowed}") from None
    if where == "knobs.nccl":
        _check_env_nccl(env_nccl, knobs, path)
    return knobs, where


def _check_env_nccl(env_nccl: dict[str, Any], knobs: Knobs, path: str | Path) -> None:
    """env's NCCL_* must repeat knobs.nccl exactly: two sources could otherwise disagree."""
    for name, value in env_nccl.items():
        if name not in knobs.nccl:
            problem = "not in knobs.nccl: NCCL variables are knobs; add it there too"
            raise ConfigError(path, f"env.{name}", f"{problem} (or leave knobs.nccl out)")
        if str(value).strip() != knobs.nccl[name] or isinstance(value, bool):
            knob = f"knobs.nccl.{name}={knobs.nccl[name]!r}"
            problem = f"{value!r} disagrees with {knob}; env is written from the knobs"
            raise ConfigError(path, f"env.{name}", f"{problem}: change the knob")
    missing = sorted(set(knobs.nccl) - set(env_nccl))
    if env_nccl and missing:
        raise ConfigError(path, "env", f"lacks {', '.join(missing)}, set in knobs.nccl")


def _nccl_notes(knobs: Knobs, where: str, path: str | Path) -> list[str]:
    try:
        notes = nccl.check_env(knobs.nccl)
    except nccl.NcclError as exc:
        raise ConfigError(
            path, f"{where}.{exc.knob}", f"{exc.value!r} is not allowed: {exc.allowed}"
        ) from None
    return [f"{where}: {n}" for n in notes]


def _trusted_notes(cfg: TunedConfig, nccl_where: str) -> list[str]:
    """A warning per variable that can run code or touch files in every rank (not refused:
    a cluster may need its network plugin; but whoever wrote the file chose them)."""
    env = cfg.env()
    return [
        f"{nccl_where if name in cfg.knobs.nccl else 'env'}.{name}={env[name]!r}: {what}; {TRUSTED}"
        for name, what in trusted.powers(env).items()
    ]


def _extra_env(env: dict[str, Any], path: str | Path) -> tuple[dict[str, str], list[str]]:
    """The variables beside NCCL_* (checked by workbench.core.envvars), and warnings about them."""
    out: dict[str, str] = {}
    notes: list[str] = []
    for name, value in env.items():
        if not envvars.is_variable_name(name):
            problem = "not an environment variable name (letters, digits and _)"
            raise ConfigError(path, f"env.{name}", problem)
        if name.startswith("NCCL_"):
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            problem = f"{value!r} is not allowed: text (quote it in YAML)"
            raise ConfigError(path, f"env.{name}", problem)
        out[name] = str(value).strip()
        try:
            notes += [f"env.{n}" for n in envvars.check_variable(name, out[name])]
        except envvars.EnvVarError as exc:
            problem = f"{exc.value!r} is not allowed: {exc.allowed}"
            raise ConfigError(path, f"env.{name}", problem) from None
    return out, notes


_LAUNCH_ADDED = ("srun", "sbatch")
"""launch entries newer than the section: a file saved before them lacks them, and loads."""


def _check_copy(
    path: str | Path,
    section: str,
    found: Any,
    expected: dict[str, Any],
    source: str,
    optional: tuple[str, ...] = (),
    older: Mapping[str, list[Any]] | None = None,
) -> None:
    """A section written from the knobs must still agree with them (absent: rebuilt on save;
    an ``optional`` entry may be absent too; an ``older`` entry is how an older schema wrote
    it, accepted as well)."""
    if found is None:
        return
    if not isinstance(found, Mapping):
        raise ConfigError(path, section, f"expected a mapping, got {type(found).__name__}")
    check_keys(path, section, found, expected)
    for key, want in expected.items():
        if key in optional and key not in found:
            continue
        got = found.get(key)
        if older and got in older.get(key, []):
            continue
        if key not in found or got != want or type(got) is not type(want):
            what = "missing" if key not in found else f"{got!r} disagrees with the knobs"
            origin = f"this section is written from {source.format(key=key)}"
            advice = "change the knob, not its copy (or delete the section: saving rebuilds it)"
            problem = f"{what}: {origin}, which gives {want!r}; {advice}"
            raise ConfigError(path, f"{section}.{key}", problem)


# --------------------------------------------------------------------------- the text


def _loader_section(cfg: TunedConfig) -> dict[str, Any]:
    section = cfg.dataloader_kwargs("cuda")  # as tuned: pin_memory is dropped only where no CUDA
    if cfg.collate_fn is not None:
        section["collate_fn"] = cfg.collate_fn
    return section


_HEADER = """\
workbench tuned config. In a training script:
  cfg = workbench.load_config("tuned.yaml")
  loader = cfg.dataloader(dataset); scaler = cfg.grad_scaler(); with cfg.autocast(): ...
  model = cfg.prepare_model(model)
  loss_fn = cfg.loss(); optimizer = cfg.optimizer(model.parameters())
`workbench show FILE` checks this file and prints the lines to paste.
The knobs are the source of truth: env's NCCL_* part, dataloader and launch are copies written
from them, and loading checks that they agree. Change a knob, not its copy."""
_TRAINING_LINE = "loss_fn = cfg.loss(); optimizer = cfg.optimizer(model.parameters())"
_MODEL_LINE = "  model = cfg.prepare_model(model)"
"""The header's model line, which says what ``prepare_model`` sets (``model_setup.summary``)."""
"""The header's line a Lightning workload's file replaces (``marks.LIGHTNING_LINE``)."""

_NOTES = {
    "knobs": "The tuned knobs (workbench.Knobs; wb.knob_specs() describes each). A knob left "
    "out has its default: DALI's knobs are left out at their defaults unless loader is dali.",
    "env": "Environment of the training processes: export it before launching. NCCL reads "
    "NCCL_* when a communicator is created and PyTorch reads PYTORCH_CUDA_ALLOC_CONF when it "
    "initializes CUDA, so setting them later has no effect.",
    "dataloader": "torch.utils.data.DataLoader arguments, passed by cfg.dataloader(dataset); "
    "shuffle and sampler are the script's. batch_size is per process; pin_memory needs CUDA. "
    "collate_fn, when present, is the workload's own (imported by that name), not a knob. "
    "With knobs.decode gpu, cfg.dataloader(dataset) reads the stored bytes and "
    "cfg.device_batches(loader, device) decodes and augments them on the device.",
    "launch": "torchrun lines (your script in place of train.py). One node: world_size "
    "processes. Several nodes: the same line on every node, with NNODES, MASTER_ADDR and "
    "JOB_ID set. srun: the same under SLURM, one agent per node, inside an allocation with "
    "MASTER_ADDR set. sbatch: a minimal batch script, one line per entry (write them to a "
    "file and submit it with sbatch).",
    "training": "The workload's loss and optimizer, by importable name (module:function), as "
    "the bursts trained: cfg.loss() returns the loss function, cfg.optimizer(params) builds the "
    "optimizer (with optimizer_impl applied, as the bursts applied it). Not knobs: the measured "
    "run's own code. null: it had no name another process can import (a lambda, a function "
    "defined inside another or in __main__, a callable object); pass your own. "
    "workbench.engine.workloads.base's default_loss (cross-entropy) and default_optimizer (SGD, "
    "lr 0.01, momentum 0.9) are workbench's defaults.",
    "comm": "A comm sweep's suggestions with the numbers measured (not knobs: set nccl or "
    "bucket_cap_mb yourself if they fit): the fastest value per message-size range, and the "
    "bucket size just past the knee of the busbw curve. On gloo NCCL variables had no effect.",
    "suggestions": "NCCL variables NCCL documents for debugging only: fine for an experiment, "
    "not kept in production, since a value forced at one scale can slow or hang a job at "
    "another. Not in env and not applied: cfg.apply(nccl_suggestions=True) or the launch lines' "
    "nccl_suggestions=True use them. Each with its source (a knob of the tuned bursts, or a "
    "comm sweep's winner at the DDP bucket's size) and what was measured, at which scale.",
    "provenance": "Where these knobs came from. Loading warns when this machine differs (GPU "
    "model, torch major version): the numbers are then a starting point, not a promise.",
}


_NOT_MEASURED = (
    "No burst measured these knobs: they were saved as they are. device and versions are "
    "those of the machine they were saved on; measured is empty."
)


def config_text(cfg: TunedConfig) -> str:
    """The file's text: a pure function of the config (same config, same bytes). A tune that
    could not tell its pick from the start says so in the first lines (``marks``); a Lightning
    workload's file shows the Trainer line in place of the loss and optimizer it did not use."""
    header = _HEADER.replace(_MODEL_LINE, model_setup.summary(cfg.knobs))
    if cfg.provenance.get("trainer") == "lightning":
        header = header.replace(_TRAINING_LINE, marks.LIGHTNING_LINE)
    return render(marks.uncertain_header(cfg.provenance) + header, _sections(cfg))


def _sections(cfg: TunedConfig) -> list[Section]:
    docs = {s.name: s.doc for s in knob_specs()}
    return [
        Section("schema_version", SCHEMA_VERSION),
        Section("knobs", _knob_values(cfg.knobs), _NOTES["knobs"], _knob_docs(cfg.knobs, docs)),
        Section("env", cfg.env(), _NOTES["env"], _env_comments(cfg)),
        Section("dataloader", _loader_section(cfg), _NOTES["dataloader"]),
        Section("launch", cfg.launch_lines(), _NOTES["launch"]),
        *([Section("training", dict(cfg.training), _NOTES["training"])] if cfg.training else []),
        Section("provenance", dict(cfg.provenance), _provenance_note(cfg.provenance)),
        *([Section("comm", dict(cfg.comm), _NOTES["comm"])] if cfg.comm else []),
        *([_suggestions_section(cfg)] if cfg.nccl_suggestions else []),
    ]


def _suggestions_section(cfg: TunedConfig) -> Section:
    entries = {name: dict(entry) for name, entry in cfg.nccl_suggestions.items()}
    note = f"{_NOTES['suggestions']}\nSource: {nccl.DEBUG_SOURCE}."
    return Section("suggestions", {"nccl": entries}, note)


def _env_comments(cfg: TunedConfig) -> dict[str, str]:
    """A comment above a variable: what an NCCL one changes, and what one can do beyond
    tuning (load code, touch a file), so the file itself says it is trusted input."""
    notes = dict(nccl.flags(cfg.knobs.nccl))
    for name, what in trusted.powers(cfg.env()).items():
        notes[name] = "; ".join(filter(None, (notes.get(name), f"trusted input: {what}")))
    return notes


def _knob_values(knobs: Knobs) -> dict[str, Any]:
    """Every knob, except DALI's at their defaults when the loader is not DALI: there they
    did not act, and a CPU config that listed them read as if they had."""
    values = knobs.to_dict()
    if knobs.loader == "dali":
        return values
    defaults = Knobs().to_dict()
    return {k: v for k, v in values.items() if k not in _DALI_KNOBS or v != defaults[k]}


def _knob_docs(knobs: Knobs, docs: Mapping[str, str]) -> dict[str, str]:
    """The knobs' docs; a DALI knob set away from its default for another loader says that
    it had no effect (kept, so the knobs load back as they were given)."""
    if knobs.loader == "dali":
        return dict(docs)
    unused = f"No effect: loader is {knobs.loader}, and this knob acts only with loader=dali."
    return {k: f"{d}\n{unused}" if k in _DALI_KNOBS else d for k, d in docs.items()}


_AMBIENT = (
    "WARNING: ambient_env lists variables that were set in the environment of the process that "
    "measured these knobs, and shaped the measurement without being knobs (allocator, NCCL, "
    "thread counts, ...). env does not export them: export them in production to reproduce the "
    "measurement, or re-measure without them."
)


def _provenance_note(prov: Mapping[str, Any]) -> str:
    note = _NOTES["provenance"]
    if prov.get("source") not in ("burst", "tune"):  # a tune's: the median of its runs
        note += "\n" + _NOT_MEASURED
    if prov.get("ambient_env"):
        note += "\n" + _AMBIENT
    return note
