"""A multi-node job's channel to the kernel: the rendezvous store the kernel hosts.

A rank on another host cannot read the kernel's temp folder, nor watch the kernel's pid. It
can reach one thing for certain: the c10d store that the kernel hosts for the rendezvous
(every agent must connect to it, or the job never starts). So the job travels through it:

- the job's ``JobSpec`` is a key of the store, and the ranks are started with the store's
  address (``wbstore://HOST:PORT/JOB``) where a single-node job gives them a file path;
- each rank appends its JSON-lines events (as :class:`workbench.distributed.torchrun.EventLog`
  writes them to a file) to a key of its own; the kernel reads them back;
- each rank checks, every second, that the store still answers, and exits when it does not:
  the kernel is gone (killed, or finished and closed the store), so nothing is left behind on
  any node.

Why not a job folder on a shared file system: not every cluster has a writable one under
``WORKBENCH_HOME`` on every node, and NFS caches attributes, so lines appended on one host
reach another seconds late (the progress bar and the timeout would lag). The store is already
there, answers in a millisecond, and disappears with the kernel.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from workbench.distributed.torchrun import JobSpec

SCHEME = "wbstore://"
CONNECT_TIMEOUT_S = 30.0
WATCH_EVERY_S = 1.0
_ALIVE = "alive"


def job_url(host: str, port: int, job_id: str) -> str:
    """What the ranks are given instead of a job file: ``wbstore://HOST:PORT/JOB``."""
    return f"{SCHEME}{host}:{port}/{job_id}"


def is_job_url(text: str) -> bool:
    return text.startswith(SCHEME)


def parse_job_url(url: str) -> tuple[str, int, str]:
    """``wbstore://HOST:PORT/JOB`` -> (HOST, PORT, JOB)."""
    address, _, job_id = url[len(SCHEME) :].partition("/")
    host, _, port = address.rpartition(":")
    return host, int(port), job_id


def _key(job_id: str, name: str) -> str:
    return f"workbench/{job_id}/{name}"


def events_key(job_id: str, rank: int) -> str:
    return _key(job_id, f"events/{rank}")


class StoreHost:
    """The kernel's side: the store itself (``is_master``), the job in it, the events out."""

    def __init__(self, address: str, job_id: str, world_size: int) -> None:
        self.address, self.job_id, self.world_size = address, job_id, world_size
        self.store = dist.TCPStore(address, 0, is_master=True, wait_for_workers=False,
                                   timeout=timedelta(seconds=CONNECT_TIMEOUT_S))  # fmt: skip
        self.port = self.store.port
        for rank in range(world_size):
            self.store.set(events_key(job_id, rank), "")  # get() never waits for a key
        self.store.set(_key(job_id, _ALIVE), "1")

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.port}"

    def url(self) -> str:
        return job_url(self.address, self.port, self.job_id)

    def put_spec(self, spec: JobSpec) -> None:
        self.store.set(_key(self.job_id, "spec"), json.dumps(dataclasses.asdict(spec)))

    def read_events(self, rank: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """Complete lines rank ``rank`` appended since ``offset``."""
        data = self.store.get(events_key(self.job_id, rank))
        end = data.rfind(b"\n") + 1
        if end <= offset:
            return [], offset
        chunk = data[offset:end]
        return [json.loads(line) for line in chunk.splitlines() if line.strip()], end

    def close(self) -> None:
        """Stop serving: a rank still running sees the store gone and exits."""
        self.store = None


class StoreJob:
    """A rank's side: its job, its event log and its watch on the kernel."""

    def __init__(self, url: str) -> None:
        self.host, self.port, self.job_id = parse_job_url(url)
        self.store = self._client()

    def _client(self) -> dist.TCPStore:
        return dist.TCPStore(self.host, self.port, is_master=False, wait_for_workers=False,
                             timeout=timedelta(seconds=CONNECT_TIMEOUT_S))  # fmt: skip

    def spec(self) -> JobSpec:
        return JobSpec(**json.loads(self.store.get(_key(self.job_id, "spec"))))

    def event_log(self, rank: int) -> StoreEventLog:
        return StoreEventLog(self.store, events_key(self.job_id, rank), rank)

    def watch_kernel(self, timeout_s: float) -> None:
        """Exit this rank (code 3) once the kernel's store stops answering, or long past the
        job's deadline: the multi-node counterpart of watching the kernel's pid."""
        deadline = time.monotonic() + timeout_s + 60.0
        client = self._client()  # its own connection: never waits behind an event write
        key = _key(self.job_id, _ALIVE)

        def watch() -> None:
            while True:
                try:
                    alive = client.check([key])
                except Exception:  # any failure to reach it means it is gone
                    alive = False
                if not alive or time.monotonic() > deadline:
                    os._exit(3)
                time.sleep(WATCH_EVERY_S)

        threading.Thread(target=watch, name="workbench-store-watch", daemon=True).start()


class StoreEventLog:
    """:class:`EventLog`'s lines, appended to the rank's key of the kernel's store."""

    def __init__(self, store: dist.TCPStore, key: str, rank: int) -> None:
        self.rank, self._store, self._key = rank, store, key
        self._lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "rank": self.rank, "t": time.time(), **fields})
        with self._lock:
            self._store.append(self._key, line + "\n")
