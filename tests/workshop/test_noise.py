"""Checks know noise: the figures a loaded 2-core machine gave the lessons (issue 43), replayed
as recorded numbers, never timed here. Where the noise covers the effect the check says "this
machine is too busy to tell" and grades nothing; a knob that could not act is never graded as
a speed-up; on a quiet seat the same checks grade as before."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.analysis.sweeps import with_drift
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.workshop import checks as workshop
from workbench.workshop import compute_lesson, noise

TF32_CPU = "TF32 is an NVIDIA tensor-core mode; the CPU ran IEEE fp32"  # a real burst's words
CUDNN_CPU = "cuDNN runs only on NVIDIA GPUs"


def _frame(knob, rows, **attrs):
    """A sweep's frame: (value, samples/s[, tokens/s, no_effect, pad share]) per burst."""
    frame = pd.DataFrame([{knob: value, "samples_per_s": sps, "tokens_per_s": sps * 256,
                           "status": "ok", "no_effect": dict(no_effect or {}),
                           "pad_share_pct": pad}
                          for value, sps, no_effect, pad in rows])  # fmt: skip
    frame.attrs.update(knob=knob, **attrs)
    return frame


def _predicted(check, value, exercise, *args, **kwargs):
    workshop.commit_prediction(value, exercise=exercise)
    return check(*args, prediction=value, exercise=exercise, **kwargs)


def test_identical_bursts_from_4_to_51_samples_per_s_make_the_machine_too_busy_to_tell():
    """Identical default bursts in one process read 4.1 and 50.7 samples/s: bf16's 1.09x of
    their median is within that spread."""
    frame = _frame("precision", [("default", 4.1, None, None), ("bf16", 30.0, None, None),
                                 ("default", 50.7, None, None)])  # fmt: skip
    seat = noise.seat_noise(frame, "precision")
    assert seat.pct == pytest.approx(100 * (50.7 - 4.1) / 27.4) and "2 bursts" in seat.source
    verdict = _predicted(workshop.check_speedup, 1.1, "03-precision", None, frame, "precision",
                         "bf16", "default")  # fmt: skip
    assert not verdict.ok and not verdict.answered  # not graded: nothing goes to the board
    assert verdict.message.startswith("this machine is too busy to tell")
    assert "run the measuring cell again" in verdict.message and "170%" in verdict.message
    # and the seat remembers: a later check of single bursts knows this noise
    single = _frame("num_workers", [(0, 20.0, None, None), (2, 26.0, None, None)])
    later = _predicted(workshop.check_best, 2, "02-workers", None, single, "num_workers")
    assert not later.answered and "measured earlier on this seat" in later.message


def test_tf32_at_1_7x_the_default_on_a_cpu_is_never_graded_as_a_speed_up():
    """Lesson 3 on the loaded VM: tf32 (no effect on a CPU) measured 1.7x the default."""
    frame = _frame("precision", [("default", 10.0, None, None),
                                 ("tf32", 17.0, {"precision": TF32_CPU}, None)])  # fmt: skip
    copied = _predicted(workshop.check_speedup, 1.7, "03-tf32", None, frame, "precision", "tf32",
                        "default")  # fmt: skip
    assert not copied.ok and copied.measured == 1.0
    assert "could not act here" in copied.message and "not a speed-up" in copied.message
    assert TF32_CPU in copied.message and "1.70x" in copied.message
    workshop.BOOK.clear()
    same = _predicted(workshop.check_speedup, 1.0, "03-tf32", None, frame, "precision", "tf32",
                      "default")  # fmt: skip
    assert same.ok and same.answered


def _burst(sps, **no_effect):
    return BurstResult(status="ok", device="cpu", knobs=Knobs(batch_size=16), samples_per_s=sps,
                       step_ms_p50=100.0, step_ms_iqr=1.0, no_effect=no_effect)  # fmt: skip


