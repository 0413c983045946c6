"""`workbench tune`, run in-process (cli.main) on a tiny workload: the tuned config it writes
and the speed-up with its interval, in JSON, text and --help."""

import json

import pytest

from workbench.cli import main
from workbench.config.saved import load_knobs

pytestmark = pytest.mark.usefixtures("tiny_workload")


def test_tune_writes_the_best_measured_config(tmp_path, capsys):
    out = tmp_path / "tuned.yaml"
    code = main(["tune", "--workload", "tiny", "--space", "batch_size=8,16", "--budget", "3",
                 "--seconds", "0.2", "--store", str(tmp_path / "h.sqlite"), "--out", str(out),
                 "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and len(doc["bursts"]) <= 3 and doc["out"] == str(out)
    assert load_knobs(out).to_dict() == doc["best"]
    assert doc["best"]["batch_size"] in (8, 16, 32)  # 32: the start, the default knobs


def test_tune_json_has_the_speedup_with_its_interval_and_the_start_runs(tmp_path, capsys):
    out = tmp_path / "tuned.yaml"
    code = main(["tune", "--workload", "tiny", "--space", "batch_size=16,64", "--budget", "6",
                 "--seconds", "0.2", "--no-record", "--out", str(out), "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["start_runs"] >= 2  # first, and again at the end
    assert {"speedup", "speedup_low", "speedup_high"} <= set(doc) and doc["speedup"] > 0
    if doc["best"] != doc["start"]:
        assert doc["speedup_low"] <= doc["speedup"] <= doc["speedup_high"]
    assert "source: tune" in out.read_text()  # the saved config quotes the tune's median


def test_tune_text_output_says_what_it_wrote(tmp_path, capsys):
    out = tmp_path / "tuned.yaml"
    code = main(["tune", "--workload", "tiny", "--space", "batch_size=16", "--budget", "2",
                 "--seconds", "0.2", "--no-record", "--out", str(out)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0 and f"wrote {out}" in captured.out and "best" in captured.out
    assert "[1/2] start" in captured.err  # one progress line per burst, on stderr


def _scripted_tune(monkeypatch, readings: dict[int, list], *args: str) -> int:
    """``workbench tune`` over num_workers 0,1 on bursts scripted per ``num_workers`` by how
    often it ran (cycling; a string is a failed run's status)."""
    from workbench.core.results import BurstResult

    calls: list = []

    def bursts(workload, knobs, **kwargs):
        seq = readings[knobs.num_workers]
        out = seq[calls.count(knobs) % len(seq)]
        calls.append(knobs)
        if isinstance(out, str):
            return BurstResult(status=out, error=f"fake {out}", workload="tiny", knobs=knobs)
        return BurstResult(workload="tiny", device="cpu", knobs=knobs, samples_per_s=out,
                           peak_mem_mib=100.0, data_wait_pct=5.0, step_ms_p50=10.0)  # fmt: skip

    monkeypatch.setattr("workbench.tuning.tuner.run_burst", bursts)
    return main(["tune", "--workload", "tiny", "--space", "num_workers=0,1", "--no-record",
                 *args])  # fmt: skip


NOISY = {0: [100.0, 40.0, 250.0], 1: [125.0, 50.0, 300.0]}
"""A loaded machine: the pick reads 1.25x the start, each run anywhere in 0.4-2.5x."""


def test_tune_json_marks_a_speedup_the_runs_cannot_tell(tmp_path, monkeypatch, capsys):
    out = str(tmp_path / "t.yaml")
    code = _scripted_tune(monkeypatch, NOISY, "--budget", "6", "--out", out, "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["start_runs"] == 3 and doc["speedup"] == pytest.approx(1.25)
    assert doc["speedup_low"] < 1 < doc["speedup_high"]  # the interval is kept, and marked
    assert doc["speedup_uncertain"] is True
    assert "cannot separate the best from the start" in doc["speedup_doubt"]
    assert isinstance(doc["drift_pct_per_burst"], float)  # three start runs: a trend


def test_tune_text_gives_words_not_the_figures_when_the_runs_cannot_tell(
    tmp_path, monkeypatch, capsys
):
    code = _scripted_tune(monkeypatch, NOISY, "--budget", "6", "--out", str(tmp_path / "t.yaml"))
    text = capsys.readouterr().out
    assert code == 0 and "speed-up over the start: the runs cannot separate" in text
    assert "more bursts" in text and "quieter machine" in text and "longer windows" in text
    assert "1.25x" not in text and "95%)" not in text


def test_tune_json_gives_figures_for_a_tight_interval(tmp_path, monkeypatch, capsys):
    steady = {0: [50.0, 51.0, 49.0], 1: [100.0, 98.0, 102.0]}
    code = _scripted_tune(monkeypatch, steady, "--budget", "8", "--out",
                          str(tmp_path / "t.yaml"), "--json")  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["speedup_uncertain"] is False and doc["speedup_doubt"] == ""
    assert 1.8 < doc["speedup_low"] < doc["speedup"] < doc["speedup_high"] < 2.2


def test_tune_json_drift_per_burst_is_null_with_one_start_reading(tmp_path, monkeypatch, capsys):
    once = {0: [100.0, "error"], 1: [200.0, 202.0, 198.0]}  # the start's re-measure fails
    code = _scripted_tune(monkeypatch, once, "--budget", "8", "--out",
                          str(tmp_path / "t.yaml"), "--json")  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["start_runs"] == 1
    assert doc["drift_pct_per_burst"] is None and doc["drift_pct"] is None


def test_tune_help_names_the_speedup_fields(capsys):
    assert main(["tune", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in ("speedup_low", "drift_pct_per_burst", "speedup_uncertain", "speedup_doubt"):
        assert name in text
    assert "null when it finished fewer than two runs" in text and "more than 2x" in text


BUSY = {0: [100.0, 45.0, 160.0, 70.0, 130.0, 52.0], 1: [328.0, 120.0, 95.0, 210.0, 140.0, 260.0]}
"""The busy-machine tune of issue 42, replayed: 3.28x on the pick's first burst, ~50% noise."""


def test_an_uncertain_tune_says_so_before_the_path_and_how_to_re_measure(
    tmp_path, monkeypatch, capsys
):
    out = tmp_path / "t.yaml"
    code = _scripted_tune(monkeypatch, BUSY, "--budget", "8", "--out", str(out))
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and lines[-1] == f"wrote {out} (marked uncertain in its first lines)"
    assert lines[-2].startswith("UNCERTAIN: the runs cannot tell the best from the start")
    assert f"workbench tune --workload tiny --budget 16 --seconds 6 --out {out}" in lines[-2]
    assert out.read_text().startswith("# UNCERTAIN")


def test_an_uncertain_tune_keeps_an_earlier_certain_config_unless_forced(
    tmp_path, monkeypatch, capsys
):
    out = tmp_path / "t.yaml"
    steady = {0: [50.0, 51.0, 49.0], 1: [100.0, 98.0, 102.0]}
    assert _scripted_tune(monkeypatch, steady, "--budget", "8", "--out", str(out)) == 0
    before = out.read_text()
    capsys.readouterr()
    code = _scripted_tune(monkeypatch, BUSY, "--budget", "8", "--out", str(out), "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["out"] is None and "--force" in doc["not_written"]
    assert out.read_text() == before
    code = _scripted_tune(monkeypatch, BUSY, "--budget", "8", "--out", str(out), "--force")
    assert code == 0 and out.read_text().startswith("# UNCERTAIN")
    assert "not written" not in capsys.readouterr().out
