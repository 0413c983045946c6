"""The ``fp8`` knob: which Linear layers float8 training converts, every way it says it cannot
act (a CPU, an older GPU, torchao missing, no eligible layer), the conversion itself on the
CPU (torchao converts without a GPU), and on a GPU with float8 tensor cores gpt:124m training
in float8 close to bf16."""

import copy
import sys

import pytest
import torch
from torch import nn
from workloads_for_tests import tensor_workload

from workbench import Knobs, run_burst, sweep
from workbench.core.errors import KnobError
from workbench.engine import fp8
from workbench.engine.workloads.gpt import GPT_SIZES, GPTShape, TinyGPT, gpt, gpt_124m

FAST = {"seconds": 0.2, "warmup_steps": 1, "min_steps": 2, "record": False}
SMALL = GPTShape(block=32, layers=1, heads=2, width=32)
CPU, CUDA = torch.device("cpu"), torch.device("cuda")
FP8 = Knobs(batch_size=4, precision="bf16", fp8="tensorwise")


@pytest.fixture(scope="module")
def small_gpt(tiny_data):
    return gpt(tiny_data, shape=SMALL)


@pytest.fixture
def float8_cores(monkeypatch):
    """This machine's CPU treated as a device with float8 tensor cores: the conversion and the
    burst's plumbing run for real (PyTorch's CPU _scaled_mm does the matmuls)."""
    monkeypatch.setattr(fp8, "device_refusal", lambda device: None)


def _capability(monkeypatch, major: int, minor: int) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, minor))


def _torchao():
    return pytest.importorskip("torchao")  # the dev extra installs it


def test_fp8_needs_bf16_and_names_itself():
    with pytest.raises(KnobError, match="needs precision=bf16 \\(not default\\)") as err:
        Knobs(fp8="tensorwise")
    assert err.value.knob == "fp8"
    assert Knobs(precision="bf16", fp8="rowwise_with_gw_hp").fp8 == "rowwise_with_gw_hp"


def test_a_cpu_burst_trains_unconverted_and_says_why(small_gpt):
    r = run_burst(small_gpt, FP8, **FAST)
    assert r.ok, r.error
    assert r.no_effect["fp8"].startswith("float8 training needs float8 tensor cores (CUDA")
    assert "this is a CPU" in r.no_effect["fp8"]
    assert r.fp8_linears is None


@pytest.mark.parametrize(("capability", "acts"), [((8, 0), False), ((8, 6), False),
                                                  ((8, 9), True), ((9, 0), True)])  # fmt: skip
def test_the_gpus_without_float8_cores_are_named_by_capability(monkeypatch, capability, acts):
    _capability(monkeypatch, *capability)
    said = fp8.fp8_no_effect(FP8, CUDA)
    if acts:
        assert said == {}
    else:
        assert f"this GPU is {capability[0]}.{capability[1]}" in said["fp8"]
    assert fp8.fp8_no_effect(Knobs(), CUDA) == {}  # off: nothing to say


def test_without_torchao_the_knob_names_itself_and_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao", None)  # what an environment without it finds
    assert "pip install 'throughput-workbench[fp8]'" in fp8.torchao_missing()
    with pytest.raises(KnobError, match="pip install 'throughput-workbench\\[fp8\\]'") as err:
        fp8.convert(TinyGPT(SMALL), "tensorwise")
    assert err.value.knob == "fp8"


def test_without_torchao_a_burst_that_could_convert_is_an_error_naming_fp8(
    small_gpt, float8_cores, monkeypatch
):
    monkeypatch.setitem(sys.modules, "torchao", None)
    r = run_burst(small_gpt, FP8, **FAST)
    assert r.status == "error" and r.bad_knob == "fp8"
    assert "torchao>=0.17" in r.bad_knob_message


