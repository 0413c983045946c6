"""Saved configs: the tuned knobs, written so a production script can load them.

This version writes a faithful, readable YAML dump of the knobs and of what the burst that
chose them measured; it loads the knobs back. (The production helpers — DataLoader kwargs,
autocast, env, torchrun line — are their own issue.) Light imports only: yaml and the knobs.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from workbench.knobs import Knobs

SCHEMA_VERSION = 1
_MEASURED = ("status", "samples_per_s", "tokens_per_s", "step_ms_p50", "step_ms_iqr",
             "data_wait_pct", "peak_mem_mib", "peak_reserved_mib", "mfu_pct", "noisy")  # fmt: skip


def save_config(knobs_or_result: Any, path: str | Path) -> Path:
    """Write ``knobs`` (a Knobs, or a BurstResult and what it measured) to ``path`` as YAML."""
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    if isinstance(knobs_or_result, Knobs):
        doc["knobs"] = knobs_or_result.to_dict()
    else:
        result = knobs_or_result.to_dict()
        doc["knobs"] = result["knobs"]
        doc["measured"] = {k: result.get(k) for k in _MEASURED}
        doc["provenance"] = {
            "workload": result.get("workload"),
            "device": result.get("device"),
            "device_name": result.get("device_name"),
            "burst_id": result.get("id"),
            "burst_at": result.get("created_at"),
            "versions": result.get("versions"),
        }
    doc["saved_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    target = Path(path).expanduser()
    plain = json.loads(json.dumps(doc, default=str))  # str subclasses (TorchVersion) -> str
    target.write_text(yaml.safe_dump(plain, sort_keys=False))
    return target


def load_knobs(path: str | Path) -> Knobs:
    """The knobs of a saved config (validated: a bad value raises KnobError)."""
    doc = yaml.safe_load(Path(path).read_text())
    if not isinstance(doc, dict) or "knobs" not in doc:
        raise ValueError(f"{path}: not a workbench config (no 'knobs' mapping)")
    return Knobs.from_dict(doc["knobs"])
