"""The ``packing`` knob on the CPU: padding against packing, tokens/s of real tokens only, and
every place it is refused with the reason."""

import pytest
import torch
from workloads_for_tests import tensor_workload

from workbench import Knobs, run_burst
from workbench.core.errors import KnobError
from workbench.engine.packing import RealTokens, documents_view, packing_space
from workbench.engine.workloads import resolve_workload
from workbench.engine.workloads.gpt import GPTShape, gpt
from workbench.tuning.tuner import default_space

FAST = {"seconds": 0.3, "warmup_steps": 1, "min_steps": 3, "record": False}
SMALL = GPTShape(block=64, layers=1, heads=2, width=32)
CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture(scope="module")
def small_gpt(tiny_data):
    return gpt(tiny_data, shape=SMALL)


@pytest.fixture(scope="module")
def bursts(small_gpt):
    return {p: run_burst(small_gpt, Knobs(batch_size=8, packing=p), **FAST)
            for p in ("off", "pad", "pack")}  # fmt: skip


def test_packing_leaves_no_padding_where_one_document_a_row_leaves_most(bursts):
    assert all(r.ok for r in bursts.values()), {p: r.error for p, r in bursts.items()}
    assert bursts["pack"].pad_share_pct == 0.0
    assert 50.0 < bursts["pad"].pad_share_pct < 80.0  # log-normal lengths, median 16 of 64
    assert bursts["off"].pad_share_pct is None  # no documents: nothing to say


def test_tokens_per_s_counts_real_tokens_and_a_sample_is_a_rows_worth_of_them(bursts):
    for name in ("pad", "pack"):
        r = bursts[name]
        positions = r.steps * 8 * 64  # every row the window trained, padding included
        real = positions * (1 - r.pad_share_pct / 100)
        assert r.tokens_per_s == pytest.approx(real / r.measured_s)
        assert r.samples_per_s == pytest.approx(r.tokens_per_s / 64)
        assert r.samples == round(real / 64) and r.samples_from == "real tokens"
    pad = bursts["pad"]
    assert pad.tokens_per_s < 0.5 * pad.steps * 8 * 64 / pad.measured_s  # most of it padding
    off = bursts["off"]
    assert off.samples == off.steps * 8 and off.samples_from == "all tensors"


def test_the_compute_only_ceiling_counts_its_replayed_batchs_real_tokens(small_gpt):
    r = run_burst(small_gpt, Knobs(batch_size=8, packing="pad", loader="synthetic"), **FAST)
    assert r.ok, r.error
    one = small_gpt.extras["documents"]("pad")
    real = sum(int(one[i][0]["lengths"]) for i in range(8))  # the first batch, unshuffled
    assert r.pad_share_pct == pytest.approx(100 * (1 - real / (8 * 64)))
    assert r.tokens_per_s == pytest.approx(r.steps * real / r.measured_s)


def test_the_loader_ceiling_counts_samples_as_the_burst_does(small_gpt):
    from workbench.analysis.loader_ceiling import run_loader_burst
    from workbench.engine.window import BurstWindow

    window = BurstWindow(seconds=0.2, min_steps=3, warmup_steps=1)
    pad = run_loader_burst(small_gpt, Knobs(batch_size=8, packing="pad"), window=window)
    pack = run_loader_burst(small_gpt, Knobs(batch_size=8, packing="pack"), window=window)
    assert pad.status == pack.status == "ok", (pad.error, pack.error)
    assert pack.samples == pack.batches * 8  # full rows: a row is a sample
    assert pad.samples < 0.5 * pad.batches * 8  # mostly padding: less than half a sample a row


def test_packed_rows_run_on_the_cpus_flash_kernel_which_takes_a_mask(small_gpt):
    r = run_burst(small_gpt, Knobs(batch_size=4, packing="pack", attention="flash"), **FAST)
    assert r.ok, r.error
    assert r.attention_backend == "flash" and "attention" not in r.no_effect


def test_cudas_flash_kernel_is_refused_for_packed_rows_naming_the_mask(small_gpt):
    with pytest.raises(KnobError, match="attention='flash' is not allowed: auto, ") as refused:
        documents_view(small_gpt, Knobs(packing="pack", attention="flash"), CUDA)
    assert refused.value.knob == "attention"
    assert "takes no mask but is_causal" in str(refused.value)
    for fine in (Knobs(packing="pad", attention="flash"), Knobs(packing="pack")):
        assert documents_view(small_gpt, fine, CUDA).forward is not None  # no mask / auto


@pytest.mark.parametrize("which", ["cnn", "own"])
def test_a_workload_without_documents_refuses_packing_with_the_reason(which, tiny_data):
    wl = resolve_workload("cnn", tiny_data) if which == "cnn" else tensor_workload()
    r = run_burst(wl, Knobs(batch_size=4, packing="pad"), **FAST)
    assert r.status == "error" and r.bad_knob == "packing"
    assert f"workload {wl.name}: it has no documents to pad or pack" in r.bad_knob_message
    if which == "own":  # off: the workload as it is
        assert run_burst(wl, Knobs(batch_size=4), **FAST).ok


def test_a_device_resident_batch_is_counted_once():
    class _Lengths(torch.Tensor):
        reads = 0

        def sum(self, *args, **kwargs):
            type(self).reads += 1
            return super().sum(*args, **kwargs)

    lengths = torch.tensor([3, 5]).as_subclass(_Lengths)
    batch = ({"tokens": torch.zeros(2, 8, dtype=torch.int64, device="meta"),
              "lengths": lengths}, torch.zeros(2, 8))  # fmt: skip
    tally = RealTokens()
    assert [tally.add(batch) for _ in range(3)] == [8, 8, 8] and tally.total == 24
    assert _Lengths.reads == 1  # not a device read a step
    tally.reset()
    assert tally.total == 0 and tally.add(batch) == 8 and _Lengths.reads == 1


def test_the_tuner_compares_pad_and_pack_from_a_start_that_reads_documents(small_gpt, tiny_data):
    assert default_space(CPU, small_gpt, Knobs(packing="pad"))["packing"] == ["pad", "pack"]
    assert "packing" not in default_space(CPU, small_gpt, Knobs())  # off reads other data
    cnn = resolve_workload("cnn", tiny_data)
    assert packing_space(cnn, Knobs(packing="pad")) == {}


def test_a_tune_over_packing_for_a_workload_without_documents_is_refused_before_a_burst():
    from workbench.tuning.tuner import tune

    with pytest.raises(KnobError, match="packing=\\['pad'\\] is not allowed: off for workload"):
        tune(tensor_workload(), {"packing": ["off", "pad"]}, budget=2, record=False)
