"""The sharding knob: FSDP2 against DDP on two real gloo ranks, and where it cannot act."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from workloads_for_tests import tensor_workload, tiny_gpt

from workbench.core.knobs import Knobs
from workbench.engine import memory, sharding
from workbench.engine.training import build_train_state, micro_step, no_effect, optimizer_step
from workbench.engine.workloads.gpt import GPTShape, TinyGPT

SHAPE = GPTShape(block=32, layers=2, heads=2, width=64)
STEPS = 4
BATCH = 4  # per rank
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
"""fp32 on both sides: FSDP's reduce-scatter averages the same gradients DDP's all-reduce
does, so the steps agree to float32 rounding (on gloo they came out bit-identical)."""


def _batches(steps: int, rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The same global batches on every run, each rank taking its half (as a sampler would)."""
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        tokens = torch.randint(0, 256, (2 * BATCH, SHAPE.block + 1), generator=g)
        mine = tokens[rank * BATCH : (rank + 1) * BATCH]
        out.append((mine[:, :-1], mine[:, 1:]))
    return out


def _train(rank: int, init: str, out: str, changes: dict) -> None:
    """One rank: the burst's own state (model, wrap, optimizer) for ``changes``, a few steps."""
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    knobs = Knobs(batch_size=BATCH, world_size=2, **changes)
    dev = torch.device("cpu")
    torch.manual_seed(0)  # as a burst seeds every rank before building the model
    wl = _workload()
    state = build_train_state(wl, knobs, dev, wrap=lambda m: sharding.data_parallel(m, knobs, dev))
    batches = _batches(STEPS, rank)
    dtypes = _gathered_dtypes(state.plain, state, batches[0])
    activations = memory.activation_mib(state, batches[0])
    losses = []
    for batch in batches:
        loss = micro_step(state, batch)
        optimizer_step(state)
        dist.all_reduce(loss)  # the mean over both ranks' halves: the global batch's loss
        losses.append(loss.item() / 2)
    full = {n: _full(p).tolist() for n, p in state.plain.named_parameters()}
    doc = {
        "losses": losses,
        "params": full if rank == 0 else None,
        "static": memory.static_parts(state.plain, state.optimizer),
        "activations_mib": activations,
        "wrapped": state.wrapped,
        "units": sharding.sharded_units(state.plain),
        "gathered_dtypes": dtypes,
        "state_dtypes": _state_dtypes(state.optimizer),
    }
    Path(out, f"rank{rank}.json").write_text(json.dumps(doc))
    dist.destroy_process_group()


def _workload():
    """tiny-gpt's model and loss (its data file is not needed: the batches are made here)."""
    from workbench.engine.workloads import Workload
    from workbench.engine.workloads.gpt import token_loss

    def adamw(params):
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1)

    return Workload(name="tiny-gpt", model=lambda: TinyGPT(SHAPE), dataset=lambda: [],
                    loss=token_loss, optimizer=adamw)  # fmt: skip


def _state_dtypes(optimizer: torch.optim.Optimizer) -> list[str]:
    """The dtypes of the optimizer's state tensors (its step counts, scalars, left out)."""
    tensors = [v for s in optimizer.state.values() for v in s.values() if v.dim() > 0]
    return sorted({str(v.dtype) for v in tensors})


def _gathered_dtypes(model, state, batch) -> list[str]:
    """The dtype of a block's weight while the block runs (FSDP's gathered parameter)."""
    seen: list[str] = []
    layer = model.blocks[0].qkv  # inside the block: FSDP's own hooks are the block's
    hook = layer.register_forward_hook(lambda m, i, o: seen.append(str(m.weight.dtype)))
    with torch.no_grad(), state.autocast():
        state.loss_of(model, batch)
    hook.remove()
    return seen


def _full(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if hasattr(p, "full_tensor") else p.detach()


def _run_two_ranks(tmp_path: Path, name: str, changes: dict) -> list[dict]:
    out = tmp_path / name
    out.mkdir()
    init = f"file://{out / 'rendezvous'}"
    # spawn, not fork: a fork of the test process after earlier tests ran OpenMP or gloo
    # threads can hang in the child (seen in the full serial suite), a fresh interpreter cannot
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_train, args=(r, init, str(out), changes)) for r in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0], name
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, list[dict]]:
    """DDP, FSDP and FSDP keeping its gathered parameters, each on two gloo ranks."""
    tmp = tmp_path_factory.mktemp("sharding")
    cases = {
        "ddp": {},
        "fsdp": {"sharding": "fsdp"},
        "fsdp-keep": {"sharding": "fsdp", "reshard_after_forward": False},
    }
    return {name: _run_two_ranks(tmp, name, changes) for name, changes in cases.items()}


def test_fsdp_trains_what_ddp_trains_on_two_gloo_ranks(trained):
    ddp = trained["ddp"][0]
    for name in ("fsdp", "fsdp-keep"):
        fsdp = trained[name][0]
        torch.testing.assert_close(torch.tensor(fsdp["losses"]), torch.tensor(ddp["losses"]),
                                   **TOLERANCE)  # fmt: skip
        for param, values in ddp["params"].items():
            torch.testing.assert_close(torch.tensor(fsdp["params"][param]),
                                       torch.tensor(values), **TOLERANCE)  # fmt: skip
    torch.manual_seed(0)
    start = TinyGPT(SHAPE).state_dict()  # what both built: the steps moved every weight from it
    for param, values in ddp["params"].items():
        assert not torch.allclose(torch.tensor(values), start[param], **TOLERANCE), param


