"""`workbench sweep`, run in-process (cli.main) on a tiny workload: one burst per value, drift."""

import json

import pytest

from workbench.cli import main

pytestmark = pytest.mark.usefixtures("tiny_workload")


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


def test_sweep_decode_runs_one_burst_per_value(tiny_data, capsys):
    code = main(["sweep", "--workload", "cnn", "--data", str(tiny_data), "--knob", "decode",
                 "--values", "cpu,gpu", "--seconds", "0.3", "--set", "batch_size=8",
                 "--reference-every", "0", "--no-record", "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["knob"] == "decode" and doc["values"] == ["cpu", "gpu"]
    cpu, gpu = doc["bursts"]
    assert (cpu["knobs"]["decode"], gpu["knobs"]["decode"]) == ("cpu", "gpu")
    assert cpu["decode"] == gpu["decode"] == "cpu" and gpu["h2d_bytes_per_sample"] is None
    assert "decode" not in cpu["no_effect"] and "nvJPEG" in gpu["no_effect"]["decode"]
