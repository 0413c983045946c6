"""Debug-only NCCL variables: kept as suggestions with their figures, applied only when asked."""

from __future__ import annotations

import os
import warnings

import pytest
import yaml

from workbench.config.saved import ConfigWarning, load_config, save_config
from workbench.core.knobs import Knobs
from workbench.engine.training import _read_flags, _restore_flags

MIB = 2**20
COMM = {  # what `workbench comm --sweep NCCL_ALGO=Ring,Tree --save` keeps, measured on NCCL
    "variable": "NCCL_ALGO", "values": ["Ring", "Tree"], "backend": "nccl",
    "device": "NVIDIA H100", "world_size": 8, "nodes": 1, "measured_at": "2026-12-05T10:00:00",
    "note": None, "bucket_cap_mb": None,
    "winners": [
        {"from_bytes": MIB, "to_bytes": 4 * MIB, "value": "Tree", "sizes_bytes": [MIB, 4 * MIB],
         "busbw_gbps": [40.0, 90.0], "margin_pct": 6.0},
        {"from_bytes": 16 * MIB, "to_bytes": 64 * MIB, "value": "Ring",
         "sizes_bytes": [16 * MIB, 64 * MIB], "busbw_gbps": [180.5, 210.25], "margin_pct": 3.2},
    ],
}  # fmt: skip


@pytest.fixture
def clean(monkeypatch):
    saved = _read_flags()
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    yield
    _restore_flags(saved)
    os.environ.pop("NCCL_ALGO", None)


def _swept(tmp_path):
    path = save_config(Knobs(world_size=8, bucket_cap_mb=25), tmp_path / "t.yaml", comm=COMM)
    return path, load_config(path, check_machine=False)


def test_a_comm_sweep_winner_is_kept_as_a_suggestion_with_its_figures(tmp_path):
    path, cfg = _swept(tmp_path)
    doc = yaml.safe_load(path.read_text())
    assert "NCCL_ALGO" not in doc["env"] and "NCCL_ALGO" not in cfg.env()
    entry = doc["suggestions"]["nccl"]["NCCL_ALGO"]
    assert entry["value"] == "Ring"  # the winner at 16 MiB, the measured size nearest 25 MiB
    assert entry["measured"]["world_size"] == 8 and entry["measured"]["nodes"] == 1
    assert entry["measured"]["busbw_gbps"] == [180.5, 210.25]
    assert entry["measured"]["at_bytes"] == 16 * MIB
    assert cfg.env(nccl_suggestions=True)["NCCL_ALGO"] == "Ring"


def test_apply_sets_a_suggestion_only_when_asked_and_says_so(tmp_path, clean):
    _, cfg = _swept(tmp_path)
    assert "NCCL_ALGO" not in [c.name for c in cfg.apply(quiet=True)]
    assert "NCCL_ALGO" not in os.environ
    made = [c for c in cfg.apply(nccl_suggestions=True, quiet=True) if c.name == "NCCL_ALGO"]
    assert [(c.before, c.after, c.kind) for c in made] == [(None, "Ring", "nccl-suggestion")]
    assert "debugging only" in made[0].note and os.environ["NCCL_ALGO"] == "Ring"


def test_launch_lines_leave_suggestions_out_unless_asked(tmp_path):
    _, cfg = _swept(tmp_path)
    plain, asked = cfg.launch_lines("t.py"), cfg.launch_lines("t.py", nccl_suggestions=True)
    assert not any("NCCL_ALGO" in line for line in [*plain.values()][:3] + plain["sbatch"])
    assert asked["single_node"] == "NCCL_ALGO=Ring " + plain["single_node"]
    assert asked["multi_node"].startswith("NCCL_ALGO=Ring torchrun --nnodes=$NNODES")
    assert asked["srun"] == "NCCL_ALGO=Ring " + plain["srun"]
    assert "export NCCL_ALGO=Ring" in asked["sbatch"]


def test_an_old_config_with_a_debug_only_variable_in_env_loads_it_as_a_suggestion(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("schema_version: 3\nknobs:\n  world_size: 2\n  nccl: {NCCL_ALGO: Tree}\n"
                    "env: {NCCL_ALGO: Tree}\n")  # fmt: skip
    with pytest.warns(ConfigWarning) as caught:
        cfg = load_config(path, check_machine=False)
    said = [str(w.message) for w in caught if "NCCL_ALGO" in str(w.message)]
    assert len(said) == 1 and "\n" not in said[0]
    assert "knobs.nccl: NCCL_ALGO: NCCL documents it for debugging only" in said[0]
    assert "loaded as suggestions.nccl" in said[0]
    assert cfg.knobs.nccl == {} and "NCCL_ALGO" not in cfg.env()
    assert cfg.nccl_suggestions["NCCL_ALGO"]["value"] == "Tree"


def test_an_old_config_keeps_loading_with_its_launch_lines_that_exported_it(tmp_path):
    path = tmp_path / "old.yaml"
    knobs = "knobs:\n  world_size: 2\n  nccl: {NCCL_ALGO: Tree}\nenv: {NCCL_ALGO: Tree}\n"
    path.write_text(f"schema_version: 3\n{knobs}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_config(path, check_machine=False)
        launch = {**cfg.launch_lines(), "sbatch": cfg.sbatch_lines(nccl_suggestions=True)}
        assert "export NCCL_ALGO=Tree" in launch["sbatch"]  # as the old file wrote it
        path.write_text(f"schema_version: 3\n{knobs}" + yaml.safe_dump({"launch": launch},
                                                                       width=1 << 30))  # fmt: skip
        assert load_config(path, check_machine=False).nccl_suggestions["NCCL_ALGO"]


def test_a_burst_knob_still_acts_but_saving_moves_it_and_says_so(tmp_path):
    knobs = Knobs(world_size=2, nccl={"NCCL_ALGO": "Ring", "NCCL_CROSS_NIC": "1"})
    assert knobs.nccl["NCCL_ALGO"] == "Ring"  # the burst's knobs keep it: an experiment
    with pytest.warns(ConfigWarning, match="knobs.nccl: NCCL_ALGO: .* saved as suggestions"):
        path = save_config(knobs, tmp_path / "t.yaml")
    cfg = load_config(path, check_machine=False)
    assert cfg.env() == {"NCCL_CROSS_NIC": "1"}
    assert cfg.nccl_suggestions["NCCL_ALGO"]["value"] == "Ring"
