"""A multi-node job's channel to the kernel: the rendezvous store the kernel hosts.

A rank on another host cannot read the kernel's temp folder, nor watch the kernel's pid. It
can reach one thing for certain: the c10d store that the kernel hosts for the rendezvous
(every agent must connect to it, or the job never starts). So the job travels through it:

- the job's ``JobSpec`` is a key of the store, and the ranks are started with
  ``wbstore://job-file/TAG`` where a single-node job gives them a file path: the store's
  address (``wbstore://HOST:PORT/JOB``) is in the job's private file, with its secret;
- the agents meet there too, each a client with the node rank its launcher gave it
  (``workbench.distributed.agent``: no pickle, no store of their own), under a prefix;
- each rank appends its JSON-lines events (as :class:`workbench.distributed.torchrun.EventLog`
  writes them to a file) to a key of its own; the kernel reads them back;
- each rank checks, every second, that the store still answers, and exits when it does not:
  the kernel is gone (killed, or finished and closed the store), so nothing is left behind on
  any node.

Why not a job folder on a shared file system: not every cluster has a writable one under
``WORKBENCH_HOME`` on every node, and NFS caches attributes, so lines appended on one host
reach another seconds late (the progress bar and the timeout would lag). The store is already
there, answers in a millisecond, and disappears with the kernel.

What keeps others out (the store itself has no authentication, and anyone who reaches its
port can read, write and delete any key of it):

- it listens only where it must: on the address the agents are given (``127.0.0.1`` for the
  ``local`` launcher), on a socket bound here and handed to the store (``master_listen_fd``;
  a plain ``TCPStore`` binds every interface whatever host name it is given). The one case
  left on every interface: this host's name resolves here to loopback only (Debian's
  ``127.0.1.1``) and no route to a node says which address they reach; a warning then asks for
  ``$WORKBENCH_RDZV_HOST``;
- the spec and every event carry an HMAC made with the job's secret
  (``workbench.distributed.jobsecret``), over the job id, the key and the exact bytes: a value
  without a good MAC is refused and logged (``logging.warning`` naming the key), never recorded
  and never acted on. Ranks check the spec's MAC before they import anything it names;
- each event is a key of its own (``events/RANK/SEQ``, written with ``compare_set``, so a key
  someone else took first is skipped, never overwritten): the kernel reads only the keys it has
  not read yet, refuses a value over its size limit, validates every field, and deletes what it
  has read (the store lives in the kernel's memory);
- the kernel puts back a spec or an ``alive`` key that someone replaced or deleted, and a
  rank exits on a missing ``alive`` only when it stays missing for seconds (an unreachable
  store still ends it at once).

What it cannot prevent: whoever reaches the port can still disturb the job (delete the
events, fill the store's memory, upset the agents' exit barrier or the ranks' process-group
keys): a denial of service, not a forgery, and nothing read from the store is unpickled. The
network the port listens on must be one the cluster trusts.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from workbench.distributed.jobsecret import (
    ChannelAuthError,
    job_from_env,
    new_secret,
    seal,
    secret_from_env,
    unseal,
)
from workbench.distributed.torchrun import PHASES, JobSpec

log = logging.getLogger(__name__)

SCHEME = "wbstore://"
CONNECT_TIMEOUT_S = 30.0
WATCH_EVERY_S = 1.0
ALIVE_MISSING_S = 5.0
"""How long ``alive`` may be missing, with the store still answering, before a rank exits."""
SPEC_WAIT_S = 10.0
"""How long a rank waits for a spec with a good MAC (the kernel puts back a replaced one)."""
EVENTS_PER_POLL = 256
"""Events read from one rank in one poll, at most: a flood cannot hold the kernel's loop."""
MAX_EVENT_BYTES = {"result": 4 << 20, "error": 1 << 20}
"""The largest value read as an event of that kind (a result carries a row per rank). The
store itself refuses any value over 8 MiB (the libuv server's payload limit)."""
DEFAULT_MAX_EVENT_BYTES = 64 << 10
MAX_WRITE_TRIES = 64
"""Event keys a rank skips, at most, because someone else took them first."""
MAX_LOGGED_REFUSALS = 20
_ALIVE = "alive"
_EVENTS = ("start", "phase", "progress", "result", "error")
_TEXT_MAX = 4096


