"""The backend flags a burst sets: TF32 through both of torch's APIs, restored exactly.

The flags are process-global and readable without a GPU, so the CUDA branch is exercised here
with device "cuda" (a CPU burst never touches them)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

from workbench import Knobs, Workload, run_burst
from workbench.engine.training import (
    _read_flags,
    _restore_flags,
    _write_torch_defaults,
    apply_backend_flags,
    backend_flags,
    precision_state,
    torch_defaults,
)
from workbench.engine.workloads.checks import WorkloadWarning

CUDA = torch.device("cuda")
b = torch.backends

USER_SETTINGS = {
    "torch default": lambda: None,
    "legacy set_float32_matmul_precision('high')": lambda: torch.set_float32_matmul_precision(
        "high"
    ),
    "legacy allow_tf32 booleans": lambda: setattr(b.cuda.matmul, "allow_tf32", True),
    "new API matmul tf32 only": lambda: setattr(b.cuda.matmul, "fp32_precision", "tf32"),
    "new API generic tf32": lambda: setattr(b, "fp32_precision", "tf32"),
}
needs_new_api = pytest.mark.skipif(
    not hasattr(b.cuda.matmul, "fp32_precision"), reason="torch < 2.9 has only the legacy API"
)


@pytest.fixture(autouse=True)
def _give_back_the_flags():
    saved = _read_flags()
    yield
    _restore_flags(saved)


def _errors(state: dict) -> list[str]:
    return [k for k, v in state.items() if isinstance(v, str) and v.startswith("error")]


@needs_new_api
@pytest.mark.parametrize("user", list(USER_SETTINGS))
@pytest.mark.parametrize("precision", ["tf32", "fp32-strict"])
def test_every_reader_works_during_a_burst_and_the_users_setting_comes_back(user, precision):
    USER_SETTINGS[user]()
    before = precision_state()
    with backend_flags(Knobs(precision=precision), CUDA):
        during = precision_state()
        assert _errors(during) == []  # Inductor's max-autotune reads the legacy getter
        tf32 = precision == "tf32"
        assert during["torch.get_float32_matmul_precision()"] == ("high" if tf32 else "highest")
        assert during["cuda.matmul.allow_tf32"] is tf32 and during["cudnn.allow_tf32"] is tf32
        mode = "tf32" if tf32 else "ieee"
        assert during["cuda.matmul.fp32_precision"] == mode
        assert during["cudnn.conv.fp32_precision"] == mode  # strict: no TF32 convolutions
    assert precision_state() == before


@pytest.mark.parametrize("user", list(USER_SETTINGS))
@pytest.mark.parametrize("precision", ["default", "bf16", "fp16"])
def test_a_default_burst_measures_pytorchs_math_and_gives_the_users_back(user, precision):
    if "new API" in user and not hasattr(b.cuda.matmul, "fp32_precision"):
        pytest.skip("torch < 2.9 has only the legacy API")
    USER_SETTINGS[user]()  # e.g. TF32 turned on in the kernel before the burst
    before = precision_state()
    with backend_flags(Knobs(precision=precision), CUDA):
        assert precision_state() == torch_defaults()  # cuDNN TF32 on, matmuls IEEE
    assert precision_state() == before


def test_a_default_burst_over_pytorchs_defaults_writes_no_switch(monkeypatch):
    _write_torch_defaults()  # as an untouched process has them (the fixture gives back after)
    written = []
    monkeypatch.setattr(torch, "set_float32_matmul_precision", written.append)
    with backend_flags(Knobs(), CUDA):
        assert precision_state() == torch_defaults()
        assert written == []  # on the way in; the way out restores as it always did


def test_benchmark_flag_set_inside_and_restored():
    before = precision_state()
    with backend_flags(Knobs(cudnn_benchmark=True), CUDA):
        assert b.cudnn.benchmark is True
    assert precision_state() == before


def test_a_cpu_burst_touches_no_flag():
    b.cuda.matmul.allow_tf32 = True
    before = precision_state()
    with backend_flags(Knobs(precision="fp32-strict"), torch.device("cpu")):
        assert precision_state() == before


def test_production_side_sets_the_same_coherent_mode():
    assert apply_backend_flags(Knobs(precision="tf32")) == {"fp32_precision": "tf32"}
    state = precision_state()
    assert _errors(state) == [] and state["torch.get_float32_matmul_precision()"] == "high"


def test_production_fp32_strict_is_ieee_everywhere_as_the_old_fp32_was():
    assert apply_backend_flags(Knobs(precision="fp32-strict")) == {"fp32_precision": "ieee"}
    state = precision_state()
    assert state["torch.get_float32_matmul_precision()"] == "highest"
    assert state["cuda.matmul.allow_tf32"] is False and state["cudnn.allow_tf32"] is False
    if hasattr(b.cuda.matmul, "fp32_precision"):
        assert state["cuda.matmul.fp32_precision"] == "ieee"
        assert state["cudnn.conv.fp32_precision"] == state["cudnn.rnn.fp32_precision"] == "ieee"


@pytest.mark.parametrize("precision", ["default", "bf16", "fp16"])
def test_production_default_and_autocast_precisions_write_no_math_switch(precision):
    b.cuda.matmul.allow_tf32 = True  # the script's own choice, before the config is applied
    b.cudnn.benchmark = True
    before = precision_state()
    assert apply_backend_flags(Knobs(precision=precision)) == {}
    assert precision_state() == before


def test_a_refusing_reader_reads_as_an_error_not_an_exception():
    if not hasattr(b.cuda.matmul, "fp32_precision"):
        pytest.skip("torch < 2.9 cannot mix the APIs")
    b.cuda.matmul.fp32_precision = "tf32"  # new API only: torch's legacy getter refuses
    state = precision_state()
    assert state["torch.get_float32_matmul_precision()"].startswith("error: ")


def test_only_a_distributed_wrapper_counts_as_wrapped():
    # a burst in this process passes the Solo coordinator's wrap, which returns the model: the
    # FLOP count on the live model (for models meta cannot run) must not think it is DDP
    from workloads_for_tests import tensor_workload

    from workbench.engine.coordinator import Solo
    from workbench.engine.training import build_train_state

    cpu = torch.device("cpu")
    solo = build_train_state(tensor_workload(), Knobs(), cpu, wrap=Solo().wrap_model)
    assert solo.wrapped is False
    ddp_like = build_train_state(tensor_workload(), Knobs(), cpu, wrap=torch.nn.Sequential)
    assert ddp_like.wrapped is True


class _Binary(nn.Module):
    """A binary classifier as users write one: one logit per sample, ``[B]``."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 1)

    def forward(self, x):
        return self.fc(x).squeeze(1)


def _binary_workload(**fields) -> Workload:
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
    y = (x[:, 0] > 0).float()  # float labels, as BCE wants them
    return Workload(name="binary", model=_Binary, dataset=lambda: TensorDataset(x, y), **fields)


def test_the_default_loss_on_a_binary_model_warns_once_and_the_result_says_so():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = run_burst(_binary_workload(), Knobs(batch_size=8), seconds=0.2, warmup_steps=2,
                      record=False)  # fmt: skip
    assert r.ok, r.error  # it trains without an error: that is why it must be said
    said = [w for w in caught if issubclass(w.category, WorkloadWarning)]
    assert len(said) == 1 and r.steps > 1  # set-up's first batch, not every step
    assert "1-D logits [8] and float targets" in str(said[0].message)
    assert r.notes == [str(said[0].message)]
    assert "binary_cross_entropy_with_logits" in r.summary()


def test_a_loss_of_its_own_gets_no_warning():
    bce = _binary_workload(loss=F.binary_cross_entropy_with_logits)
    with warnings.catch_warnings():
        warnings.simplefilter("error", WorkloadWarning)
        r = run_burst(bce, Knobs(batch_size=8), seconds=0.2, warmup_steps=1, record=False)
    assert r.ok and r.notes == []
