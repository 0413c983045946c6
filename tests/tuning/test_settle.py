"""A tune whose confirmed runs cannot tell its pick from the start spends the budget left on
more interleaved passes (``tuner.settle``), on replayed bursts (recorded readings, no timing)."""

import pytest

from workbench import Knobs
from workbench.core.results import BurstResult
from workbench.tuning.tuner import SETTLE_RUNS, tune_on

BUSY = {0: [100.0, 45.0, 160.0, 70.0, 130.0, 52.0, 110.0, 90.0],
        1: [328.0, 120.0, 95.0, 210.0, 140.0, 260.0, 80.0, 170.0]}  # fmt: skip
"""The busy-machine tune of issue 42, replayed: the pick's first burst read 3.28x the start's,
and each run lands anywhere in about 0.5-2x (the tune measured ~50% noise per burst)."""

WOBBLY = {0: [100.0, 106.0, 95.0, 100.0, 102.0, 98.0, 100.0, 100.0],
          1: [150.0, 100.0, 225.0, 150.0, 152.0, 148.0, 150.0, 150.0]}  # fmt: skip
"""A pick truly 1.5x the start whose second and third runs were disturbed: more runs tell."""


class Replay:
    """Bursts replaying recorded samples/s per ``num_workers``, in the order each ran."""

    def __init__(self, readings: dict[int, list[float]]):
        self.readings, self.calls = readings, []

    def __call__(self, knobs: Knobs) -> BurstResult:
        seq = self.readings[knobs.num_workers]
        out = seq[self.calls.count(knobs) % len(seq)]
        self.calls.append(knobs)
        return BurstResult(workload="tiny", device="cpu", knobs=knobs, samples_per_s=out,
                           peak_mem_mib=100.0, data_wait_pct=5.0)  # fmt: skip


def _tune(readings, budget):
    run = Replay(readings)
    return tune_on(run, {"num_workers": [0, 1]}, budget=budget), [k.num_workers for k in run.calls]


def test_the_busy_tune_re_measures_the_leaders_interleaved_then_still_says_uncertain():
    t, order = _tune(BUSY, budget=30)
    assert t.speedup_uncertain is True and t.best == Knobs(num_workers=1)
    assert order.count(0) == order.count(1) == SETTLE_RUNS  # stopped by the cap, not the budget
    assert len(t.bursts) == 2 * SETTLE_RUNS < 30 and t.stopped == "converged"
    tail = order[8:]  # after the confirmation: start and pick take turns
    assert all(a != b for a, b in zip(tail[::2], tail[1::2], strict=True))


def test_without_budget_left_nothing_more_runs():
    t, order = _tune(BUSY, budget=6)
    assert len(order) == 6 and t.stopped == "budget" and t.speedup_uncertain is True


@pytest.mark.parametrize(("budget", "uncertain", "bursts"), [(8, True, 8), (20, False, 10)])
def test_more_interleaved_runs_settle_what_the_confirmation_could_not(budget, uncertain, bursts):
    t, _ = _tune(WOBBLY, budget)
    assert t.speedup_uncertain is uncertain and len(t.bursts) == bursts
    assert t.best == Knobs(num_workers=1)


def test_a_clear_tune_spends_nothing_more():
    t, _ = _tune({0: [50.0, 51.0, 49.0], 1: [100.0, 98.0, 102.0]}, budget=20)
    assert t.speedup_uncertain is False and len(t.bursts) < 10
