"""The torchrun launcher's process handling, on real processes."""

import json
import subprocess
import sys
import time

import psutil
import pytest

from workbench.core.knobs import KnobError
from workbench.distributed.torchrun import (
    EventLog,
    JobSpec,
    TorchrunJob,
    check_port,
    read_new_events,
    stop_process_tree,
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
    standalone = torchrun_command(2, tmp_path / "job.json", None)
    assert standalone[1:3] == ["-m", "torch.distributed.run"] and "--standalone" in standalone
    assert "--nproc-per-node=2" in standalone and "--max-restarts=0" in standalone
    fixed = torchrun_command(2, tmp_path / "job.json", 29555)
    assert "--rdzv-endpoint=127.0.0.1:29555" in fixed and "--standalone" not in fixed


def test_check_port_names_the_port_and_what_to_do():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(KnobError, match="in use; leave it unset"):
            check_port(port)
    with pytest.raises(KnobError, match="1-65535"):
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
