"""Tests for workbench.workshop.slices: which MIG slices run the core lessons, from the kept GPU
run's peaks (1g.10gb does not run lesson 3's fp32 batch 128; 3g.40gb runs every core step),
the bounds where a step was not measured, and the instructor's check of one server."""

from __future__ import annotations

import inspect

import pytest

import workbench as wb
from workbench.engine import hardware
from workbench.engine.mig import MigSlice
from workbench.workshop import checks as workshop
from workbench.workshop import slices
from workbench.workshop.slices import (
    MEMORY_MARGIN,
    fits,
    kept_entries,
    profile_memory_mib,
    step_memory,
)

FP32_FAMILY = ("default", "fp32-strict", "fp32", "tf32")


def verdicts(profile: str) -> dict[tuple[str, str, int], str]:
    """(lesson, precision, batch) -> verdict of every core step on ``profile``, kept figures."""
    return {(f.step.lesson, f.step.precision, f.step.batch_size): f.verdict
            for f in fits(profile_memory_mib(profile))}  # fmt: skip


def test_the_kept_run_has_the_peaks_the_guidance_reads() -> None:
    peaks = {e["id"]: e.get("peak_mem_mib") for e in kept_entries()}
    for eid in ("wb-gpu-r50-fp32", "wb-gpu-r50-tf32", "wb-gpu-r50-bf16", "wb-gpu-r50-fp16"):
        assert peaks[eid] is not None and peaks[eid] > 0


def test_1g_10gb_runs_out_of_memory_in_lesson_3_fp32_at_batch_128() -> None:
    got = verdicts("1g.10gb")
    plan = workshop.lesson_plan("03", gpu=True)
    assert plan.base.batch_size == 128 and "fp32-strict" in plan.values
    assert got[("03", "fp32-strict", 128)] == "out of memory"
    four = workshop.lesson_plan("04", gpu=True)
    if four.base.precision in FP32_FAMILY:  # lesson 4 sweeps fp32 tensors: from 128 on, too
        assert [got[("04", four.base.precision, b)] for b in four.values if b >= 128] == [
            "out of memory"
        ] * len([b for b in four.values if b >= 128])
    assert got[("03", "bf16", 128)] == "fits"  # half the memory: it is the fp32 rows


def test_3g_40gb_runs_every_core_lesson_step() -> None:
    got = verdicts("3g.40gb")
    assert got and set(got.values()) == {"fits"}
    lessons = {lesson for lesson, _, _ in got}
    assert lessons == set(slices.CORE_PLANS)


@pytest.mark.parametrize("profile", ["7g.40gb", "3g.71gb", "7g.80gb", "7g.141gb"])
def test_whole_gpus_and_bigger_slices_run_every_core_step(profile: str) -> None:
    assert set(verdicts(profile).values()) == {"fits"}


def test_a_20gb_slice_is_not_sure_of_the_biggest_batch_only() -> None:
    got = verdicts("2g.20gb")
    unsure = [k for k, v in got.items() if v != "fits"]
    four = workshop.lesson_plan("04", gpu=True)
    assert unsure == [("04", four.base.precision, max(four.values))]
    assert got[unsure[0]] == "may not fit"


# --------------------------------------------------------------------------- bounds


def entry(eid: str, precision: str, batch: int, peak: float, workload: str = "resnet50") -> dict:
    return {"id": eid, "workload": workload, "precision": precision, "batch_size": batch,
            "peak_mem_mib": peak}  # fmt: skip


def test_a_measured_step_is_its_peak() -> None:
    n = step_memory("03", "resnet50", "bf16", 128, [entry("a", "bf16 (autocast)", 128, 6000)])
    assert n is not None and (n.low, n.high, n.source) == (6000, 6000, "a")


def test_another_batch_is_bounded_by_the_linear_model() -> None:
    kept = [entry("a", "fp32-strict (IEEE)", 128, 12000)]
    up = step_memory("04", "resnet50", "fp32-strict", 256, kept)
    down = step_memory("04", "resnet50", "fp32-strict", 32, kept)
    assert up is not None and (up.low, up.high) == (12000, 24000)
    assert down is not None and (down.low, down.high) == (3000, 12000)
    assert "scaled from batch 128" in up.source
    two = [*kept, entry("b", "fp32-strict", 512, 40000)]
    mid = step_memory("04", "resnet50", "fp32-strict", 256, two)
    assert mid is not None and (mid.low, mid.high) == (20000, 24000)  # tighter from both sides


def test_a_precision_without_a_peak_takes_the_largest_of_its_family() -> None:
    kept = [entry("s", "fp32-strict", 128, 11000), entry("t", "TF32", 128, 10000),
            entry("h", "bf16", 128, 5000)]  # fmt: skip
    n = step_memory("03", "resnet50", "default", 128, kept)
    assert n is not None and n.high == 11000 and "same tensors as fp32-strict" in n.source
    half = step_memory("03", "resnet50", "fp16", 128, kept)
    assert half is not None and half.high == 5000  # bf16's, not an fp32 one
    assert step_memory("03", "gpt", "default", 128, kept) is None  # nothing of that workload


def test_verdicts_at_the_edges() -> None:
    kept = [entry("a", "bf16", 128, 900)]
    n = step_memory("03", "resnet50", "bf16", 128, kept)
    assert n is not None
    assert slices._verdict(n, 1000, MEMORY_MARGIN) == "fits"  # 900 <= 90% of 1000
    assert slices._verdict(n, 999, MEMORY_MARGIN) == "may not fit"
    assert slices._verdict(n, 899, MEMORY_MARGIN) == "out of memory"


def test_the_margin_is_the_tuners() -> None:
    assert inspect.signature(wb.tune).parameters["memory_margin"].default == MEMORY_MARGIN


def test_profile_memory_is_its_name_in_gb() -> None:
    assert profile_memory_mib("3g.40gb") == pytest.approx(40e9 / 2**20)
    assert profile_memory_mib("1g.18gb+me") == pytest.approx(18e9 / 2**20)
    for _, profiles in slices.MIG_PROFILES:
        assert profiles[-1].startswith("7g.")  # the whole GPU is the last profile


# --------------------------------------------------------------------------- one server


def slice_info(profile: str, mib: float, sms: int) -> hardware.DeviceInfo:
    return hardware.DeviceInfo(
        kind="cuda", name=f"NVIDIA H100 80GB HBM3 MIG {profile}", index=0, total_mem_mib=mib,
        capability=(9, 0), driver_version=None, cuda_version=None, cpu_count=8,
        mig=MigSlice("NVIDIA H100 80GB HBM3", profile, sms, 132),
    )  # fmt: skip


def test_report_on_a_3g_40gb_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "device_info", lambda d: slice_info("3g.40gb", 40_448, 60))
    said = slices.report()
    assert said == ("NVIDIA H100 80GB HBM3 MIG 3g.40gb, 40,448 MiB, 60 of the GPU's 132 SMs: "
                    "every core lesson step fits")  # fmt: skip


def test_report_on_a_1g_10gb_slice_names_what_runs_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "device_info", lambda d: slice_info("1g.10gb", 9_984, 16))
    said = slices.report()
    assert said.startswith("NVIDIA H100 80GB HBM3 MIG 1g.10gb, 9,984 MiB")
    assert "not every core lesson step fits" in said
    assert "out of memory: 3: default, fp32-strict, tf32 at batch 128" in said


def test_report_without_a_gpu() -> None:
    assert "no GPU here" in slices.report()
