"""The torchrun launcher's process handling, on real processes."""

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from workbench.core.errors import InputError
from workbench.distributed.torchrun import (
    EventLog,
    JobSpec,
    TorchrunJob,
    Traced,
    check_port,
    read_new_events,
    stop_process_tree,
    stop_process_trees,
    torchrun_command,
)

# A parent that starts two children in sessions of their own (as torchrun starts its ranks),
# each with a grandchild (as a rank starts DataLoader workers), then waits forever.
TREE = """
import subprocess, sys, time
sleeper = [sys.executable, "-c", "import subprocess, sys, time; "
           "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
           "time.sleep(600)"]
for _ in range(2):
    subprocess.Popen(sleeper, start_new_session=True)
time.sleep(600)
"""


def test_stop_process_tree_kills_children_in_other_sessions_and_grandchildren():
    proc = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    root = psutil.Process(proc.pid)
    deadline = time.monotonic() + 30
    while len(root.children(recursive=True)) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    tree = root.children(recursive=True)
    assert len(tree) == 4
    stop_process_tree(proc)
    assert proc.poll() is not None
    assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_events_are_read_line_by_line_and_a_half_written_line_waits(tmp_path):
    log = EventLog(tmp_path / "rank0.jsonl", rank=0)
    log.write("phase", phase="setup")
    with open(tmp_path / "rank0.jsonl", "a") as f:
        f.write('{"event": "prog')  # a line still being written
    events, offset = read_new_events(tmp_path / "rank0.jsonl", 0)
    assert [e["phase"] for e in events] == ["setup"] and events[0]["rank"] == 0
    with open(tmp_path / "rank0.jsonl", "a") as f:
        f.write('ress", "rank": 0, "t": 1.0}\n')
    more, _ = read_new_events(tmp_path / "rank0.jsonl", offset)
    assert [e["event"] for e in more] == ["progress"]
    assert read_new_events(tmp_path / "missing.jsonl", 0) == ([], 0)


def test_job_spec_round_trips_through_its_file(tmp_path):
    spec = JobSpec(mode="burst", out_dir=str(tmp_path), device="cuda", parent_pid=1,
                   timeout_s=9.0, workload="cnn", knobs={"batch_size": 8},
                   device_indices=[1, 2])  # fmt: skip
    assert JobSpec.read(spec.write()) == spec
    assert json.loads((tmp_path / "job.json").read_text())["workload"] == "cnn"


def test_torchrun_command_uses_a_free_port_unless_one_is_given(tmp_path):
    picked = torchrun_command(2, tmp_path / "job.json", None)
    assert picked[1:3] == ["-m", "workbench.distributed.agent"]  # torchrun, our rendezvous
    assert "--nproc-per-node=2" in picked and "--max-restarts=0" in picked
    assert "--standalone" not in picked and not [w for w in picked if w.startswith("--rdzv")]
    fixed = torchrun_command(2, tmp_path / "job.json", 29555)
    assert "--rdzv-endpoint=127.0.0.1:29555" in fixed and "--standalone" not in fixed


def test_check_port_names_the_port_and_what_to_do():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(InputError, match="in use; leave it unset"):
            check_port(port)
    with pytest.raises(InputError, match="1-65535"):
        check_port(70000)
    check_port(None)


def test_laggards_name_the_rank_furthest_behind(tmp_path):
    spec = JobSpec(mode="burst", out_dir=str(tmp_path), device="cpu", parent_pid=1, timeout_s=5)
    job = TorchrunJob(spec, nproc=3, env={})
    now = time.time()
    job.events = {
        0: [{"event": "phase", "phase": "ddp", "rank": 0, "t": now - 4}],
        1: [{"event": "phase", "phase": "setup", "rank": 1, "t": now - 9}],
        2: [],
    }
    text = job._laggards()
    assert "rank 0 last in phase 'ddp'" in text
    assert "rank 1 last in phase 'setup' (9 s ago)" in text
    assert "rank 2 never started <- furthest behind" in text


# A stand-in for torchrun: one "rank" in a session of its own that outlives it, and two start
# events: the rank's own, and one naming a process that is no part of the job (WB_VICTIM).
FAKE_TORCHRUN = """
import json, os, subprocess, sys, time
out = json.load(open(sys.argv[1]))["out_dir"]
rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                        start_new_session=True)
for r, pid in ((0, rank.pid), (1, int(os.environ["WB_VICTIM"]))):
    with open(os.path.join(out, f"rank{r}.jsonl"), "a") as f:
        f.write(json.dumps({"event": "start", "rank": r, "t": time.time(), "pid": pid}) + "\\n")
time.sleep(1.5)  # the kernel reads the events meanwhile; the rank is left behind
"""


def test_only_processes_traced_to_the_agent_are_stopped(tmp_path, monkeypatch, caplog):
    victim = subprocess.Popen(["sleep", "60"])  # no part of the job
    monkeypatch.setattr("workbench.distributed.torchrun.torchrun_command",
                        lambda nproc, path, port: [sys.executable, "-c", FAKE_TORCHRUN,
                                                   str(path)])  # fmt: skip
    spec = JobSpec(mode="burst", out_dir=str(tmp_path), device="cpu", parent_pid=1, timeout_s=30)
    job = TorchrunJob(spec, nproc=2, env={**os.environ, "WB_VICTIM": str(victim.pid)})
    try:
        job.run()
        rank_pid = job.events[0][0]["pid"]
        assert victim.poll() is None  # named by an event, not traced: left alone
        assert not psutil.pid_exists(rank_pid) or psutil.Process(rank_pid).status() == "zombie"
        assert list(job.traced) == [rank_pid]
        assert f"names pid {victim.pid}, which is not a process of this job's agents" in caplog.text
    finally:
        victim.kill()
        victim.wait()


def test_a_recorded_pid_whose_start_time_differs_is_not_signalled():
    proc = subprocess.Popen(["sleep", "60"])
    try:
        started = psutil.Process(proc.pid).create_time()
        stop_process_trees([], [Traced(proc.pid, started - 2.0)])  # the pid, reused
        assert proc.poll() is None
        assert Traced.of(proc.pid) == Traced(proc.pid, started)
        stop_process_trees([], [Traced(proc.pid, started)])  # the same process: stopped
        assert Traced(proc.pid, started).process() is None  # killed (and reaped by psutil)
    finally:
        proc.kill()
        proc.wait()
