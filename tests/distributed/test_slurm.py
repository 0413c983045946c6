"""workbench.distributed.slurm against a real SLURM: munged, slurmctld, two slurmd (this host).

The cluster starts once per session (about 1 s) in a temp folder (``slurm_cluster.py``). Under
CI=true these tests fail when SLURM is missing; elsewhere they skip, saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from slurm_cluster import SlurmCluster, missing_binaries

import workbench as wb
from workbench.config.saved import save_config
from workbench.core.errors import InputError
from workbench.core.nccl import NcclError
from workbench.distributed.launchers import AgentLaunch, LaunchError, pick_launcher
from workbench.distributed.netcheck import check_interfaces
from workbench.distributed.slurm import (
    SlurmLauncher,
    allocation,
    srun_command,
)
from workbench.distributed.torchrun import JobSpec

# srun steps, mostly waited on; one worker holds the module's cluster
pytestmark = [pytest.mark.concurrent, pytest.mark.xdist_group("slurm")]

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The test cluster, for this module only: its daemons are this process's children, and
    later tests (tests/engine/test_burst.py) check that a burst leaves no child behind."""
    missing = missing_binaries()
    why = None
    if missing:
        why = f"SLURM/munge not installed ({', '.join(missing)}): apt-get install slurm-wlm munge"
    elif os.geteuid() != 0:
        why = "the test cluster's slurmd runs jobs as root: run the tests as root"
    if why and IN_CI:
        pytest.fail(why)
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    print(f"\nSLURM test cluster up in {cluster.start_s:.2f} s")
    yield cluster
    cluster.stop()
    for name, proc in cluster.procs.items():
        assert proc.poll() is not None, f"{name} still running after stop"


@pytest.fixture
def in_slurm(slurm, monkeypatch):
    """This test process inside a two-node allocation, as ``salloc`` would leave a shell:
    ``salloc --no-shell`` grants it, and SLURM's variables for it go into our environment."""
    for name, value in slurm.env.items():
        monkeypatch.setenv(name, value)
    slurm.run(["salloc", "--no-shell", "--nodes=2", "--job-name=wbtest"], timeout=30)
    queue = slurm.run(["squeue", "--noheader", "--format=%i %j"]).split()
    assert "wbtest" in queue, f"salloc granted nothing: {queue}"
    job_id = queue[queue.index("wbtest") - 1]
    monkeypatch.setenv("SLURM_JOB_ID", job_id)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "wb[1-2]")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "1(x2)")
    monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)
    yield job_id
    slurm.run(["scancel", job_id], check=False)


def _wait_job(slurm: SlurmCluster, job_id: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while job_id in slurm.jobs():
        assert time.monotonic() < deadline, f"job {job_id} still queued or running"
        time.sleep(0.1)


# -- the cluster itself ---------------------------------------------------------------------


def test_two_tasks_fit_on_one_node_under_salloc_and_sbatch(slurm, tmp_path):
    out = slurm.run(["salloc", "--nodes=1", "--ntasks=2", "srun", "--nodes=1", "--ntasks=2",
                     "hostname"])  # fmt: skip
    assert len(out.split()) == 2
    script = tmp_path / "two.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n"
                      "srun -N1 -n1 hostname\nsrun printenv SLURMD_NODENAME\n")  # fmt: skip
    # srun's own notes ("Requested nodes are busy" while the first step's resources are
    # released, on a loaded machine) go to the error file, not among the names
    job_id = slurm.run(["sbatch", "--parsable", f"--output={tmp_path}/out.txt",
                        f"--error={tmp_path}/err.txt", str(script)])  # fmt: skip
    _wait_job(slurm, job_id.strip())
    lines = (tmp_path / "out.txt").read_text().split()
    assert sorted(lines[1:]) == ["wb1", "wb2"]  # one task on each node, named by srun


def test_allocation_reads_what_salloc_sets(slurm):
    code = ("import json, dataclasses; from workbench.distributed.slurm import allocation; "
            "print(json.dumps(dataclasses.asdict(allocation())))")  # fmt: skip
    out = slurm.run(["salloc", "--nodes=2", "--ntasks-per-node=1", sys.executable, "-c", code],
                    env={"PYTHONPATH": os.getcwd()})  # fmt: skip
    got = json.loads(out.strip().splitlines()[-1])
    assert got["nodes"] == ["wb1", "wb2"] and got["job_id"].isdigit()
    assert got["ntasks_per_node"] == [1, 1]