FROM_FILE = f"{SCHEME}job-file/"
"""What the ranks' argv says: the job named in the job's private file, ``FROM_FILE + TAG``."""


def job_url(host: str, port: int, job_id: str) -> str:
    """The store's address and the job: ``wbstore://HOST:PORT/JOB`` (in the job's file)."""
    return f"{SCHEME}{host}:{port}/{job_id}"


def is_job_url(text: str) -> bool:
    return text.startswith(SCHEME)


def alive_key(job_id: str) -> str:
    """The key the kernel keeps while it follows the job (see ``StoreJob.watch_kernel``)."""
    return _key(job_id, _ALIVE)


def agents_prefix(job_id: str) -> str:
    """Where the agents of ``job_id`` keep their keys in the kernel's store."""
    return _key(job_id, "agents")


def parse_job_url(url: str) -> tuple[str, int, str]:
    """``wbstore://HOST:PORT/JOB`` -> (HOST, PORT, JOB); ValueError naming anything else."""
    address, _, job_id = url[len(SCHEME) :].partition("/")
    host, _, port = address.rpartition(":")
    if not is_job_url(url) or not host or not port.isdigit() or not job_id:
        raise ValueError(f"{url[:200]!r}: not a job's store address (wbstore://HOST:PORT/JOB)")
    return host, int(port), job_id


def _key(job_id: str, name: str) -> str:
    return f"workbench/{job_id}/{name}"


def events_key(job_id: str, rank: int, seq: int) -> str:
    """Where rank ``rank`` writes its ``seq``-th event (the MAC covers this key)."""
    return _key(job_id, f"events/{rank}/{seq}")


def spec_key(job_id: str) -> str:
    return _key(job_id, "spec")


def listen_socket(host: str, peers: Sequence[str] = (), explicit: bool = True) -> socket.socket:
    """A listening socket on an ephemeral port of the address ``host`` names here.

    ``explicit=False`` (this host's own name, not one the user chose): a name that resolves
    here to loopback only (Debian's ``127.0.1.1``) would keep remote nodes out, so the
    address this host uses to reach the first of ``peers`` is taken; failing that, every
    interface, with a warning that names ``$WORKBENCH_RDZV_HOST``.
    """
    addrs = [ai for ai in socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
             if ai[0] in (socket.AF_INET, socket.AF_INET6)]  # fmt: skip
    usable = [ai for ai in addrs if explicit or not ipaddress.ip_address(ai[4][0]).is_loopback]
    if usable:
        family, sockaddr = usable[0][0], usable[0][4]
    else:
        family, sockaddr = _route_to(peers)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((sockaddr[0], 0, *sockaddr[2:]))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    return sock


def _route_to(peers: Sequence[str]) -> tuple[int, tuple]:
    for peer in peers:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((peer, 9))  # no packet is sent: the kernel picks a route
                here = probe.getsockname()
        except OSError:
            continue
        if not ipaddress.ip_address(here[0]).is_loopback:
            return socket.AF_INET, here
    log.warning("the job's store listens on every interface: this host's name resolves to "
                "loopback here and no node's route names an address; set WORKBENCH_RDZV_HOST "
                "to the address the nodes reach")  # fmt: skip
    return socket.AF_INET, ("0.0.0.0", 0)


