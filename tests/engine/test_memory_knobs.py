import pytest
import torch
from torch import nn

from workbench.core.knobs import KnobError, Knobs
from workbench.engine.memory import SavedTensorProbe
from workbench.engine.memory_knobs import (
    apply_activation_checkpointing,
    checkpoint_blocks,
    with_impl,
)
from workbench.engine.workloads.gpt import GPTShape, TinyGPT
from workbench.engine.workloads.vision import SmallConvNet

SHAPE = GPTShape(block=32, layers=3, heads=2, width=32)
MAKERS = [lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
          lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.1)]  # fmt: skip


def _grads(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model(x).float().square().mean().backward()
    return [p.grad.clone() for p in model.parameters()]


def test_the_built_in_models_name_their_blocks():
    assert len(checkpoint_blocks(SmallConvNet(10))) == 4
    assert len(checkpoint_blocks(TinyGPT(SHAPE))) == 3


def test_torchvision_resnet_blocks_are_found_by_shape():
    from torchvision.models import resnet18

    assert len(checkpoint_blocks(resnet18(num_classes=4))) == 8  # 4 stages x 2 BasicBlocks


def test_checkpointing_gives_the_same_gradients_and_keeps_less():
    torch.manual_seed(0)
    plain = TinyGPT(SHAPE)
    recomputed = TinyGPT(SHAPE)
    recomputed.load_state_dict(plain.state_dict())
    assert apply_activation_checkpointing(recomputed) == 3
    assert list(recomputed.state_dict()) == list(plain.state_dict())  # names unchanged
    x = torch.randint(0, 256, (4, 32))
    for a, b in zip(_grads(plain, x), _grads(recomputed, x), strict=True):
        torch.testing.assert_close(a, b)
    kept = []
    for model in (plain, recomputed):
        with SavedTensorProbe(model.parameters()) as probe:
            model(x).sum()
        kept.append(probe.mib)
    assert kept[1] < 0.5 * kept[0], kept  # the blocks' insides are recomputed, not kept


def test_a_model_without_blocks_is_reported_not_faked():
    model = nn.Linear(4, 4)
    assert apply_activation_checkpointing(model) == 0


@pytest.mark.parametrize("impl, foreach, fused", [("foreach", True, False),
                                                  ("fused", False, True),
                                                  ("for-loop", False, False)])  # fmt: skip
@pytest.mark.parametrize("make", MAKERS)
def test_the_optimizer_is_rebuilt_with_the_implementation(make, impl, foreach, fused):
    model = nn.Linear(4, 4)
    original = make(model.parameters())
    opt, why = with_impl(original, impl)
    assert why == "" and type(opt) is type(original)
    group = opt.param_groups[0]
    assert (group["foreach"], group["fused"]) == (foreach, fused)
    assert group["lr"] == original.param_groups[0]["lr"]
    assert group["weight_decay"] == original.param_groups[0]["weight_decay"]
    model(torch.randn(2, 4)).sum().backward()
    opt.step()  # it really steps on this device


def test_an_optimizer_without_the_arguments_says_so():
    class Plain(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {"lr": 0.1})

    original = Plain(nn.Linear(2, 2).parameters())
    opt, why = with_impl(original, "fused")
    assert opt is original and "Plain takes no foreach/fused argument" in why


def test_the_knobs_check_their_values():
    assert Knobs(optimizer_impl="fused", activation_checkpointing=True).optimizer_impl == "fused"
    with pytest.raises(KnobError, match="optimizer_impl='apex' is not allowed: one of foreach"):
        Knobs(optimizer_impl="apex")
    with pytest.raises(KnobError, match="activation_checkpointing"):
        Knobs(activation_checkpointing="yes")


def test_a_burst_with_checkpointing_keeps_less_and_trains(tiny_data):
    from workbench.engine.burst import run_burst

    runs = {}
    for on in (False, True):
        k = Knobs(batch_size=16, activation_checkpointing=on, optimizer_impl="fused")
        runs[on] = run_burst("cnn", k, data_dir=tiny_data, seconds=0.3, min_steps=2,
                             warmup_steps=1, record=False)  # fmt: skip
        assert runs[on].ok, runs[on].error
        assert "activation_checkpointing" not in runs[on].no_effect
    before = runs[False].memory_breakdown["activations_mib"]
    after = runs[True].memory_breakdown["activations_mib"]
    assert 0 < after < 0.75 * before, (before, after)


def test_a_user_model_without_blocks_reports_no_effect(tiny_data):
    from workbench.engine.burst import run_burst
    from workbench.engine.workloads import Workload

    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 3)

        def forward(self, x):
            return self.lin(x)

    data = [(torch.randn(8), i % 3) for i in range(64)]
    wl = Workload(name="flat", model=Flat, dataset=lambda: data)
    r = run_burst(wl, Knobs(batch_size=8, activation_checkpointing=True), seconds=0.2,
                  min_steps=2, warmup_steps=1, record=False)  # fmt: skip
    assert r.ok, r.error
    assert "checkpoint_blocks()" in r.no_effect["activation_checkpointing"]
