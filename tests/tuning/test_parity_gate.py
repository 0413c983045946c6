"""The tuner keeps the numbers: a pick that changes rounding is checked for loss parity, a
drifting one is refused with its reason and the next best taken, and the saved config carries
the evidence (``tuning.parity_gate``). Scripted bursts (``tune_on``), a planted penalty."""

import types

import pytest
import torch
from torch import nn

from workbench import Knobs
from workbench.analysis.parity import parity
from workbench.cli import main
from workbench.config.saved import load_config, save_config
from workbench.core.results import BurstResult
from workbench.engine.workloads import Workload
from workbench.tuning import parity_gate
from workbench.tuning.tuner import tune_on

SPEED = {("default", 0): 100.0, ("default", 1): 150.0, ("bf16", 0): 180.0, ("bf16", 1): 300.0}
SPACE = {"precision": ["default", "bf16"], "num_workers": [0, 1]}


def _run(knobs: Knobs) -> BurstResult:
    sps = SPEED[(knobs.precision, knobs.num_workers)]
    return BurstResult(workload="tiny", device="cpu", knobs=knobs, samples_per_s=sps,
                       peak_mem_mib=100.0, data_wait_pct=1.0, step_ms_p50=10.0)  # fmt: skip


class Planted:
    """A parity check that calls bf16 drifting (or what ``verdict`` says), and keeps its calls."""

    def __init__(self, verdict: str = "drifting", accepted=None):
        self.verdict, self.accepted, self.calls = verdict, accepted, []

    def __call__(self, reference: Knobs, candidate: Knobs):
        self.calls.append((reference, candidate))
        if candidate.precision == "bf16" and self.verdict != "within-noise":
            return types.SimpleNamespace(verdict=self.verdict, reason="planted: 3.1e-02 > band")
        return self.accepted


def test_a_drifting_pick_is_refused_with_its_reason_and_the_next_best_taken():
    check = Planted("drifting")
    t = tune_on(_run, SPACE, budget=12, parity=check)
    assert t.best == Knobs(num_workers=1) and t.speedup == pytest.approx(1.5)
    assert check.calls[0] == (Knobs(num_workers=1), Knobs(precision="bf16", num_workers=1))
    assert t.parity_refused[0]["verdict"] == "drifting"
    assert t.parity_refused[0]["knobs"] == {"precision": "bf16", "num_workers": 1}
    assert "refused num_workers=1, precision=bf16: loss parity drifting (planted" in t.summary()
    assert t.to_dict()["parity_refused"] == t.parity_refused


def test_without_a_check_or_with_a_pick_of_no_rounding_change_nothing_is_measured():
    assert tune_on(_run, SPACE, budget=12).best == Knobs(precision="bf16", num_workers=1)
    check = Planted("diverged")
    t = tune_on(_run, {"num_workers": [0, 1]}, budget=6, parity=check)
    assert t.best == Knobs(num_workers=1) and check.calls == [] and t.parity is None


def test_reference_keeps_the_pick_s_batch_and_workers_with_the_start_s_numerics():
    start = Knobs(precision="tf32", batch_size=32)
    pick = Knobs(precision="bf16", batch_size=64, num_workers=2, compile="default")
    assert parity_gate.rounding_changes(start, pick) == ["precision", "compile"]
    assert parity_gate.reference_for(start, pick) == Knobs(precision="tf32", batch_size=64,
                                                           num_workers=2)  # fmt: skip


def test_steps_are_sized_to_a_share_of_the_tune():
    r = BurstResult(workload="w", knobs=Knobs(), step_ms_p50=100.0, setup_s=1.0)
    assert parity_gate.steps_for(100.0, r, r) == 40  # (15 s - 3 s) / 0.3 s
    assert parity_gate.steps_for(1.0, r, r) == parity_gate.MIN_STEPS
    assert parity_gate.steps_for(1e6, r, r) == parity_gate.MAX_STEPS


def test_the_accepted_pick_s_evidence_is_saved_and_shown(tmp_path, capsys):
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())
    wl = Workload(name="lin", model=lambda: nn.Linear(8, 2), dataset=lambda: data)
    measured = parity(wl, Knobs(batch_size=8), Knobs(batch_size=8, precision="bf16"), steps=4,
                      device="cpu")  # fmt: skip
    t = tune_on(_run, SPACE, budget=12, parity=Planted("within-noise", accepted=measured))
    assert t.best == Knobs(precision="bf16", num_workers=1) and t.parity is measured
    path = save_config(t, tmp_path / "tuned.yaml")
    saved = load_config(path).provenance["parity"]
    assert saved["verdict"] == measured.verdict and saved["steps"] == 4
    assert saved["band"] == pytest.approx(measured.band, rel=1e-2)
    assert main(["show", str(path)]) == 0
    assert f"loss parity against the start (batch_size=8): {measured.verdict} over 4 steps" in (
        capsys.readouterr().out)  # fmt: skip


def test_a_real_tune_s_check_reads_its_bursts_and_trains(monkeypatch):
    from workloads_for_tests import tensor_workload

    from workbench.tuning import tuner

    seen = {}

    def choose(ranked, start, check):  # the tune's own check, on a pick it did not measure
        seen["result"] = check(start, start.replace(precision="bf16"))
        return parity_gate.Gate()

    monkeypatch.setattr(tuner.parity_gate, "choose", choose)
    t = tuner.tune(
        tensor_workload(),
        {"batch_size": [16]},
        budget=2,
        base=Knobs(batch_size=16),
        device="cpu",
        seconds=0.1,
        record=False,
    )  # fmt: skip  steps sized from its bursts
    assert t.best is not None and seen["result"].verdict == "within-noise"
    assert parity_gate.MIN_STEPS <= seen["result"].steps <= parity_gate.MAX_STEPS
    assert seen["result"].candidate.precision == "bf16"


def test_a_bad_parity_steps_is_refused_before_any_burst(tmp_path, capsys):
    assert main(["tune", "--out", str(tmp_path / "t.yaml"), "--parity-steps", "1",
                 "--workload", "cnn", "--no-record"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "--parity-steps=1 is not allowed" in err and "samples/s" not in err
