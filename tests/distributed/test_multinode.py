"""Bursts and the comm benchmark across two "nodes" of the local launcher: real torchrun
agents in a real c10d rendezvous whose store this process hosts, gloo ranks on the CPU."""

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

import workbench as wb
from workbench.core.errors import InputError
from workbench.core.nccl import NcclError
from workbench.distributed.jobs import comm_bench, run_distributed_burst, worker_env
from workbench.distributed.launchers import LocalLauncher
from workbench.distributed.multinode import MultiNodeJob, node_rows
from workbench.distributed.storejob import SCHEME
from workbench.distributed.torchrun import JobSpec
from workbench.engine.window import BurstWindow

pytestmark = pytest.mark.concurrent  # torchrun agents and ranks: mostly waiting on them

WINDOW = BurstWindow(seconds=0.5, warmup_steps=1, min_steps=3)
TWO_NODES = wb.Knobs(batch_size=4, world_size=2, nodes=2)
GONE_WITHIN_S = 15.0
# Both ranks must reach 'setup' before the timeout for the error to name the one that hangs
# there: 25 s was enough on the CI VM one test at a time; make test runs this module beside
# another test (pytest-xdist), so the start-up may take twice as long.
HANG_TIMEOUT_S = 40


TOKEN_ENV = "TORCH_WB_TEST_JOB_MARK"  # TORCH_* (no "TOKEN" in it): on the agents' allow-list


