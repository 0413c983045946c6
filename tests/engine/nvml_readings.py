"""Recorded NVML readings for tests (tests/fixtures/nvml_h200_windows.json), as the telemetry
sampler's samples: each case is a burst's readings every 50 ms, a few before and after its
measured window."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.engine.telemetry import _Sample

FIXTURE = Path(__file__).parent.parent / "fixtures" / "nvml_h200_windows.json"
WINDOW_OFFSET_S = 0.01
"""The window opens this long before its first reading (and closes as long after its last)."""


def recorded() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


CASES = tuple(recorded()["cases"])


def readings(case: str) -> tuple[list[_Sample], tuple[float, float]]:
    """``(samples, window)`` of one recorded case, in seconds from its first reading."""
    data = recorded()
    columns, dt = data["cases"][case], data["interval_s"]
    names = ("sm_clock", "mem_clock", "temp", "power_mw", "reasons")
    rows = zip(*(columns[name] for name in names), strict=True)
    samples = [
        _Sample(
            t=i * dt,
            sm_clock=float(sm),
            mem_clock=float(mem),
            temp_c=float(temp),
            power_w=power_mw / 1000.0,
            throttle=int(mask),
        )
        for i, (sm, mem, temp, power_mw, mask) in enumerate(rows)
    ]
    first, last = data["before"], data["before"] + data["inside"] - 1
    window = (samples[first].t - WINDOW_OFFSET_S, samples[last].t + WINDOW_OFFSET_S)
    return samples, window
