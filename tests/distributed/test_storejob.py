"""workbench.distributed.storejob: the job, the events and the watch, through a real TCPStore."""

import subprocess
import sys
import time

from workbench.distributed.storejob import (
    StoreHost,
    StoreJob,
    is_job_url,
    job_url,
    parse_job_url,
)
from workbench.distributed.torchrun import JobSpec


def test_the_job_url_names_the_store_and_the_job():
    url = job_url("gpu01.cluster", 29400, "wb-1234")
    assert url == "wbstore://gpu01.cluster:29400/wb-1234" and is_job_url(url)
    assert parse_job_url(url) == ("gpu01.cluster", 29400, "wb-1234")
    assert not is_job_url("/tmp/workbench-job-x/job.json")


def test_a_rank_reads_the_job_and_its_events_come_back_whole_and_in_order():
    host = StoreHost("127.0.0.1", "wb-test", world_size=2)
    try:
        spec = JobSpec(mode="comm", out_dir="/x", device="cpu", parent_pid=0, timeout_s=9,
                       sizes_bytes=[8], nodes=2)  # fmt: skip
        host.put_spec(spec)
        job = StoreJob(host.url())
        assert job.spec() == spec
        assert host.read_events(1, 0) == ([], 0)  # nothing yet: no wait for a missing key
        log = job.event_log(1)
        log.write("start", pid=7, node="n1")
        log.write("phase", phase="init")
        events, offset = host.read_events(1, 0)
        assert [(e["event"], e["rank"]) for e in events] == [("start", 1), ("phase", 1)]
        assert events[0]["node"] == "n1"
        job.store.append("workbench/wb-test/events/1", '{"event": "hal')  # half a line
        assert host.read_events(1, offset) == ([], offset)  # waits for the rest
        assert host.read_events(0, 0) == ([], 0)
    finally:
        host.close()


WATCHER = """
import sys, time
from workbench.distributed.storejob import StoreJob
StoreJob(sys.argv[1]).watch_kernel(timeout_s=600)
print("watching", flush=True)
time.sleep(120)
"""


def test_a_rank_exits_once_the_kernels_store_is_gone():
    host = StoreHost("127.0.0.1", "wb-watch", world_size=1)
    rank = subprocess.Popen([sys.executable, "-c", WATCHER, host.url()], stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        assert rank.stdout.readline().strip() == "watching"
        time.sleep(1.5)
        assert rank.poll() is None  # the store answers: the rank goes on
        host.close()
        t0 = time.monotonic()
        assert rank.wait(timeout=15) == 3
        assert time.monotonic() - t0 < 5
    finally:
        rank.kill()
        rank.wait()
