"""workbench.distributed.launchers: host lists, the agent's command line, the local and ssh
launchers (real processes, a real ssh client to a host that does not resolve)."""

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from workbench.core.errors import InputError
from workbench.distributed.jobsecret import SECRET_FILE_ENV, agent_shell, job_text
from workbench.distributed.launchers import (
    NODE_ENV,
    NODE_INDEX_ENV,
    AgentLaunch,
    LaunchError,
    LocalLauncher,
    SshLauncher,
    agent_command,
    forwarded_env,
    local_env,
    parse_hosts,
    pick_launcher,
    private_names,
)


def test_host_lists_are_parsed_and_bad_ones_refused_naming_hosts():
    assert parse_hosts("a, b ,user@c:2222") == ["a", "b", "user@c:2222"]
    assert parse_hosts(["a", "b"]) == ["a", "b"] and parse_hosts(None) == []
    with pytest.raises(InputError, match=r"hosts='a b' is not allowed: host names"):
        parse_hosts("a b,c")
    with pytest.raises(InputError, match=r"hosts='a,a' is not allowed: each host once"):
        parse_hosts("a,a")


def test_a_host_that_ssh_would_read_as_an_option_is_refused_naming_it():
    for bad in ("-Fcfg", "node1,-oProxyCommand=x", "-l@node", "user@-Fcfg"):
        with pytest.raises(InputError, match=r"hosts='.*-.*' is not allowed: host names"):
            parse_hosts(bad)
    with pytest.raises(InputError, match=r"hosts='-Fcfg' is not allowed: .*start with '-'"):
        SshLauncher(["-Fcfg"])
    argv = SshLauncher(["node1"]).ssh_argv("node1", "true")
    assert argv[-3:] == ["--", "node1", "true"]  # no word after the options is an option