class StoreHost:
    """The kernel's side: the store itself (``is_master``), the job in it, the events out.

    ``address``: what the agents are given; ``listener``: the socket to serve on (by default
    one bound to ``address``, see :func:`listen_socket`); ``secret``: the job's (a new one by
    default).
    """

    def __init__(
        self,
        address: str,
        job_id: str,
        world_size: int,
        *,
        secret: bytes | None = None,
        listener: socket.socket | None = None,
    ) -> None:
        self.address, self.job_id, self.world_size = address, job_id, world_size
        self.secret = secret if secret is not None else new_secret()
        sock = listener if listener is not None else listen_socket(address)
        port = sock.getsockname()[1]
        try:
            self.store = dist.TCPStore(address, port, is_master=True, wait_for_workers=False,
                                       timeout=timedelta(seconds=CONNECT_TIMEOUT_S),
                                       master_listen_fd=sock.fileno())  # fmt: skip
        except BaseException:
            sock.close()
            raise
        sock.detach()  # the store's server owns the descriptor now, and closes it
        self.port = self.store.port
        self._next = dict.fromkeys(range(world_size), 0)
        self._spec: bytes | None = None
        self.refused = 0
        self.store.set(_key(job_id, _ALIVE), "1")

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.port}"

    def url(self) -> str:
        return job_url(self.address, self.port, self.job_id)

    def put_spec(self, spec: JobSpec) -> None:
        payload = json.dumps(dataclasses.asdict(spec)).encode()
        key = spec_key(self.job_id)
        self._spec = seal(self.secret, self.job_id, key, payload)
        self.store.set(key, self._spec)

    def guard(self) -> None:
        """Put back a spec that someone replaced (logged) and an ``alive`` key deleted."""
        self.store.set(_key(self.job_id, _ALIVE), "1")
        if self._spec is None:
            return
        key = spec_key(self.job_id)
        if not self.store.check([key]) or self.store.get(key) != self._spec:
            self._refuse(key, "a replaced spec", "bad MAC")
            self.store.set(key, self._spec)

    def read_events(self, rank: int) -> list[dict[str, Any]]:
        """The events rank ``rank`` wrote since the last call, authenticated and validated;
        anything else is refused and logged."""
        out: list[dict[str, Any]] = []
        for _ in range(EVENTS_PER_POLL):
            key = events_key(self.job_id, rank, self._next[rank])
            if not self.store.check([key]):
                break
            self._next[rank] += 1
            event = self._event_at(key, rank)
            if event is not None:
                out.append(event)
                self.store.delete_key(key)  # read: the store's memory is the kernel's
        return out

    def _event_at(self, key: str, rank: int) -> dict[str, Any] | None:
        value = self.store.get(key)
        if len(value) > max(MAX_EVENT_BYTES.values()):
            return self._refuse(key, "an event", f"{len(value)} bytes")
        try:
            payload = unseal(self.secret, self.job_id, key, value)
            event = json.loads(payload)
        except (ChannelAuthError, ValueError) as exc:
            return self._refuse(key, "an event", str(exc) or "not JSON")
        why = event_problem(event, rank, len(payload))
        if why:
            return self._refuse(key, "an event", why)
        return event

    def _refuse(self, key: str, what: str, why: str) -> None:
        self.refused += 1
        if self.refused <= MAX_LOGGED_REFUSALS:
            log.warning("job %s: refused %s at key %s (%s); not recorded, not acted on",
                        self.job_id, what, key, why)  # fmt: skip
        elif self.refused == MAX_LOGGED_REFUSALS + 1:
            log.warning("job %s: more values refused; no longer logged", self.job_id)
        return None

    def close(self) -> None:
        """Stop serving: a rank still running sees the store gone and exits."""
        self.store = None


def event_problem(event: Any, rank: int, size: int) -> str | None:
    """Why ``event`` is not one a rank of this job writes (None: it is)."""
    if not isinstance(event, dict):
        return "not an object"
    kind = event.get("event")
    if kind not in _EVENTS:
        return f"unknown event {str(kind)[:40]!r}"
    if size > MAX_EVENT_BYTES.get(kind, DEFAULT_MAX_EVENT_BYTES):
        return f"{size} bytes for a {kind} event"
    if event.get("rank") != rank or not _is_int(event.get("rank")):
        return f"rank {str(event.get('rank'))[:20]} at rank {rank}'s key"
    if not isinstance(event.get("t"), int | float) or isinstance(event.get("t"), bool):
        return "no time"
    checks = {
        "start": lambda e: (_is_int(e.get("pid")) and e["pid"] > 0 and _is_text(e.get("node"))
                            and _is_text(e.get("host"))),
        "phase": lambda e: e.get("phase") in PHASES,
        "progress": lambda e: e.get("phase") in PHASES and all(
            isinstance(e.get(k), int | float | None) for k in ("elapsed_s", "window_s", "steps")),
        "result": lambda e: True,
        "error": lambda e: _is_text(e.get("error"), 1 << 19) and _is_text(e.get("status")),
    }  # fmt: skip
    return None if checks[kind](event) else f"bad fields for a {kind} event"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_text(value: Any, limit: int = _TEXT_MAX) -> bool:
    return isinstance(value, str) and len(value) <= limit


