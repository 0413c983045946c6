"""A Hugging Face causal LM built from its config (nothing downloaded) as a workload."""

import sys

import pytest

from workbench import Knobs, hf_causal_lm, run_burst
from workbench.core.errors import InputError
from workbench.engine.workloads import name_for_ranks, resolve_workload

transformers = pytest.importorskip("transformers")  # the dev extra installs it

FAST = {"seconds": 0.2, "warmup_steps": 1, "min_steps": 2, "record": False}


def _tiny(**changes):
    fields = {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 32, "vocab_size": 1000,
              "bos_token_id": 0, "eos_token_id": 0, **changes}  # fmt: skip
    return transformers.GPT2Config(**fields)


def test_a_config_trains_with_tokens_flops_and_its_attention_kernel(tiny_data):
    wl = hf_causal_lm(_tiny(), data_dir=tiny_data)
    assert wl.name == "hf:gpt2" and wl.tokens_per_sample == 32
    r = run_burst(wl, Knobs(batch_size=2), **FAST)
    assert r.ok, r.error
    assert r.tokens_per_s == pytest.approx(r.samples_per_s * 32)
    assert r.flops_per_sample == wl.flops_per_sample > 0
    # GPT2Config's attention dropout (0.1) reaches SDPA only in training, where the CPU's
    # flash kernel refuses it: what auto ran is what the step ran, math
    assert r.attention_backend == "math"
    refused = run_burst(wl, Knobs(batch_size=2, attention="flash"), **FAST)
    assert refused.bad_knob == "attention"
    assert "dropout 0.1): auto, math; PyTorch's flash kernel refused it" in refused.error
    no_dropout = hf_causal_lm(_tiny(attn_pdrop=0.0), name="tiny", data_dir=tiny_data)
    r = run_burst(no_dropout, Knobs(batch_size=2, attention="flash"), **FAST)
    assert r.ok and r.attention_backend == "flash" and r.workload == "tiny"


def test_hf_gpt2_is_gpt2_small_from_transformers_defaults(tiny_data):
    wl = resolve_workload("hf:gpt2", tiny_data)
    assert wl.description == ("Hugging Face GPT2Config: 12 layers x 768, 1,024 tokens, "
                              "vocabulary 50,257 (built from its config)")  # fmt: skip
    assert wl.tokens_per_sample == 1024 and name_for_ranks("hf:gpt2") == "hf:gpt2"
    n = 124_439_808 - 1024 * 768  # GPT-2 small's parameters less its position table
    assert wl.flops_per_sample == (6 * n + 12 * 12 * 768 * 1024) * 1024


def test_a_sequence_longer_than_the_configs_positions_is_refused(tiny_data):
    with pytest.raises(InputError, match=r"seq_len=64 is not allowed: from 1 to 32, the "
                                         "positions GPT2Config has"):  # fmt: skip
        hf_causal_lm(_tiny(), seq_len=64, data_dir=tiny_data)


def test_without_transformers_the_workload_says_how_to_install_it(tiny_data, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now fails
    with pytest.raises(InputError, match=r"workload='hf:gpt2' is not allowed: a Hugging Face "
                       r"workload needs transformers, not installed here: pip install "
                       r"'throughput-workbench\[hf\]'"):  # fmt: skip
        resolve_workload("hf:gpt2", tiny_data)
