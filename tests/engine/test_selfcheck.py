"""The self-checks every burst runs: each one passes an honest burst and fails a wrong one."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from nvml_readings import CASES, readings

from workbench.core.results import BurstResult
from workbench.engine import burst
from workbench.engine.selfcheck import CLOCK_DROP_SHARE, burst_problems, throttled_in_window
from workbench.engine.telemetry import _summarize

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


# --------------------------------------------------------------------------- a GPU that slowed


def _gpu_burst(case: str, **changes: Any) -> BurstResult:
    """A 2 s GPU burst's result with the recorded NVML readings of ``case``, through the
    sampler's summary and the burst's own copy into the result."""
    samples, window = readings(case)
    for s in samples:
        for name, value in changes.items():
            setattr(s, name, value)
    summary = _summarize(samples, window, "nvml", [], power_limit_w=700.0)
    result = _result(device="cuda:0", steps=40, measured_s=2.0, mfu_pct=None)
    burst._fill_memory_and_telemetry(result, torch.device("cpu"), summary)
    result.suspect = burst_problems(result, [50.0] * 40, FLAGS, FLAGS, "cuda:0")
    return result


@pytest.mark.parametrize("case", ["steady", "single_dip", "steady_power_cap"])
def test_a_gpu_that_held_its_clock_is_not_suspect(case: str) -> None:
    r = _gpu_burst(case)
    assert r.suspect == []
    assert r.clock_drop_pct is not None and r.clock_drop_pct < 100 * CLOCK_DROP_SHARE / 4
    assert r.mem_clock_mhz == 3201.0 and r.nvml is not None and r.nvml["samples"] == 40


def test_a_single_50_ms_dip_is_recorded_but_not_a_drop() -> None:
    r = _gpu_burst("single_dip")
    assert r.nvml is not None and min(r.nvml["window"]["sm_clock_mhz"]) == 1500.0
    assert r.clock_drop_pct == pytest.approx(0.76)  # 1980 -> 1965, the boost's own wander
    assert r.suspect == []


def test_a_power_cap_held_over_the_window_is_the_steady_state() -> None:
    r = _gpu_burst("steady_power_cap")
    assert r.throttle_reasons == ["sw_power_cap"]  # seen, and reported as before
    assert r.power_w is not None and r.power_w > 690
    assert throttled_in_window(r) is None


def test_a_thermal_slowdown_partway_is_suspect_and_named() -> None:
    r = _gpu_burst("thermal_partway")
    (problem,) = r.suspect
    assert problem.startswith("the GPU slowed down inside the window (")
    assert "sw_thermal_slowdown from 1.21 s" in problem
    assert "SM clock 1,980 -> 1,830 MHz, -7.6%" in problem  # under the share: the reason decides
    assert "up to 70 C" in problem
    assert "rerun it, and compare bursts only at the same clocks" in problem


def test_a_clock_drop_beyond_the_share_is_suspect_without_a_reason() -> None:
    r = _gpu_burst("drop_15pct_no_reason")
    assert r.throttle_reasons == []
    (problem,) = r.suspect
    assert "no clock-event reason set" in problem
    assert "SM clock 1,980 -> 1,680 MHz, -15.2%" in problem
    assert "up to 64 C" in problem


def test_a_power_cap_with_a_drop_or_setting_in_partway_is_suspect() -> None:
    dropped = _gpu_burst("drop_15pct_no_reason", throttle=0x4)  # capped from the start
    (problem,) = dropped.suspect
    assert "sw_power_cap from 0.01 s" in problem and "-15.2%" in problem

    partway = _gpu_burst("power_cap_partway")
    assert partway.clock_drop_pct is not None and partway.clock_drop_pct < 10  # under the share
    (problem,) = partway.suspect
    assert "sw_power_cap from 0.81 s" in problem and "1,980 -> 1,890 MHz, -4.5%" in problem


@pytest.mark.parametrize("case", CASES)
def test_the_check_reads_only_what_a_kept_result_keeps(case: str) -> None:
    r = _gpu_burst(case)
    kept = BurstResult.from_dict(json.loads(r.to_json()))
    assert (kept.nvml, kept.clock_drop_pct, kept.mem_clock_mhz) == (
        r.nvml,
        r.clock_drop_pct,
        r.mem_clock_mhz,
    )
    assert [p for p in [throttled_in_window(kept)] if p] == r.suspect


def test_without_nvml_there_is_no_throttle_check() -> None:
    cpu = _result(device="cpu", clock_drop_pct=50.0)  # a figure without its record: not read
    assert throttled_in_window(cpu) is None