class StoreJob:
    """A rank's side: its job, its event log and its watch on the kernel. ``url``: the
    store's address, or ``FROM_FILE...``: the one in the job's file, with its secret."""

    def __init__(self, url: str, secret: bytes | None = None) -> None:
        if url.startswith(FROM_FILE):
            secret, url = job_from_env()
        self.host, self.port, self.job_id = parse_job_url(url)
        self.secret = secret if secret is not None else secret_from_env()
        self.store = self._client()

    def _client(self) -> dist.TCPStore:
        return dist.TCPStore(self.host, self.port, is_master=False, wait_for_workers=False,
                             timeout=timedelta(seconds=CONNECT_TIMEOUT_S))  # fmt: skip

    def spec(self) -> JobSpec:
        """The job, once its MAC checks out: nothing it names is imported before. A spec that
        fails is waited past (the kernel puts its own back) for ``SPEC_WAIT_S``."""
        key = spec_key(self.job_id)
        deadline = time.monotonic() + SPEC_WAIT_S
        while True:
            try:
                payload = unseal(self.secret, self.job_id, key, self.store.get(key))
                return JobSpec(**json.loads(payload))
            except ChannelAuthError as exc:
                if time.monotonic() > deadline:
                    raise ChannelAuthError(f"the job's spec at key {key} failed its check "
                                           f"({exc}) for {SPEC_WAIT_S:g} s") from None  # fmt: skip
                time.sleep(0.1)

    def group_store(self) -> dist.Store:
        """A connection of its own for the ranks' process group, under the job's prefix."""
        return dist.PrefixStore(_key(self.job_id, "group"), self._client())

    def event_log(self, rank: int) -> StoreEventLog:
        return StoreEventLog(self.store, self.job_id, rank, self.secret)

    def watch_kernel(self, timeout_s: float) -> None:
        """Exit this rank (code 3) once the kernel's store stops answering, or its ``alive``
        key stays missing for ``ALIVE_MISSING_S``, or long past the job's deadline: the
        multi-node counterpart of watching the kernel's pid."""
        deadline = time.monotonic() + timeout_s + 60.0
        client = self._client()  # its own connection: never waits behind an event write
        key = _key(self.job_id, _ALIVE)

        def watch() -> None:
            missing_since = None
            while True:
                try:
                    alive = client.check([key])
                except Exception:  # any failure to reach it means it is gone
                    os._exit(3)
                now = time.monotonic()
                missing_since = None if alive else (missing_since or now)
                if (missing_since and now - missing_since > ALIVE_MISSING_S) or now > deadline:
                    os._exit(3)
                time.sleep(WATCH_EVERY_S)

        threading.Thread(target=watch, name="workbench-store-watch", daemon=True).start()


class StoreEventLog:
    """:class:`EventLog`'s events, each sealed and written to a key of its own."""

    def __init__(self, store: dist.TCPStore, job_id: str, rank: int, secret: bytes) -> None:
        self.rank, self._store, self._job_id, self._secret = rank, store, job_id, secret
        self._seq = 0
        self._lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        payload = json.dumps({"event": event, "rank": self.rank, "t": time.time(), **fields})
        with self._lock:
            for _ in range(MAX_WRITE_TRIES):
                key = events_key(self._job_id, self.rank, self._seq)
                self._seq += 1
                value = seal(self._secret, self._job_id, key, payload.encode())
                if self._store.compare_set(key, "", value) == value:
                    return
        raise ChannelAuthError(f"rank {self.rank}: {MAX_WRITE_TRIES} event keys in a row were "
                               "taken by someone else")  # fmt: skip
