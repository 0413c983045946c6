"""The speed-up over the start as far as the runs support it: an interval with the drift in it,
and words instead of numbers when that interval says nothing.

**The interval.** ``noise.ratio_interval`` gives the 95% interval of the ratio of the best's
median to the start's from the noise of repeated runs. It assumes both were measured on the
same machine state; they were not. The start's readings across the tune (its first burst and
its re-measurements in the confirmation) give a trend ``r`` (``analysis.drift``: least squares
on log samples/s, ``drift_pct_per_burst = 100 * (exp(r) - 1)``). Under a steady trend a config
reads ``r * position`` higher (log units) for the time its bursts ran, so a ratio of two
configs' readings carries ``r * (mean position of the best's runs - mean position of the
start's runs)`` besides the knobs' effect: the drift over the bursts that separate the two.
The interval is widened by that amount on *both* sides, not shifted by it: the trend rests on
two or three readings of one config, whose own noise is in it, so its sign is no surer than
its size. Runs interleaved with the start (the confirmation's passes) sit close to it on
average and widen the interval little; a best measured only early in the search, far from
the start's re-measurements, widens it by the drift of the whole gap. The widening can be
redone from ``workbench tune --json``: the bursts in the order they ran and
``drift_pct_per_burst``. With one reading of the start there is no trend (``None``), nothing
widens, and the summary's drift line is absent.

**When the runs cannot tell.** The speed-up is *uncertain* (``speedup_uncertain``; the
summary and the panel then give words, the JSON keeps the numbers) when

- there is no interval (no config ran twice: no noise to size one with);
- the interval holds 1 (the runs cannot separate the best from the start);
- the interval is wider than ``WIDE_FACTOR`` (high over low), though clear of 1 (the words
  then say which of the two is faster, and that the runs cannot tell by how much); or
- the start drifted more over the tune than the speed-up (``Drift.exceeds``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.tuning import noise as tune_noise

if TYPE_CHECKING:
    from workbench.analysis.drift import Drift
    from workbench.tuning.search import Search

WIDE_FACTOR = 2.0
"""An interval whose high end is more than this many times its low end gives no figure to act
on: the speed-up could be 41% (``sqrt(2)``) above or below the middle of its range, more than
most single knobs are worth, and a saving quoted from it is as loose. A quiet machine stays
well inside it: 5% noise a burst with 3 and 3 runs gives a width of 1.25; 2 is reached at
about 15% a burst with 3 and 3 runs (t = 2.78 at 4 degrees of freedom), or 8% with 2 and 2
(t = 4.30): the readings of a loaded box. The "1.25x (0.02-80.67)" a loaded machine printed
from three start runs was 4,000 wide. On the simulated landscapes (the benchmarks' proving
ground, seeds 200-399, 2-30% noise a burst) at 12 bursts the median width was 1.58, and 51 of
197 tunes were wider than 2 though clear of 1: their words still say which config is faster."""


def positions(bursts: Sequence[BurstResult], runs: Sequence[BurstResult]) -> list[int]:
    """Where each finished run of ``runs`` sits among ``bursts`` (the order they ran)."""
    ok = [r for r in runs if r.ok and r.samples_per_s]
    return [i for i, b in enumerate(bursts) if any(b is r for r in ok)]


def drift_widening(
    pct_per_burst: float | None, best_at: Sequence[int], start_at: Sequence[int]
) -> float | None:
    """The drift over the bursts between the best's runs and the start's (log units): the
    trend times the distance between their mean positions (module docstring); None when the
    trend or either set of positions is unknown."""
    if pct_per_burst is None or not best_at or not start_at:
        return None
    apart = abs(statistics.fmean(best_at) - statistics.fmean(start_at))
    return abs(math.log1p(pct_per_burst / 100.0)) * apart


def speedup_interval(
    ratio: float,
    best_at: Sequence[int],
    start_at: Sequence[int],
    noise: float | None,
    df: int,
    pct_per_burst: float | None,
) -> tuple[float | None, float | None]:
    """The 95% interval of the speed-up ``ratio`` from the noise (``noise.ratio_interval``
    with the runs at ``best_at`` and ``start_at``), widened on both sides by the drift between
    them (``drift_widening``); (None, None) when the noise is unknown."""
    low, high = tune_noise.ratio_interval(ratio, len(best_at), len(start_at), noise, df)
    widen = drift_widening(pct_per_burst, best_at, start_at)
    if low is None or high is None or not widen:
        return low, high
    return low * math.exp(-widen), high * math.exp(widen)


def doubt(low: float | None, high: float | None, drift_exceeds: bool | None) -> str:
    """Why the runs cannot tell the speed-up, in words without its figures; empty when the
    interval says something (module docstring: the four reasons, in this order)."""
    if low is None or high is None:
        return "the runs cannot tell the speed-up: too few for an interval (no config ran twice)"
    if low <= 1.0 <= high:
        return "the runs cannot separate the best from the start: either may be the faster"
    if high > WIDE_FACTOR * low:
        way = "faster" if low > 1.0 else "slower"
        return (f"the best is {way}, but the runs cannot tell by how much: the range they "
                f"allow spans more than {WIDE_FACTOR:g}x")  # fmt: skip
    if drift_exceeds:
        return "the runs cannot tell the speed-up from drift: the start moved more than that"
    return ""


def judge(
    search: Search, best: Knobs, start: Knobs, ratio: float, drift: Drift
) -> tuple[float | None, float | None, str]:
    """(low, high, doubt) of the speed-up ``ratio`` of ``best`` over ``start`` in a tune:
    its interval from the tune's noise and its runs' places among the bursts, widened by the
    start's drift (``speedup_interval``), and why the runs cannot tell it (``doubt``)."""
    noise, df = search.noise()
    best_at, start_at = (positions(search.bursts, search.runs.get(k, [])) for k in (best, start))
    low, high = speedup_interval(ratio, best_at, start_at, noise, df, drift.pct_per_burst)
    return low, high, doubt(low, high, drift.exceeds)


ADVICE = "more bursts (a larger budget), a quieter machine, or longer windows (more seconds)"
"""What to do when the runs cannot tell: each narrows the interval (more runs of each, less
noise per burst, less noise per window)."""


__all__ = [
    "ADVICE",
    "WIDE_FACTOR",
    "doubt",
    "drift_widening",
    "judge",
    "positions",
    "speedup_interval",
]
