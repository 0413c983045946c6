"""NCCL variables a saved config suggests but never applies on its own: the debug-only ones.

NCCL's guide lists some variables under "Debugging" (``workbench.core.nccl.DEBUG_ONLY``, with
its source): fine for an experiment, not for production, because a value forced at one scale
(an algorithm that won on 8 GPUs) can slow or hang a job at another. So a config keeps them
under ``suggestions.nccl``, each with its value, where it came from (``source``) and what was
measured, at which scale (``measured``: world size, nodes, and the burst's or the comm
benchmark's figures). ``cfg.apply(nccl_suggestions=True)`` and the launch lines'
``nccl_suggestions=True`` use them; by default nothing does.

Two sources: a knob ``nccl={...}`` the tuned bursts ran with (it acted there: a burst is an
experiment), moved here when the config is built; and a comm sweep over a debug-only variable,
whose winner at the DDP bucket's size is suggested with that range's busbw.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench.config.yaml_text import ConfigError
from workbench.core import nccl
from workbench.core.knobs import Knobs

__all__ = ["FROM_COMM", "FROM_KNOB", "check_suggestions", "describe_suggestions", "from_comm",
           "from_knob"]  # fmt: skip

FROM_KNOB = "knobs.nccl: set in the tuned bursts"
FROM_COMM = "comm sweep: the winner at the DDP bucket's size"
_KEYS = ("value", "source", "measured")
_MIB = 2**20


def from_knob(value: str, knobs: Knobs, provenance: Mapping[str, Any]) -> dict[str, Any]:
    """A suggestion for a debug-only knob: its value and the run that measured it."""
    measured = provenance.get("measured") or {}
    device = provenance.get("device") or {}
    return {
        "value": value,
        "source": FROM_KNOB,
        "measured": {
            "world_size": knobs.world_size,
            "nodes": knobs.nodes,
            "device": device.get("name") or device.get("type"),
            "samples_per_s": measured.get("samples_per_s"),
            "step_ms_p50": measured.get("step_ms_p50"),
            "date": provenance.get("date"),
        },
    }


def from_comm(comm: Mapping[str, Any], bucket_cap_mb: float) -> dict[str, dict[str, Any]]:
    """The comm sweep's winner for its variable, when NCCL documents that one for debugging
    only and the sweep ran on NCCL (on gloo the values did nothing): the size range holding the
    measured size nearest DDP's bucket (``bucket_cap_mb``), since DDP all-reduces bucket-sized
    messages. Empty otherwise."""
    variable, winners = comm.get("variable"), comm.get("winners") or []
    if not nccl.is_debug_only(str(variable)) or comm.get("backend") != "nccl" or not winners:
        return {}
    bucket = bucket_cap_mb * _MIB
    sizes = [(abs(size - bucket), size, r) for r in winners for size in r["sizes_bytes"]]
    _, at, best = min(sizes, key=lambda item: item[0])
    measured = {key: comm.get(key) for key in ("world_size", "nodes", "backend", "device",
                                              "measured_at", "values")}  # fmt: skip
    measured.update(at_bytes=at, sizes_bytes=list(best["sizes_bytes"]),
                    busbw_gbps=list(best["busbw_gbps"]), margin_pct=best["margin_pct"])  # fmt: skip
    return {str(variable): {"value": best["value"], "source": FROM_COMM, "measured": measured}}


def check_suggestions(section: Any, path: str | Path | None) -> dict[str, dict[str, Any]]:
    """The ``suggestions`` section's NCCL entries, or ConfigError naming the key that is wrong."""
    if not isinstance(section, Mapping):
        raise ConfigError(path, "suggestions", f"expected a mapping, got {type(section).__name__}")
    unknown = [k for k in section if k != "nccl"]
    if unknown:
        raise ConfigError(path, f"suggestions.{unknown[0]}", "unknown key; known: nccl")
    entries = section.get("nccl") or {}
    if not isinstance(entries, Mapping):
        raise ConfigError(path, "suggestions.nccl", "expected a mapping of NCCL variables")
    return {str(name): _entry(name, entry, path) for name, entry in entries.items()}


def _entry(name: Any, entry: Any, path: str | Path | None) -> dict[str, Any]:
    key = f"suggestions.nccl.{name}"
    if not isinstance(name, str) or not name.startswith("NCCL_"):
        raise ConfigError(path, key, "not an NCCL variable (NCCL_...)")
    if not isinstance(entry, Mapping) or "value" not in entry or set(entry) - set(_KEYS):
        raise ConfigError(path, key, f"expected a mapping with value (and {', '.join(_KEYS[1:])})")
    value = str(entry["value"]).strip()
    try:
        nccl.check_variable(name, value)
    except nccl.NcclError as exc:
        problem = f"{exc.value!r} is not allowed: {exc.allowed}"
        raise ConfigError(path, f"{key}.value", problem) from None
    measured = entry.get("measured")
    if measured is not None and not isinstance(measured, Mapping):
        raise ConfigError(path, f"{key}.measured", "expected a mapping of measured figures")
    return {"value": value, "source": entry.get("source"), "measured": dict(measured or {})}


def describe_suggestions(suggestions: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The lines ``workbench show`` prints: each variable, where it came from, its figures."""
    if not suggestions:
        return []
    lines = [
        "# NCCL suggestions, not applied: NCCL documents these for debugging only, and a value "
        "forced at one scale can slow or hang a job at another",
        f"# (source: {nccl.DEBUG_SOURCE})",
        "# to use them: cfg.apply(nccl_suggestions=True), cfg.launch_lines(script, "
        "nccl_suggestions=True), workbench show FILE --nccl-suggestions",
    ]
    for name, entry in suggestions.items():
        lines.append(f"#   {name}={entry['value']}  ({entry.get('source')})")
        lines.append(f"#     measured: {_figures(entry.get('measured') or {})}")
    return lines


def _figures(measured: Mapping[str, Any]) -> str:
    shown = []
    for key, value in measured.items():
        if value is None:
            continue
        if isinstance(value, list):
            value = ", ".join(_number(v) for v in value)
        shown.append(f"{key} {_number(value)}")
    return "; ".join(shown) or "no figures saved"


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
