"""The transformer FLOP count (6N + 12 * layers * width * seq_len a token) against PyTorch's own
count of the same model's matmuls.

The two differ by design in one place: ``N`` holds the biases and layer-norm gains (as
nanoGPT's does), whose multiplies the counter leaves out, 6 FLOPs each a token. Less that term,
they must agree exactly; with it, within 0.1% for GPT-2 small (0.085% measured)."""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from workbench.engine.workloads.gpt import GPT_SIZES, GPTShape, TinyGPT, token_loss
from workbench.engine.workloads.transformer_flops import (
    matmul_params,
    train_flops_per_sample,
    train_flops_per_token,
)


def _counted(model, forward, tokens) -> int:
    """Forward and backward FLOPs as FlopCounterMode counts them (under the math kernel, whose
    matmuls it counts: it has no formula for PyTorch's CPU flash kernel)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        token_loss(forward(model, tokens), tokens).backward()
    return counter.get_total_flops()


def _vector_params(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.dim() == 1)


@pytest.mark.parametrize("shape", [GPT_SIZES["124m"], GPTShape(block=64, layers=2, heads=4,
                                                                width=64)],
                         ids=["gpt:124m", "small"])  # fmt: skip
def test_the_formula_is_pytorchs_count_plus_the_biases(shape):
    with torch.device("meta"):  # shapes only: GPT-2 small costs no memory here
        model = TinyGPT(shape)
        tokens = torch.randint(0, shape.vocab, (1, shape.block))
    counted = _counted(model, lambda m, x: m(x), tokens)
    per_token = train_flops_per_token(matmul_params(model, model.head), shape.layers,
                                      shape.width, shape.block)  # fmt: skip
    formula = per_token * shape.block
    assert formula == counted + 6 * shape.block * _vector_params(model)
    if shape is GPT_SIZES["124m"]:
        assert formula == pytest.approx(counted, rel=1e-3)
        assert formula == train_flops_per_sample(lambda: TinyGPT(shape), lambda m: m.head,
                                                 12, 768, 1024)  # fmt: skip


def test_gpt2_smalls_parameters_are_llm_cs_and_n_leaves_the_position_table_out():
    with torch.device("meta"):
        model = TinyGPT(GPT_SIZES["124m"])
    assert sum(p.numel() for p in model.parameters()) == 124_475_904  # llm.c's, padded vocab
    assert model.tok.weight.shape == (50_304, 768) and model.head.weight is model.tok.weight
    assert matmul_params(model, model.head) == 124_475_904 - 1024 * 768
    assert matmul_params(model) == 124_475_904 - 1024 * 768 - 50_304 * 768  # no head given


def test_a_hugging_face_model_is_counted_the_same_way(tmp_path):
    transformers = pytest.importorskip("transformers")
    from workbench.engine.workloads.hf import hf_causal_lm

    (tmp_path / "t.bin").write_bytes(bytes(range(256)) * 4)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64,
                                     vocab_size=1000)  # fmt: skip
    wl = hf_causal_lm(config, data_dir=tmp_path / "t.bin")
    model = wl.model().eval()  # eval: the CPU's math kernel either way; no dropout to vary
    tokens = torch.randint(0, 1000, (1, 64))
    counted = _counted(model, wl.run_model, tokens)
    assert wl.flops_per_sample == counted + 6 * 64 * _vector_params(model)
