"""What a saved config says first when its knobs are less than a tune's clear answer.

A tune on a busy machine can pick a config whose one good reading was luck: its runs cannot
separate it from the start (``speedup_uncertain``). Such a config is still saved (the bursts
were real, and the pick may well be right), but its first lines say that the tune could not
tell, and how to re-measure, so that a reader of the file, not only of the tune's summary,
sees it. It never replaces a config an earlier tune could tell, unless asked (``force``).

Light imports only (``load_config`` stays torch-free).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench.config.yaml_text import ConfigError

LIGHTNING_LINE = (
    "trainer = lightning.Trainer(**cfg.lightning_trainer_kwargs())  # the module's own "
    "training_step and configure_optimizers trained"
)
"""The header's training line for a Lightning workload: no loss or optimizer of the file's."""


class OverwriteRefused(ConfigError):
    """An uncertain tune's config would replace one an earlier tune could tell."""


def is_uncertain(prov: Mapping[str, Any]) -> bool:
    """Whether the tune that saved this provenance could not tell its pick from its start."""
    return (prov.get("tune") or {}).get("speedup_uncertain") is True


def is_certain(prov: Mapping[str, Any]) -> bool:
    """Whether a tune saved it and could tell its speed-up (not a burst's, not a guess)."""
    told = (prov.get("tune") or {}).get("speedup_uncertain") is False
    return prov.get("source") == "tune" and told


def remeasure(prov: Mapping[str, Any], out: str = "FILE.yaml") -> str:
    """How to re-measure: the tune again with twice its bursts, on a quieter machine."""
    tune = prov.get("tune") or {}
    budget = max(16, 2 * int(tune.get("bursts") or 8))
    workload = prov.get("workload") if prov.get("workload_importable") is not False else None
    named = f"--workload {workload} " if workload else "--workload module:function "
    return (f"Re-measure before relying on them: on a quieter machine, run the tune again with "
            f"more bursts and longer windows (workbench tune {named}--budget {budget} "
            f"--seconds 6 --out {out}, or wb.tune(..., budget={budget}, seconds=6)).")  # fmt: skip


def uncertain_header(prov: Mapping[str, Any]) -> str:
    """The file's first paragraph when the tune could not tell; empty otherwise."""
    if not is_uncertain(prov):
        return ""
    tune = prov.get("tune") or {}
    noise = tune.get("noise_pct")
    noisy = f"noise {noise:.1f}% per burst, " if isinstance(noise, (int, float)) else ""
    return (
        f"UNCERTAIN: the tune that chose these knobs could not tell them from its start "
        f"({noisy}{tune.get('runs')} runs of these knobs, {tune.get('start_runs')} of the "
        f"start): they may be no faster than what you run today.\n{remeasure(prov)}\n\n"
    )


def uncertain_lines(prov: Mapping[str, Any]) -> list[str]:
    """``workbench show``'s lines for a config marked uncertain (empty otherwise)."""
    if not is_uncertain(prov):
        return []
    return ["# UNCERTAIN: the tune that chose these knobs could not tell them from its start",
            f"# {remeasure(prov)}"]  # fmt: skip


def refuse_uncertain_over_certain(
    new: Mapping[str, Any], target: Path, earlier: Mapping[str, Any] | None
) -> None:
    """ConfigError when an uncertain tune's config would replace one an earlier tune could
    tell; the message says how to keep both or overwrite on purpose."""
    if earlier is None or not is_uncertain(new) or not is_certain(earlier):
        return
    speedup = (earlier.get("tune") or {}).get("speedup")
    was = f" ({speedup:.2f}x its start)" if isinstance(speedup, (int, float)) else ""
    raise OverwriteRefused(
        target, None,
        f"holds the config of an earlier tune that could tell its speed-up{was}, and this "
        "tune could not: not overwritten. Save this one elsewhere, or replace it on purpose "
        "(save_config(..., force=True); workbench tune --force)",
    )  # fmt: skip


__all__ = [
    "LIGHTNING_LINE",
    "OverwriteRefused",
    "is_certain",
    "is_uncertain",
    "refuse_uncertain_over_certain",
    "remeasure",
    "uncertain_header",
    "uncertain_lines",
]
