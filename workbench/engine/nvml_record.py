"""The NVML record a GPU burst keeps: clocks, temperature, power and clock-event reasons at the
window's edges and inside it, small enough to store with every result.

A burst's window summary (a median clock, a max temperature, the reasons ever seen) cannot
tell a GPU that ran steadily at 1980 MHz from one that started there and sank to 1680 MHz
half-way through: both have a median near 1900. So the burst also keeps what NVML read over
the window, as columns, and the self-check (``workbench.engine.selfcheck``) reads the slow-down
from them. The record's layout (``BurstResult.nvml``):

- ``start`` / ``end``: the sample nearest each edge of the window (it may lie just outside):
  ``t_s`` (seconds from the window's start), ``sm_clock_mhz``, ``mem_clock_mhz``, ``temp_c``,
  ``power_w``, ``throttle_reasons`` (names, ``gpu_idle`` left out).
- ``window``: the samples inside the window as columns of equal length: ``t_s``,
  ``sm_clock_mhz``, ``mem_clock_mhz``, ``temp_c``, ``power_w``, ``throttle_mask`` (the raw
  clock-event bit mask, an int; nvml.h's bits, named in ``THROTTLE_BITS``). A value NVML did
  not give is None.
- ``samples``: the window's samples before thinning; ``stride``: samples per kept point. Past
  ``RECORD_POINTS`` samples (5 s at the sampler's 50 ms) the columns are thinned: each point
  stands for ``stride`` consecutive samples, with the first one's ``t_s``, the median of each
  number (a lone outlier does not survive, a level that holds does), and the OR of the masks, so
  a reason seen in any sample is never thinned away.
- ``clock_drop``: ``from_mhz``, ``to_mhz``, ``pct``: the largest fall of the sustained SM clock
  inside the window (``clock_drop``), from the full-rate samples; None with fewer than
  ``SUSTAIN_SAMPLES`` clock readings.

Why a "sustained" clock: NVML's clock is an instantaneous reading taken every 50 ms, and one
reading can land in a short dip (a P-state change, a brief power excursion the controller
answers within milliseconds) that costs the window almost nothing: 50 ms at 85% of the clock
in a 2 s window is 0.4% of its time. The SM clock is therefore smoothed by a rolling median of
``SUSTAIN_SAMPLES`` = 3 consecutive readings: one low reading is outvoted by its neighbours, a
level held for two readings in a row (about 100 ms) passes. The drop is then the largest fall
from a sustained reading to a later one (a clock that rises is not a fall).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = [
    "RECORD_POINTS",
    "SUSTAIN_SAMPLES",
    "THROTTLE_BITS",
    "clock_drop",
    "nvml_record",
    "throttle_names",
]

# Clock event ("throttle") reason bits, as nvml.h / pynvml name them
# (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*).
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
NOT_LIMITING = frozenset({"gpu_idle"})
_KNOWN_BITS = sum(bit for bit, _ in THROTTLE_BITS)

RECORD_POINTS = 100
"""At most this many points in ``window``'s columns: a result stays a few KB."""
SUSTAIN_SAMPLES = 3
"""The SM clock is smoothed by a rolling median of this many consecutive readings (see above)."""

_EDGE_FIELDS = ("sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w")
_SAMPLE_FIELDS = {"sm_clock_mhz": "sm_clock", "mem_clock_mhz": "mem_clock", "temp_c": "temp_c",
                  "power_w": "power_w"}  # fmt: skip


class Reading(Protocol):
    """One sample as the telemetry sampler takes it (``telemetry._Sample``)."""

    t: float
    sm_clock: float | None
    mem_clock: float | None
    temp_c: float | None
    power_w: float | None
    throttle: int | None


def throttle_names(masks: Sequence[float | int]) -> tuple[str, ...]:
    """The limiting reasons set in any of ``masks`` (``gpu_idle`` left out; unknown bits as
    ``unknown_0x...``), in nvml.h's order."""
    seen = 0
    for m in masks:
        seen |= int(m)
    names = [name for bit, name in THROTTLE_BITS if seen & bit and name not in NOT_LIMITING]
    unknown = seen & ~_KNOWN_BITS
    names += [f"unknown_0x{1 << b:x}" for b in range(unknown.bit_length()) if unknown >> b & 1]
    return tuple(names)


def clock_drop(clocks: Sequence[float]) -> tuple[float, float, float] | None:
    """``(from_mhz, to_mhz, pct)``: the largest fall of the sustained clock to a later sustained
    reading; ``(high, high, 0.0)`` when it never fell; None with too few readings to smooth."""
    if len(clocks) < SUSTAIN_SAMPLES:
        return None
    smooth = [
        statistics.median(clocks[i : i + SUSTAIN_SAMPLES])
        for i in range(len(clocks) - SUSTAIN_SAMPLES + 1)
    ]
    best = (smooth[0], smooth[0], 0.0)
    high = smooth[0]
    for value in smooth[1:]:
        high = max(high, value)
        if high > 0 and (high - value) / high * 100 > best[2]:
            best = (high, value, (high - value) / high * 100)
    return best


def nvml_record(
    samples: Sequence[Reading], window: tuple[float, float] | None
) -> dict[str, Any] | None:
    """The record of one burst (layout above); None where NVML gave no reading at all.

    ``window``: the measured window in the samples' clock; None (no window, a failed burst)
    means every sample.
    """
    readings = [s for s in samples if _has_nvml(s)]
    if not readings:
        return None
    start, end = window if window is not None else (readings[0].t, readings[-1].t)
    inside = [s for s in readings if start <= s.t <= end]
    clocks = [s.sm_clock for s in inside if s.sm_clock is not None]
    drop = clock_drop(clocks)
    stride = max(1, math.ceil(len(inside) / RECORD_POINTS))
    return {
        "start": _edge(_nearest(readings, start), start),
        "end": _edge(_nearest(readings, end), start),
        "window": _columns(inside, start, stride),
        "samples": len(inside),
        "stride": stride,
        "clock_drop": None
        if drop is None
        else {"from_mhz": round(drop[0], 1), "to_mhz": round(drop[1], 1), "pct": round(drop[2], 2)},
    }


def _has_nvml(s: Reading) -> bool:
    return any(getattr(s, name) is not None for name in (*_SAMPLE_FIELDS.values(), "throttle"))


def _nearest(readings: Sequence[Reading], t: float) -> Reading:
    return min(readings, key=lambda s: abs(s.t - t))


def _edge(s: Reading, t0: float) -> dict[str, Any]:
    out: dict[str, Any] = {"t_s": round(s.t - t0, 3)}
    for key in _EDGE_FIELDS:
        out[key] = _round(getattr(s, _SAMPLE_FIELDS[key]))
    out["throttle_reasons"] = list(throttle_names([s.throttle] if s.throttle is not None else []))
    return out


def _columns(inside: Sequence[Reading], t0: float, stride: int) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {"t_s": [], **{k: [] for k in _EDGE_FIELDS}, "throttle_mask": []}
    for i in range(0, len(inside), stride):
        stretch = inside[i : i + stride]
        cols["t_s"].append(round(stretch[0].t - t0, 3))
        for key in _EDGE_FIELDS:
            values = [v for s in stretch if (v := getattr(s, _SAMPLE_FIELDS[key])) is not None]
            cols[key].append(_round(statistics.median(values)) if values else None)
        masks = [s.throttle for s in stretch if s.throttle is not None]
        mask = 0
        for m in masks:
            mask |= int(m)
        cols["throttle_mask"].append(mask if masks else None)
    return cols


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 1)
