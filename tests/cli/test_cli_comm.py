"""`workbench comm`: the all-reduce benchmark on the CPU, one node or two local ones."""

import json

from cli_process import run_workbench as _run

from workbench.cli import main


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


def test_comm_across_two_local_nodes_has_a_scope_column_and_field(capsys):
    from workbench.distributed.allreduce import CommResult

    args = ["--world-size", "2", "--nodes", "2", "--launcher", "local", "--sizes", "8K"]
    assert main(["comm", *args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nodes"] == 2 and [r["scope"] for r in doc["rows"]] == ["inter"]
    table = CommResult(**doc).table().splitlines()
    assert table[1].split()[:3] == ["size", "scope", "ranks"]
    assert table[2].split()[2:4] == ["inter", "2"]