def test_the_saved_configs_sbatch_script_is_accepted_and_runs_one_agent_per_node(slurm, tmp_path):
    # The production script, as `workbench show` prints it: sbatch --test-only accepts it, and
    # run for real (torchrun replaced by a stand-in that reports what it was given) srun starts
    # one agent per node with the exported variables and MASTER_ADDR set.
    shape = {"nodes": 2} if "nodes" in wb.Knobs.__dataclass_fields__ else {}
    knobs = wb.Knobs(world_size=2 * shape.get("nodes", 1), **shape,
                     nccl={"NCCL_SOCKET_IFNAME": "=lo"})  # fmt: skip
    cfg = wb.load_config(save_config(knobs, tmp_path / "tuned.yaml"), check_machine=False)
    script = tmp_path / "train.sbatch"
    script.write_text("\n".join(cfg.sbatch_lines("train.py")) + "\n")
    test = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True,
                          text=True, env=slurm.client_env())  # fmt: skip
    assert test.returncode == 0 and "to start at" in test.stderr, test.stderr
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "torchrun"
    fake.write_text('#!/bin/sh\necho "$SLURMD_NODENAME $NCCL_SOCKET_IFNAME $MASTER_ADDR $*"\n')
    fake.chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    job_id = slurm.run(["sbatch", "--parsable", f"--output={tmp_path}/job.out", str(script)],
                       env={"PATH": path}).strip()  # fmt: skip
    _wait_job(slurm, job_id)
    lines = sorted((tmp_path / "job.out").read_text().splitlines())
    nodes = shape.get("nodes", 1)
    assert [line.split()[0] for line in lines] == ["wb1", "wb2"][:nodes]
    for line in lines:
        _node, ifname, master, *args = line.split()
        assert ifname == "=lo" and master == "wb1"
        assert f"--nnodes={nodes}" in args and "--nproc_per_node=2" in args
        assert "--rdzv_endpoint=wb1:29500" in args and args[-1] == "train.py"


# -- pure parts -----------------------------------------------------------------------------


def test_no_allocation_outside_slurm_and_a_broken_one_is_named():
    assert allocation({}) is None
    with pytest.raises(InputError, match="SLURM_JOB_NODELIST"):
        allocation({"SLURM_JOB_ID": "7"})


