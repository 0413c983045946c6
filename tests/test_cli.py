import json
import os
import subprocess
import sys

import pytest

from workbench.cli import main


def _run(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


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
    h = _run("history", "--store", str(store), "--json")
    assert h.returncode == 0
    rows = json.loads(h.stdout)
    assert [r["id"] for r in rows] == [doc["id"]]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--set", "batch_size=0"], "batch_size=0 is not allowed"),
        (["--set", "batch_size=-3"], "batch_size=-3 is not allowed"),
        (["--set", "batch_size=abc"], "batch_size='abc' is not allowed: an integer"),
        (["--set", "prefetch_factor=4"], "prefetch_factor=4 is not allowed: needs num_workers"),
        (["--set", "precision=fp8"], "precision='fp8' is not allowed: one of fp32"),
        (["--set", "warp=9"], "warp='9' is not allowed: unknown knob; known: batch_size"),
        (["--workload", "nope"], "workload='nope' is not allowed: one of cnn, resnet50, gpt"),
        (["--data", "/does/not/exist"], "/does/not/exist does not exist"),
        (["--seconds", "0"], "seconds=0.0 is not allowed"),
        (["--seconds", "abc"], "invalid float value: 'abc'"),
        (["--set", "NCCL_ALGO=Rign"], "NCCL_ALGO='Rign' is not allowed: a comma-separated list"),
        (["--set", "NCCL_IB_TIMEOUT=40"], "NCCL_IB_TIMEOUT='40' is not allowed: an integer 1-31"),
        (["--set", "world_size=512"], "world_size=512 is not allowed: 1.."),
        (["--set", "world_size=0"], "world_size=0 is not allowed"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, words, capsys):
    code = main(["burst", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert words in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_argparse_errors_are_one_line_too(capsys):
    assert main(["burst", "--seconds", "abc"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "invalid float value" in err


def test_data_folder_without_images_exits_2_in_a_real_process(tmp_path):
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    p = _run("burst", "--data", str(tmp_path / "empty"), "--json")
    assert p.returncode == 2
    assert p.stdout == ""
    assert str(tmp_path / "empty") in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_data_command_builds_and_reuses(tmp_path, capsys):
    out = tmp_path / "d"
    args = ["data", "--out", str(out), "--images-per-class", "2", "--classes", "2",
            "--token-mb", "0.01", "--json"]  # fmt: skip
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["root"] == str(out) and len(list(out.rglob("*.jpg"))) == 4
    assert main(args) == 0  # second time: reused, same answer
    assert json.loads(capsys.readouterr().out) == doc


def test_history_of_an_empty_store(tmp_path, capsys):
    assert main(["history", "--store", str(tmp_path / "h.sqlite"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_oom_is_a_result_with_exit_0(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(os.path.dirname(__file__))
    from workloads_for_tests import hungry_workload

    from workbench.workloads import register_workload

    register_workload("hungry", lambda data_dir=None: hungry_workload(limit=4))
    code = main(["burst", "--workload", "hungry", "--set", "batch_size=8", "--seconds", "0.2",
                 "--no-record", "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["status"] == "oom" and "allocate" in doc["error"]


def test_comm_prints_one_json_document_and_bad_input_exits_2(capsys):
    p = _run("comm", "--world-size", "2", "--sizes", "8K,64K", "--set", "NCCL_PROTO=LL",
             "--device", "cpu", "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["status"] == "ok" and doc["world_size"] == 2 and doc["backend"] == "gloo"
    assert [r["size_bytes"] for r in doc["rows"]] == [8192, 65536]
    assert all(r["correct"] for r in doc["rows"]) and "nccl" in doc["no_effect"]
    for args, words in [
        (["--set", "batch_size=8"], "comm takes NCCL_* variables"),
        (["--sizes", "8Q"], "sizes='8Q' is not allowed"),
        (["--set", "NCCL_PROTO=LL2"], "NCCL_PROTO='LL2' is not allowed"),
    ]:
        assert main(["comm", *args]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1


def test_two_rank_burst_from_the_cli_shows_each_rank(tiny_data, tmp_path):
    p = _run("burst", "--workload", "cnn", "--data", str(tiny_data), "--seconds", "0.5",
             "--set", "batch_size=4", "--set", "world_size=2", "--no-record")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "rank 0" in p.stdout and "rank 1" in p.stdout and "samples/s" in p.stdout