@pytest.fixture(autouse=True)
def _job_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh token in the environment every process of this test inherits (kernel, agents,
    ranks): the job processes counted below are this test's, not those of a job that another
    test (another pytest-xdist worker) runs at the same moment."""
    monkeypatch.setenv(TOKEN_ENV, uuid.uuid4().hex)


def _job_processes() -> list[psutil.Process]:
    """Agents and ranks of this test's multi-node jobs, wherever they were re-parented: their
    command line carries a store's address (a job) and their environment this test's token."""
    token, found = os.environ[TOKEN_ENV], []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if SCHEME not in cmd or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        with contextlib.suppress(psutil.Error):  # gone, or a zombie by now
            if p.environ().get(TOKEN_ENV) == token:
                found.append(p)
    return found


def _nothing_left() -> None:
    children = [p for p in psutil.Process().children(recursive=True) if p.is_running()]
    assert children == [] and _job_processes() == []


def test_a_burst_on_two_local_nodes_counts_every_rank_and_shows_each_node(tiny_data, store_path):
    # NCCL knobs reach every node's ranks (reported in each rank's nccl_env); the interface
    # named exists on both "nodes", so the check before the start passes.
    knobs = TWO_NODES.replace(NCCL_SOCKET_IFNAME="lo", NCCL_ALGO="Ring")
    r = wb.run_burst("cnn", knobs, data_dir=tiny_data, store=store_path, window=WINDOW,
                     launcher="local", timeout_s=120)  # fmt: skip
    assert r.status == "ok", r.error
    # the launcher numbers the nodes (static rendezvous): local-0 holds rank 0
    assert [(row["rank"], row["node"]) for row in r.ranks] == [(0, "local-0"), (1, "local-1")]
    assert r.samples == sum(row["samples"] for row in r.ranks) == 2 * r.ranks[0]["samples"]
    assert r.samples_per_s == pytest.approx(r.samples / r.measured_s)
    assert r.ranks[0]["steps"] == r.ranks[1]["steps"] >= 3  # the window ends on the same step
    assert [n["node"] for n in r.nodes] == ["local-0", "local-1"]
    assert [n["ranks"] for n in r.nodes] == [[0], [1]]
    for node, row in zip(r.nodes, r.ranks, strict=True):
        assert node["step_ms_p50"] == row["step_ms_p50"] > 0
        assert node["peak_mem_mib"] == row["peak_mem_mib"] > 0
        assert node["data_wait_pct"] == row["data_wait_pct"]
        assert node["samples_per_s"] == pytest.approx(row["samples"] / row["measured_s"])
    assert all(row["nccl_env"] == {"NCCL_ALGO": "Ring", "NCCL_SOCKET_IFNAME": "lo"}
               for row in r.ranks)  # fmt: skip
    assert "NCCL_ALGO" not in os.environ
    assert r.launch_s > 0 and r.knobs.nodes == 2
    _nothing_left()


def test_node_rows_sum_samples_and_take_the_slowest_rank_of_each_node():
    rows = [
        {"rank": 0, "node": "a", "host": "h", "samples": 100, "measured_s": 2.0,
         "step_ms_p50": 10.0, "data_wait_pct": 10.0, "peak_mem_mib": 100.0},
        {"rank": 1, "node": "a", "host": "h", "samples": 100, "measured_s": 2.0,
         "step_ms_p50": 30.0, "data_wait_pct": 30.0, "peak_mem_mib": 200.0},
        {"rank": 2, "node": "b", "host": "g", "samples": 50, "measured_s": 2.0,
         "step_ms_p50": None, "data_wait_pct": None, "peak_mem_mib": None},
    ]  # fmt: skip
    a, b = node_rows(rows, "cuda")
    assert a == {"node": "a", "host": "h", "ranks": [0, 1], "samples_per_s": 100.0,
                 "step_ms_p50": 30.0, "data_wait_pct": 20.0, "peak_mem_mib": 200.0}  # fmt: skip
    assert node_rows(rows, "cpu")[0]["peak_mem_mib"] == 300.0  # CPU ranks share the memory
    assert b["step_ms_p50"] is None and b["peak_mem_mib"] is None and b["samples_per_s"] == 25


def test_comm_across_two_local_nodes_has_inter_rows():
    r = comm_bench(2, nodes=2, launcher="local", sizes=[8192, 65536], timeout_s=120)
    assert r.status == "ok", r.error
    assert r.nodes == 2 and r.world_size == 2
    assert [(row["size_bytes"], row["scope"], row["ranks"]) for row in r.rows] == [
        (8192, "inter", 2),
        (65536, "inter", 2),
    ]  # fmt: skip  (one rank per node: no intra)
    assert all(row["correct"] and row["busbw_gbps"] > 0 for row in r.rows)
    assert "scope" in r.table() and "inter" in r.table()
    assert list(r.frame()["scope"]) == ["inter", "inter"]
    _nothing_left()


def test_comm_on_two_nodes_of_two_ranks_measures_within_and_across(tmp_path):
    # Four ranks: comm_bench refuses more ranks than this CPU's cores (CI has 2), so the job
    # is run one level down, as comm_bench runs it; the rows are what comm_bench returns.
    spec = JobSpec(mode="comm", out_dir=str(tmp_path), device="cpu", parent_pid=0,
                   timeout_s=120, sizes_bytes=[65536], nodes=2)  # fmt: skip
    job = MultiNodeJob(spec, LocalLauncher(), 2, 2, worker_env({}, 4))
    outcome = job.run()
    assert outcome.status == "ok", outcome.error
    rows = outcome.result["rows"]
    assert sorted((row["scope"], row["ranks"]) for row in rows) == [("inter", 2), ("intra", 2)]
    assert all(row["correct"] and row["busbw_gbps"] > 0 for row in rows)
    starts = {r: next(e for e in evs if e["event"] == "start") for r, evs in job.events.items()}
    assert [starts[r]["node"] for r in range(4)] == ["local-0", "local-0", "local-1", "local-1"]
    _nothing_left()


def test_an_interface_missing_on_a_node_is_refused_before_the_job_starts():
    knobs = TWO_NODES.replace(NCCL_SOCKET_IFNAME="=eth9")
    t0 = time.monotonic()
    with pytest.raises(NcclError, match=r"NCCL_SOCKET_IFNAME='=eth9'.*node local-0"):
        run_distributed_burst("cnn", knobs, record=False, launcher="local", window=WINDOW)
    assert time.monotonic() - t0 < 10
    _nothing_left()


def test_bad_launcher_hosts_and_nodes_are_refused_naming_them():
    with pytest.raises(InputError, match=r"launcher='pbs'.*local, ssh, slurm"):
        run_distributed_burst("cnn", TWO_NODES, record=False, launcher="pbs")
    with pytest.raises(InputError, match=r"hosts=.*no hosts with launcher=local"):
        run_distributed_burst("cnn", TWO_NODES, record=False, launcher="local", hosts="a,b")
    with pytest.raises(InputError, match=r"hosts=.*one host per node: 2"):
        run_distributed_burst("cnn", TWO_NODES, record=False, launcher="ssh", hosts="a")
    with pytest.raises(InputError, match=r"hosts='a'.*nodes=1"):
        comm_bench(2, hosts="a")
    with pytest.raises(InputError, match=r"world_size=3.*multiple of nodes=2"):
        comm_bench(3, nodes=2, launcher="local")


def test_a_node_that_cannot_be_reached_ends_the_job_naming_it():
    hosts = "nowhere-a.invalid,nowhere-b.invalid"
    r = run_distributed_burst("cnn", TWO_NODES, record=False, launcher="ssh", hosts=hosts,
                              timeout_s=60, window=WINDOW)  # fmt: skip
    assert r.status == "error"
    assert r.error.startswith("node nowhere-a.invalid: "), r.error
    assert "nowhere-a.invalid" in r.error.split(":", 1)[1]  # ssh's own words name it again
    assert r.launch_s < 30
    _nothing_left()


def test_a_rank_that_fails_on_one_node_ends_the_job_naming_node_and_rank():
    r = run_distributed_burst("workloads_for_tests:rank1_crashes", TWO_NODES, record=False,
                              launcher="local", timeout_s=120, window=WINDOW)  # fmt: skip
    assert r.status == "error"
    assert r.error.startswith("node local-1, rank 1: RuntimeError: rank 1 was told to fail")
    _nothing_left()


def test_a_hang_on_one_node_ends_at_the_timeout_naming_it():
    r = run_distributed_burst("workloads_for_tests:rank1_hangs", TWO_NODES, record=False,
                              launcher="local", timeout_s=HANG_TIMEOUT_S,
                              window=WINDOW)  # fmt: skip
    assert r.status == "error"
    assert f"did not finish within {HANG_TIMEOUT_S} s" in r.error
    assert "node local-1, rank 1 last in phase 'setup'" in r.error, r.error
    assert r.launch_s < HANG_TIMEOUT_S + 10
    _nothing_left()


def test_cancel_stops_every_node():
    cancel = threading.Event()
    timer = threading.Timer(3.0, cancel.set)
    timer.start()
    r = run_distributed_burst("workloads_for_tests:rank1_hangs", TWO_NODES, record=False,
                              launcher="local", timeout_s=120, cancel=cancel,
                              window=WINDOW)  # fmt: skip
    assert r.status == "cancelled" and r.launch_s < 20  # cancelled at 3 s, not at the timeout
    _nothing_left()


KERNEL = """
import workbench as wb
from workbench.distributed.jobs import run_distributed_burst
from workbench.engine.window import BurstWindow
run_distributed_burst("workloads_for_tests:rank1_hangs",
                      wb.Knobs(batch_size=4, world_size=2, nodes=2), record=False,
                      launcher="local", timeout_s=600,
                      window=BurstWindow(seconds=0.5, warmup_steps=1, min_steps=3))
