"""Lesson 11's helpers ("Compute and monitoring"): torch.compile's break-even point, the layout
knobs' effect, how much of the device's peak a step uses, and the checks of its three
predict-then-measure exercises.

Every ``check_*`` returns a :class:`~workbench.workshop.checks.Check` and never raises: a burst
that failed, a compile that fell back to eager, a CPU without a known peak or a machine too
noisy to tell two bursts apart each end in a sentence a learner can read. Decision edges have
tolerances: two bursts closer than their own noise cannot be ranked, so either neighbouring
answer counts there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from workbench.engine import hardware
from workbench.workshop import noise
from workbench.workshop.checks import Check, _judge_first, _never_raises

if TYPE_CHECKING:
    from workbench.core.results import BurstResult

__all__ = ["EXERCISES", "PUBLISHED", "BreakEven", "break_even", "busy_and_useful",
           "check_break_even", "check_layout", "check_share_of_peak", "layout_table", "published",
           "reference_mfu", "telemetry_table"]  # fmt: skip

GUESS_FACTOR = 2.0
"""A predicted step count within this factor of the measured range counts as right: the point
is the order of magnitude (tens of steps, or tens of thousands), not the digit."""
SAME_BAND = 0.05
"""Two throughputs within 5 % (or within the bursts' own noise, if larger) are "the same"."""
EDGE = 0.02
"""Within 2 % of a band's edge, both answers on either side of it count."""


def _ask(what: str, variable: str = "prediction") -> Check:
    return Check(False, f"set `{variable}` to {what}, then run this cell again")


def _failed(name: str, r: BurstResult | None) -> str | None:
    """Why a burst cannot be used for a check, or None when it can."""
    if r is None:
        return f"the {name} burst has not run yet: run the cell above"
    if r.status != "ok" or not r.step_ms_p50 or not r.samples_per_s:
        return f"the {name} burst ended {r.status} ({r.error or 'no steps measured'}): rerun it"
    return None


# -- compile and its break-even ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BreakEven:
    """When torch.compile pays for itself: its one-off compile time over what it saves a step.

    ``steps`` is ``compile_s / saving``; ``steps_low``/``steps_high`` the same with the saving
    plus and minus the bursts' noise (half the sum of their step-time IQRs), ``inf`` where the
    saving is within the noise. ``steps`` is ``inf`` when compiled steps are not faster: then
    it never pays. ``why`` says what was measured, in words.
    """

    compile_s: float | None
    eager_step_ms: float | None
    compiled_step_ms: float | None
    saving_ms: float | None
    noise_ms: float | None
    steps: float | None
    steps_low: float | None
    steps_high: float | None
    why: str

    @property
    def known(self) -> bool:
        return self.steps is not None

    @property
    def pays(self) -> bool:
        return self.steps is not None and math.isfinite(self.steps)

    def in_training_time(self) -> str:
        """The break-even as minutes of compiled training, or why there is none to give."""
        if not self.pays or self.steps_high is None or not math.isfinite(self.steps_high):
            return self.why
        assert self.steps is not None and self.compiled_step_ms is not None
        minutes = self.steps * self.compiled_step_ms / 60e3
        return f"{self.steps:,.0f} compiled steps = {minutes:,.1f} minutes of training"


def break_even(eager: BurstResult | None, compiled: BurstResult | None) -> BreakEven:
    """The break-even point from an eager burst and a ``compile`` burst of the same knobs."""
    unknown = dict(compile_s=None, eager_step_ms=None, compiled_step_ms=None, saving_ms=None,
                   noise_ms=None, steps=None, steps_low=None, steps_high=None)  # fmt: skip
    problem = _failed("eager", eager) or _failed("compiled", compiled)
    if problem:
        return BreakEven(**unknown, why=problem)
    assert eager is not None and compiled is not None
    fell_back = (compiled.no_effect or {}).get("compile")
    if fell_back or compiled.compile_s is None:
        return BreakEven(**unknown, why=fell_back or "this burst did not compile: set compile")
    e_ms, c_ms, comp_s = eager.step_ms_p50, compiled.step_ms_p50, max(compiled.compile_s, 0.0)
    noise = 0.5 * ((eager.step_ms_iqr or 0.0) + (compiled.step_ms_iqr or 0.0))
    saving = e_ms - c_ms
    compile_ms = comp_s * 1e3

    def steps_for(save_ms: float) -> float:
        return compile_ms / save_ms if save_ms > 0 else math.inf

    steps, low, high = steps_for(saving), steps_for(saving + noise), steps_for(saving - noise)
    if not math.isfinite(steps):
        why = (f"compiled steps ({c_ms:.1f} ms) were not faster than eager ones ({e_ms:.1f} ms): "
               f"the {comp_s:.1f} s of compiling never pays back here")  # fmt: skip
    else:
        why = (f"compiling took {comp_s:.1f} s and saves {saving:.1f} ms a step "
               f"({e_ms:.1f} -> {c_ms:.1f} ms, noise +-{noise:.1f} ms): it pays after "
               f"{steps:,.0f} steps")  # fmt: skip
        if not math.isfinite(high):
            why += ", though the saving is within the noise: it may never pay"
    return BreakEven(comp_s, e_ms, c_ms, saving, noise, steps, low, high, why)


EXERCISES = ("11-compile-break-even", "11-channels-last", "11-share-of-peak")
"""The exercise names lesson 11's checks give their verdicts (``Check.exercise``), for the board."""


@_never_raises(exercise=EXERCISES[0])
def check_break_even(prediction: Any, be: BreakEven, *, factor: float = GUESS_FACTOR) -> Check:
    """Is ``prediction`` (a step count, or ``"never"``) the measured break-even point?

    Right when it lies within ``factor`` of the range the noise allows, or is ``"never"`` where
    compiled steps were not measurably faster.
    """
    measured = None if be.steps is None else ("never" if not be.pays else round(be.steps))
    return _judge_first(lambda guess: _break_even_verdict(guess, be, factor), prediction,
                        exercise=EXERCISES[0], what=_BREAK_EVEN_WHAT, measured=measured,
                        note=False)  # fmt: skip


_BREAK_EVEN_WHAT = 'the number of steps you expect compile to need to pay back, or "never"'


def _break_even_verdict(prediction: Any, be: BreakEven, factor: float) -> Check:
    if prediction is None:
        return _ask(_BREAK_EVEN_WHAT)
    never = isinstance(prediction, str) and prediction.strip().lower() == "never"
    number = None if never else _as_number(prediction)
    if not never and (number is None or number <= 0):
        return Check(False, f'{prediction!r} is neither a positive number of steps nor "never"')
    if not be.known:
        return Check(False, f"nothing to check against yet: {be.why}")
    low, high = be.steps_low or 0.0, be.steps_high if be.steps_high is not None else math.inf
    if never:
        if not math.isfinite(high):
            return Check(True, f"measured: {be.why}")
        return Check(False, f"it does pay here: {be.why}")
    assert number is not None
    if low / factor <= number <= high * factor:
        return Check(True, f"you said {number:,.0f}; measured: {be.why}")
    way = "too few" if number < low / factor else "too many"
    return Check(False, f"{number:,.0f} steps is {way}: {be.why}")


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# -- channels_last and cudnn_benchmark ---------------------------------------------------------


def layout_table(results: Mapping[str, BurstResult], baseline: str = "baseline") -> pd.DataFrame:
    """One row per burst (named by its key): throughput, step time, speed-up over ``baseline``
    and what could not act here (``no_effect``)."""
    base = results.get(baseline)
    base_rate = base.samples_per_s if base is not None and base.ok else None
    rows = []
    for name, r in results.items():
        rate = r.samples_per_s if r.ok else None
        rows.append({
            "change": name, "status": r.status, "samples_per_s": rate,
            "step_ms_p50": r.step_ms_p50, "step_ms_iqr": r.step_ms_iqr,
            "speedup": rate / base_rate if rate and base_rate else None,
            "no_effect": "; ".join(f"{k}: {v}" for k, v in (r.no_effect or {}).items()) or "",
        })  # fmt: skip
    return pd.DataFrame(rows)


def _band(base: BurstResult, changed: BurstResult, tolerance: float) -> tuple[float, float]:
    """The speed ratio and the "same" band: ``tolerance``, or the bursts' relative noise."""
    ratio = changed.samples_per_s / base.samples_per_s  # type: ignore[operator]
    noise = 0.5 * sum((r.step_ms_iqr or 0.0) / r.step_ms_p50 for r in (base, changed))  # type: ignore[operator]
    return ratio, max(tolerance, noise)


@_never_raises(exercise=EXERCISES[1])
def check_layout(
    prediction: str | None,
    base: BurstResult | None,
    changed: BurstResult | None,
    *,
    knob: str = "channels_last",
    tolerance: float = SAME_BAND,
    gauge: BurstResult | None = None,
) -> Check:
    """Is ``prediction`` ("faster", "slower" or "same") what turning ``knob`` on did here?

    "same" means within ``tolerance`` (or the bursts' own noise, when larger); near a band's
    edge (``EDGE``) both neighbouring answers count. A knob that could not act on this device
    (``no_effect``) is "same" by construction, whatever the ratio read, and the verdict says
    why. ``gauge``: a burst that repeats the baseline's computation (lesson 11's
    ``cudnn_benchmark`` row on a CPU, where that knob cannot act): its distance from the
    baseline is this seat's noise, and when that (or the noise the seat showed earlier) is at
    least the effect, nothing is graded: "this machine is too busy to tell". ``measured``: the
    speed ratio (changed over base; 1 where the knob could not act), or None.
    """
    measured = None
    exercise = EXERCISES[1] if knob == "channels_last" else f"11-{knob.replace('_', '-')}"
    if _failed("baseline", base) is None and _failed(knob, changed) is None:
        assert base is not None and changed is not None
        ratio = _band(base, changed, tolerance)[0]
        measured = 1.0 if _cannot_act(changed, knob) else round(ratio, 3)
        seat = _seat_noise(base, gauge)
        effect = noise.effect_pct(ratio)
        if measured != 1.0 and effect > 100 * tolerance and seat.hides(effect):
            said = f"{knob} ran {ratio:.2f}x the baseline's throughput"
            return Check(False, noise.busy_message(seat, effect, said), exercise=exercise,
                         prediction=prediction, answered=False)  # fmt: skip
    return _judge_first(
        lambda guess: _layout_verdict(guess, base, changed, knob, tolerance), prediction,
        exercise=exercise, what='"faster", "slower" or "same"', variable="prediction_layout",
        measured=measured, note=False,
    )  # fmt: skip


def _layout_verdict(
    prediction: str | None,
    base: BurstResult | None,
    changed: BurstResult | None,
    knob: str,
    tolerance: float,
) -> Check:
    answers = ("faster", "slower", "same")
    if prediction is None:
        return _ask('"faster", "slower" or "same"', "prediction_layout")
    said = str(prediction).strip().lower()
    if said not in answers:
        return Check(False, f"{prediction!r} is not one of {', '.join(answers)}")
    problem = _failed("baseline", base) or _failed(knob, changed)
    if problem:
        return Check(False, problem)
    assert base is not None and changed is not None
    ratio, band = _band(base, changed, tolerance)
    right = _acceptable(ratio, band)
    what = (f"{knob} ran {ratio:.2f}x the baseline's throughput ({changed.samples_per_s:,.1f} vs "
            f"{base.samples_per_s:,.1f} samples/s; 'same' is within {band:.0%})")  # fmt: skip
    why_not = _cannot_act(changed, knob)
    if why_not:
        right = {"same"}
        what = (f"{knob} could not act here ({why_not}): both bursts ran the same computation, "
                f"so its {ratio:.2f}x of the baseline is this machine's noise and the answer "
                "is 'same'")  # fmt: skip
    if said in right:
        return Check(True, what)
    return Check(False, f"{what}: the measurement says {' or '.join(sorted(right))}")


def _cannot_act(changed: BurstResult, knob: str) -> str | None:
    why = (changed.no_effect or {}).get(knob)
    return None if why is None else str(why)


def _seat_noise(base: BurstResult, gauge: BurstResult | None) -> noise.Noise:
    """The noise a layout verdict allows for: the gauge's distance from the baseline (when the
    gauge's knob could not act, so it repeated the baseline's computation), else what the
    seat showed earlier (``noise.SEAT``)."""
    if (gauge is not None and gauge.ok and gauge.no_effect and base.samples_per_s
            and gauge.samples_per_s):  # fmt: skip
        gauged = noise.Noise(noise.effect_pct(gauge.samples_per_s / base.samples_per_s),
                             f"a repeat of the baseline ({', '.join(gauge.no_effect)} could "
                             "not act)")  # fmt: skip
        noise.SEAT.note(gauged)
        return gauged
    return noise.SEAT.recent()


def _acceptable(ratio: float, band: float) -> set[str]:
    out = set()
    if ratio >= 1 + band - EDGE:
        out.add("faster")
    if ratio <= 1 - band + EDGE:
        out.add("slower")
    if 1 - band - EDGE <= ratio <= 1 + band + EDGE:
        out.add("same")
    return out


# -- MFU, and busy is not efficient -------------------------------------------------------------


def busy_and_useful(result: BurstResult, ceiling_flops: float | None = None) -> dict[str, Any]:
    """How busy the device was, beside how much of its peak the step used.

    ``busy_pct``: on a GPU, NVML's utilization (the share of time *any* kernel ran); on a CPU,
    the process's CPU time over its threads' wall time. ``share_of_peak_pct``: ``mfu_pct`` where
    the datasheet peak is known, else achieved FLOP/s over ``ceiling_flops`` (a measured matmul
    ceiling, ``hardware.measure_matmul_flops``), with ``peak_source`` saying which.
    """
    import torch  # the thread count of a CPU burst

    cuda = str(result.device).startswith("cuda")
    if cuda:
        busy = result.gpu_util_pct
    elif result.cpu_util_pct is not None:
        busy = min(100.0, result.cpu_util_pct / max(1, torch.get_num_threads()))
    else:
        busy = None
    share, source = result.mfu_pct, "datasheet peak (mfu_pct)"
    if share is None and result.achieved_tflops and ceiling_flops:
        share = 100.0 * result.achieved_tflops * 1e12 / ceiling_flops
        source = "measured matmul ceiling"
    if share is None:
        source = "unknown: no peak for this device and no measured ceiling"
    return {"busy_pct": busy, "share_of_peak_pct": share, "peak_source": source,
            "achieved_tflops": result.achieved_tflops, "flops_per_sample": result.flops_per_sample,
            "samples_per_s": result.samples_per_s}  # fmt: skip


@_never_raises(exercise=EXERCISES[2])
def check_share_of_peak(
    prediction: Any, result: BurstResult | None, ceiling_flops: float | None = None,
    *, factor: float = GUESS_FACTOR, points: float = 5.0,
) -> Check:  # fmt: skip
    """Is ``prediction`` (a percentage) the share of the device's peak this burst's step used?
    Right within ``factor`` of the measured share, or within ``points`` percentage points."""
    measured = None
    if _failed("measured", result) is None:
        share = busy_and_useful(result, ceiling_flops)["share_of_peak_pct"]  # type: ignore[arg-type]
        measured = None if share is None else round(share, 2)
    return _judge_first(
        lambda guess: _share_verdict(guess, result, ceiling_flops, factor, points), prediction,
        exercise=EXERCISES[2], what="the percentage of this device's peak FLOP/s you expect "
        "the step to use", variable="prediction_peak", measured=measured, note=False,
    )  # fmt: skip


def _share_verdict(
    prediction: Any,
    result: BurstResult | None,
    ceiling_flops: float | None,
    factor: float,
    points: float,
) -> Check:
    if prediction is None:
        return _ask(
            "the percentage of this device's peak FLOP/s you expect the step to use",
            "prediction_peak",
        )
    number = _as_number(prediction)
    if number is None or number < 0:
        return Check(False, f"{prediction!r} is not a percentage (a number such as 10)")
    problem = _failed("measured", result)
    if problem:
        return Check(False, problem)
    assert result is not None
    seen = busy_and_useful(result, ceiling_flops)
    share = seen["share_of_peak_pct"]
    if share is None:
        return Check(False, f"cannot be checked here: the share of peak is {seen['peak_source']}")
    busy = seen["busy_pct"]
    busy_text = "n/a" if busy is None else f"{busy:.0f}%"
    what = (f"the step used {share:.1f}% of the {seen['peak_source']} while the device was busy "
            f"{busy_text} of the time")  # fmt: skip
    close = abs(number - share) <= points or share / factor <= number <= share * factor
    return Check(close, f"you said {number:g}%; {what}")


TELEMETRY = ("gpu_util_pct", "mem_busy_pct", "sm_clock_mhz", "power_w", "temp_c",
             "throttle_reasons", "cpu_util_pct", "mfu_pct", "telemetry")  # fmt: skip
"""What a burst's result holds about the device while the window ran (``telemetry`` names the
source: "nvml", "cpu", or why there is none)."""


def telemetry_table(results: Mapping[str, BurstResult]) -> pd.DataFrame:
    """One row per burst (named by its key): its telemetry (``TELEMETRY``) beside its
    throughput; unknown figures stay empty, never 0."""
    rows = []
    for name, r in results.items():
        row = {"change": name, "samples_per_s": r.samples_per_s if r.ok else None}
        row.update({k: getattr(r, k, None) for k in TELEMETRY})
        row["throttle_reasons"] = ", ".join(row["throttle_reasons"] or []) or None
        rows.append(row)
    return pd.DataFrame(rows)


def reference_mfu(
    samples_per_s: float, flops_per_sample: float, device_name: str, precision: str
) -> float | None:
    """MFU (%) of a published throughput, as the workbench computes its own: model FLOPs per
    sample times samples/s over the datasheet's dense peak (``hardware.peak_flops``)."""
    peak = hardware.peak_flops(device_name, precision)
    return hardware.estimate_mfu(flops_per_sample, samples_per_s, peak)


RESNET50_TRAIN_GFLOP = 24.3
"""ResNet-50 (torchvision, 1000 classes, 224 px), forward + backward, per image, as the
workbench counts it (``FlopCounterMode`` on the meta device: matmuls and convolutions)."""

PUBLISHED: tuple[dict[str, Any], ...] = (
    {"what": "ResNet-50 training, 1x A100 80GB, TF32", "figure": "938 img/s",
     "mfu_pct": reference_mfu(938, RESNET50_TRAIN_GFLOP * 1e9, "NVIDIA A100-SXM4-80GB", "tf32"),
     "source": "NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5 README, training performance "
               "(DGX A100); MFU computed here from the datasheet's 156 TFLOP/s TF32"},
    {"what": "ResNet-50 training, 1x A100 80GB, AMP (fp16)", "figure": "2,470 img/s",
     "mfu_pct": reference_mfu(2470, RESNET50_TRAIN_GFLOP * 1e9, "NVIDIA A100-SXM4-80GB", "fp16"),
     "source": "same README; MFU computed here from the datasheet's 312 TFLOP/s FP16"},
    {"what": "Llama 3 405B pre-training, 8,192-16,384 H100, BF16", "figure": "38-43% MFU",
     "mfu_pct": None,
     "source": "Llama Team, 'The Llama 3 Herd of Models' (2024), table 4"},
    {"what": "GPT models 22B-1T, Megatron-LM on A100", "figure": "41-56% MFU",
     "mfu_pct": None,
     "source": "Korthikanti et al., 'Reducing Activation Recomputation in Large Transformer "
               "Models' (2022); Megatron-LM README"},
    {"what": "PaLM 540B on TPU v4 vs GPT-3 175B on V100", "figure": "46.2% vs 21.3% MFU",
     "mfu_pct": None, "source": "Chowdhery et al., 'PaLM' (2022), table 3"},
    {"what": "torch.compile, 163 open-source models, training on A100", "figure":
     "21% (fp32) and 51% (AMP) faster on average; compiled 93% of them", "mfu_pct": None,
     "source": "PyTorch 2.0 announcement, pytorch.org/get-started/pytorch-2.0"},
    {"what": "channels_last, ResNet-50 on V100 and A100 (AMP)", "figure": "about 1.3x",
     "mfu_pct": None,
     "source": "MosaicML Composer, 'Channels Last' method card; PyTorch's channels-last "
               "tutorial: 22% on ResNet-50 training, 8-35% across models, V100 with AMP"},
)  # fmt: skip
"""Published figures the lesson sets beside what a laptop measures (each with its source)."""


def published() -> pd.DataFrame:
    """``PUBLISHED`` as a table (MFU rounded to one decimal where computed here)."""
    frame = pd.DataFrame(list(PUBLISHED))
    frame["mfu_pct"] = frame["mfu_pct"].map(lambda x: None if x is None else round(x, 1))
    return frame