def test_cudnn_benchmark_at_1_53x_on_a_cpu_is_same_and_gauges_the_seat():
    """Lesson 11 on the loaded VM: cudnn_benchmark (a no-op on a CPU) read 1.53x."""
    base, gauge = _burst(100.0), _burst(153.0, cudnn_benchmark=CUDNN_CPU)
    workshop.commit_prediction("faster", exercise="11-cudnn-benchmark")
    faster = compute_lesson.check_layout("faster", base, gauge, knob="cudnn_benchmark")
    assert not faster.ok and faster.measured == 1.0 and "answer is 'same'" in faster.message
    workshop.BOOK.clear()
    workshop.commit_prediction("same", exercise="11-cudnn-benchmark")
    assert compute_lesson.check_layout("same", base, gauge, knob="cudnn_benchmark").ok
    # the same gauge beside channels_last's 1.2x: the noise (53%) covers the effect (20%)
    workshop.commit_prediction("faster", exercise="11-channels-last")
    layout = compute_lesson.check_layout("faster", base, _burst(120.0), gauge=gauge)
    assert not layout.answered and layout.message.startswith("this machine is too busy")
    assert "a repeat of the baseline (cudnn_benchmark could not act)" in layout.message


def test_pack_over_pad_at_4_9x_past_the_lessons_own_limit_is_not_graded():
    """Lesson 12 on the loaded VM: pack measured 4.9x pad, above 1 / (1 - pad share) = 3.97x,
    the most turning all of the padding into real tokens can give."""
    pad_share = 100 * (1 - 1 / 3.97)
    frame = _frame("packing", [("pad", 100.0, None, pad_share), ("pack", 490.0, None, 0.0)])
    verdict = _predicted(workshop.check_speedup, 3.0, "12-packing", None, frame, "packing",
                         "pack", "pad", metric="tokens_per_s", limit=3.97)  # fmt: skip
    assert not verdict.ok and not verdict.answered
    assert "too busy to tell" in verdict.message and "above the 3.97x" in verdict.message
    within = _frame("packing", [("pad", 100.0, None, pad_share), ("pack", 300.0, None, 0.0)])
    workshop.BOOK.clear()
    graded = _predicted(workshop.check_speedup, 3.0, "12-packing", None, within, "packing",
                        "pack", "pad", metric="tokens_per_s", limit=3.97)  # fmt: skip
    assert graded.ok and graded.answered


def test_a_sweep_whose_reference_drifted_from_9_4_to_42_8_cannot_rank_its_values():
    """Lesson 2 on the loaded VM: the reference (num_workers=0) read 9.4 at the start and 42.8
    at the end, so the drift-corrected column is a guess: the drift covers the effect."""
    frame = _frame("num_workers", [(0, 9.4, None, None), (1, 20.0, None, None),
                                   (2, 25.0, None, None), (0, 42.8, None, None)])  # fmt: skip
    frame = with_drift(frame, [False, False, False, True], [True, False, False, True])
    assert frame.attrs["drift"]["drift_pct"] > 100
    for metric in ("samples_per_s", "samples_per_s_corrected"):
        workshop.BOOK.clear()
        verdict = _predicted(workshop.check_best, 2, "02-workers", None, frame, "num_workers",
                             metric=metric)  # fmt: skip
        assert not verdict.answered and "too busy to tell" in verdict.message, metric


def test_on_a_quiet_seat_the_same_checks_grade():
    frame = _frame("precision", [("default", 100.0, None, None), ("bf16", 200.0, None, None),
                                 ("default", 103.0, None, None)])  # fmt: skip
    assert noise.seat_noise(frame, "precision").pct == pytest.approx(100 * 3 / 101.5)
    right = _predicted(workshop.check_speedup, 2.0, "03-precision", None, frame, "precision",
                       "bf16", "default")  # fmt: skip
    assert right.ok and right.answered
    workers = _frame("num_workers", [(0, 50.0, None, None), (1, 90.0, None, None),
                                     (2, 100.0, None, None), (2, 98.0, None, None)])  # fmt: skip
    best = _predicted(workshop.check_best, 2, "02-workers", None, workers, "num_workers")
    assert best.ok
    # a 7% gap (over the 5% band) on a seat whose repeats differ by 10.5%: within the noise
    noisy = _frame("num_workers", [(1, 88.0, None, None), (2, 100.0, None, None),
                                   (2, 90.0, None, None), (0, 40.0, None, None)])  # fmt: skip
    workshop.BOOK.clear()
    close = _predicted(workshop.check_best, 1, "02-workers", None, noisy, "num_workers")
    assert close.ok and "cannot tell them apart" in close.message


def test_the_seat_forgets_old_noise():
    ticks = iter([0.0, noise.SEAT_MEMORY_S + 1.0])
    seat = noise.SeatRecord(clock=lambda: next(ticks))
    seat.note(noise.Noise(80.0, "2 bursts of x=1"))
    assert not seat.recent().known
    assert noise.spread_pct([5.0]) is None and noise.effect_pct(0.5) == pytest.approx(100.0)
