"""This seat's noise, known before a check grades: a difference smaller than the noise is not
a measurement of the knob.

On a shared machine (a room of learners on one host, a loaded laptop) two bursts of identical
knobs can differ by more than any knob's effect: on the project's loaded 2-core VM identical
bursts in one process read 4.1 to 50.7 samples/s, and ``precision="tf32"`` (no effect on a
CPU) then measured 1.7x the default. A check that grades such a ratio grades the neighbours.
So before grading, a check asks what this seat's noise is, from what was already measured:

- **repeats**: bursts of one configuration in the frame (a sweep's ``repeats``, its extra runs
  of the first value for drift, a lesson's repeated baseline): their spread, max - min over
  the median;
- **drift**: the sweep's own estimate of how far its reference moved (``attrs["drift"]``,
  ``workbench.analysis.drift``);
- **the seat's record**: the largest of those measured by an earlier check in this kernel
  within ``SEAT_MEMORY_S`` (a frame of single bursts inherits what the seat showed before).

When the noise is at least the effect being judged, the check says :data:`BUSY` and what to do
(:func:`busy_message`), and grades nothing. A knob that cannot act here (the burst lists it in
``no_effect``, e.g. ``tf32`` or ``cudnn_benchmark`` on a CPU) ran the same computation as its
baseline: the ratio is noise by construction, so it is never graded as a speed-up
(:func:`cannot_act`).

Why max - min and not the IQR: a room's noise comes in bursts (a neighbour's compile, a
throttled GPU), and with the two or three repeats a lesson affords, the range is the spread
there is. Within-burst step spread (``step_ms_iqr``) is not used: a burst's throughput averages
its steps, and a steady neighbour moves every step alike.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

__all__ = ["BUSY", "SEAT", "SEAT_MEMORY_S", "Noise", "SeatRecord", "busy_message", "cannot_act",
           "effect_pct", "seat_noise", "spread_pct"]  # fmt: skip

BUSY = "this machine is too busy to tell"
WHAT_TO_DO = (
    "close other work on this machine (or wait for a quieter moment), then run the measuring "
    "cell again; where the lesson sweeps, repeats=3 gives each value its own spread. Your "
    "prediction stays committed: it is judged when a measurement can tell"
)
SEAT_MEMORY_S = 600.0
"""How long a seat's measured noise stands for later checks in the same kernel."""


@dataclass(frozen=True, slots=True)
class Noise:
    """How far bursts that should agree were apart here, in percent of their median."""

    pct: float | None
    """None: nothing measured it (one burst of each configuration, no drift, no record)."""
    source: str
    """Where it was measured, in words."""

    @property
    def known(self) -> bool:
        return self.pct is not None

    def hides(self, effect: float) -> bool:
        """Whether an effect of ``effect`` percent is within this noise: nothing to grade."""
        return self.pct is not None and self.pct >= effect

    def words(self) -> str:
        if self.pct is None:
            return "this seat's noise was not measured (one burst each)"
        return f"bursts that should agree were {self.pct:.0f}% apart here ({self.source})"


def spread_pct(values: Iterable[float]) -> float | None:
    """(max - min) / median of ``values``, in percent; None for fewer than two."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if len(xs) < 2:
        return None
    middle = statistics.median(xs)
    return 100.0 * (max(xs) - min(xs)) / middle if middle > 0 else None


def effect_pct(ratio: float) -> float:
    """How far a speed ratio is from 1, in percent, either way (0.5x and 2x are both 100%)."""
    return 100.0 * (max(ratio, 1.0 / ratio) - 1.0)


class SeatRecord:
    """The largest noise measured on this seat recently (this kernel): what a check of single
    bursts knows about the seat. Thread-safe; ``clock`` swappable in tests."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._seen: list[tuple[float, Noise]] = []
        self._lock = threading.Lock()

    def note(self, noise: Noise) -> None:
        if noise.pct is not None:
            with self._lock:
                self._seen.append((self._clock(), noise))

    def recent(self) -> Noise:
        now = self._clock()
        with self._lock:
            self._seen = [(at, n) for at, n in self._seen if now - at <= SEAT_MEMORY_S]
            if not self._seen:
                return Noise(None, "")
            _, worst = max(self._seen, key=lambda seen: seen[1].pct or 0.0)
        return Noise(worst.pct, f"measured earlier on this seat: {worst.source}")

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


SEAT = SeatRecord()
"""This kernel's record of its seat's noise."""


def seat_noise(frame: pd.DataFrame, knob: str, metric: str = "samples_per_s") -> Noise:
    """The noise a check of ``frame`` (a sweep's, or a lesson's bursts as one) must allow for:
    the largest of its repeats' spread, its drift and the seat's recent record. What the
    frame itself measured is recorded for later checks (:data:`SEAT`)."""
    found = [_repeats(frame, knob, metric), _drift(frame)]
    for noise in found:
        SEAT.note(noise)
    found.append(SEAT.recent())
    known = [n for n in found if n.pct is not None]
    return max(known, key=lambda n: n.pct or 0.0) if known else Noise(None, "")


def _repeats(frame: pd.DataFrame, knob: str, metric: str) -> Noise:
    if knob not in frame.columns or metric not in frame.columns or frame.empty:
        return Noise(None, "")
    ok = frame[(frame["status"] == "ok") & frame[metric].notna()]
    worst: tuple[float, Any, int] | None = None
    for value, group in ok.groupby(ok[knob].map(str), sort=False):
        spread = spread_pct(group[metric])
        if spread is not None and (worst is None or spread > worst[0]):
            worst = (spread, value, len(group))
    if worst is None:
        return Noise(None, "")
    spread, value, n = worst
    return Noise(spread, f"{n} bursts of {knob}={value}")


def _drift(frame: pd.DataFrame) -> Noise:
    drift = frame.attrs.get("drift") or {}
    pct = drift.get("drift_pct")
    if pct is None or not math.isfinite(float(pct)):
        return Noise(None, "")
    return Noise(float(pct), "the sweep's reference runs drifted")


def busy_message(noise: Noise, effect: float, said: str) -> str:
    """The verdict's sentence when the noise hides the effect: what was measured, the noise,
    and what to do."""
    return (f"{BUSY}: {said}, an effect of {effect:.0f}%, but {noise.words()}: the difference "
            f"is within the noise. {WHAT_TO_DO}")  # fmt: skip


def cannot_act(frame: pd.DataFrame, knob: str, value: Any) -> str | None:
    """Why ``knob=value`` could not act here, when every successful burst of it lists the knob
    in ``no_effect`` (the reason the first one gives); None when it acted."""
    if "no_effect" not in frame.columns or knob not in frame.columns:
        return None
    rows = frame[(frame["status"] == "ok") & frame[knob].map(lambda v: _same(v, value))]
    reasons = [_reason(r, knob) for r in rows["no_effect"]]
    if not reasons or any(r is None for r in reasons):
        return None
    return reasons[0]


def _same(a: Any, b: Any) -> bool:
    a = a.item() if hasattr(a, "item") else a
    return bool(a == b) or str(a).strip().lower() == str(b).strip().lower()


def _reason(no_effect: Any, knob: str) -> str | None:
    if isinstance(no_effect, dict):
        why = no_effect.get(knob)
        return None if why is None else str(why)
    return None
