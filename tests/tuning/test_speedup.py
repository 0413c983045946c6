"""The speed-up's interval with the drift in it, and when the runs cannot tell it."""

import math

import pytest

from workbench import Knobs
from workbench.core.results import BurstResult
from workbench.tuning import noise
from workbench.tuning.speedup import (
    WIDE_FACTOR,
    doubt,
    drift_widening,
    positions,
    speedup_interval,
)


def _burst(workers: int, sps: float | None, status: str = "ok") -> BurstResult:
    return BurstResult(status=status, knobs=Knobs(num_workers=workers), samples_per_s=sps)


def test_positions_are_the_places_of_the_finished_runs_among_the_bursts():
    start, pick, failed = _burst(0, 100.0), _burst(1, 150.0), _burst(1, None, "oom")
    again = _burst(0, 101.0)
    bursts = [start, pick, failed, again]
    assert positions(bursts, [start, again]) == [0, 3]
    assert positions(bursts, [pick, failed]) == [1]  # a failed run is no reading
    # by identity: an equal reading elsewhere is not this run
    assert positions([_burst(0, 100.0), start], [start]) == [1]


def test_the_widening_is_the_trend_over_the_bursts_between_the_two():
    # 2% a burst; the best ran at 8 and 10 (mean 9), the start at 0 and 9 (mean 4.5)
    assert drift_widening(2.0, [8, 10], [0, 9]) == pytest.approx(math.log(1.02) * 4.5)
    assert drift_widening(-2.0, [8, 10], [0, 9]) == pytest.approx(-math.log(0.98) * 4.5)
    assert drift_widening(5.0, [1, 3], [0, 4]) == 0.0  # interleaved: same mean place
    assert drift_widening(None, [8, 10], [0, 9]) is None  # no trend: the start ran once
    assert drift_widening(2.0, [], [0, 9]) is None


def test_the_interval_is_the_noise_s_widened_by_the_drift_on_both_sides():
    base = noise.ratio_interval(1.5, 2, 2, 0.05, 3)
    assert speedup_interval(1.5, [5, 6], [0, 7], 0.05, 3, None) == base
    low, high = speedup_interval(1.5, [5, 6], [0, 7], 0.05, 3, -3.0)
    widen = -math.log(0.97) * 2.0
    assert low == pytest.approx(base[0] * math.exp(-widen))
    assert high == pytest.approx(base[1] * math.exp(widen))
    assert speedup_interval(1.5, [5, 6], [0, 7], None, 0, -3.0) == (None, None)


@pytest.mark.parametrize(
    ("low", "high", "drift_exceeds", "words"),
    [
        (None, None, None, "too few for an interval"),
        (0.02, 80.67, False, "cannot separate the best from the start"),
        (0.9, 1.1, None, "cannot separate the best from the start"),
        (1.2, 2.5, False, "the best is faster, but the runs cannot tell by how much"),
        (0.3, 0.8, False, "the best is slower, but the runs cannot tell by how much"),
        (1.2, 1.4, True, "cannot tell the speed-up from drift"),
    ],
)
def test_the_runs_cannot_tell_for_each_reason_in_words(low, high, drift_exceeds, words):
    text = doubt(low, high, drift_exceeds)
    assert words in text
    assert not any(f"{v:.2f}" in text for v in (low, high) if v is not None)  # no figures


def test_an_interval_clear_of_1_and_within_the_factor_says_something():
    assert doubt(1.2, 1.2 * WIDE_FACTOR, False) == ""
    assert doubt(1.2, 1.2 * WIDE_FACTOR * 1.01, False) != ""
    assert doubt(1.2, 1.4, None) == ""  # drift unknown: the interval is judged alone