def test_gpt_124m_converts_every_block_linear_and_keeps_the_tied_head():
    with torch.device("meta"):
        model = TinyGPT(GPT_SIZES["124m"])
    plan = fp8.plan_linears(model)
    per_block = ["qkv", "proj", "mlp.0", "mlp.2"]
    assert plan.converted == [f"blocks.{i}.{n}" for i in range(12) for n in per_block]
    assert plan.skipped == {"head": "the output head stays in bf16"}


class _HeadFirst(nn.Module):
    """A head registered before the body, tied to the token table; a Linear whose width is
    not a multiple of 16."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(64, 32)
        self.out = nn.Linear(32, 64, bias=False)
        self.out.weight = self.tok.weight
        self.odd = nn.Linear(32, 40)
        self.body = nn.Linear(40, 32)


class _WithOutputEmbeddings(nn.Sequential):
    """Hugging Face's way of naming the head: ``get_output_embeddings()``."""

    def get_output_embeddings(self) -> nn.Module:
        return self[0]


def test_the_filter_skips_the_head_and_dimensions_not_a_multiple_of_16():
    plan = fp8.plan_linears(_HeadFirst())
    assert plan.skipped == {"out": "the output head stays in bf16",
                            "odd": "32x40: a dimension is not a multiple of 16",
                            "body": "the output head stays in bf16"}  # fmt: skip
    assert plan.no_effect("mine").startswith("no Linear layer of mine can train in float8 (out:")
    named = fp8.plan_linears(_WithOutputEmbeddings(nn.Linear(32, 32), nn.Linear(32, 32)))
    assert named.converted == ["1"] and list(named.skipped) == ["0"]
    assert (
        fp8.Fp8Plan().no_effect("cnn")
        == "cnn has no Linear layer: float8 training converts only those"
    )


def test_eligible_layers_are_counted_on_the_meta_device(small_gpt):
    assert fp8.eligible_layers(small_gpt) == 4
    assert fp8.eligible_layers(tensor_workload(features=10)) == 0  # 10 wide, then the head


def _train(model: nn.Module, steps: int = 3) -> list[float]:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (4, SMALL.block), generator=g)
    y = torch.randint(0, 256, (4, SMALL.block), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "rowwise_with_gw_hp"])
def test_conversion_on_the_cpu_swaps_the_planned_layers_and_trains_close(recipe):
    _torchao()
    from torchao.float8.float8_linear import Float8Linear

    torch.manual_seed(0)
    plain = TinyGPT(SMALL)
    model, plan = fp8.convert(copy.deepcopy(plain), recipe)
    converted = {n for n, m in model.named_modules() if isinstance(m, Float8Linear)}
    assert converted == set(plan.converted) == {"blocks.0.qkv", "blocks.0.proj",
                                                "blocks.0.mlp.0", "blocks.0.mlp.2"}  # fmt: skip
    assert type(model.head) is nn.Linear and model.head.weight is model.tok.weight
    ours, theirs = _train(model), _train(plain)
    assert all(torch.isfinite(torch.tensor(ours)))
    assert ours == pytest.approx(theirs, rel=0.01)
    assert ours[-1] < ours[0]  # it learns


def test_a_burst_that_converts_counts_the_layers_and_notes_compile(small_gpt, float8_cores):
    _torchao()
    r = run_burst(small_gpt, FP8, **FAST)
    assert r.ok, r.error
    assert r.fp8_linears == 4 and "fp8" not in r.no_effect
    assert fp8.COMPILE_NOTE in r.notes


def test_a_recipe_the_kernels_refuse_fails_in_set_up_naming_fp8(small_gpt, float8_cores,
                                                                 monkeypatch):  # fmt: skip
    _torchao()

    def refuse(*args, **kwargs):
        raise RuntimeError("rowwise scaling is not supported on this device")

    monkeypatch.setattr(torch, "_scaled_mm", refuse)  # what torchao's float8 matmul calls
    r = run_burst(small_gpt, FP8.replace(fp8="rowwise"), **FAST)
    assert r.status == "error" and r.bad_knob == "fp8", r.error
    assert "rowwise failed in set-up (RuntimeError: rowwise scaling is not supported" in r.error
    assert fp8.refusal_of(RuntimeError("elsewhere"), "rowwise") is None  # not torchao's


