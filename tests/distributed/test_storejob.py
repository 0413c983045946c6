"""workbench.distributed.storejob: the job, the events and the watch, through a real TCPStore;
what a second process that reaches the store, without the job's secret, can and cannot do."""

import json
import logging
import os
import stat
import subprocess
import sys
import time

import pytest

from workbench.distributed.jobsecret import (
    ChannelAuthError,
    read_secret_file,
    seal,
    write_secret_file,
)
from workbench.distributed.storejob import (
    StoreHost,
    StoreJob,
    events_key,
    is_job_url,
    job_url,
    parse_job_url,
)
from workbench.distributed.torchrun import JobSpec

SPEC = JobSpec(mode="comm", out_dir="/x", device="cpu", parent_pid=0, timeout_s=9,
               sizes_bytes=[8], nodes=2)  # fmt: skip


def test_the_job_url_names_the_store_and_the_job():
    url = job_url("gpu01.cluster", 29400, "wb-1234")
    assert url == "wbstore://gpu01.cluster:29400/wb-1234" and is_job_url(url)
    assert parse_job_url(url) == ("gpu01.cluster", 29400, "wb-1234")
    assert not is_job_url("/tmp/workbench-job-x/job.json")


def test_a_rank_reads_the_job_and_its_events_come_back_whole_and_in_order():
    host = StoreHost("127.0.0.1", "wb-test", world_size=2)
    try:
        host.put_spec(SPEC)
        job = StoreJob(host.url(), secret=host.secret)
        assert job.spec() == SPEC
        assert host.read_events(1) == []  # nothing yet: no wait for a missing key
        log = job.event_log(1)
        log.write("start", pid=7, node="n1", host="h1")
        log.write("phase", phase="init")
        events = host.read_events(1)
        assert [(e["event"], e["rank"]) for e in events] == [("start", 1), ("phase", 1)]
        assert events[0]["node"] == "n1"
        assert host.read_events(1) == [] and host.read_events(0) == []  # read once only
        assert not job.store.check([events_key("wb-test", 1, 0)])  # read keys are freed
        assert host.refused == 0
    finally:
        host.close()


def _listening_addresses(port: int) -> list[str]:
    """Local addresses of the sockets listening on ``port`` (/proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, _, hex_port = local.rpartition(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.append(address)
    return found


def test_the_store_listens_on_loopback_only_when_given_loopback():
    host = StoreHost("127.0.0.1", "wb-bind", world_size=1)
    try:
        assert _listening_addresses(host.port) == ["0100007F"]  # 127.0.0.1, nothing else
    finally:
        host.close()


FORGER = """
import json, sys, time
from datetime import timedelta
import torch.distributed as dist
host, port, job = sys.argv[1], int(sys.argv[2]), sys.argv[3]
store = dist.TCPStore(host, port, is_master=False, wait_for_workers=False,
                      timeout=timedelta(seconds=30))
key = lambda name: f"workbench/{job}/{name}"
start = json.dumps({"event": "start", "rank": 0, "t": time.time(), "pid": 1, "node": "n",
                    "host": "h"})
