"""Lesson 11's helpers: the break-even point, the layout check, the share of peak, and checks
that answer every path a room can hit with a sentence instead of an exception."""

import math

import pandas as pd
import pytest

from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.workshop import checks as workshop
from workbench.workshop import compute_lesson as lesson

EXERCISE = {"check_break_even": lesson.EXERCISES[0], "check_layout": lesson.EXERCISES[1],
            "check_share_of_peak": lesson.EXERCISES[2]}  # fmt: skip


def predicted(check, prediction, *args, **kwargs):
    """``check``'s verdict on ``prediction`` committed before its burst, in a fresh book."""
    exercise = EXERCISE[check.__name__]
    if kwargs.get("knob", "channels_last") != "channels_last":
        exercise = f"11-{kwargs['knob'].replace('_', '-')}"
    workshop.BOOK.clear()
    # None: the burst ran without a prediction (skipped: with None alone it would not start)
    workshop.commit_prediction(workshop.SKIP if prediction is None else prediction,
                               exercise=exercise)  # fmt: skip
    return check(prediction, *args, **kwargs)


def burst(step_ms=100.0, iqr=2.0, batch=32, device="cpu", **extra) -> BurstResult:
    return BurstResult(
        knobs=Knobs(batch_size=batch), device=device, step_ms_p50=step_ms, step_ms_iqr=iqr,
        samples_per_s=batch / step_ms * 1e3, **extra,
    )  # fmt: skip


def test_break_even_is_compile_time_over_the_saving_with_a_noise_range():
    be = lesson.break_even(burst(100.0, 4.0), burst(60.0, 2.0, compile_s=12.0))
    assert be.steps == pytest.approx(12_000 / 40) and be.pays
    assert be.steps_low == pytest.approx(12_000 / 43) and be.steps_high == pytest.approx(
        12_000 / 37
    )
    assert "300 steps" in be.why
    assert predicted(lesson.check_break_even, 300, be).ok
    assert predicted(lesson.check_break_even, 200, be).ok  # within a factor of 2 of the range
    assert not predicted(lesson.check_break_even, 50, be).ok and "too few" in str(
        predicted(lesson.check_break_even, 50, be)
    )
    assert not predicted(lesson.check_break_even, 5000, be).ok
    assert not predicted(lesson.check_break_even, "never", be).ok
    assert be.in_training_time() == "300 compiled steps = 0.3 minutes of training"


def test_a_compile_that_saves_nothing_never_pays_and_never_is_right():
    be = lesson.break_even(burst(100.0), burst(105.0, compile_s=8.0))
    assert be.known and not be.pays and be.steps == math.inf
    assert predicted(lesson.check_break_even, "never", be).ok
    # a saving inside the noise: "never" and a large number both count
    noisy = lesson.break_even(burst(100.0, 20.0), burst(95.0, 20.0, compile_s=8.0))
    assert noisy.steps_high == math.inf and "within the noise" in noisy.why
    assert predicted(lesson.check_break_even, "never", noisy).ok
    assert predicted(lesson.check_break_even, 10_000, noisy).ok
    assert noisy.in_training_time() == noisy.why  # no minutes for a saving inside the noise


def test_break_even_checks_never_raise():
    be = lesson.break_even(None, burst(compile_s=3.0))
    assert not be.known and "has not run yet" in be.why
    assert "nothing to check" in str(predicted(lesson.check_break_even, 10, be))
    fell = burst(compile_s=None, no_effect={"compile": "torch.compile fell back to eager: x"})
    assert "fell back" in lesson.break_even(burst(), fell).why
    failed = BurstResult(status="oom", error="out of memory")
    assert "ended oom" in lesson.break_even(burst(), failed).why
    assert "Set `prediction`" in str(predicted(lesson.check_break_even, None, be))
    for bad in ("soon", -3, True, float("nan")):
        assert not predicted(lesson.check_break_even, bad, be).ok


def test_layout_check_has_a_same_band_and_tolerant_edges():
    base = burst(100.0, 1.0)
    assert predicted(lesson.check_layout, "faster", base, burst(80.0, 1.0)).ok
    assert predicted(lesson.check_layout, "same", base, burst(98.0, 1.0)).ok
    assert not predicted(lesson.check_layout, "faster", base, burst(98.0, 1.0)).ok
    assert predicted(lesson.check_layout, "slower", base, burst(125.0, 1.0)).ok
    # 1.0/0.955 = 1.047: at the edge of the 5% band, both "same" and "faster" count
    edge = burst(95.5, 1.0)
    assert (
        predicted(lesson.check_layout, "same", base, edge).ok
        and predicted(lesson.check_layout, "faster", base, edge).ok
    )
    # noisy bursts widen "same"
    assert predicted(lesson.check_layout, "same", burst(100.0, 30.0), burst(85.0, 30.0)).ok


