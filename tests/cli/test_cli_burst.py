"""`workbench burst`: one document with --json, bad input as one line and exit 2, OOM as a
result, and the text output of a burst (suspects, ranks, nodes, the environment, decode)."""

import json
import os

import pytest
from cli_process import run_workbench as _run

from workbench.cli import main

# DESIGN.md's BurstResult fields: outside scripts read these names from `--json`.
# fmt: off
CONTRACT_FIELDS = {
    "status", "error", "workload", "device", "knobs", "samples_per_s", "tokens_per_s",
    "step_ms_p50", "step_ms_iqr", "steps", "measured_s", "warmup_s", "data_wait_pct",
    "peak_mem_mib", "peak_reserved_mib", "gpu_util_pct", "power_w", "temp_c", "mfu_pct",
    "noisy", "no_effect", "suspect", "samples_from",
}
# fmt: on


def test_burst_json_is_one_document_on_stdout(tiny_data, tmp_path):
    store = tmp_path / "h.sqlite"
    p = _run("burst", "--workload", "cnn", "--data", str(tiny_data), "--seconds", "0.5",
             "--set", "batch_size=8", "--set", "num_workers=1", "--store", str(store),
             "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # the whole of stdout parses as one document
    assert doc["status"] == "ok" and doc["workload"] == "cnn"
    assert doc["knobs"]["batch_size"] == 8 and doc["knobs"]["num_workers"] == 1
    assert doc["samples_per_s"] > 0 and doc["gpu_util_pct"] is None
    assert set(doc) >= CONTRACT_FIELDS, f"missing: {CONTRACT_FIELDS - set(doc)}"
    assert doc["samples_from"] == "all tensors"  # images and labels: one row per sample each
    # unknown is null, never 0: a CPU has no GPU figures, an image workload has no tokens
    assert [doc[k] for k in ("tokens_per_s", "power_w", "temp_c", "mfu_pct")] == [None] * 4
    assert doc["suspect"] == []  # every self-check passed
    h = _run("history", "--store", str(store), "--json")
    assert h.returncode == 0
    rows = json.loads(h.stdout)
    assert [r["id"] for r in rows] == [doc["id"]]
    assert rows[0]["samples_from"] == "all tensors"  # the store keeps the whole result


# A knob's bad value as ``--set`` takes it, and what the one line says.
BAD_SETTINGS = {
    "batch_size=0": "batch_size=0 is not allowed",
    "batch_size=-3": "batch_size=-3 is not allowed",
    "batch_size=abc": "batch_size='abc' is not allowed: an integer",
    "prefetch_factor=4": "prefetch_factor=4 is not allowed: needs num_workers",
    "precision=fp8": "precision='fp8' is not allowed: one of default, fp32-strict",
    "fp8=tensorwise": "fp8='tensorwise' is not allowed: needs precision=bf16",
    "warp=9": "warp='9' is not allowed: unknown knob; known: batch_size",
    "batch_sise=64": (
        "batch_sise='64' is not allowed: unknown knob (did you mean batch_size?); known: batch_size"
    ),
    "NCCL_ALGO=Rign": "NCCL_ALGO='Rign' is not allowed: a comma-separated list",
    "NCCL_IB_TIMEOUT=40": "NCCL_IB_TIMEOUT='40' is not allowed: an integer 1-31",
    "world_size=512": "world_size=512 is not allowed: 1..",
    "world_size=0": "world_size=0 is not allowed",
}
BAD_OPTIONS = [
    (["--workload", "nope"], "workload='nope' is not allowed: one of cnn, resnet50, gpt"),
    (["--data", "/does/not/exist"], "/does/not/exist does not exist"),
    (["--seconds", "0"], "seconds=0.0 is not allowed"),
    (["--seconds", "abc"], "invalid float value: 'abc'"),
]


@pytest.mark.parametrize(
    ("args", "words"), [*((["--set", s], w) for s, w in BAD_SETTINGS.items()), *BAD_OPTIONS]
)
def test_bad_input_exits_2_with_one_line(args, words, capsys):
    code = main(["burst", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert words in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_batch_bigger_than_the_dataset_is_bad_input(tiny_data, tmp_path, capsys):
    # found only once the data is read (inside the burst), so it is also a recorded result
    store = tmp_path / "h.sqlite"
    args = ["--data", str(tiny_data), "--set", "batch_size=64", "--store", str(store)]
    code = main(["burst", *args, "--json"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.strip() == (
        "workbench burst: error: batch_size=64 is not allowed: the dataset has only 36 samples"
    )
    assert main(["history", "--store", str(store), "--json"]) == 0
    assert [r["status"] for r in json.loads(capsys.readouterr().out)] == ["error"]


def test_a_batch_bigger_than_each_ranks_share_is_bad_input_too(tiny_data, capsys):
    # the rank that fails first reports it ("rank 0: KnobError: ...")
    args = ["--data", str(tiny_data), "--set", "batch_size=32", "--set", "world_size=2"]
    assert main(["burst", *args, "--no-record", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == (
        "workbench burst: error: batch_size=32 is not allowed: each rank's share of the "
        "dataset has only 18 samples"
    )


def test_data_folder_without_images_exits_2_in_a_real_process(tmp_path):
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    p = _run("burst", "--data", str(tmp_path / "empty"), "--json")
    assert p.returncode == 2
    assert p.stdout == ""
    assert str(tmp_path / "empty") in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_oom_is_a_result_with_exit_0(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(os.path.dirname(os.path.dirname(__file__)))
    from workloads_for_tests import hungry_workload

    from workbench.engine.workloads import register_workload

    register_workload("hungry", lambda data_dir=None: hungry_workload(limit=4))
    code = main(["burst", "--workload", "hungry", "--set", "batch_size=8", "--seconds", "0.2",
                 "--no-record", "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["status"] == "oom" and "allocate" in doc["error"]


def test_two_rank_burst_from_the_cli_shows_each_rank(tiny_data, tmp_path):
    p = _run("burst", "--workload", "cnn", "--data", str(tiny_data), "--seconds", "0.5",
             "--set", "batch_size=4", "--set", "world_size=2", "--no-record")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "rank 0" in p.stdout and "rank 1" in p.stdout and "samples/s" in p.stdout


def test_a_suspect_burst_says_so_in_the_text_output():
    from workbench.cli.burst import _format_result
    from workbench.core.results import BurstResult

    r = BurstResult(workload="cnn", suspect=["the step times add up to 1 ms but ..."])
    assert "SUSPECT            the step times add up to 1 ms but ..." in _format_result(r.to_dict())


def test_the_text_output_says_which_tensor_counted_the_samples():
    from workbench.cli.burst import _format_result
    from workbench.core.results import BurstResult

    text = _format_result(BurstResult(workload="rec", samples_from="target").to_dict())
    assert "samples_from       target" in text.splitlines()


def test_the_text_output_prints_the_ambient_environment_as_warnings():
    from workbench.cli.burst import _format_result
    from workbench.core.ambient import stamp
    from workbench.core.knobs import Knobs
    from workbench.core.results import BurstResult

    r = BurstResult(knobs=Knobs(), device="cpu")
    stamp(r, r.knobs, "cpu", {"NCCL_ALGO": "Tree", "PATH": "/bin"})
    lines = [line for line in _format_result(r.to_dict()).splitlines() if "ENVIRONMENT" in line]
    assert len(lines) == 1 and "NCCL_ALGO=Tree came from the environment, not a knob" in lines[0]


def test_a_burst_on_two_local_nodes_shows_each_node_in_json_and_text(tiny_data, capsys):
    from workbench.cli.burst import _format_result

    args = ["--data", str(tiny_data), "--seconds", "0.5", "--min-steps", "3", "--warmup-steps",
            "1", "--set", "batch_size=4", "--set", "world_size=2", "--set", "nodes=2",
            "--launcher", "local", "--no-record", "--json"]  # fmt: skip
    assert main(["burst", *args]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "ok", doc["error"]
    assert [(n["node"], n["ranks"]) for n in doc["nodes"]] == [("local-0", [0]), ("local-1", [1])]
    assert all(n["step_ms_p50"] > 0 and n["peak_mem_mib"] > 0 for n in doc["nodes"])
    assert all(n["data_wait_pct"] is not None and n["samples_per_s"] > 0 for n in doc["nodes"])
    text = _format_result(doc).splitlines()
    head = next(i for i, line in enumerate(text) if line.startswith("node "))
    assert "samples/s" in text[head] and "step p50 ms" in text[head]
    assert text[head + 1].split()[:2] == ["local-0", "0"]
    assert text[head + 2].split()[:2] == ["local-1", "1"]


def test_the_text_output_of_a_job_says_what_its_fullest_rank_holds():
    from workbench.cli.burst import _format_result
    from workbench.core.knobs import Knobs
    from workbench.core.results import BurstResult

    row = {"step_ms_p50": 9.0, "data_wait_pct": 0.0, "peak_mem_mib": 400.0}
    r = BurstResult(workload="gpt", knobs=Knobs(world_size=2, sharding="fsdp"),
                    ranks=[{"rank": 0, **row}, {"rank": 1, **row}], param_mib_per_rank=0.226,
                    grad_mib_per_rank=0.226, optimizer_state_mib_per_rank=0.452)  # fmt: skip
    shown = [line for line in _format_result(r.to_dict()).splitlines() if "per rank" in line]
    assert shown == ["held per rank      params 0.226, grads 0.226, optimizer 0.452 MiB "
                     "(shards, 2 ranks)"]  # fmt: skip
    alone = BurstResult(workload="gpt", param_mib_per_rank=0.452, grad_mib_per_rank=0.452,
                        optimizer_state_mib_per_rank=0.904)  # fmt: skip
    assert "held per rank" not in _format_result(alone.to_dict())  # the breakdown says it


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


def test_a_decode_value_that_does_not_exist_is_one_line_naming_the_choices(capsys):
    assert main(["burst", "--set", "decode=nvjpeg", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "decode='nvjpeg' is not allowed: one of cpu, gpu" in err
