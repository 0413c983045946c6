"""`workbench sweep`, `diagnose` and `tune`, run in-process (cli.main) on a tiny workload."""

import json

import pytest
from workloads_for_tests import tensor_workload

from workbench.cli import main
from workbench.config.saved import load_knobs
from workbench.engine.workloads import register_workload


@pytest.fixture(autouse=True)
def _tiny():
    register_workload("tiny", lambda data_dir=None: tensor_workload())


def test_sweep_json_is_one_document_with_one_burst_per_value(tmp_path, capsys):
    plot = tmp_path / "sweep.json"
    code = main(["sweep", "--workload", "tiny", "--knob", "batch_size", "--values", "8,16",
                 "--seconds", "0.2", "--no-record", "--plot", str(plot), "--json"])  # fmt: skip
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert code == 0 and doc["knob"] == "batch_size" and doc["values"] == [8, 16]
    assert [b["knobs"]["batch_size"] for b in doc["bursts"]] == [8, 16, 8]  # 8 again: drift
    assert [b["reference"] for b in doc["bursts"]] == [False, False, True]
    assert all(b["drift_factor"] > 0 and b["samples_per_s_corrected"] > 0 for b in doc["bursts"])
    assert doc["drift"]["reference_runs"] == 2 and doc["drift"]["drift_pct"] >= 0
    assert "hconcat" in json.loads(plot.read_text())


def test_sweep_json_without_a_reference_has_no_drift(capsys):
    code = main(["sweep", "--workload", "tiny", "--knob", "batch_size", "--values", "8,16",
                 "--seconds", "0.2", "--no-record", "--reference-every", "0",
                 "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and [b["knobs"]["batch_size"] for b in doc["bursts"]] == [8, 16]
    assert doc["drift"]["drift_pct"] is None and doc["drift"]["sentence"] == ""


def test_sweep_text_prints_each_row_once(capsys):
    code = main(["sweep", "--workload", "tiny", "--knob", "batch_size", "--values", "8,16",
                 "--seconds", "0.2", "--no-record"])  # fmt: skip
    out, err = capsys.readouterr()
    rows = [line for line in (out + err).splitlines() if line.lstrip().startswith("batch_size=")]
    assert code == 0 and len(rows) == 3, out + err  # once each: it printed every row twice
    assert rows[0].startswith("batch_size=8 ") and rows[1].startswith("batch_size=16 ")
    assert rows[2].startswith("batch_size=8 ") and rows[2].endswith("(again, for drift)")
    assert all("samples/s" in row for row in rows) and out.splitlines()[:3] == rows
    drift = out.splitlines()[3:]
    assert len(drift) == 1 and drift[0].startswith(("drift: the first value held within ",
                                                    "drift: the reference drifted "))  # fmt: skip


def test_sweep_prints_that_drift_exceeds_the_effect(monkeypatch, capsys):
    """A machine that slows 2% a burst under a knob worth 3%: the CLI says so plainly."""
    from workbench.core.results import BurstResult

    speed = {8: 100.0, 16: 101.5, 32: 103.0}
    ran: list[int] = []

    def drifting(workload, knobs, **kwargs):
        ran.append(knobs.batch_size)
        sps = speed[knobs.batch_size] * 0.98 ** (len(ran) - 1)
        return BurstResult(workload="tiny", device="cpu", knobs=knobs, samples_per_s=sps)

    monkeypatch.setattr("workbench.analysis.sweeps.run_burst", drifting)
    code = main(["sweep", "--workload", "tiny", "--knob", "batch_size", "--values", "8,16,32",
                 "--no-record"])  # fmt: skip
    last = capsys.readouterr().out.splitlines()[-1]
    assert code == 0 and ran == [8, 16, 32, 8]
    assert last.startswith("drift: the reference drifted 5.9% over the sweep (100 -> 94 samples/s")
    assert last.endswith("more than the 3.0% between the values: these bursts cannot rank them; "
                         "rerun on a quiet machine")  # fmt: skip


def test_diagnose_json_has_the_verdict_and_the_three_numbers(capsys):
    code = main(["diagnose", "--workload", "tiny", "--set", "batch_size=16", "--seconds", "0.2",
                 "--no-record", "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["verdict"] in ("data-bound", "compute-bound", "balanced")
    for key in ("full_samples_per_s", "loader_samples_per_s", "compute_samples_per_s"):
        assert doc[key] > 0


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


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["tune", "--space", "batch_size="], "batch_size='' is not allowed: comma-separated"),
        (["tune", "--space", "warp=1,2"], "warp='1' is not allowed: unknown knob"),
        (["tune", "--space", "batch_size=0,16"], "batch_size=0 is not allowed: an integer"),
        (["tune", "--space", "batch_size"], "KNOB=V1,V2"),
        (["tune", "--space", "batch_size=8", "--space", "batch_size=16"], "given twice"),
        (["tune", "--budget", "0"], "budget=0 is not allowed: an integer >= 1"),
        (["tune", "--margin", "0.95"], "memory_margin=0.95 is not allowed: a number from 0"),
        (["tune", "--margin", "-0.1"], "memory_margin=-0.1 is not allowed"),
        (["tune", "--out", "/does/not/exist/t.yaml"], "a .yaml or .yml file in an existing"),
        (["tune", "--out", "tuned.txt"], "out='tuned.txt' is not allowed"),
        (["tune", "--workload", "tiny"], "the following arguments are required: --out"),
        (["tune", "--workload", "nope"], "workload='nope' is not allowed: one of cnn"),
        (["sweep", "--knob", "warp", "--values", "1"], "warp='1' is not allowed"),
        (["sweep", "--knob", "batch_size", "--values", ""], "none may be empty"),
        (["sweep", "--knob", "batch_size", "--values", "8", "--repeats", "0"], "repeats=0"),
        (["sweep", "--knob", "batch_size"], "required: --values"),
        (["diagnose", "--set", "batch_size=0"], "batch_size=0 is not allowed"),
        (["diagnose", "--set", "loader=synthetic"], "loader='synthetic' is not allowed"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if args[0] == "tune" and "--out" not in args and "required: --out" not in words:
        args = [*args, "--out", str(tmp_path / "t.yaml")]
    if "--workload" not in args:
        args = [*args, "--workload", "tiny"]  # bad input is refused before any data is built
    code = main([*args, "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert words in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "t.yaml").exists()
