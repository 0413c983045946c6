import pytest
import torch
from torch import nn

from workbench.core.knobs import Knobs
from workbench.engine import memory
from workbench.engine.workloads.gpt import TinyGPT


def test_static_parts_are_the_bytes_of_the_tensors():
    model = nn.Sequential(nn.Linear(100, 50), nn.Linear(50, 10))  # 5,050 + 510 = 5,560 params
    opt = torch.optim.Adam(model.parameters())
    parts = memory.static_parts(model, opt)
    assert parts["params_mib"] == pytest.approx(5560 * 4 / 2**20)
    assert parts["grads_mib"] == pytest.approx(5560 * 4 / 2**20)
    assert parts["optimizer_mib"] == 0  # Adam makes its state at the first step
    model(torch.randn(3, 100)).sum().backward()
    opt.step()
    parts = memory.static_parts(model, opt)
    # two moments per parameter plus a 4-byte step counter per parameter tensor (4 tensors)
    assert parts["optimizer_mib"] == pytest.approx((2 * 5560 * 4 + 4 * 4) / 2**20)


def test_frozen_parameters_have_no_gradient_and_shared_ones_count_once():
    model = nn.Linear(10, 10)  # 110 params
    model.bias.requires_grad_(False)
    tied = nn.ModuleList([model, model])
    parts = memory.static_parts(tied, torch.optim.SGD(model.parameters(), lr=0.1))
    assert parts["params_mib"] == pytest.approx(110 * 4 / 2**20)
    assert parts["grads_mib"] == pytest.approx(100 * 4 / 2**20)


def test_the_probe_counts_saved_activations_not_parameters():
    lin = nn.Linear(256, 256, bias=False)
    x = torch.randn(64, 256, requires_grad=True)
    with memory.SavedTensorProbe(lin.parameters()) as probe:
        y = torch.relu(lin(x))
    # linear keeps its input (64x256 fp32, 64 KiB); relu keeps its output (another 64 KiB);
    # the weight is a parameter and is left out
    assert probe.mib == pytest.approx(2 * 64 * 256 * 4 / 2**20)
    del y


def test_fragmentation_and_breakdown_arithmetic():
    assert memory.fragmentation_pct(750.0, 1000.0) == pytest.approx(25.0)
    assert memory.fragmentation_pct(None, 1000.0) is None
    parts = {"params_mib": 100.0, "grads_mib": 100.0, "optimizer_mib": 200.0}
    cuda = memory.breakdown(parts, 300.0, 1000.0, on_cuda=True)
    assert cuda["rest_mib"] == 600.0 and cuda["activations_mib"] == 300.0
    cpu = memory.breakdown(parts, 300.0, 1000.0, on_cuda=False)
    assert cpu["rest_mib"] is None  # the process's memory holds the interpreter too


def test_a_cpu_burst_reports_its_breakdown_and_memory_timeline(tiny_data):
    from workbench.engine.burst import run_burst

    r = run_burst("gpt", Knobs(batch_size=4), data_dir=tiny_data, seconds=0.3, min_steps=2,
                  warmup_steps=1, record=False)  # fmt: skip
    assert r.ok, r.error
    b = r.memory_breakdown
    n_params = sum(p.numel() for p in TinyGPT().parameters())  # the tied head counts once
    assert b["params_mib"] == pytest.approx(n_params * 4 / 2**20, rel=1e-3)
    assert b["optimizer_mib"] == pytest.approx(2 * b["params_mib"], rel=0.01)  # AdamW moments
    assert b["activations_mib"] > b["params_mib"] / 10
    assert r.fragmentation_pct is None  # no caching allocator on a CPU
    assert len(r.mem_timeline) >= 2
    times = [t for t, _ in r.mem_timeline]
    assert times == sorted(times) and max(m for _, m in r.mem_timeline) == pytest.approx(
        r.peak_mem_mib, abs=1.0
    )


def test_the_probe_leaves_nothing_alive():
    """A pack hook that returns the saved tensor itself makes a saved output hold its own
    grad_fn: a cycle through C++ that leaked one batch of activations per burst."""
    import gc
    import weakref

    lin = nn.Linear(64, 64)
    with memory.SavedTensorProbe(lin.parameters()):
        y = torch.relu(lin(torch.randn(8, 64)))  # relu saves its own output
    gone = weakref.ref(y)
    del y
    gc.collect()
    assert gone() is None
