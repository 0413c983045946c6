"""The decode knob from the command line: ``--set decode=gpu`` and ``sweep --knob decode``."""

import json

from workbench.cli import main


def test_set_decode_gpu_on_a_cpu_runs_the_workers_pipeline_and_says_why(tiny_data, capsys):
    code = main(["burst", "--workload", "cnn", "--data", str(tiny_data), "--seconds", "0.3",
                 "--set", "batch_size=8", "--set", "decode=gpu", "--no-record"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert rows["decode"].split()[1] == "cpu"  # what ran: the workers decoded
    assert "'decode': 'gpu'" in rows["knobs"]
    assert any(line.startswith("no effect") and "decode: nvJPEG decodes on a CUDA device" in line
               for line in out.splitlines())  # fmt: skip


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


def test_a_decode_value_that_does_not_exist_is_one_line_naming_the_choices(capsys):
    assert main(["burst", "--set", "decode=nvjpeg", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "decode='nvjpeg' is not allowed: one of cpu, gpu" in err