def test_the_launcher_is_picked_from_the_allocation_the_hosts_or_this_machine(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert pick_launcher(None).name == "local"
    assert pick_launcher(None, "a,b").name == "ssh"
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert pick_launcher(None).name == "slurm"
    with pytest.raises(InputError, match=r"launcher='pbs'.*local, ssh, slurm"):
        pick_launcher("pbs")
    with pytest.raises(InputError, match=r"hosts=''.*one host per node with launcher=ssh"):
        pick_launcher("ssh")


def test_only_the_jobs_variables_travel_to_a_remote_node():
    env = {"NCCL_ALGO": "Ring", "TORCH_X": "1", "OMP_NUM_THREADS": "4", "PYTHONPATH": "/p",
           "PATH": "/bin", "HOME": "/root", "SSH_AUTH_SOCK": "/s", "DISPLAY": ":0"}  # fmt: skip
    assert forwarded_env(env) == {"NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "4",
                                  "PYTHONPATH": "/p", "TORCH_X": "1"}  # fmt: skip
    # a local agent also gets what a process here needs to start, and nothing else
    assert local_env({**env, "PGPASSWORD": "pw", "AWS_SECRET_ACCESS_KEY": "k"}) == {
        **forwarded_env(env), "PATH": "/bin", "HOME": "/root"}  # fmt: skip


def test_no_password_store_address_or_token_travels_to_a_node():
    env = {"WORKBENCH_STORE": "postgresql://room:pw@db/class", "WORKBENCH_LAB_TOKEN": "t",
           "WORKBENCH_ROLE": "instructor", "WORKBENCH_HISTORY": "/h.db", "PGPASSWORD": "pw",
           "NCCL_IB_SECRET_KEY": "k", "WORKBENCH_DATA": "/data", "WORKBENCH_HOME": "/wb",
           "CUDA_VISIBLE_DEVICES": "0,1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
           SECRET_FILE_ENV: "/tmp/x/secret"}  # fmt: skip
    assert forwarded_env(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "WORKBENCH_DATA": "/data",
        "WORKBENCH_HOME": "/wb",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    assert sorted(private_names(list(env))) == sorted(
        [
            "WORKBENCH_STORE",
            "WORKBENCH_LAB_TOKEN",
            "WORKBENCH_ROLE",
            "WORKBENCH_HISTORY",
            "PGPASSWORD",
            "NCCL_IB_SECRET_KEY",
            SECRET_FILE_ENV,
        ]
    )  # srun drops the same
    argv = SshLauncher(["n1"]).agent_argv("n1", ["python", "-m", "x"], env, "/tmp/wb-1/secret")
    assert "pw" not in " ".join(argv) and "WORKBENCH_STORE" not in " ".join(argv)
    assert f"{SECRET_FILE_ENV}=/tmp/wb-1/secret" in argv[-1]  # the path, never the secret


def test_the_agents_command_line_names_no_store_no_job_and_no_rendezvous():
    argv = agent_command(nnodes=2, nproc_per_node=4, tag="t1")
    assert argv[1:3] == ["-m", "workbench.distributed.agent"]
    for word in ("--nnodes=2", "--nproc-per-node=4", "--max-restarts=0"):
        assert word in argv
    assert not [w for w in argv if w.startswith(("--rdzv", "--master", "--local-addr"))]
    assert argv[-3:] == ["-m", "workbench.distributed.rank", "wbstore://job-file/t1"]


def test_ssh_runs_the_agent_in_this_folder_with_the_forwarded_variables_only():
    ssh = SshLauncher(["user@gpu01:2222"])
    argv = ssh.agent_argv("user@gpu01:2222", ["python", "-m", "x"],
                          {"NCCL_ALGO": "Tree", "PATH": "/bin"})  # fmt: skip
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"]
    assert "-tt" in argv and argv[argv.index("-p") + 1] == "2222" and "user@gpu01" in argv
    remote = argv[-1]
    assert remote.startswith(f"cd {os.getcwd()} && exec env ")
    assert f"NCCL_ALGO=Tree {NODE_ENV}=gpu01 WORKBENCH_NODE_RANK=0 python -m x" in remote
    assert "PATH=" not in remote
    assert argv[-3] == "--" and argv[-2] == "user@gpu01"
    with pytest.raises(InputError, match=r"one host per node: 2 for nodes=2, 1 given"):
        ssh.hosts(2)


def test_a_host_that_does_not_resolve_is_named_in_the_error():
    ssh = SshLauncher(["nowhere.invalid"])
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"^node nowhere.invalid: .*nowhere.invalid") as caught:
        ssh.run_on("nowhere.invalid", ["true"], 20)
    assert caught.value.host == "nowhere.invalid" and time.monotonic() - t0 < 20


def test_local_agents_are_nodes_of_their_own_and_stop_leaves_nothing(tmp_path, monkeypatch):
    code = ("import os, time; open(os.environ['WORKBENCH_NODE'] + '-' + "
            "os.environ['WORKBENCH_NODE_INDEX'], 'w'); time.sleep(300)")  # fmt: skip
    launcher = LocalLauncher()
    monkeypatch.chdir(tmp_path)  # the agents run in this folder
    secret = os.urandom(32)
    env = {**os.environ, "PGPASSWORD": "pw", "WB_NOT_ON_THE_LIST": "1"}
    procs = launcher.start(AgentLaunch([sys.executable, "-c", code], env, 2, tmp_path,
                                       job_text(secret)))  # fmt: skip
    deadline = time.monotonic() + 30
    while not ((tmp_path / "local-0-0").exists() and (tmp_path / "local-1-1").exists()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert [psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE for p in procs] == [True] * 2
    assert {os.getsid(p.pid) for p in procs} == {p.pid for p in procs}  # a session each
    assert sorted(f.name for f in tmp_path.glob("*.log")) == ["local-0.log", "local-1.log"]
    for p in procs:  # the secret: a 0600 file, named in the environment, never in argv
        agent = psutil.Process(p.pid)
        path = Path(agent.environ()[SECRET_FILE_ENV])
        assert path.read_text() == job_text(secret) and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert secret.hex() not in " ".join(agent.cmdline())
        assert secret.hex() not in " ".join(agent.environ().values())
        # the allow-list, not this process's whole environment
        assert "PGPASSWORD" not in agent.environ() and "WB_NOT_ON_THE_LIST" not in agent.environ()
        assert agent.environ()["PATH"] == os.environ["PATH"]
    launcher.stop(procs)
    assert all(p.poll() is not None for p in procs)
    assert NODE_INDEX_ENV not in os.environ


def test_srun_agents_read_the_secret_from_stdin_into_a_private_file(tmp_path):
    # the shell srun runs on each node, here: the secret arrives on stdin, not in argv
    secret = os.urandom(32).hex()
    show = [
        sys.executable,
        "-c",
        "import os, stat; p = os.environ['WORKBENCH_JOB_SECRET_FILE']; "
        "print(open(p).read(), oct(stat.S_IMODE(os.stat(p).st_mode)), os.path.dirname(p))",
    ]
    argv = agent_shell(show)
    assert secret not in " ".join(argv)
    out = subprocess.run(argv, input=secret, capture_output=True, text=True, timeout=30,
                         env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
    text, mode, folder = out.stdout.split()
    assert (text, mode) == (secret, "0o600") and folder.startswith(str(tmp_path))
    assert not Path(folder).exists()  # removed when the agent ends


FAKE_SSH = """#!/bin/sh
# ssh as far as the launcher uses it: options up to "--", the host, then the remote command,
# run here by sh (no terminal: stdin passes through)
while [ "$1" != "--" ]; do shift; done
shift 2
exec sh -c "$1"
"""


def test_ssh_sends_the_secret_on_stdin_and_the_agent_reads_it_from_a_private_file(
    tmp_path, monkeypatch
):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    secret = os.urandom(32)
    show = [sys.executable, "-c", "import os, stat; p = os.environ['WORKBENCH_JOB_SECRET_FILE']; "
            "print(open(p).read(), oct(stat.S_IMODE(os.stat(p).st_mode)))"]  # fmt: skip
    launcher = SshLauncher(["node1"])
    procs = launcher.start(AgentLaunch(show, {}, 1, tmp_path, job_text(secret)))
    assert procs[0].wait(timeout=30) == 0
    folder = launcher._secret_dirs["node1"]
    assert (tmp_path / "node1.log").read_text().split() == [secret.hex(), "0o600"]
    assert secret.hex() not in " ".join(procs[0].args)  # the ssh client's argv
    launcher.stop(procs)
    assert folder.startswith(str(tmp_path)) and not Path(folder).exists()  # removed at stop
