"""The burst's plan: each knob decided once, before anything is built (``engine.plan``)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from workloads_for_tests import tensor_workload

from workbench import Knobs, run_burst
from workbench.engine import plan as planning
from workbench.engine.training import no_effect

CPU = torch.device("cpu")
GPU = torch.device("cuda")  # planned, never touched: no GPU is needed


def test_a_plan_is_frozen_and_prints_as_plain_json():
    p = planning.plan_burst(Knobs(), tensor_workload(), CPU)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.loader = "dali"  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.no_effect["batch_size"] = "no"  # type: ignore[index]
    assert json.loads(json.dumps(p.to_dict())) == p.to_dict()
    assert (p.processes, p.sharding, p.attention, p.fp8) == (False, "none", "auto", None)
    assert p.fp32_math is None and p.cudnn_benchmark is None  # a CPU: no switch written


def test_the_plan_decides_what_the_knobs_mean_here():
    knobs = Knobs(precision="bf16", compile="default", attention="efficient", fp8="tensorwise",
                  pin_memory=True)  # fmt: skip
    p = planning.plan_burst(knobs, tensor_workload(), CPU)
    assert p.autocast == "bf16" and p.compile == "default" and not p.grad_scaler
    assert p.attention == "auto"  # efficient has no CPU kernel: auto runs, and says so
    assert p.fp8 is None and "fp8" in p.no_effect and "attention" in p.no_effect
    assert "pin_memory" in p.no_effect
    cuda = planning.math_switches(Knobs(precision="tf32", cudnn_benchmark=True), GPU)
    assert cuda == ("tf32", True)
    assert planning.math_switches(Knobs(), GPU) == ("torch", False)


def test_processes_or_here_is_one_answer_with_its_reason():
    assert planning.processes_why(Knobs(), CPU) is None
    assert "world_size=2" in planning.processes_why(Knobs(world_size=2), CPU)
    assert planning.processes_why(Knobs(nccl={"NCCL_ALGO": "Ring"}), CPU) is None  # no NCCL
    assert "NCCL" in planning.processes_why(Knobs(nccl={"NCCL_ALGO": "Ring"}), GPU)
    alloc = Knobs(alloc_conf="expandable_segments:True")  # CUDA reads it once, at start-up
    assert "alloc_conf" in planning.processes_why(alloc, GPU)
    assert planning.processes_why(alloc, CPU) is None and "alloc_conf" in planning.no_effect(
        alloc, CPU, tensor_workload()
    )
    two = planning.plan_burst(Knobs(world_size=2, bucket_cap_mb=50), tensor_workload(), CPU)
    assert two.processes and two.sharding == "ddp" and "bucket_cap_mb" not in two.no_effect
    one = planning.plan_burst(Knobs(bucket_cap_mb=50), tensor_workload(), CPU)
    assert one.no_effect["bucket_cap_mb"] == planning.DDP_ONE_PROCESS


def test_no_effect_is_the_plans_and_the_result_prints_the_plan():
    knobs = Knobs(batch_size=8, pin_memory=True, cudnn_benchmark=True)
    wl = tensor_workload()
    assert no_effect(knobs, CPU, wl) == dict(planning.plan_burst(knobs, wl, CPU).no_effect)
    r = run_burst(wl, knobs, seconds=0.05, min_steps=2, warmup_steps=1, device="cpu",
                  record=False)  # fmt: skip
    assert r.ok, r.error
    assert r.plan == planning.plan_burst(knobs, wl, CPU).to_dict()
    assert r.to_dict()["plan"]["no_effect"] == r.no_effect  # nothing more found in set-up
