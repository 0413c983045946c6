"""Drift: a reference config measured again among the bursts, and every burst corrected by it.

Why: a machine does not hold still. On one H200, four identical bf16 resnet50 bursts in one
process read 4,306 / 3,990 / 3,819 / 3,816 samples/s (11% from first to last), more than most
knob effects. Interleaving repeats spreads such drift over the values but does not measure it;
a value measured late still reads low. So sweeps, format comparisons and the tuner run one
config (the *reference*: a sweep's first value, the tune's start) again among the others, and
this module turns its readings into a factor for every burst.

Method. The bursts are taken in the order they ran (position = burst index). The reference's
readings ``r_0, r_1, ...`` at positions ``p_0 < p_1 < ...`` give the factor ``r_i / r_0`` at
each ``p_i``. Between two readings the factor is interpolated linearly in the position: the
drift is assumed steady within the gap, and the nearest readings before and after a burst are
the best evidence of the machine's state when it ran (a single nearest reading would jump
halfway through the gap). Before the first reading and after the last the factor is flat (the
nearest reading's): nothing is known there, and extrapolating a slope between two noisy
readings would invent a trend. A burst's corrected samples/s is ``samples_per_s / factor``:
what it would have read when the reference was first measured.

Assumed: the drift multiplies every config alike (clocks 5% lower slow each config 5%).
A slowdown that hits one config harder (a thermal ceiling a big batch reaches first, a loader
starved by another job while the GPU-bound values are not) breaks it.

Limits: a step change between two readings (another job starts) is spread over the gap, so
the bursts early in it are corrected too much and the late ones too little; only readings
closer together (``reference_every``) narrow that. Each reading's own noise enters the factors
around it: on a machine that does not drift, the correction adds a reading's noise to every
burst, and ``drift_pct`` then shows about that noise, not a trend. Positions count bursts,
not seconds: bursts are time-boxed alike, so one burst is about one unit of time.

The summary (``Drift``) says how far the reference moved (``drift_pct``: the spread of its
factors), its trend (``pct_per_burst``), the effect being compared (``effect_pct``: the
largest difference between the groups' corrected medians, or the speed-up a caller passes),
and whether the drift exceeds it; ``sentence`` says it in words, or nothing when the reference
held within ``QUIET_PCT`` and below the effect.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from workbench.core.errors import InputError

T = TypeVar("T")

QUIET_PCT = 1.0
"""A reference that moved less than this (in %) is not worth a sentence unless the effect is
smaller still: about the repeatability of one burst on a quiet GPU."""


@dataclass(frozen=True, slots=True)
class Wording:
    """The words of a drift sentence, so that a sweep and a tune each speak of their own."""

    subject: str = "the reference"
    over: str = "the sweep"
    effect: str = "the {pct} between the values"
    """``{pct}`` is replaced by the effect, e.g. "3.0%"."""
    cannot: str = "these bursts cannot rank them; rerun on a quiet machine"
    corrected: str = "; samples_per_s_corrected is corrected by it"
    """Said when the drift is below the effect (empty where nothing is corrected)."""


SWEEP_WORDS = Wording()
TUNE_WORDS = Wording(
    subject="the start",
    over="the tune",
    effect="the {pct} speed-up",
    cannot="the runs cannot tell the speed-up from drift; rerun on a quiet machine",
    corrected="",
)


@dataclass(frozen=True, slots=True)
class Drift:
    """The drift of one run of bursts, read from its reference's readings."""

    factors: tuple[float, ...]
    """Per burst, in the order they ran: the reference's throughput there over its first
    reading (1.0 everywhere when it was measured fewer than twice)."""
    corrected: tuple[float | None, ...]
    """Per burst: samples/s over its factor (None where the burst has no samples/s)."""
    reference_sps: tuple[float, ...]
    """The reference's readings, in the order they ran."""
    drift_pct: float | None
    """Spread of the factors, ``100 * (max - min)``; None with fewer than two readings."""
    pct_per_burst: float | None
    """Trend of the reference in % per burst (least squares on log samples/s; negative when
    it slows down); None with fewer than two readings."""
    effect_pct: float | None
    """The effect compared against the drift, in %; None when there is none to compare."""
    exceeds: bool | None
    """Whether the drift is larger than the effect; None when either is unknown."""
    sentence: str
    """The finding in words; empty when the reference held (or was measured once)."""

    def to_dict(self) -> dict[str, Any]:
        """The summary without the per-burst tuples (a frame's ``attrs["drift"]``, JSON)."""
        ref = self.reference_sps
        return {
            "drift_pct": self.drift_pct,
            "pct_per_burst": self.pct_per_burst,
            "effect_pct": self.effect_pct,
            "exceeds": self.exceeds,
            "reference_runs": len(ref),
            "reference_first": ref[0] if ref else None,
            "reference_last": ref[-1] if ref else None,
            "sentence": self.sentence,
        }


def check_every(every: Any) -> int | None:
    """``reference_every``: None (no extra reference bursts) or an integer >= 1."""
    if every is None:
        return None
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        allowed = "an integer >= 1 (bursts between re-measurements of the reference), or None"
        raise InputError.not_allowed("reference_every", every, allowed)
    return every