"""


def test_a_killed_kernel_leaves_no_agent_and_no_rank_on_any_node(tmp_path):
    # Ranks on other hosts cannot watch the kernel's pid: they watch its store, which dies
    # with it. SIGKILL: no finally, no launcher.stop.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]),
                                                        *sys.path]))  # fmt: skip
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], env=env, cwd=tmp_path)
    try:
        ranks = _wait_for_ranks(2, deadline_s=60)
        assert len(_job_processes()) >= 4  # two agents, two ranks
        kernel.send_signal(signal.SIGKILL)
        kernel.wait()
        end = time.monotonic() + GONE_WITHIN_S
        while _job_processes() and time.monotonic() < end:
            time.sleep(0.2)
        left = _job_processes()
    finally:
        kernel.kill()
        kernel.wait()
        for p in _job_processes():
            with contextlib.suppress(psutil.Error):
                p.kill()
    assert len(ranks) == 2
    assert left == [], f"still running {GONE_WITHIN_S:g} s after the kernel died: {left}"


def _wait_for_ranks(count: int, deadline_s: float) -> list[psutil.Process]:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        ranks = [p for p in _job_processes()
                 if "workbench.distributed.agent" not in " ".join(p.info["cmdline"])]  # fmt: skip
        if len(ranks) >= count:
            time.sleep(2.0)  # past the store connection, into the job
            return ranks
        time.sleep(0.2)
    raise AssertionError(f"{count} ranks did not start within {deadline_s:g} s")


def test_a_knob_refused_on_one_node_is_still_bad_input():
    from workbench.core.results import BurstResult

    error = "node local-1, rank 1: KnobError: batch_size=32 is not allowed: only 18 samples"
    r = BurstResult(status="error", error=error)
    assert r.bad_knob == "batch_size"
    assert r.bad_knob_message == "batch_size=32 is not allowed: only 18 samples"


def test_ctrl_c_in_the_cli_stops_every_node(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]),
                                                        *sys.path]))  # fmt: skip
    cli = subprocess.Popen(
        [sys.executable, "-m", "workbench", "burst", "--workload",
         "workloads_for_tests:rank1_hangs", "--set", "batch_size=4", "--set", "world_size=2",
         "--set", "nodes=2", "--launcher", "local", "--no-record", "--timeout", "600"],
        env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for_ranks(2, deadline_s=60)
        cli.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal sends
        _, err = cli.communicate(timeout=30)
    finally:
        cli.kill()
        cli.wait()
    assert cli.returncode == 130 and "interrupted" in err, err[-2000:]
    assert _job_processes() == []


# Someone on this host who knows the store's port and the job's id, but not its secret: a
# start event naming a process of theirs, a result, and a spec that would run os.system. In
# both layouts: the key per event of this channel, and the one appended key of the old one.
FORGER = """
import json, socket, sys, time
from datetime import timedelta
import torch.distributed as dist
print("ready", flush=True)
port, job, victim = (int(w) if w.isdigit() else w for w in sys.stdin.readline().split())
store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                      timeout=timedelta(seconds=30))
key = lambda name: f"workbench/{job}/{name}"
start = json.dumps({"event": "start", "rank": 0, "t": time.time(), "pid": victim,
                    "node": "local-0", "host": socket.gethostname()})
