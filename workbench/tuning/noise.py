"""How far apart two configs must read before the tuner believes the difference.

One burst on a shared machine can be 2-30% off its config's typical throughput; a GPU box is
quieter than a laptop, a busy CPU noisier. So every decision of the tune that compares two
throughputs is sized by the noise *measured in this tune*, not by a constant:

- **The noise** is the pooled standard deviation of ``log(samples/s)`` over every config that
  ran more than once (each config's runs about their own mean; degrees of freedom = runs - 1
  summed). Logs make it relative (0.05 ~ 5%) and let configs of different speeds pool: on one
  machine a burst's relative noise depends on the machine more than on the knobs. Until
  something ran twice (the confirmation's first pass re-measures the start and the leader)
  ``PRIOR_NOISE`` stands in.
- **Standard error of a comparison** of a config with ``n_a`` runs and one with ``n_b``:
  ``noise * sqrt(1/n_a + 1/n_b)`` (in log units).
- **Clearly slower** (a climb counts a step as a fall): below the best by more than
  ``Z_STEP`` standard errors. **Close** (both go to the confirmation): within ``Z_CLOSE``
  standard errors. **Confirmed** (a contender needs no more runs): ``runs_needed`` runs, the
  count at which the standard error of a comparison of two such configs falls to
  ``RESOLUTION`` (5%, the difference worth a user's attention), clamped to 2..``MAX_RUNS``.
- **The speed-up's interval**: the ratio of medians times ``exp(+-t * se)``, with Student's t
  at 95% for the pooled degrees of freedom. It assumes the noise is about the same for the
  two configs; with runs too few or too noisy the interval holds 1 and the summary says that
  the runs cannot separate them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

PRIOR_NOISE = 0.05
"""Stand-in relative noise until some config has run twice (a typical shared CPU box)."""
Z_STEP = 1.5
"""A climb's step is a fall when it reads this many standard errors below the best. At 1.0
one equal step in six reads as a fall (and ends a climb short of a plateau); at 1.5 one in
fourteen. On 400 held-out simulated landscapes at 12 bursts (batch patience 2): 89.5% within
5% of the true best at 1.0, 90.2% at 1.5, 90.0% at 2.0 (benchmarks/tuner_landscapes.py
--first-seed 200)."""
Z_CLOSE = 2.0
"""Configs within this many standard errors of the leader are confirmed by re-measuring."""
RESOLUTION = 0.05
"""The relative difference confirmation should resolve: 5%, what a user would act on."""
MAX_RUNS = 4
"""At most this many runs per contender: past it, noise that high is reported, not beaten."""

_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
        10: 2.23, 12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04}  # fmt: skip


def pooled_noise(groups: Iterable[Sequence[float]]) -> tuple[float | None, int]:
    """(pooled SD of log throughput, degrees of freedom) over groups of runs of one config.

    Groups with fewer than two positive values add nothing; (None, 0) when none has two.
    """
    squares, df = 0.0, 0
    for values in groups:
        logs = [math.log(v) for v in values if v and v > 0]
        if len(logs) < 2:
            continue
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
    return (math.sqrt(squares / df), df) if df else (None, 0)


def std_error(noise: float, n_a: int, n_b: int) -> float:
    """Standard error (log units) of the difference between two configs' typical readings."""
    return noise * math.sqrt(1 / max(1, n_a) + 1 / max(1, n_b))


def clearly_slower(sps: float, n: int, best_sps: float, best_n: int, noise: float) -> bool:
    """``sps`` (n runs) reads more than ``Z_STEP`` standard errors below ``best_sps``."""
    return math.log(best_sps / sps) > Z_STEP * std_error(noise, n, best_n)


def clearly_faster(sps: float, n: int, ref_sps: float, ref_n: int, noise: float) -> bool:
    """``sps`` (n runs) reads more than ``Z_STEP`` standard errors above ``ref_sps``."""
    return math.log(sps / ref_sps) > Z_STEP * std_error(noise, n, ref_n)


def close(sps: float, n: int, top_sps: float, top_n: int, noise: float) -> bool:
    """``sps`` is within ``Z_CLOSE`` standard errors of the leader: it may truly be the best."""
    return math.log(top_sps / sps) <= Z_CLOSE * std_error(noise, n, top_n)


def runs_needed(noise: float) -> int:
    """Runs per contender for a comparison of two contenders to resolve ``RESOLUTION``:
    se = noise * sqrt(2 / n) <= RESOLUTION, so n = 2 (noise / RESOLUTION)^2, in 2..MAX_RUNS
    (two at least: one run has no spread to show)."""
    return max(2, min(MAX_RUNS, math.ceil(2 * (noise / RESOLUTION) ** 2)))


def t95(df: int) -> float:
    """Student's t, two-sided 95%, for ``df`` degrees of freedom (the next smaller tabled df:
    conservative); 1.96 past the table."""
    if df < 1:
        return math.inf
    if df > 30:
        return 1.96
    return _T95[max(d for d in _T95 if d <= df)]


def ratio_interval(
    ratio: float, n_a: int, n_b: int, noise: float | None, df: int
) -> tuple[float | None, float | None]:
    """95% interval of a ratio of two configs' typical throughputs (None, None when the
    noise is unknown: nothing ran twice)."""
    if noise is None or df < 1:
        return None, None
    half = t95(df) * std_error(noise, n_a, n_b)
    return ratio * math.exp(-half), ratio * math.exp(half)


__all__ = [
    "PRIOR_NOISE",
    "clearly_faster",
    "clearly_slower",
    "close",
    "pooled_noise",
    "ratio_interval",
    "runs_needed",
    "std_error",
    "t95",
]
