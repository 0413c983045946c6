"""The ``attention`` knob on the CPU: which SDPA kernel a burst runs, and every way it says it
cannot act (no kernel on this device, no SDPA call in the model, a kernel these inputs refuse)."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from workloads_for_tests import tensor_workload

from workbench import Knobs, Workload, run_burst
from workbench.engine.attention import (
    NO_SDPA_CALL,
    SDPA_KEY,
    attention_no_effect,
    attention_scope,
    attention_space,
    watch_attention,
)
from workbench.engine.workloads.gpt import GPTShape, gpt

FAST = {"seconds": 0.2, "warmup_steps": 1, "min_steps": 2, "record": False}
SMALL = GPTShape(block=32, layers=1, heads=2, width=32)
CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def _switches() -> dict[str, bool]:
    b = torch.backends.cuda
    return {"flash": b.flash_sdp_enabled(), "efficient": b.mem_efficient_sdp_enabled(),
            "cudnn": b.cudnn_sdp_enabled(), "math": b.math_sdp_enabled()}  # fmt: skip


@pytest.fixture(scope="module")
def small_gpt(tiny_data):
    return gpt(tiny_data, shape=SMALL)


@pytest.mark.parametrize(("asked", "ran"), [("auto", "flash"), ("flash", "flash"),
                                            ("math", "math")])  # fmt: skip
def test_the_kernels_a_cpu_has_run_and_the_result_says_which(small_gpt, asked, ran):
    # PyTorch's CPU SDPA is its own C++ flash kernel (auto picks it for fp32) or math
    r = run_burst(small_gpt, Knobs(batch_size=4, attention=asked), **FAST)
    assert r.ok, r.error
    assert r.attention_backend == ran and "attention" not in r.no_effect


@pytest.mark.parametrize("asked", ["efficient", "cudnn"])
def test_cuda_only_kernels_run_auto_on_a_cpu_and_say_so(small_gpt, asked):
    r = run_burst(small_gpt, Knobs(batch_size=4, attention=asked), **FAST)
    assert r.ok, r.error
    assert r.no_effect["attention"].startswith(f"{asked} attention has CUDA kernels only")
    assert r.attention_backend == "flash"  # what auto ran in its place
    assert attention_no_effect(Knobs(attention=asked), CUDA) == {}


class _WideValues(nn.Module):
    """Attention whose values are twice as wide as its queries: math runs it, CPU flash cannot
    (q, k and v must share their last dimension)."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 8)
        self.out = nn.Linear(16, 2)

    def forward(self, x):
        tokens = x.view(-1, 1, 2, 4)  # (batch, one head, 2 tokens, 4 features)
        att = F.scaled_dot_product_attention(self.q(tokens), self.k(tokens), self.v(tokens))
        return self.out(att.flatten(1))


def _wide_values() -> Workload:
    return Workload(name="wide", model=_WideValues, dataset=tensor_workload(features=8).dataset)


def test_a_kernel_that_refuses_the_models_attention_is_a_result_naming_the_knob():
    r = run_burst(_wide_values(), Knobs(batch_size=8, attention="flash"), **FAST)
    assert r.status == "error" and r.bad_knob == "attention"
    assert r.error.startswith("KnobError: attention='flash' is not allowed: one that runs this "
                              "model's attention here (torch.float32, head dim 4): auto, math; "
                              "PyTorch's flash kernel refused it: Flash attention requires q,k,v "
                              "to have the same last dimension")  # fmt: skip
    assert r.steps == 0  # refused in set-up, before any warm-up
    ok = run_burst(_wide_values(), Knobs(batch_size=8), **FAST)
    assert ok.ok and ok.attention_backend == "math"


def test_a_compiled_burst_is_refused_in_set_up_too_before_anything_compiles():
    # no activation count runs under compile: a training forward of the plain model decides
    r = run_burst(_wide_values(), Knobs(batch_size=8, attention="flash", compile="default"),
                  **FAST)  # fmt: skip
    assert r.bad_knob == "attention" and "same last dimension" in r.error
    assert r.compile_s is None and r.steps == 0


def test_a_model_without_sdpa_says_the_knob_had_nothing_to_choose():
    r = run_burst(tensor_workload(), Knobs(batch_size=8, attention="flash"), **FAST)
    assert r.ok and r.attention_backend is None
    assert r.no_effect["attention"] == NO_SDPA_CALL
    plain = run_burst(tensor_workload(), Knobs(batch_size=8), **FAST)
    assert "attention" not in plain.no_effect


def test_the_switches_are_the_knobs_inside_and_the_users_after():
    torch.backends.cuda.enable_flash_sdp(False)  # a user's own choice, earlier in the kernel
    try:
        with attention_scope(Knobs(), CPU):
            assert all(_switches().values())  # auto: PyTorch's choice among all, not the user's
        with attention_scope(Knobs(attention="math"), CPU):
            assert _switches() == {"flash": False, "efficient": False, "cudnn": False,
                                   "math": True}  # fmt: skip
        with attention_scope(Knobs(attention="cudnn"), CPU):  # no kernel here: auto runs
            assert all(_switches().values())
        assert _switches()["flash"] is False and _switches()["math"] is True
    finally:
        torch.backends.cuda.enable_flash_sdp(True)


def test_a_burst_leaves_the_switches_as_it_found_them(small_gpt):
    before = _switches()
    assert run_burst(small_gpt, Knobs(batch_size=4, attention="math"), **FAST).ok
    assert _switches() == before


def test_the_watch_asks_in_autocasts_dtype_as_the_step_runs():
    q = torch.randn(2, 2, 8, 16)
    with watch_attention("auto") as seen, torch.autocast("cpu", dtype=torch.bfloat16):
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert seen.calls == 1 and seen.ran() == "flash"
    flash = Knobs(attention="flash")
    with attention_scope(flash, CPU), watch_attention("flash", strict=False) as lenient:
        out = F.scaled_dot_product_attention(q, q, q[..., :8])  # refused, then run under auto
    assert out.shape == (2, 2, 8, 8) and lenient.calls == 1 and lenient.ran() is None
    assert "same last dimension" in lenient.refused


def test_the_tuner_searches_the_kernels_where_they_act(small_gpt, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert attention_space(small_gpt, CUDA) == {"attention": ["auto", "flash", "efficient",
                                                              "cudnn"]}  # fmt: skip
    assert attention_space(small_gpt, CPU) == {}  # the tuner's space is a GPU's
    unknown = tensor_workload()  # a user's model: the burst's watch finds out, not the tuner
    assert attention_space(unknown, CUDA) == {}
    assert small_gpt.extras[SDPA_KEY] == "sdpa"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert attention_space(small_gpt, CUDA) == {"attention": ["auto", "efficient"]}