def test_srun_command_runs_one_agent_per_node_and_kills_all_on_a_bad_exit():
    argv = srun_command(2, ["python", "-m", "x"], nodelist=["a", "b"], output="/l/%N.log")
    assert argv[0] == "srun" and argv[-3:] == ["python", "-m", "x"]
    for word in ("--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                 "--export=ALL", "--nodelist=a,b", "--output=/l/%N.log"):  # fmt: skip
        assert word in argv
    with pytest.raises(InputError, match="nodes=0"):
        srun_command(0, ["x"])
    with pytest.raises(InputError, match="hosts='a'"):
        srun_command(2, ["x"], nodelist=["a"])


def test_the_launcher_outside_an_allocation_says_so(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_JOBID", raising=False)
    with pytest.raises(InputError, match="inside a SLURM allocation"):
        SlurmLauncher().hosts(1)


# -- the launcher on the real cluster --------------------------------------------------------


def test_hosts_come_from_the_allocation_and_too_many_nodes_is_refused(in_slurm):
    alloc = allocation()
    assert alloc.nodes == ["wb1", "wb2"] and alloc.job_id == in_slurm
    assert SlurmLauncher().hosts(2) == ["wb1", "wb2"]
    assert isinstance(pick_launcher(None), SlurmLauncher)  # picked inside an allocation
    assert SlurmLauncher(["wb2"]).hosts(1) == ["wb2"]
    with pytest.raises(InputError, match=r"nodes=3.*at most 2.*wb1,wb2"):
        SlurmLauncher().hosts(3)
    with pytest.raises(InputError, match="not in it: gpu9"):
        SlurmLauncher(["wb1", "gpu9"]).hosts(2)


def test_run_on_runs_on_that_node_and_names_it_when_it_fails(in_slurm, slurm):
    launcher = SlurmLauncher()
    assert launcher.run_on("wb2", ["printenv", "SLURMD_NODENAME"], 20).strip() == "wb2"
    assert "lo" in launcher.run_on("wb1", ["ls", "/sys/class/net"], 20).split()
    with pytest.raises(LaunchError, match=r"node wb1: false exited with code 1") as err:
        launcher.run_on("wb1", ["false"], 20)
    assert err.value.host == "wb1"
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match="node wb2: sleep did not answer within 1 s"):
        launcher.run_on("wb2", ["sleep", "60"], 1.0)
    assert time.monotonic() - t0 < 10
    _no_steps_left(slurm, in_slurm)


def test_interfaces_are_checked_on_each_node_through_srun(in_slurm):
    launcher = SlurmLauncher()
    check_interfaces(["wb1", "wb2"], {"NCCL_SOCKET_IFNAME": "=lo"}, launcher.run_on)
    with pytest.raises(NcclError, match=r"NCCL_SOCKET_IFNAME='=eth9'.*node wb1 .*\(.*lo.*\)"):
        check_interfaces(["wb1", "wb2"], {"NCCL_SOCKET_IFNAME": "=eth9"}, launcher.run_on)


def test_stop_leaves_no_step_and_no_process(in_slurm, slurm, tmp_path):
    marker = f"wb-stop-{os.getpid()}-{time.monotonic_ns()}"
    code = f"import time, os; open(os.path.join({str(tmp_path)!r}, os.environ['SLURMD_NODENAME']), 'w'); time.sleep(300)  # {marker}"  # noqa: E501
    launcher = SlurmLauncher()
    procs = launcher.start(AgentLaunch([sys.executable, "-c", code], {}, 2, tmp_path))
    deadline = time.monotonic() + 20
    while not ((tmp_path / "wb1").exists() and (tmp_path / "wb2").exists()):
        assert time.monotonic() < deadline, (tmp_path / "srun.log").read_text()
        time.sleep(0.1)
    assert _marked(marker)  # both agents run
    launcher.stop(procs)
    assert all(p.poll() is not None for p in procs)
    _no_steps_left(slurm, in_slurm)
    deadline = time.monotonic() + 10
    while _marked(marker):
        assert time.monotonic() < deadline, f"still running: {_marked(marker)}"
        time.sleep(0.1)


def test_a_workbench_burst_through_srun_and_torchrun_on_two_nodes(in_slurm, slurm, tmp_path,
                                                                   tiny_data):  # fmt: skip
    # One torchrun agent per node (srun, one task each), a c10d rendezvous, two gloo ranks
    # training the cnn: the ranks report their node, the result counts both.
    knobs = wb.Knobs(batch_size=4, world_size=2)
    times, results = {}, {}
    for how in ("srun", "local"):
        out = tmp_path / how
        out.mkdir()
        spec = JobSpec(mode="burst", out_dir=str(out), device="cpu", parent_pid=os.getpid(),
                       timeout_s=120, workload="cnn", knobs=knobs.to_dict(), seconds=0.5,
                       min_steps=3, warmup_steps=1, data_dir=str(tiny_data))  # fmt: skip
        agent = _agent(spec.write(), _free_port())
        env = {"PYTHONPATH": os.getcwd(), "OMP_NUM_THREADS": "1"}
        t0 = time.monotonic()
        if how == "srun":
            launcher = SlurmLauncher()
            procs = launcher.start(AgentLaunch(agent, env, 2, out))
            try:
                codes = [p.wait(120) for p in procs]
            finally:
                launcher.stop(procs)
        else:  # the same two agents started here: what srun adds is the difference
            procs = [subprocess.Popen(agent, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.STDOUT) for _ in range(2)]  # fmt: skip
            codes = [p.wait(120) for p in procs]
        times[how] = time.monotonic() - t0
        logs = "".join(p.read_text() for p in out.glob("*.log"))
        assert codes == [0] * len(procs), logs
        result = results[how] = _result(out / "rank0.jsonl")
        assert [row["rank"] for row in result["ranks"]] == [0, 1]
        assert result["samples"] == sum(row["samples"] for row in result["ranks"]) > 0
    print(
        f"\ntwo-node burst job wall time: srun {times['srun']:.1f} s, "
        f"local agents {times['local']:.1f} s"
    )
    # srun names each agent's node (SLURMD_NODENAME); the local agents are this host's
    assert sorted(row["node"] for row in results["srun"]["ranks"]) == ["wb1", "wb2"]
    _no_steps_left(slurm, in_slurm)


def test_run_burst_with_nodes_2_picks_srun_inside_the_allocation(in_slurm, slurm, tiny_data,
                                                                   monkeypatch):  # fmt: skip
    # The whole path: launcher picked from SLURM_JOB_ID, the store hosted here, one agent per
    # node through srun, the ranks' events through the store, a row per node.
    monkeypatch.setenv("WORKBENCH_RDZV_HOST", "127.0.0.1")  # both test nodes are this host
    knobs = wb.Knobs(batch_size=4, world_size=2, nodes=2)
    r = wb.run_burst("cnn", knobs, data_dir=tiny_data, record=False, seconds=0.5, min_steps=3,
                     warmup_steps=1, timeout_s=120)  # fmt: skip
    assert r.status == "ok", r.error
    # srun numbers the nodes (SLURM_NODEID, the node rank): the ranks are one per node
    assert sorted((n["node"], len(n["ranks"])) for n in r.nodes) == [("wb1", 1), ("wb2", 1)]
    assert sorted(rank for n in r.nodes for rank in n["ranks"]) == [0, 1]
    assert r.samples == sum(row["samples"] for row in r.ranks) > 0
    _no_steps_left(slurm, in_slurm)


def _agent(job_path: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=wbslurm",
            "--max-restarts=0", "--monitor-interval=0.1", "-m", "workbench.distributed.rank",
            str(job_path)]  # fmt: skip


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _result(path: Path) -> dict:
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    found = [e for e in events if e["event"] == "result"]
    assert found, events
    return found[0]


def _marked(marker: str) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.info["pid"] != os.getpid() and marker in " ".join(p.info["cmdline"] or []):
            out.append(p.info["pid"])
    return out


def _no_steps_left(slurm: SlurmCluster, job_id: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        steps = slurm.run(["squeue", "--steps", f"--jobs={job_id}", "--noheader",
                           "--format=%i %j"]).split("\n")  # fmt: skip
        ours = [s for s in steps if "workbench" in s]
        if not ours:
            return
        assert time.monotonic() < deadline, f"steps left: {ours}"
        time.sleep(0.1)
