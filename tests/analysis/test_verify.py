"""workbench.analysis.verify and `workbench verify`: a saved config's figures rerun here."""

import json

import pytest
import torch
import yaml
from workloads_for_tests import tensor_workload

import workbench as wb
from workbench.analysis.verify import verify
from workbench.cli import main
from workbench.core.errors import InputError
from workbench.engine.workloads import register_workload


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A config saved from a real tune of a tiny workload on this machine: its best's runs
    are listed, so their spread is the saved figure's noise."""
    register_workload("verify-tiny", lambda data_dir=None: tensor_workload(name="verify-tiny"))
    t = wb.tune("verify-tiny", {"batch_size": [16, 32]}, budget=6, base=wb.Knobs(batch_size=16),
                seconds=0.5, device="cpu", record=False)  # fmt: skip
    path = tmp_path_factory.mktemp("verify") / "tuned.yaml"
    with pytest.warns(UserWarning):  # a registered name: no other process can rebuild it
        wb.save_config(t, path)
    yield path
    unregister("verify-tiny")  # registered before conftest's per-test snapshot: not restored


def unregister(name):
    from workbench.engine import workloads

    workloads._REGISTRY.pop(name, None)


@pytest.fixture(autouse=True)
def _registered():
    register_workload("verify-tiny", lambda data_dir=None: tensor_workload(name="verify-tiny"))


def _edited(path, tmp_path, edit):
    doc = yaml.safe_load(path.read_text())
    edit(doc["provenance"])
    doc.pop("launch")  # written from the knobs and the device: loading rebuilds it
    out = tmp_path / "edited.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


ATTEMPTS = 3
"""A shared 2-core machine can be truly slower for a minute (a neighbour's test run took 87%
of a tiny model's rate once): the verdict is then right to say so. "Holds on the same
machine" is asked of one of three verifies, as a user would rerun on a quiet moment."""


def _first_holding(run):
    results = [run()]
    while not _held(results[-1]) and len(results) < ATTEMPTS:
        results.append(run())
    return results[-1], results


def _held(result) -> bool:
    return result == 0 or getattr(result, "verdict", None) == "holds"


def test_on_the_same_machine_it_holds_and_every_field_is_the_same(saved):
    v, tries = _first_holding(lambda: verify(saved, record=False))
    assert all(t.differs == [] for t in tries)  # slower or not, nothing here differs
    assert v.saved_noise_pct is not None  # the tune's runs' spread
    assert v.verdict == "holds", [t.reason for t in tries]
    assert v.differs == [] and len(v.samples_per_s_runs) == 3
    assert v.environment["torch"]["saved"] == v.environment["torch"]["here"] is not None
    assert v.environment["usable_cores"]["saved"] is not None  # kept by save_config


def test_one_faked_environment_field_is_named(saved, tmp_path):
    faked = _edited(saved, tmp_path, lambda p: p["versions"].update(cudnn="1.2.3"))
    v = verify(faked, runs=1, record=False)
    assert v.differs == ["cudnn"] and "cudnn (1.2.3 saved" in v.reason

    def fake(p):
        p["versions"]["nccl"] = "0.1"
        p["measured"]["samples_per_s"] = 1e9

    slow = _edited(saved, tmp_path, fake)
    v = verify(slow, runs=1, record=False)
    assert v.verdict == "slower" and not v.holds
    assert "likely causes" in v.reason and "nccl (0.1 saved" in v.reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU here runs a GPU config")
def test_a_gpu_config_on_a_cpu_machine_cannot_run_here_and_says_why(saved, tmp_path, capsys):
    gpu = _edited(saved, tmp_path, lambda p: p["device"].update(type="cuda:0", name="NVIDIA H100"))
    v = verify(gpu, record=False)
    assert v.verdict == "cannot-run" and "NVIDIA H100" in v.reason and v.bursts == []
    assert main(["verify", str(gpu), "--no-record", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"] == "cannot-run"


def test_the_command_exits_0_when_it_holds_and_2_on_bad_input(saved, tmp_path, capsys):
    code, _ = _first_holding(lambda: main(["verify", str(saved), "--runs", "2", "--no-record",
                                           "--json"]))  # fmt: skip
    assert code == 0
    doc = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert doc["verdict"] == "holds" and len(doc["bursts"]) == 2
    assert main(["verify", str(tmp_path / "missing.yaml")]) == 2
    knobs_only = wb.save_config(wb.Knobs(), tmp_path / "knobs.yaml")
    assert main(["verify", str(knobs_only)]) == 2
    assert "nothing to compare" in capsys.readouterr().err
    assert main(["verify", str(saved), "--runs", "0"]) == 2
    with pytest.raises(InputError, match="runs"):
        verify(saved, runs=0)
