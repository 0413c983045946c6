import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--set", "batch_size=0"], "batch_size=0 is not allowed"),
        (["--set", "batch_size=-3"], "batch_size=-3 is not allowed"),
        (["--set", "batch_size=abc"], "batch_size='abc' is not allowed: an integer"),
        (["--set", "prefetch_factor=4"], "prefetch_factor=4 is not allowed: needs num_workers"),
        (["--set", "precision=fp8"], "precision='fp8' is not allowed: one of default, fp32-strict"),
        (["--set", "fp8=tensorwise"], "fp8='tensorwise' is not allowed: needs precision=bf16"),
        (["--set", "warp=9"], "warp='9' is not allowed: unknown knob; known: batch_size"),
        (
            ["--set", "batch_sise=64"],
            "batch_sise='64' is not allowed: unknown knob (did you "
            "mean batch_size?); known: batch_size",
        ),
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


def test_argparse_errors_are_one_line_too(capsys):
    assert main(["burst", "--seconds", "abc"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "invalid float value" in err


def test_version_names_our_distribution_and_where_workbench_is_imported_from(capsys):
    import workbench

    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"throughput-workbench {workbench.__version__} (import workbench from ")
    assert os.path.dirname(workbench.__file__) in out


def test_a_missing_file_in_any_command_is_one_line_and_exit_2(monkeypatch, capsys):
    import workbench.cli as cli

    def missing(_args):
        Path("/no/such/folder/x.yaml").read_text()  # what a command meets at a missing path

    monkeypatch.setitem(cli._COMMANDS, "history", missing)
    assert main(["history"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["workbench history: error: /no/such/folder/x.yaml: no such file or folder"]


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


def test_data_command_builds_a_set_by_its_total_or_for_a_batch(tmp_path, capsys):
    out = tmp_path / "d"
    common = ["data", "--out", str(out), "--classes", "2", "--token-mb", "0.01", "--json"]
    assert main([*common, "--images", "5"]) == 0  # rounded up to whole classes: 3 each
    capsys.readouterr()
    assert len(list(out.rglob("*.jpg"))) == 6
    # for batch 1 at SHORT_EPOCH_BATCHES (50) batches an epoch: 50 images, 25 a class
    assert main([*common, "--for-batch", "1"]) == 0
    capsys.readouterr()
    assert len(list(out.rglob("*.jpg"))) == 50


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--images", "1"], "--images=1 is not allowed: an integer >= --classes (2)"),
        (["--for-batch", "0"], "--for-batch=0 is not allowed: a batch size >= 1"),
        (["--images-per-class", "0"], "--images-per-class=0 is not allowed: an integer >= 1"),
        (["--classes", "0"], "--classes=0 is not allowed: an integer >= 1"),
        (["--images", "8", "--for-batch", "2"], "not allowed with argument"),
        (["--for-batch", "2", "--format", "lmdb"], "--for-batch is not allowed with --format"),
    ],
)
def test_data_command_refuses_a_bad_size(args, said, tmp_path, capsys):
    out = tmp_path / "d"
    base = ["--classes", "2"] if "--classes" not in args else []
    assert main(["data", "--out", str(out), *base, *args]) == 2
    assert said in capsys.readouterr().err
    assert not out.exists()


def test_history_of_an_empty_store(tmp_path, capsys):
    assert main(["history", "--store", str(tmp_path / "h.sqlite"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_history_of_a_room_names_each_learner(tmp_path, capsys, monkeypatch):
    from workbench.history.store import HistoryStore

    store = tmp_path / "h.sqlite"
    for learner in ("ada", "bob"):
        monkeypatch.setenv("WORKBENCH_LEARNER", learner)
        HistoryStore(store).append({"workload": "cnn", "status": "ok", "samples_per_s": 10.0})
    assert main(["history", "--store", str(store)]) == 0  # bob, a learner: his row only
    out = capsys.readouterr().out
    assert "learner" not in out and len(out.splitlines()) == 2

    monkeypatch.setenv("WORKBENCH_ROLE", "instructor")
    assert main(["history", "--store", str(store)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "learner" in lines[0] and " ada " in lines[1] and " bob " in lines[2]
    assert main(["history", "--store", str(store), "--learner", "ada", "--json"]) == 0
    assert [r["learner"] for r in json.loads(capsys.readouterr().out)] == ["ada"]


def test_oom_is_a_result_with_exit_0(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(os.path.dirname(os.path.dirname(__file__)))
    from workloads_for_tests import hungry_workload

    from workbench.engine.workloads import register_workload

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


def _interrupt_like_a_terminal(args: list[str], ready, tmp_path) -> tuple[int, str, list]:
    """Start `workbench ARGS` in its own process group, wait until ``ready(proc, stderr_lines)``
    and send SIGINT to the whole group, as a terminal's Ctrl-C (or Jupyter's interrupt) does:
    the loader's or the builder's worker processes get it too."""
    import signal
    import threading
    import time

    import psutil

    env = {**os.environ, "WORKBENCH_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "workbench", *args]
    pipe = subprocess.PIPE
    p = subprocess.Popen(cmd, stdout=pipe, stderr=pipe, text=True, env=env, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(p.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not ready(psutil.Process(p.pid), lines) and time.monotonic() < deadline:
        assert p.poll() is None, "".join(lines)
        time.sleep(0.1)
    children = psutil.Process(p.pid).children(recursive=True)
    os.killpg(p.pid, signal.SIGINT)
    p.wait(timeout=60)
    reader.join(timeout=10)
    time.sleep(0.5)
    alive = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    return p.returncode, "".join(lines), alive


def test_ctrl_c_in_a_terminal_stops_a_burst_without_a_traceback(tiny_data, tmp_path):
    def workers_running(proc, _lines):
        return len(proc.children()) >= 2

    code, err, alive = _interrupt_like_a_terminal(
        ["burst", "--data", str(tiny_data), "--seconds", "60", "--set", "num_workers=2",
         "--set", "batch_size=4", "--json"], workers_running, tmp_path)  # fmt: skip
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert alive == []


def test_ctrl_c_in_a_terminal_stops_a_data_build_without_a_traceback(tmp_path):
    def building_images(_proc, lines):
        return any("images:" in ln for ln in lines)

    code, err, alive = _interrupt_like_a_terminal(
        ["data", "--out", str(tmp_path / "d"), "--images-per-class", "200"],
        building_images, tmp_path)  # fmt: skip
    assert code == 130, err
    assert "Traceback" not in err
    assert alive == []


def test_a_suspect_burst_says_so_in_the_text_output():
    from workbench.cli import _format_result
    from workbench.core.results import BurstResult

    r = BurstResult(workload="cnn", suspect=["the step times add up to 1 ms but ..."])
    assert "SUSPECT            the step times add up to 1 ms but ..." in _format_result(r.to_dict())


def test_the_text_output_says_which_tensor_counted_the_samples():
    from workbench.cli import _format_result
    from workbench.core.results import BurstResult

    text = _format_result(BurstResult(workload="rec", samples_from="target").to_dict())
    assert "samples_from       target" in text.splitlines()


USER_MODULE = """
import torch
from torch.utils.data import TensorDataset

import workbench as wb


def make_model():
    x = torch.randn(256, 16)
    return wb.Workload(name="mine", model=lambda: torch.nn.Linear(16, 2),
                       dataset=lambda: TensorDataset(x, (x[:, 0] > 0).long()))


def not_a_workload():
    return {"model": None}
"""


def _workbench_script() -> str:
    """The installed ``workbench`` command: unlike ``python -m workbench``, its import path
    starts with its bin folder, not the current directory (what users run)."""
    script = os.path.join(os.path.dirname(sys.executable), "workbench")
    if not os.path.exists(script):
        pytest.skip("the workbench command is not installed next to this Python")
    return script


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_module_in_the_current_directory_is_found_by_the_command_and_its_ranks(
    world_size, tmp_path
):
    (tmp_path / "mymodel.py").write_text(USER_MODULE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # found from where it runs
    p = subprocess.run(
        [_workbench_script(), "burst", "--workload", "mymodel:make_model", "--seconds", "0.3",
         "--set", "batch_size=8", "--set", f"world_size={world_size}", "--no-record", "--json"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["status"] == "ok" and doc["workload"] == "mine"
    assert len(doc["ranks"] or [None]) == world_size


SHADOW = """
from pathlib import Path

Path(__file__).with_name("SHADOW-IMPORTED").touch()
raise ImportError("this is not torch")
"""


def test_a_file_in_the_current_directory_never_shadows_an_installed_package(tmp_path):
    """The current directory went first on the import path for any --workload: a ``torch.py``
    there was imported instead of torch. ``python -m`` puts it first too; the command moves it
    after everything installed, and the workload beside it still loads."""
    (tmp_path / "mymodel.py").write_text(USER_MODULE)
    (tmp_path / "torch.py").write_text(SHADOW)
    (tmp_path / "yaml.py").write_text(SHADOW)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    p = subprocess.run(
        [sys.executable, "-m", "workbench", "burst", "--workload", "mymodel:make_model",
         "--seconds", "0.3", "--set", "batch_size=8", "--no-record", "--json"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert not (tmp_path / "SHADOW-IMPORTED").exists(), p.stderr
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["workload"] == "mine"


@pytest.mark.parametrize(
    ("workload", "words"),
    [
        ("nomodule:make", "no module named 'nomodule' on the import path (which includes the "
                          "current directory, {here}); one of cnn, resnet50, gpt, gpt:124m, "
                          "hf:gpt2, or module:function that returns a Workload"),
        ("mymodel:make", "module mymodel ({here}/mymodel.py) has no 'make'; its functions: "
                         "make_model, not_a_workload"),
        ("mymodel:not_a_workload", "mymodel:not_a_workload returned dict, not a Workload"),
        ("mymodel", "'mymodel' is a module: add its function's name, e.g. 'mymodel:make'"),
    ],
    ids=["no-module", "no-function", "not-a-workload", "module-only"],
)  # fmt: skip
def test_a_bad_workload_name_exits_2_with_one_line_naming_the_option(
    workload, words, tmp_path, monkeypatch, capsys
):
    (tmp_path / "mymodel.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the command puts the directory last
    monkeypatch.delitem(sys.modules, "mymodel", raising=False)
    for world_size in (1, 2):  # a distributed burst refuses it before launching, in the same words
        code = main(["burst", "--workload", workload, "--set", f"world_size={world_size}",
                     "--no-record", "--json"])  # fmt: skip
        out, err = capsys.readouterr()
        assert (code, out) == (2, "")
        assert err.startswith(f"workbench burst: error: --workload='{workload}' is not allowed: ")
        assert words.format(here=tmp_path) in err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert sys.path[-1] == str(tmp_path) and str(tmp_path) not in sys.path[:-1]


def test_data_for_a_function_that_cannot_take_it_names_the_option(tmp_path, monkeypatch, capsys):
    (tmp_path / "mymodel.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "mymodel", raising=False)
    code = main(["burst", "--workload", "mymodel:make_model", "--data", str(tmp_path),
                 "--no-record"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == (
        f"workbench burst: error: --data='{tmp_path}' is not allowed: mymodel:make_model has no "
        "data_dir parameter to take it (add one, def make(data_dir=None), or leave the data "
        "folder out)"
    )


@pytest.mark.parametrize("command", ["burst", "sweep", "diagnose", "tune", "profile"])
def test_the_workload_help_says_how_to_name_a_factory(command, capsys):
    assert main([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("--workload NAME|MODULE:FUNCTION a built-in name (cnn, resnet50, gpt, gpt:124m, "
            "hf:gpt2) or "
            "module:function that returns a Workload, importable from the current directory"
            ) in text  # fmt: skip


def test_the_text_output_prints_the_ambient_environment_as_warnings():
    from workbench.cli import _format_result
    from workbench.core.ambient import stamp
    from workbench.core.knobs import Knobs
    from workbench.core.results import BurstResult

    r = BurstResult(knobs=Knobs(), device="cpu")
    stamp(r, r.knobs, "cpu", {"NCCL_ALGO": "Tree", "PATH": "/bin"})
    lines = [line for line in _format_result(r.to_dict()).splitlines() if "ENVIRONMENT" in line]
    assert len(lines) == 1 and "NCCL_ALGO=Tree came from the environment, not a knob" in lines[0]


def test_a_burst_on_two_local_nodes_shows_each_node_in_json_and_text(tiny_data, capsys):
    from workbench.cli import _format_result

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


def test_comm_across_two_local_nodes_has_a_scope_column_and_field(capsys):
    from workbench.distributed.allreduce import CommResult

    args = ["--world-size", "2", "--nodes", "2", "--launcher", "local", "--sizes", "8K"]
    assert main(["comm", *args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nodes"] == 2 and [r["scope"] for r in doc["rows"]] == ["inter"]
    table = CommResult(**doc).table().splitlines()
    assert table[1].split()[:3] == ["size", "scope", "ranks"]
    assert table[2].split()[2:4] == ["inter", "2"]


@pytest.mark.parametrize(
    ("command", "args", "words"),
    [
        ("burst", ["--launcher", "pbs"], "argument --launcher: invalid choice: 'pbs'"),
        ("comm", ["--launcher", "pbs"], "argument --launcher: invalid choice: 'pbs'"),
        ("burst", ["--hosts", "a b"], "argument --hosts: 'a b' is not allowed: host names"),
        ("comm", ["--hosts", "a,a"], "argument --hosts: 'a,a' is not allowed: each host once"),
        ("comm", ["--nodes", "0"], "argument --nodes: '0' is not allowed: a whole number"),
        ("comm", ["--hosts", "a,b"], "--hosts='a,b' is not allowed: no hosts with nodes=1"),
        ("comm", ["--nodes", "2", "--world-size", "3"], "world_size=3 is not allowed: a multiple"),
        ("burst", ["--set", "nodes=2", "--set", "world_size=2", "--launcher", "ssh"],
         "--hosts='' is not allowed: one host per node with launcher=ssh"),
        ("burst", ["--set", "nodes=2", "--set", "world_size=2", "--launcher", "local",
                   "--hosts", "a,b"], "--hosts='a,b' is not allowed: no hosts with launcher=local"),
    ],
)  # fmt: skip
def test_bad_launcher_hosts_or_nodes_exit_2_naming_the_flag(command, args, words, capsys):
    assert main([command, *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and words in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_text_output_of_a_job_says_what_its_fullest_rank_holds():
    from workbench.cli import _format_result
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
