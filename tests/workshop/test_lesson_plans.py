"""The lessons' plans and starting knobs: on a GPU, PyTorch's default math (or bf16) and
resnet50 in channels_last, the setting of the kept H200 run; on a CPU, the small cnn in NCHW."""

from __future__ import annotations

import pytest

from workbench.core.knobs import Knobs
from workbench.workshop import checks as workshop
from workbench.workshop import lesson_plans, reference

PLANNED = ("02", "03", "04", "06")


@pytest.mark.parametrize("lesson", PLANNED)
def test_a_gpu_plan_starts_from_pytorchs_math_in_channels_last(lesson):
    plan = lesson_plans.lesson_plan(lesson, gpu=True)
    assert plan.workload == "resnet50" and plan.base.channels_last
    assert plan.base.precision in ("default", "bf16")


@pytest.mark.parametrize("lesson", PLANNED)
def test_a_cpu_plan_is_as_it_was_cnn_in_nchw_at_the_default_math(lesson):
    plan = lesson_plans.lesson_plan(lesson, gpu=False)
    assert plan.workload == "cnn" and not plan.base.channels_last
    assert plan.base.precision == "default"


def test_lesson_3_sweeps_precision_at_the_kept_runs_setting():
    """Every knob the kept run's precision bursts set, lesson 3's GPU base holds at the same
    value: the sweep's rows and the run's compare like with like."""
    plan = lesson_plans.lesson_plan("03", gpu=True)
    for value in ("fp32-strict", "tf32", "bf16", "fp16"):
        kept = next(r for r in reference.load() if r.knobs and r.id in reference.KEPT_PRECISIONS
                    and r.knobs["precision"] == value)  # fmt: skip
        assert value in plan.values
        assert {k: getattr(plan.base.replace(precision=value), k) for k in kept.knobs} == kept.knobs


def test_lesson_knobs_add_channels_last_for_a_convnet_on_a_gpu_only():
    assert lesson_plans.lesson_knobs("resnet50", True, batch_size=64) == Knobs(
        batch_size=64, channels_last=True)  # fmt: skip
    assert lesson_plans.lesson_knobs("cnn", False, batch_size=8) == Knobs(batch_size=8)
    assert lesson_plans.lesson_knobs("gpt", True, batch_size=8) == Knobs(batch_size=8)
    nchw = lesson_plans.lesson_knobs("resnet50", True, channels_last=False, precision="bf16")
    assert not nchw.channels_last and nchw.precision == "bf16"  # a lesson about the layout


def test_lesson_knobs_default_to_this_machines_kind(monkeypatch):
    monkeypatch.setattr(lesson_plans.torch.cuda, "is_available", lambda: True)
    assert lesson_plans.lesson_workload() == "resnet50"
    assert lesson_plans.lesson_knobs(batch_size=32).channels_last
    assert lesson_plans.lesson_plan("02").workload == "resnet50"
    monkeypatch.setattr(lesson_plans.torch.cuda, "is_available", lambda: False)
    assert lesson_plans.lesson_knobs(batch_size=32) == Knobs(batch_size=32)
    assert lesson_plans.lesson_workload() == "cnn"


def test_an_unplanned_lesson_names_the_planned_ones():
    with pytest.raises(KeyError, match="planned: 02, 03, 04, 06, 12"):
        lesson_plans.lesson_plan("11")


def test_lesson_12_trains_gpt2_smalls_shape_on_a_gpu_and_the_tiny_gpt_on_a_cpu():
    """One resident batch (the compute, as llm.c's figure beside it), from the default math:
    its first exercise sweeps precision to bf16."""
    on_gpu, on_cpu = (lesson_plans.lesson_plan("12", gpu=g) for g in (True, False))
    assert (on_gpu.workload, on_cpu.workload) == ("gpt:124m", "gpt")
    for plan in (on_gpu, on_cpu):
        assert plan.base.loader == "synthetic" and plan.base.precision == "default"
        assert (plan.knob, plan.values, plan.teaches) == ("precision", ("default", "bf16"),
                                                          "compute")  # fmt: skip
        assert not plan.base.channels_last  # no image tensors: lesson_knobs adds nothing
    assert on_cpu.base.batch_size < on_gpu.base.batch_size


def test_workshop_reexports_the_plans():
    for name in ("LessonPlan", "lesson_plan", "lesson_knobs", "lesson_workload", "gpu_verdicts",
                 "loader_ceiling_estimate"):  # fmt: skip
        assert getattr(workshop, name) is getattr(lesson_plans, name), name
        assert name in workshop.__all__
