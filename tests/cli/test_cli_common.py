"""What every command shares (workbench/cli/common.py): usage errors and missing files as one
line and exit 2, Ctrl-C as exit 130, the options of the commands that run bursts, and a
``--workload module:function`` found in the current directory, never in place of a package."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.cli.common import workload_is_here


def test_argparse_errors_are_one_line_too(capsys):
    assert main(["burst", "--seconds", "abc"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "invalid float value" in err


def test_a_missing_file_in_any_command_is_one_line_and_exit_2(monkeypatch, capsys):
    import workbench.cli.history as history

    def missing(_args):
        Path("/no/such/folder/x.yaml").read_text()  # what a command meets at a missing path

    monkeypatch.setattr(history, "run", missing)
    assert main(["history"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["workbench history: error: /no/such/folder/x.yaml: no such file or folder"]


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
        ("nomodule:make", "no module named 'nomodule' on the import path (the current "
                          "directory, {here}, is not on it); one of cnn, resnet50, gpt, "
                          "gpt:124m, hf:gpt2, or module:function that returns a Workload"),
        ("mymodel:make", "module mymodel ({here}/mymodel.py) has no 'make'; its functions: "
                         "make_model, not_a_workload"),
        ("mymodel:not_a_workload", "mymodel:not_a_workload returned dict, not a Workload"),
        ("mymodel", "'mymodel' is a module: name its function, one of mymodel:make_model, "
                    "mymodel:not_a_workload"),
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
    if workload.startswith("nomodule"):  # no such module here: the folder stays off the path
        assert str(tmp_path) not in sys.path
    else:
        assert sys.path[-1] == str(tmp_path) and str(tmp_path) not in sys.path[:-1]


def test_the_current_folder_goes_on_the_path_only_for_a_module_there_or_when_asked(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])  # as python -m puts it
    (tmp_path / "mymodel.py").write_text(USER_MODULE)
    assert main(["history", "--json"]) == 0
    assert str(tmp_path) not in sys.path  # a shared folder's libraries are not searched
    assert main(["--trust-cwd", "history", "--json"]) == 0
    assert sys.path[-1] == str(tmp_path)
    assert main(["history", "--trust-cwd", "--json"]) == 0 and sys.path[-1] == str(tmp_path)
    assert main(["history", "--json"]) == 0 and str(tmp_path) not in sys.path
    capsys.readouterr()
    assert workload_is_here("mymodel:make_model") and workload_is_here("mymodel")
    assert not workload_is_here("cnn") and not workload_is_here("elsewhere:make")
    (tmp_path / "examples").mkdir()  # a plain folder, no __init__.py: a namespace package
    (tmp_path / "examples" / "train.py").write_text(USER_MODULE)
    assert workload_is_here("examples.train:make_model")
    assert not workload_is_here("examples.missing:make") and not workload_is_here("a-b:make")


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


@pytest.mark.usefixtures("tiny_workload")
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