store.set(key("events/0/0"), start)                        # no MAC at all
store.set(key("events/0/1"), "0" * 64 + "\\n" + start)     # a made-up MAC
store.set(key("spec"), json.dumps({"mode": "burst", "workload": "os:system"}))
store.set(key("events/0/4"), "x" * (5 << 20))               # beyond any event's size
print("done", flush=True)
"""


def test_values_written_without_the_secret_are_refused_and_logged(caplog):
    caplog.set_level(logging.WARNING, logger="workbench.distributed.storejob")
    host = StoreHost("127.0.0.1", "wb-forged", world_size=1)
    try:
        host.put_spec(SPEC)
        out = subprocess.run([sys.executable, "-c", FORGER, "127.0.0.1", str(host.port),
                              "wb-forged"], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.stdout.strip() == "done", out.stderr[-2000:]
        job = StoreJob(host.url(), secret=host.secret)
        log = job.event_log(0)
        log.write("start", pid=os.getpid(), node="n0", host="h0")  # keys 0 and 1 are taken
        log.write("phase", phase="init")
        log.write("phase", phase="setup")  # key 4 is taken too
        host.guard()  # the kernel puts its spec back
        assert job.spec() == SPEC
        events = host.read_events(0)
        assert [(e["event"], e.get("phase"), e.get("pid")) for e in events] == [
            ("start", None, os.getpid()),
            ("phase", "init", None),
            ("phase", "setup", None),
        ]
        assert host.refused == 4
    finally:
        host.close()
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert any("spec at key workbench/wb-forged/spec (bad MAC)" in m for m in refused)
    assert any("event at key workbench/wb-forged/events/0/0 (no MAC)" in m for m in refused)
    assert any("event at key workbench/wb-forged/events/0/1 (bad MAC)" in m for m in refused)
    assert any("event at key workbench/wb-forged/events/0/4 (5242880 bytes)" in m
               for m in refused)  # fmt: skip


def test_a_rank_refuses_a_spec_without_the_jobs_mac(monkeypatch):
    monkeypatch.setattr("workbench.distributed.storejob.SPEC_WAIT_S", 0.3)
    host = StoreHost("127.0.0.1", "wb-spec", world_size=1)
    try:
        host.put_spec(SPEC)
        other = StoreJob(host.url(), secret=b"\1" * 32)  # another job's secret
        with pytest.raises(ChannelAuthError, match=r"spec at key workbench/wb-spec/spec"):
            other.spec()
    finally:
        host.close()


def test_an_event_with_a_good_mac_but_bad_fields_is_refused():
    host = StoreHost("127.0.0.1", "wb-fields", world_size=2)
    try:
        job = StoreJob(host.url(), secret=host.secret)
        log = job.event_log(1)
        log.write("start", pid="1", node="n", host="h")  # a pid that is not an int
        log.write("launch_missiles")
        key = events_key("wb-fields", 1, 2)  # rank 1's key, an event that says rank 0
        payload = json.dumps({"event": "phase", "rank": 0, "t": 1.0, "phase": "init"})
        job.store.set(key, seal(host.secret, "wb-fields", key, payload.encode()))
        assert host.read_events(1) == [] and host.refused == 3
    finally:
        host.close()


def test_the_secret_file_is_private_and_never_an_existing_file_or_link(tmp_path):
    path = write_secret_file(tmp_path, b"\7" * 32)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_secret_file(path) == b"\7" * 32
    with pytest.raises(FileExistsError):
        write_secret_file(tmp_path, b"\7" * 32)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret").symlink_to(tmp_path / "target")
    with pytest.raises(FileExistsError):  # O_EXCL: a planted link is not followed
        write_secret_file(tmp_path / "elsewhere", b"\7" * 32)
    assert not (tmp_path / "target").exists()
    path.chmod(0o644)
    with pytest.raises(ChannelAuthError, match=r"mode 644, allowed: 600"):
        read_secret_file(path)


WATCHER = """
import sys, time
from workbench.distributed.storejob import StoreJob
StoreJob(sys.argv[1], secret=b"0" * 32).watch_kernel(timeout_s=600)
print("watching", flush=True)
time.sleep(120)
"""


def test_a_rank_exits_once_the_kernels_store_is_gone():
    host = StoreHost("127.0.0.1", "wb-watch", world_size=1)
    rank = subprocess.Popen([sys.executable, "-c", WATCHER, host.url()], stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        assert rank.stdout.readline().strip() == "watching"
        host.store.delete_key("workbench/wb-watch/alive")  # someone else deletes it ...
        time.sleep(1.5)
        host.guard()  # ... and the kernel's next poll puts it back
        time.sleep(1.0)
        assert rank.poll() is None  # the store answers: the rank goes on
        host.close()
        t0 = time.monotonic()
        assert rank.wait(timeout=15) == 3
        assert time.monotonic() - t0 < 5
    finally:
        rank.kill()
        rank.wait()
