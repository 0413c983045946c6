"""A config saved from a tune that could not tell its pick from the start says so in its first
lines and in ``workbench show``, and never replaces a config an earlier tune could tell unless
forced (replayed bursts: recorded readings, no timing)."""

import warnings

import pytest

from workbench import Knobs
from workbench.cli import main
from workbench.config.marks import OverwriteRefused
from workbench.config.saved import load_config, save_config
from workbench.core.results import BurstResult
from workbench.tuning.tuner import tune_on

BUSY = {0: [100.0, 45.0, 160.0, 70.0, 130.0, 52.0], 1: [328.0, 120.0, 95.0, 210.0, 140.0, 260.0]}
STEADY = {0: [50.0, 51.0, 49.0], 1: [100.0, 98.0, 102.0]}


def _tune(readings, budget=8):
    calls: list = []

    def run(knobs: Knobs) -> BurstResult:
        seq = readings[knobs.num_workers]
        out = seq[calls.count(knobs) % len(seq)]
        calls.append(knobs)
        return BurstResult(workload="cnn", device="cpu", knobs=knobs, samples_per_s=out,
                           peak_mem_mib=100.0, data_wait_pct=5.0)  # fmt: skip

    return tune_on(run, {"num_workers": [0, 1]}, budget=budget)


def _save(t, path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return save_config(t, path, **kw)


def test_an_uncertain_tune_is_saved_marked_in_its_first_lines(tmp_path):
    t = _tune(BUSY)
    assert t.speedup_uncertain is True
    text = _save(t, tmp_path / "t.yaml").read_text()
    first = text.splitlines()[:6]
    assert first[0].startswith("# UNCERTAIN: the tune that chose these knobs could not tell")
    said = " ".join(line.lstrip("# ") for line in first)
    assert "Re-measure" in said and "--budget 16" in said and "quieter machine" in said
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert load_config(tmp_path / "t.yaml").knobs == Knobs(num_workers=1)


def test_a_tune_that_could_tell_is_not_marked(tmp_path):
    t = _tune(STEADY)
    assert t.speedup_uncertain is False
    assert "UNCERTAIN" not in _save(t, tmp_path / "t.yaml").read_text()


def test_show_says_uncertain_and_how_to_re_measure(tmp_path, capsys):
    _save(_tune(BUSY), tmp_path / "t.yaml")
    assert main(["show", str(tmp_path / "t.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("# UNCERTAIN") and "Re-measure" in lines[2]


def test_an_uncertain_tune_never_replaces_a_certain_config_unless_forced(tmp_path):
    path = tmp_path / "t.yaml"
    _save(_tune(STEADY), path)
    before = path.read_text()
    with pytest.raises(OverwriteRefused, match=r"earlier tune that could tell .*force=True"):
        _save(_tune(BUSY), path)
    assert path.read_text() == before
    _save(_tune(BUSY), path, force=True)
    assert path.read_text().startswith("# UNCERTAIN")
    _save(_tune(BUSY), path)  # uncertain over uncertain: nothing to protect
    _save(_tune(STEADY), path)  # a certain one replaces anything
    assert not path.read_text().startswith("# UNCERTAIN")
