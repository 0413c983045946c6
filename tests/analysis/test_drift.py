"""Drift factors from a reference's readings, and what the summary says about them."""

import math

import pytest

from workbench.analysis.drift import (
    TUNE_WORDS,
    check_every,
    drift_factors,
    estimate_drift,
    with_references,
)
from workbench.core.errors import InputError

H200 = [4306.0, 3990.0, 3819.0, 3816.0]
"""Four identical bf16 resnet50 bursts in one process on one H200 (issue 26)."""


def test_factors_are_linear_between_readings_and_flat_beyond_them():
    sps = [None, 100.0, 50.0, 50.0, 80.0, 70.0, 10.0]
    ref = [False, True, False, False, True, False, False]
    # 100 at position 1, 80 at position 4: 0.8 in three steps; flat before 1 and after 4
    assert drift_factors(sps, ref) == pytest.approx([1.0, 1.0, 0.9333, 0.8667, 0.8, 0.8, 0.8], 1e-3)


def test_failed_reference_bursts_are_no_readings():
    sps = [100.0, 90.0, None, float("nan"), 90.0]
    assert drift_factors(sps, [True, False, True, True, True]) == pytest.approx(
        [1.0, 0.975, 0.95, 0.925, 0.9]
    )


def test_a_reference_measured_once_gives_factors_of_one_and_no_sentence():
    d = estimate_drift([100.0, 120.0, 90.0], [True, False, False], ["a", "b", "c"])
    assert d.factors == (1.0, 1.0, 1.0) and d.corrected == (100.0, 120.0, 90.0)
    assert d.drift_pct is None and d.pct_per_burst is None and d.exceeds is None
    assert d.effect_pct == pytest.approx(100 * (120 / 90 - 1)) and d.sentence == ""


def test_no_drift_gives_factors_of_one_and_no_sentence():
    d = estimate_drift([100.0, 103.0, 100.0, 103.0], [True, False, True, False], [8, 16, 8, 16])
    assert d.factors == (1.0,) * 4 and d.corrected == (100.0, 103.0, 100.0, 103.0)
    assert d.drift_pct == 0.0 and d.pct_per_burst == 0.0 and d.exceeds is False
    assert d.sentence == "" and d.to_dict()["reference_runs"] == 2


def test_the_h200_bursts_read_as_11_percent_of_drift():
    d = estimate_drift(H200, [True] * 4, effect_pct=4.0)
    assert d.drift_pct == pytest.approx(100 * (1 - 3816 / 4306)) and d.exceeds
    assert d.corrected == pytest.approx((4306.0,) * 4)  # the reference corrected to its first
    assert d.pct_per_burst < -3.0
    assert d.sentence.startswith("the reference drifted 11% over the sweep (4,306 -> 3,816")
    assert "more than the 4.0% between the values: these bursts cannot rank them" in d.sentence


def test_drift_below_the_effect_says_the_figures_are_corrected():
    sps = [100.0, 150.0, 97.0]
    d = estimate_drift(sps, [True, False, True], ["a", "b", "a"])
    assert d.drift_pct == pytest.approx(3.0) and d.exceeds is False
    assert d.corrected[1] == pytest.approx(150.0 / 0.985)
    assert "less than the 52% between the values; samples_per_s_corrected" in d.sentence


def test_a_tune_speaks_of_its_start_and_its_speed_up():
    d = estimate_drift([100.0, 105.0, 104.0, 92.0], [True, False, False, True], effect_pct=5.0,
                       words=TUNE_WORDS)  # fmt: skip
    assert d.sentence.startswith("the start drifted 8.0% over the tune")
    assert "more than the 5.0% speed-up: the runs cannot tell the speed-up from drift" in d.sentence


def test_the_trend_is_a_least_squares_slope_per_burst():
    sps = [100.0 * 0.98**i for i in range(6)]
    d = estimate_drift(sps, [i % 2 == 0 for i in range(6)])
    assert d.pct_per_burst == pytest.approx(-2.0)
    assert math.isclose(d.factors[4], 0.98**4)


def test_the_reference_runs_again_every_n_bursts_and_at_the_end():
    five = with_references(list("abcde"), 5)
    assert five == [(c, False) for c in "abcde"] + [("a", True)]
    assert "".join(x for x, _ in with_references(list("abcde"), 2)) == "abcadea"
    # a repeat's own run of the first value is a reading: no extra one beside it
    assert [e for _, e in with_references(list("abab"), 1)] == [False] * 4 + [True]
    assert with_references(["a"], 3) == [("a", False)]  # ends on the reference: nothing to add
    assert with_references(list("abc"), None) == [("a", False), ("b", False), ("c", False)]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_reference_every_is_checked(bad):
    with pytest.raises(
        InputError, match=f"reference_every={bad!r} is not allowed: an integer >= 1"
    ):
        check_every(bad)
    assert check_every(None) is None and check_every(3) == 3
