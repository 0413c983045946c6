"""workbench.analysis.parity on a CPU, with real training: what must be identical is, what
rounds stays within noise, and what breaks the math (an unseeded augmentation, fp16 gradients
that underflow) is caught and named."""

import random

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

from workbench.analysis.parity import parity
from workbench.core.errors import InputError
from workbench.core.knobs import Knobs
from workbench.engine.workloads import Workload
from workbench.engine.workloads.gpt import GPTShape, gpt

_X = torch.randn(96, 8, generator=torch.Generator().manual_seed(0))
_Y = (_X[:, 0] > 0).long()


class _OwnGenerator(Dataset):
    """A planted slip: the augmentation draws from a generator of its own, made once. Forked
    workers each get a copy of it, so two workers draw what one process would not."""

    def __init__(self):
        self.rng = random.Random(0)

    def __len__(self):
        return len(_X)

    def __getitem__(self, i):
        return _X[i] + self.rng.random(), _Y[i]


def _linear(dataset=None, loss=None, optimizer=None) -> Workload:
    extra = {"loss": loss} if loss else {}
    if optimizer:
        extra["optimizer"] = optimizer
    return Workload(name="lin", model=lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(),
                                                             nn.Linear(16, 2)),
                    dataset=dataset or (lambda: torch.utils.data.TensorDataset(_X, _Y)),
                    **extra)  # fmt: skip


def test_bf16_autocast_on_cnn_is_within_noise(tiny_data):
    r = parity("cnn", Knobs(batch_size=4), Knobs(batch_size=4, precision="bf16"), steps=6,
               device="cpu", data_dir=tiny_data)  # fmt: skip
    assert r.verdict == "within-noise", r.summary()
    assert r.changed == {"precision": "rounding"} and not r.defects
    assert 0 < r.max_rel_dev <= r.band and r.rounding_floor == 2.0**-8
    assert r.same_data is True and len(r.candidate_losses) == 6


def test_bf16_autocast_on_gpt_is_within_noise(tiny_data):
    wl = gpt(tiny_data, GPTShape(layers=2, heads=2, width=32, block=32))
    r = parity(wl, Knobs(batch_size=4), Knobs(batch_size=4, precision="bf16"), steps=6,
               device="cpu")  # fmt: skip
    assert r.verdict == "within-noise", r.summary()
    assert 0 < r.max_rel_dev <= r.band


def test_num_workers_0_against_2_is_identical_on_cnn(tiny_data):
    r = parity("cnn", Knobs(batch_size=4), Knobs(batch_size=4, num_workers=2), steps=4,
               device="cpu", data_dir=tiny_data)  # fmt: skip
    assert r.verdict == "identical" and r.ok and r.max_rel_dev == 0, r.summary()
    assert r.changed == {"num_workers": "bit-identical"} and r.band_measured == 0


def test_an_augmentation_with_its_own_generator_in_workers_is_a_defect_naming_the_knob():
    r = parity(_linear(dataset=_OwnGenerator), Knobs(batch_size=8),
               Knobs(batch_size=8, num_workers=2), steps=4, device="cpu")  # fmt: skip
    assert r.verdict != "identical" and not r.ok and r.same_data is False
    assert any("num_workers=2" in d and "bit-identical" in d for d in r.defects), r.defects
    assert any("changed the batches from step 2" in d for d in r.defects)  # worker 1: a copy


def test_fp16_without_its_scaler_on_gradients_that_underflow_is_not_within_noise():
    tiny = lambda out, y: 1e-9 * nn.functional.cross_entropy(out, y)  # noqa: E731
    adam = lambda params: torch.optim.Adam(params, lr=0.05)  # noqa: E731  scale-free steps
    wl = _linear(loss=tiny, optimizer=adam)
    fp16 = Knobs(batch_size=16, precision="fp16")
    scaled, bare = parity(
        wl, Knobs(batch_size=16), [fp16, fp16], steps=8, device="cpu", scaler=[True, False]
    )  # fmt: skip  one reference for both
    assert bare.verdict in ("drifting", "diverged") and not bare.ok, bare.summary()
    assert bare.candidate_grad_norms[0] == 0.0 < bare.reference_grad_norms[0]  # underflowed
    assert any("without its GradScaler" in n for n in bare.notes)
    assert scaled.verdict == "within-noise", scaled.summary()  # what the scaler is for
    assert scaled.reference_losses == bare.reference_losses


def test_a_bigger_batch_is_compared_per_sample_seen_as_information():
    r = parity(_linear(), Knobs(batch_size=8), Knobs(batch_size=16), steps=6, device="cpu")
    assert r.informational and r.compared_on == "samples seen"
    assert r.samples_seen == [16, 32, 48] and len(r.candidate_losses) == 3
    assert r.changed == {"batch_size": "optimisation"}


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"steps": 1}, "steps"), ({"candidate": None}, "candidate"),
    ({"candidate": {"precision": "bf16"}}, "candidate"), ({"scaler": "no"}, "scaler"),
    ({"candidate": [Knobs(), Knobs()], "scaler": [True]}, "scaler"),
    ({"candidate": []}, "candidate"),
])  # fmt: skip
def test_bad_input_is_refused_by_name_before_training(kwargs, named):
    args = {"candidate": Knobs(precision="bf16"), "steps": 4, **kwargs}
    with pytest.raises(InputError) as caught:
        parity(_linear(), Knobs(), device="cpu", **args)
    assert caught.value.name == named


def test_the_command_prints_one_json_document_and_exits_by_the_verdict(capsys):
    import json

    import workbench as wb
    from workbench.cli import main
    from workbench.engine.workloads import register_workload

    assert wb.parity is parity
    register_workload("parity-lin", lambda data_dir=None: _linear())
    args = ["parity", "--workload", "parity-lin", "--device", "cpu", "--steps", "3"]
    assert main([*args, "--reference", "batch_size=8", "--set", "precision=bf16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "within-noise" and doc["candidate"]["batch_size"] == 8
    assert len(doc["candidate_losses"]) == 3 and doc["changed"] == {"precision": "rounding"}
    assert main([*args, "--set", "precision=fp64"]) == 2
    assert "precision" in capsys.readouterr().err
    assert main([*args[:-1], "1", "--set", "precision=bf16"]) == 2
    assert "steps=1 is not allowed" in capsys.readouterr().err