def test_each_fsdp_rank_holds_half_the_parameters_and_optimizer_state(trained):
    ddp = trained["ddp"]
    for rank in (0, 1):
        whole, shard = ddp[rank]["static"], trained["fsdp"][rank]["static"]
        for part in ("params_mib", "grads_mib", "optimizer_mib"):
            assert shard[part] == pytest.approx(whole[part] / 2, rel=0.05), (rank, part)
    # both DDP ranks hold the whole model; FSDP's two shards add up to it
    total = sum(r["static"]["params_mib"] for r in trained["fsdp"])
    assert total == pytest.approx(ddp[0]["static"]["params_mib"], rel=1e-6)


def test_the_sharded_model_is_two_blocks_and_the_root_and_counts_as_wrapped(trained):
    assert [r["units"] for r in trained["fsdp"]] == [3, 3]  # 2 blocks + the root
    assert all(r["wrapped"] for name in trained for r in trained[name])
    assert trained["ddp"][0]["units"] == 0


def test_gathered_parameters_are_not_counted_as_activations(trained):
    """FSDP's gathered weights, saved by the matmuls for backward, are parameters: the
    activation probe counts what DDP's counts."""
    want = trained["ddp"][0]["activations_mib"]
    assert want > 0
    for name in ("fsdp", "fsdp-keep"):
        assert trained[name][0]["activations_mib"] == pytest.approx(want, rel=1e-6), name


def test_bf16_gathers_16_bit_parameters_and_keeps_fp32_shards_and_state(tmp_path):
    ranks = _run_two_ranks(tmp_path, "bf16", {"sharding": "fsdp", "precision": "bf16"})
    for r in ranks:
        assert r["gathered_dtypes"] == ["torch.bfloat16"]
        assert r["state_dtypes"] == ["torch.float32"]  # Adam's moments on the fp32 shards
        assert all(loss == loss for loss in r["losses"])  # finite: no NaN


def test_fsdp_cannot_act_on_one_rank_and_says_why():
    cpu = torch.device("cpu")
    wl = tensor_workload()
    assert no_effect(Knobs(sharding="fsdp"), cpu, wl)["sharding"] == sharding.ONE_RANK
    assert "sharding" not in no_effect(Knobs(sharding="fsdp", world_size=2), cpu, wl)
    assert no_effect(Knobs(reshard_after_forward=False), cpu, wl)["reshard_after_forward"] == (
        sharding.NO_FSDP
    )
    two = Knobs(sharding="fsdp", world_size=2, reshard_after_forward=False, bucket_cap_mb=50.0)
    reasons = no_effect(two, cpu, wl)
    assert "reshard_after_forward" not in reasons
    assert reasons["bucket_cap_mb"] == sharding.DDP_ONLY
    assert "bucket_cap_mb" not in no_effect(two.replace(sharding="ddp"), cpu, wl)
    assert sharding.sharding_no_effect(Knobs()) == {}


def test_blocks_are_the_models_own_and_a_model_without_any_is_one_unit():
    model = TinyGPT(SHAPE)
    assert sharding.shard_blocks(model) == list(model.blocks)
    assert sharding.shard_blocks(tensor_workload().model()) == []
    assert not sharding.is_sharded(model) and sharding.sharded_notes(model) == ({}, [])


def test_mixed_precision_is_16_bit_parameters_with_fp32_reduction():
    bf16 = sharding.mixed_precision("bf16")
    assert (bf16.param_dtype, bf16.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert sharding.mixed_precision("fp16").param_dtype == torch.float16
    for fp32 in ("default", "fp32-strict", "tf32"):
        policy = sharding.mixed_precision(fp32)
        assert policy.param_dtype is None and policy.reduce_dtype is None


def test_the_tuner_searches_sharding_for_several_ranks_of_a_model_with_blocks(tiny_data):
    gpt = tiny_gpt(tiny_data)
    assert sharding.sharding_space(gpt, Knobs()) == {}  # one rank: fsdp cannot act
    assert sharding.sharding_space(gpt, Knobs(world_size=2)) == {"sharding": ["ddp", "fsdp"]}
    started = sharding.sharding_space(gpt, Knobs(world_size=2, sharding="fsdp"))
    assert started["reshard_after_forward"] == [True, False]
    assert sharding.sharding_space(tensor_workload(), Knobs(world_size=2)) == {}  # no blocks


def test_a_hugging_face_models_blocks_are_its_decoder_layers():
    transformers = pytest.importorskip("transformers")
    configs = {
        "GPT2Block": transformers.GPT2Config(n_layer=3, n_embd=64, n_head=2),
        "LlamaDecoderLayer": transformers.LlamaConfig(
            num_hidden_layers=3, hidden_size=64, intermediate_size=128, num_attention_heads=2,
            num_key_value_heads=2, vocab_size=128,
        ),
    }  # fmt: skip
    for layer, config in configs.items():
        with torch.device("meta"):  # shapes only: nothing downloaded, nothing allocated
            model = transformers.AutoModelForCausalLM.from_config(config)
        assert [type(b).__name__ for b in sharding.shard_blocks(model)] == [layer] * 3
