"""``gpt`` and ``gpt:<size>`` by name: the shapes, their token data and what a burst reports."""

import pytest
import torch

from workbench import Knobs, run_burst
from workbench.engine.datasets import BigramTokenWindows, TokenWindows
from workbench.engine.workloads import name_for_ranks, resolve_workload, workload_names
from workbench.engine.workloads.gpt import GPT_SIZES, GPTShape

FAST = {"seconds": 0.2, "warmup_steps": 1, "min_steps": 2, "record": False}


def test_every_gpt_size_is_a_built_in_name_the_ranks_take_as_it_is(tiny_data):
    sized = [f"gpt:{size}" for size in GPT_SIZES]
    assert set(sized) <= set(workload_names())
    for name in ["gpt", *sized]:
        wl = resolve_workload(name, tiny_data)
        shape = GPT_SIZES.get(name.partition(":")[2], GPTShape())
        assert wl.name == name and wl.tokens_per_sample == shape.block
        assert name_for_ranks(name) == name  # a built-in, never module "gpt", function "124m"
    big = resolve_workload("gpt:124m", tiny_data)
    assert big.description == ("decoder-only transformer, 12 layers x 768, 12 heads, 1,024 "
                               "tokens (vocabulary 50,257, byte pairs)")  # fmt: skip
    assert isinstance(big.dataset(), BigramTokenWindows)
    assert isinstance(resolve_workload("gpt", tiny_data).dataset(), TokenWindows)


def test_gpt_stays_the_cpu_sized_default(tiny_data):
    wl = resolve_workload("gpt", tiny_data)
    assert GPTShape() == GPTShape(vocab=256, block=256, layers=6, heads=6, width=384)
    with torch.device("meta"):
        assert wl.model().tok.weight.shape == (256, 384)


def test_a_sized_gpt_burst_reports_tokens_and_its_flops(tiny_data, monkeypatch):
    # gpt:124m itself is a GPU's work (about 0.9 TFLOP a sample); the same factory and data
    # path at a CPU's size: a vocabulary past bytes, read as byte pairs
    small = GPTShape(vocab=50257, pad_to=64, block=32, layers=1, heads=2, width=32)
    monkeypatch.setitem(GPT_SIZES, "124m", small)
    r = run_burst("gpt:124m", Knobs(batch_size=2), data_dir=tiny_data, **FAST)
    assert r.ok, r.error
    assert r.workload == "gpt:124m" and r.attention_backend == "flash"
    assert r.tokens_per_s == pytest.approx(r.samples_per_s * 32)
    params = (12 * 32 * 32 + 13 * 32) + 2 * 32 + 50304 * 32  # a block, the last norm, the head
    assert r.flops_per_sample == (6 * params + 12 * 1 * 32 * 32) * 32  # 6N + 12 L C T a token
