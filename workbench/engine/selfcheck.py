"""Cheap plausibility checks that run in every burst, on a CPU and on a GPU.

A wrong number is worse than no number: users save tuned configs and ship them. Each check
here compares two things the burst measured independently, or a figure with the range it must
lie in, and each failure becomes one sentence in ``BurstResult.suspect``, which the summary, the
CLI and the panel show. They cost microseconds and run after the window, never inside it.

- The per-step times add up to the window. On a GPU the steps come from CUDA events on the
  device's timeline and the window from the host clock after a synchronize: two clocks, so a
  mismatch means the events were recorded on another device or stream, or the window did not
  wait for the device.
- ``0 < mfu_pct <= 100``: above 100 the FLOP count or the peak is wrong.
- The numeric mode (TF32 through both of torch's APIs, cudnn.benchmark) reads the same after the
  burst as before it: a burst must not change the user's numerics.
- On CUDA the burst ran on the device its result names.
- NVML's figures lie in their ranges.
- torch.compile did not compile inside the measured window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workbench.core.results import BurstResult, spread

WINDOW_TOLERANCE = 0.10
"""Steps may miss the window by this share of it, plus two median steps: the window also
holds the closing synchronize, and a DDP rank's window waits for the slowest rank's last step."""


def burst_problems(
    result: BurstResult,
    step_ms: Sequence[float],
    flags_before: Mapping[str, Any],
    flags_after: Mapping[str, Any],
    ran_on: str | None,
    telemetry: Sequence[str] = (),
) -> list[str]:
    """Every failed check of one burst, as sentences (empty when all passed). ``telemetry``:
    NVML's figures out of range (``telemetry.telemetry_problems``, which knows the board's
    power limit)."""
    found = [
        _steps_fill_window(step_ms, result.measured_s) if result.steps else None,
        _mfu_in_range(result.mfu_pct),
        _flags_restored(flags_before, flags_after),
        _ran_where_named(result.device, ran_on),
        _compiled_outside_window(result.compile_window_graphs),
    ]
    return [p for p in found if p] + list(telemetry)


def _steps_fill_window(step_ms: Sequence[float], measured_s: float | None) -> str | None:
    if any(ms <= 0 for ms in step_ms):
        return f"{sum(ms <= 0 for ms in step_ms)} step time(s) are zero or negative: a broken clock"
    if not step_ms or not measured_s:
        return None
    total_ms, window_ms = sum(step_ms), measured_s * 1e3
    slack_ms = WINDOW_TOLERANCE * window_ms + 2 * (spread(step_ms).p50 or 0.0)
    if abs(total_ms - window_ms) <= slack_ms:
        return None
    return (
        f"the step times add up to {total_ms:,.1f} ms but the window took {window_ms:,.1f} ms: "
        "the per-step clock and the window's clock disagree"
    )


def _mfu_in_range(mfu_pct: float | None) -> str | None:
    if mfu_pct is None or 0 < mfu_pct <= 100:
        return None
    return f"MFU {mfu_pct:.1f}% is outside (0, 100]: the FLOP count or the device's peak is wrong"


def _flags_restored(before: Mapping[str, Any], after: Mapping[str, Any]) -> str | None:
    changed = [
        f"{k} {before.get(k)!r} -> {after.get(k)!r}"
        for k in before
        if before.get(k) != after.get(k)
    ]
    if not changed:
        return None
    return "the numeric mode was not restored after the burst: " + "; ".join(changed)


def _ran_where_named(device: str, ran_on: str | None) -> str | None:
    if ran_on is None or ran_on == device:
        return None
    return f"the result names {device} but the model ran on {ran_on}"


def _compiled_outside_window(window_graphs: int | None) -> str | None:
    if not window_graphs:
        return None
    return (
        f"torch.compile compiled {window_graphs} graph(s) inside the measured window: "
        "compile time was counted as training time"
    )
