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
- The GPU did not slow down inside the window (``throttled_in_window``): no thermal or hardware
  slow-down, no fall of the SM clock past ``CLOCK_DROP_SHARE``, no power cap that set in partway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workbench.core.results import BurstResult, spread
from workbench.engine.nvml_record import SUSTAIN_SAMPLES, THROTTLE_BITS

WINDOW_TOLERANCE = 0.10
"""Steps may miss the window by this share of it, plus two median steps: the window also
holds the closing synchronize, and a DDP rank's window waits for the slowest rank's last step."""
CLOCK_DROP_SHARE = 0.10
"""A sustained SM clock that falls by more than this share inside the window makes the burst
suspect. A compute-bound step slows about in proportion to the clock, so a 10% fall costs up
to 10% of the window's throughput: twice the 5% by which the GPU check calls a row
order-dependent (benchmarks/gpu_rows.py ``ORDER_TOLERANCE``), and the size of the drift seen
between four identical bursts on the H200 (11%, issue 26). A smaller wander is left alone: at
the power limit GPU Boost moves the clock a little all the time, and a long run moves with it.
To be checked against the clocks the first kept GPU run records."""
SLOWDOWN_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown",
                    "hw_power_brake_slowdown")  # fmt: skip
"""Clock-event reasons that are a slow-down wherever they appear in the window."""
POWER_CAP = "sw_power_cap"
_BIT = {name: bit for bit, name in THROTTLE_BITS}


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
        throttled_in_window(result),
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


def throttled_in_window(result: BurstResult) -> str | None:
    """A sentence when the GPU slowed down inside the measured window, else None.

    Read from the result's NVML record (``result.nvml``, ``result.clock_drop_pct``), so a kept
    result can be checked again. Suspect when, inside the window:

    (i) a thermal reason (``sw_thermal_slowdown``, ``hw_thermal_slowdown``), ``hw_slowdown`` or
        ``hw_power_brake_slowdown`` appears in any sample. NVML documents the hardware ones as
        "reducing the core clocks by a factor of 2 or more", driven by a too high temperature,
        an external power brake or Fast Trigger protection against a too high power draw (NVML
        API Reference, nvmlClocksEventReasons); it adds that hw_slowdown "may be also reported
        during PState or clock change", so a lone hw_slowdown may be a false alarm, and a rerun
        tells;
    (ii) the sustained SM clock fell by more than ``CLOCK_DROP_SHARE`` (``clock_drop_pct``; a
        single 50 ms dip does not count, ``workbench.engine.nvml_record``), with or without a
        reason bit;
    (iii) ``sw_power_cap`` appears with such a drop, or sets in partway: absent from the
        window's first ``SUSTAIN_SAMPLES`` points and present in each of its last ones (a point
        is a reading, or past 100 readings a stretch of them).

    A power cap held over the whole window at a steady clock is *not* suspect. NVML describes
    nvmlClocksEventReasonSwPowerCap as "the clocks have been optimized to ensure not to exceed
    currently set power limits" (older releases: "SW Power Scaling algorithm is reducing the
    clocks below requested clocks"; NVML API Reference, group nvmlClocksEventReasons,
    docs.nvidia.com/deploy/nvml-api), and NVIDIA's GPU Boost raises the clocks "when sufficient
    power and thermal headroom are available" (NVIDIA developer blog, "Increase Performance with
    GPU Boost and K80 Autoboost"). A datacenter GPU under full training load thus typically
    climbs until it meets its power limit and stays there, flagged sw_power_cap: that is the board's
    steady state, which the user's production run gets too, not a slow-down inside the window.
    Only a change (a falling clock, a cap that arrives partway) means the window's start and end
    ran at different speeds.
    """
    record = result.nvml
    if not record:
        return None
    window = record.get("window") or {}
    first = _first_seen(window.get("throttle_mask") or [], window.get("t_s") or [])
    causes = [name for name in SLOWDOWN_REASONS if name in first]
    dropped = result.clock_drop_pct is not None and result.clock_drop_pct > CLOCK_DROP_SHARE * 100
    if POWER_CAP in first and (dropped or _set_in_partway(window.get("throttle_mask") or [])):
        causes.insert(0, POWER_CAP)
    if not causes and not dropped:
        return None
    said = [f"{name} from {first[name]:.2f} s" for name in causes] or ["no clock-event reason set"]
    said += [_clock_words(record.get("clock_drop")), _temp_words(window, result.temp_c)]
    return (
        f"the GPU slowed down inside the window ({'; '.join(w for w in said if w)}): its number "
        "is lower than this config's steady state; rerun it, and compare bursts only at the "
        "same clocks"
    )


def _first_seen(masks: Sequence[int | None], times: Sequence[float]) -> dict[str, float]:
    """Each reason set in the window, with the ``t_s`` of the first point that has it."""
    first: dict[str, float] = {}
    for mask, t in zip(masks, times, strict=False):
        if mask is None:
            continue
        for bit, name in THROTTLE_BITS:
            if mask & bit and name not in first:
                first[name] = t
    return first


def _set_in_partway(masks: Sequence[int | None]) -> bool:
    """The power cap is off in each of the window's first points and on in each of its last:
    the board reached its power limit during the window, so its start ran faster than its end.
    A cap that comes and goes from the start (power hovering at the limit) is the steady state."""
    n, bit = SUSTAIN_SAMPLES, _BIT[POWER_CAP]
    if len(masks) < 2 * n:
        return False
    head_off = all(m is not None and not m & bit for m in masks[:n])
    tail_on = all(m is not None and m & bit for m in masks[-n:])
    return head_off and tail_on


def _clock_words(drop: Mapping[str, float] | None) -> str:
    if not drop:
        return "SM clock unknown"
    return f"SM clock {drop['from_mhz']:,.0f} -> {drop['to_mhz']:,.0f} MHz, -{drop['pct']:.1f}%"


def _temp_words(window: Mapping[str, Any], temp_c: float | None) -> str | None:
    temps = [t for t in window.get("temp_c") or [] if t is not None]
    high = max(temps) if temps else temp_c
    return None if high is None else f"up to {high:.0f} C"