def test_a_model_without_an_eligible_layer_says_what_it_skipped(float8_cores):
    _torchao()
    r = run_burst(tensor_workload(features=10), FP8, **FAST)
    assert r.ok, r.error
    assert r.no_effect["fp8"] == ("no Linear layer of tiny can train in float8 (0: 10x32: a "
                                  "dimension is not a multiple of 16; 2: the output head "
                                  "stays in bf16)")  # fmt: skip
    assert r.fp8_linears is None and fp8.COMPILE_NOTE not in r.notes


def test_a_sweep_over_fp8_starts_from_bf16_and_each_row_says_what_ran(small_gpt, float8_cores):
    _torchao()
    with pytest.raises(KnobError, match="fp8='tensorwise' is not allowed: needs precision=bf16"):
        sweep(small_gpt, "fp8", ["off", "tensorwise"], **FAST)  # refused before any burst
    df = sweep(small_gpt, "fp8", ["off", "tensorwise"], base=FP8.replace(fp8="off"),
               reference_every=None, **FAST)  # fmt: skip
    assert list(df["fp8"]) == ["off", "tensorwise"] and list(df["status"]) == ["ok", "ok"]
    assert df["fp8_linears"].isna().iloc[0] and df["fp8_linears"].iloc[1] == 4


def test_the_tuner_searches_fp8_only_where_it_can_act(small_gpt, monkeypatch):
    _torchao()
    assert fp8.fp8_space(small_gpt, CPU) == {}
    _capability(monkeypatch, 9, 0)
    assert fp8.fp8_space(small_gpt, CUDA) == {"fp8": ["off", "tensorwise", "rowwise"]}
    assert fp8.fp8_space(tensor_workload(features=10), CUDA) == {}  # nothing to convert
    monkeypatch.setitem(sys.modules, "torchao", None)
    assert fp8.fp8_space(small_gpt, CUDA) == {}
    _capability(monkeypatch, 8, 0)
    assert fp8.unavailable(CUDA, small_gpt).endswith("this GPU is 8.0")


# -- on a GPU with float8 tensor cores ----------------------------------------------------------


def _needs_float8_cores() -> None:
    _torchao()
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < fp8.MIN_CAPABILITY:
        pytest.skip(
            f"float8 tensor cores need compute capability 8.9+; this GPU is {major}.{minor}"
        )


def _train_124m(model: nn.Module, steps: int = 6) -> list[float]:
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randint(0, 50257, (4, 1024), device="cuda", generator=g)
    y = torch.randint(0, 50257, (4, 1024), device="cuda", generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    losses = []
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_gpt_124m_trains_in_float8_close_to_bf16(recipe):
    _needs_float8_cores()
    torch.manual_seed(0)
    plain = TinyGPT(GPT_SIZES["124m"]).cuda()
    model, plan = fp8.convert(copy.deepcopy(plain), recipe)
    assert len(plan.converted) == 48
    ours, theirs = _train_124m(model), _train_124m(plain)
    assert all(torch.isfinite(torch.tensor(ours)))
    assert ours == pytest.approx(theirs, rel=0.02)  # float8 rounds; the curve stays bf16's
    assert ours[-1] < ours[0]


@pytest.mark.gpu
def test_a_gpt_124m_burst_trains_its_48_block_linears_in_float8(tiny_data):
    _needs_float8_cores()
    r = run_burst(gpt_124m(tiny_data), Knobs(batch_size=4, precision="bf16", fp8="tensorwise"),
                  seconds=1.0, record=False)  # fmt: skip
    assert r.ok, r.error
    assert r.fp8_linears == 48 and "fp8" not in r.no_effect
    assert r.tokens_per_s and r.tokens_per_s > 0