def with_references(plan: Sequence[T], every: int | None) -> list[tuple[T, bool]]:
    """``plan`` (the configs in the order they will run; ``plan[0]`` is the reference) with
    the reference run again after every ``every`` bursts since its last run, and once at the
    end unless the plan ends on it. Each item comes with ``True`` when it is such an extra
    run. A regular run of the reference (the first value of the next repeat) counts as a
    reading too, so repeats need fewer extras. ``every=None``: the plan as it is."""
    if every is None or not plan:
        return [(item, False) for item in plan]
    ref, out, since = plan[0], [], 0
    for item in plan:
        if item != ref and since >= every:
            out.append((ref, True))
            since = 0
        out.append((item, False))
        since = 0 if item == ref else since + 1
    if since:
        out.append((ref, True))
    return out


def drift_factors(samples_per_s: Sequence[float | None], reference: Sequence[bool]) -> list[float]:
    """The factor at every position: the reference's readings over its first, linear between
    the nearest readings before and after, flat beyond the first and last (module docstring).
    Reference bursts without samples/s (failed) are no readings."""
    if len(samples_per_s) != len(reference):
        raise ValueError(f"{len(samples_per_s)} samples/s against {len(reference)} flags")
    points = _readings(samples_per_s, reference)
    if len(points) < 2:
        return [1.0] * len(samples_per_s)
    first = points[0][1]
    return [_interpolate(points, i) / first for i in range(len(samples_per_s))]


def estimate_drift(
    samples_per_s: Sequence[float | None],
    reference: Sequence[bool],
    groups: Sequence[Hashable] | None = None,
    *,
    effect_pct: float | None = None,
    words: Wording = SWEEP_WORDS,
) -> Drift:
    """The drift of a run of bursts (in the order they ran), ``reference`` marking the bursts
    of the reference config. The effect is ``effect_pct`` when given (a tune's speed-up),
    else the largest difference between the medians of the corrected samples/s of ``groups``
    (one label per burst, e.g. the swept value), ``100 * (max / min - 1)``."""
    factors = drift_factors(samples_per_s, reference)
    corrected = tuple(None if _missing(s) else float(s) / f  # type: ignore[arg-type]
                      for s, f in zip(samples_per_s, factors, strict=True))  # fmt: skip
    points = _readings(samples_per_s, reference)
    measured = len(points) >= 2
    drift = 100.0 * (max(factors) - min(factors)) if measured else None
    if effect_pct is None and groups is not None:
        effect_pct = _group_effect(corrected, groups)
    exceeds = None if drift is None or effect_pct is None else drift > effect_pct
    d = Drift(factors=tuple(factors), corrected=corrected,
              reference_sps=tuple(s for _, s in points), drift_pct=drift,
              pct_per_burst=_trend(points) if measured else None, effect_pct=effect_pct,
              exceeds=exceeds, sentence="")  # fmt: skip
    return _with_sentence(d, words)


def _readings(
    samples_per_s: Sequence[float | None], reference: Sequence[bool]
) -> list[tuple[int, float]]:
    """(position, samples/s) of each reference burst that has samples/s."""
    pairs = enumerate(zip(samples_per_s, reference, strict=True))
    return [(i, float(s)) for i, (s, ref) in pairs if ref and s is not None and s == s and s > 0]


def _missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _interpolate(points: list[tuple[int, float]], at: int) -> float:
    """The reference's throughput at position ``at``: linear between the readings around it,
    the nearest reading beyond the ends."""
    if at <= points[0][0]:
        return points[0][1]
    for (p0, r0), (p1, r1) in itertools.pairwise(points):
        if at <= p1:
            return r0 + (r1 - r0) * (at - p0) / (p1 - p0)
    return points[-1][1]


def _trend(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log samples/s on position, as % per burst."""
    xs, ys = [p for p, _ in points], [math.log(s) for _, s in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return 100.0 * math.expm1(slope)


def _group_effect(corrected: Sequence[float | None], groups: Sequence[Hashable]) -> float | None:
    by: dict[Hashable, list[float]] = {}
    for value, group in zip(corrected, groups, strict=True):
        if value is not None and value > 0:
            by.setdefault(group, []).append(value)
    medians = [statistics.median(v) for v in by.values()]
    if len(medians) < 2:
        return None
    return 100.0 * (max(medians) / min(medians) - 1.0)


def _with_sentence(d: Drift, words: Wording) -> Drift:
    if d.drift_pct is None or (d.drift_pct < QUIET_PCT and not d.exceeds):
        return d
    ref = d.reference_sps
    moved = "drifted" if d.drift_pct >= QUIET_PCT else "held within"
    text = (f"{words.subject} {moved} {_pct(d.drift_pct)} over {words.over} "
            f"({ref[0]:,.0f} -> {ref[-1]:,.0f} samples/s in {len(ref)} runs, "
            f"{d.pct_per_burst:+.1f}% a burst)")  # fmt: skip
    if d.effect_pct is not None:
        effect = words.effect.format(pct=_pct(d.effect_pct))
        if d.exceeds:
            text += f", more than {effect}: {words.cannot}"
        else:
            text += f", less than {effect}{words.corrected}"
    return dataclasses.replace(d, sentence=text)


def _pct(value: float) -> str:
    return f"{value:.1f}%" if abs(value) < 10 else f"{value:.0f}%"


__all__ = [
    "QUIET_PCT",
    "SWEEP_WORDS",
    "TUNE_WORDS",
    "Drift",
    "Wording",
    "check_every",
    "drift_factors",
    "estimate_drift",
    "with_references",
]
