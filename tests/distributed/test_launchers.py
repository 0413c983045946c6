"""workbench.distributed.launchers: host lists, the agent's command line, the local and ssh
launchers (real processes, a real ssh client to a host that does not resolve)."""

import os
import sys
import time

import psutil
import pytest

from workbench.core.errors import InputError
from workbench.distributed.launchers import (
    NODE_ENV,
    NODE_INDEX_ENV,
    LaunchError,
    LocalLauncher,
    SshLauncher,
    agent_command,
    forwarded_env,
    parse_hosts,
    pick_launcher,
)


def test_host_lists_are_parsed_and_bad_ones_refused_naming_hosts():
    assert parse_hosts("a, b ,user@c:2222") == ["a", "b", "user@c:2222"]
    assert parse_hosts(["a", "b"]) == ["a", "b"] and parse_hosts(None) == []
    with pytest.raises(InputError, match=r"hosts='a b' is not allowed: host names"):
        parse_hosts("a b,c")
    with pytest.raises(InputError, match=r"hosts='a,a' is not allowed: each host once"):
        parse_hosts("a,a")


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


def test_the_agent_joins_the_kernels_store_without_hosting_it():
    argv = agent_command(nnodes=2, nproc_per_node=4, endpoint="k:1234", rdzv_id="j",
                         job_path="wbstore://k:1234/j", join_timeout_s=30,
                         local_addr="127.0.0.1")  # fmt: skip
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    for word in ("--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                 "--rdzv-endpoint=k:1234", "--rdzv-id=j", "--rdzv-conf=is_host=0,join_timeout=30",
                 "--local-addr=127.0.0.1", "--max-restarts=0"):  # fmt: skip
        assert word in argv
    assert argv[-3:] == ["-m", "workbench.distributed.rank", "wbstore://k:1234/j"]


def test_ssh_runs_the_agent_in_this_folder_with_the_forwarded_variables_only():
    ssh = SshLauncher(["user@gpu01:2222"])
    argv = ssh.agent_argv("user@gpu01:2222", ["python", "-m", "x"],
                          {"NCCL_ALGO": "Tree", "PATH": "/bin"})  # fmt: skip
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"]
    assert "-tt" in argv and argv[argv.index("-p") + 1] == "2222" and "user@gpu01" in argv
    remote = argv[-1]
    assert remote.startswith(f"cd {os.getcwd()} && exec env ")
    assert f"NCCL_ALGO=Tree {NODE_ENV}=gpu01 python -m x" in remote and "PATH=" not in remote
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
    procs = launcher.start([sys.executable, "-c", code], dict(os.environ), 2, tmp_path)
    deadline = time.monotonic() + 30
    while not ((tmp_path / "local-0-0").exists() and (tmp_path / "local-1-1").exists()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert [psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE for p in procs] == [True] * 2
    assert {os.getsid(p.pid) for p in procs} == {p.pid for p in procs}  # a session each
    assert sorted(f.name for f in tmp_path.glob("*.log")) == ["local-0.log", "local-1.log"]
    launcher.stop(procs)
    assert all(p.poll() is not None for p in procs)
    assert NODE_INDEX_ENV not in os.environ
