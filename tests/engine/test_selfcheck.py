"""The self-checks every burst runs: each one passes an honest burst and fails a wrong one."""

from __future__ import annotations

from workbench.core.results import BurstResult
from workbench.engine.selfcheck import burst_problems

FLAGS = {"torch.get_float32_matmul_precision()": "highest", "cudnn.benchmark": False}


def _result(**fields) -> BurstResult:
    base = {"device": "cuda:1", "steps": 10, "measured_s": 1.0, "mfu_pct": 40.0}
    return BurstResult(**{**base, **fields})


def _problems(result: BurstResult, step_ms=(100.0,) * 10, after=FLAGS, ran_on="cuda:1", **kw):
    return burst_problems(result, list(step_ms), FLAGS, after, ran_on, **kw)


def test_an_honest_burst_has_no_problem():
    assert _problems(_result()) == []
    assert _problems(_result(), step_ms=[98.0] * 10) == []  # the closing sync's few ms


def test_steps_that_do_not_fill_the_window_are_suspect():
    # events on an idle GPU: the steps read 10 ms while the host waited 1 s
    (problem,) = _problems(_result(), step_ms=[10.0] * 10)
    assert "add up to 100.0 ms but the window took 1,000.0 ms" in problem


def test_a_clock_that_runs_backwards_is_suspect():
    (problem,) = _problems(_result(), step_ms=[100.0] * 9 + [-5.0])
    assert "zero or negative" in problem


def test_mfu_must_lie_in_zero_to_a_hundred():
    assert "MFU 140.0%" in _problems(_result(mfu_pct=140.0))[0]
    assert _problems(_result(mfu_pct=None)) == []  # unknown is not wrong


def test_flags_left_changed_are_named():
    after = {**FLAGS, "cudnn.benchmark": True}
    (problem,) = _problems(_result(), after=after)
    assert "cudnn.benchmark False -> True" in problem


def test_the_device_that_ran_must_be_the_one_named():
    (problem,) = _problems(_result(), ran_on="cuda:0")
    assert "names cuda:1 but the model ran on cuda:0" in problem


def test_a_recompile_inside_the_window_is_suspect():
    (problem,) = _problems(_result(compile_window_graphs=2))
    assert "compiled 2 graph(s) inside the measured window" in problem


def test_telemetry_problems_are_passed_through():
    assert _problems(_result(), telemetry=["temp_c=400 C is outside"]) == [
        "temp_c=400 C is outside"
    ]