def test_layout_check_names_a_knob_that_could_not_act_and_never_raises():
    cpu = burst(100.0, no_effect={"cudnn_benchmark": "cuDNN runs only on NVIDIA GPUs"})
    verdict = predicted(lesson.check_layout, "same", burst(100.0), cpu, knob="cudnn_benchmark")
    assert verdict.ok and "could not act here" in str(verdict)
    assert "not one of" in str(predicted(lesson.check_layout, "quicker", burst(), burst()))
    assert "has not run yet" in str(predicted(lesson.check_layout, "same", None, burst()))
    assert "Set `prediction_layout`" in str(predicted(lesson.check_layout, None, burst(), burst()))
    table = lesson.layout_table(
        {"baseline": burst(100.0), "channels_last": burst(50.0), "cudnn": cpu}
    )
    assert table.set_index("change").loc["channels_last", "speedup"] == pytest.approx(2.0)
    assert "cuDNN" in table.set_index("change").loc["cudnn", "no_effect"]


def test_share_of_peak_uses_mfu_or_a_measured_ceiling():
    r = burst(100.0, achieved_tflops=0.002, cpu_util_pct=150.0)
    seen = lesson.busy_and_useful(r, ceiling_flops=40e9)
    assert seen["share_of_peak_pct"] == pytest.approx(5.0)
    assert seen["peak_source"] == "measured matmul ceiling" and 0 < seen["busy_pct"] <= 100
    assert predicted(lesson.check_share_of_peak, 8, r, 40e9).ok  # within 5 points
    assert not predicted(lesson.check_share_of_peak, 60, r, 40e9).ok
    gpu = burst(mfu_pct=30.0, device="cuda:0", gpu_util_pct=98.0)
    verdict = predicted(lesson.check_share_of_peak, 40, gpu)
    assert verdict.ok and "busy 98%" in str(verdict)
    assert "cannot be checked here" in str(predicted(lesson.check_share_of_peak, 5, burst()))
    assert "not a percentage" in str(predicted(lesson.check_share_of_peak, "lots", r, 40e9))


def test_published_reference_mfu_is_computed_from_the_datasheet_peak():
    # NVIDIA's 2,470 img/s AMP ResNet-50 on one A100: ~19% of 312 TFLOP/s
    assert lesson.reference_mfu(2470, 24.3e9, "NVIDIA A100-SXM4-80GB", "fp16") == pytest.approx(
        19.2, abs=0.1
    )
    assert lesson.reference_mfu(100, 1e9, "cpu", "default") is None
    table = lesson.published()
    assert {"what", "figure", "mfu_pct", "source"} <= set(table.columns)
    assert table["source"].str.len().min() > 10


def test_telemetry_table_keeps_unknowns_empty():
    table = lesson.telemetry_table(
        {"a": burst(gpu_util_pct=97.0, throttle_reasons=["sw_power_cap"]), "b": burst()}
    ).set_index("change")
    assert (
        table.loc["a", "gpu_util_pct"] == 97.0
        and table.loc["a", "throttle_reasons"] == "sw_power_cap"
    )
    assert pd.isna(table.loc["b", "throttle_reasons"]) and table["mfu_pct"].isna().all()


def test_verdicts_carry_the_exercise_the_prediction_and_the_measurement_for_the_board():
    be = lesson.break_even(burst(100.0, 4.0), burst(60.0, 2.0, compile_s=12.0))
    v = predicted(lesson.check_break_even, 250, be)
    assert (v.exercise, v.prediction, v.measured) == ("11-compile-break-even", 250, 300)
    never = predicted(
        lesson.check_break_even,
        "never",
        lesson.break_even(burst(100.0), burst(110.0, compile_s=3.0)),
    )
    assert never.ok and never.measured == "never"
    v = predicted(lesson.check_layout, "faster", burst(100.0), burst(50.0))
    assert (v.exercise, v.prediction, v.measured) == ("11-channels-last", "faster", 2.0)
    assert predicted(lesson.check_layout, "same", None, burst()).measured is None
    r = burst(100.0, achieved_tflops=0.002)
    v = predicted(lesson.check_share_of_peak, 5, r, 40e9)
    assert (v.exercise, v.prediction, v.measured) == ("11-share-of-peak", 5, 5.0)
    assert predicted(lesson.check_share_of_peak, 5, None).measured is None