result = json.dumps({"event": "result", "rank": 0, "t": time.time(), "status": "ok",
                     "rows": [], "forged": True})
store.append(key("events/0"), start + "\\n" + result + "\\n")
store.set(key("events/0/0"), "0" * 64 + "\\n" + start)
store.set(key("events/0/1"), "0" * 64 + "\\n" + result)
store.set(key("spec"), json.dumps({"mode": "burst", "workload": "os:system"}))
print("forged", flush=True)
"""


def _listening(port: int) -> list[str]:
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            rows += [
                line.split()[1]
                for line in f.read().splitlines()[1:]
                if line.split()[3] == "0A" and int(line.split()[1][-4:], 16) == port
            ]
    return [row.rpartition(":")[0] for row in rows]


def test_forged_events_and_spec_are_refused_and_the_job_is_unaffected(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    victim = subprocess.Popen(["sleep", "60"])  # a process of this host, not of the job
    forger = subprocess.Popen([sys.executable, "-c", FORGER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert forger.stdout.readline().strip() == "ready"
    spec = JobSpec(mode="comm", out_dir=str(tmp_path), device="cpu", parent_pid=0,
                   timeout_s=120, sizes_bytes=[8192], nodes=2)  # fmt: skip
    seen = {}

    class Watched(LocalLauncher):  # the forgery lands after the spec, before any agent
        def start(self, launch):
            host = job._host
            seen["listening"] = _listening(host.port)
            forger.stdin.write(f"{host.port} {host.job_id} {victim.pid}\n")
            forger.stdin.flush()
            assert forger.stdout.readline().strip() == "forged"
            procs = super().start(launch)
            seen["agents"] = [psutil.Process(p.pid) for p in procs]
            seen["secret"] = getattr(host, "secret", b"").hex() or "no secret"
            seen["argv"] = " ".join(" ".join(p.cmdline()) for p in seen["agents"])
            seen["env"] = " ".join(v for p in seen["agents"] for v in p.environ().values())
            return procs

    job = MultiNodeJob(spec, Watched(), 2, 1, worker_env({}, 2))
    try:
        outcome = job.run()
    finally:
        forger.kill()
        forger.wait()
        alive = victim.poll() is None
        victim.kill()
        victim.wait()
    assert outcome.status == "ok", outcome.error
    assert "forged" not in outcome.result and outcome.result["rows"]  # the real measurement
    assert alive, "a process named only by a forged event was killed"
    assert seen["listening"] == ["0100007F"]  # 127.0.0.1 only
    assert seen["secret"] not in seen["argv"] and seen["secret"] not in seen["env"]
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    keys = ("an event at key workbench/{}/events/0/0", "an event at key workbench/{}/events/0/1",
            "a replaced spec at key workbench/{}/spec")  # fmt: skip
    for what in keys:
        assert any(what.format(job._host.job_id) in m for m in refused), refused
    _nothing_left()
