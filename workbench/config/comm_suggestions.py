"""A saved config's ``comm`` section: what a comm sweep suggested, with its measured numbers.

Written by ``workbench.analysis.comm_sweep`` (``save_config(..., comm=sweep.suggestions())``),
read back as plain data: suggestions are not knobs. A person decides whether the winner of a
size range or the bucket size past the knee fits their job, and sets the knob
(``nccl``/``bucket_cap_mb``) themselves; the numbers beside each suggestion say how much it is
worth, and where (backend, device, ranks, nodes) it was measured. Across nodes the winners
and the bucket come from the inter-node rows (the link the network variables act on); a file
saved before ``nodes`` was kept reads as one node.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench.config.yaml_text import ConfigError

__all__ = ["check_comm", "describe_comm"]

_KEYS = ("variable", "values", "backend", "device", "world_size", "nodes", "measured_at", "note",
         "winners", "bucket_cap_mb")  # fmt: skip
_RANGE_KEYS = ("from_bytes", "to_bytes", "value", "sizes_bytes", "busbw_gbps", "margin_pct")


def check_comm(section: Any, path: str | Path | None) -> dict[str, Any]:
    """The ``comm`` section as a dict, or ConfigError naming the key that is wrong."""
    if not isinstance(section, Mapping):
        raise ConfigError(path, "comm", f"expected a mapping, got {type(section).__name__}")
    unknown = [k for k in section if k not in _KEYS]
    if unknown:
        raise ConfigError(path, f"comm.{unknown[0]}", f"unknown key; known: {', '.join(_KEYS)}")
    if not isinstance(section.get("variable"), str) or not section["variable"].startswith("NCCL_"):
        raise ConfigError(path, "comm.variable", f"{section.get('variable')!r}: an NCCL variable")
    winners = section.get("winners") or []
    if not isinstance(winners, list) or not all(
        isinstance(r, Mapping) and set(r) == set(_RANGE_KEYS) for r in winners
    ):
        raise ConfigError(path, "comm.winners", f"a list of ranges with {', '.join(_RANGE_KEYS)}")
    return dict(section)


def describe_comm(comm: Mapping[str, Any]) -> list[str]:
    """The lines `workbench show` and a sweep's table print for its suggestions."""
    where = f"{comm.get('backend')}, {comm.get('world_size')} ranks, {comm.get('device')}"
    nodes = comm.get("nodes") or 1
    if nodes > 1:
        where += f", {nodes} nodes: inter-node rows"
    head = f"# comm sweep over {comm['variable']} ({where}): suggestions, not knobs"
    lines = [head]
    if comm.get("note"):
        lines.append(f"# note: {comm['note']}")
    for r in comm.get("winners") or []:
        sizes = _size(r["from_bytes"])
        if r["from_bytes"] != r["to_bytes"]:
            sizes += f" - {_size(r['to_bytes'])}"
        bw = ", ".join(f"{x:.3g}" for x in r["busbw_gbps"])
        lead = "" if r["margin_pct"] is None else f", {r['margin_pct']:+.1f}% over the next"
        lines.append(f"#   {sizes}: {comm['variable']}={r['value']} (busbw {bw} GB/s{lead})")
    b = comm.get("bucket_cap_mb")
    if b:
        clamped = " (raised to the knob's minimum)" if b.get("clamped_to_min") else ""
        lines.append(
            f"#   bucket_cap_mb={b['value']:g}: busbw {b['busbw_gbps']:.3g} GB/s at "
            f"{_size(b['at_bytes'])}, {b['share_of_peak_pct']:g}% of the peak "
            f"{b['peak_busbw_gbps']:.3g} GB/s at {_size(b['peak_at_bytes'])}{clamped}"
        )
    return lines


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"
