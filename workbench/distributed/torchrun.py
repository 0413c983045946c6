"""Run a job under torchrun as a child process, hear from its ranks, and bring it down cleanly.

Why torchrun and not our own process spawning: it is what users launch production jobs with,
so a burst measured here starts the way their training starts (the same elastic agent, the
same environment variables: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT). Only its
rendezvous is the workbench's (``workbench.distributed.agent``: a static one whose store listens
on loopback and holds no pickle, where ``--standalone`` pickles its state into a store on every
interface, which any local user could overwrite to run code in the agent).

How the ranks talk back: each rank appends JSON lines to ``<job dir>/rank<N>.jsonl`` (an
:class:`EventLog`): its pid, each phase it enters, progress, and its result or its error. Files
rather than stdout, because torchrun and NCCL also write to stdout/stderr, and because a file
survives the rank that wrote it: after a crash the parent still reads the error.

Process hygiene, the part that must never fail:

- torchrun starts in a new session, so the user's Ctrl-C reaches us (not the ranks directly)
  and we decide how to stop the job;
- torchrun starts every rank in a session of its own, so stopping torchrun's process group
  would miss them: :func:`stop_process_tree` collects torchrun's descendants (and the ranks
  traced earlier) first, asks torchrun to stop (SIGTERM: it then stops its ranks), and kills
  whatever is left after a grace period;
- only processes traced to the job's own agents are ever signalled: each is known by its pid
  *and* its start time (:class:`Traced`), taken when this process started the agent or found
  the rank among the agent's descendants, and compared again before any signal, so a pid
  that was reused meanwhile belongs to someone else and is left alone. A pid that an event
  names is only a hint: a rank whose ``start`` event names a process that is not a
  descendant of one of the job's agents is ignored, with a warning;
- each rank also watches the parent process and exits if it disappears or is a zombie not
  yet reaped (see ``workbench.distributed.rank``), so even a killed kernel leaves no orphans
  behind: torchrun ends the job when its ranks exit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from workbench.core.errors import InputError

log = logging.getLogger(__name__)

PHASES = ("start", "init", "setup", "ddp", "fsdp", "warmup", "measuring", "comm", "done")
"""A rank's phases in order; ``ddp`` or ``fsdp`` is the wrapping of its model (DDP's
broadcasts rank 0's weights: a wait for every rank)."""
STOP_GRACE_S = 5.0
_POLL_S = 0.05


@dataclass
class JobSpec:
    """What every rank of the job needs, written to ``job.json`` for the workers to read."""

    mode: str  # "burst" or "comm"
    out_dir: str
    device: str  # "cuda" or "cpu"
    parent_pid: int
    timeout_s: float
    device_indices: list[int] = field(default_factory=list)
    """The CUDA index of each local rank (``job_devices``); empty on a CPU."""
    workload: str | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    seconds: float = 3.0
    min_steps: int = 5
    warmup_steps: int = 3
    data_dir: str | None = None
    sizes_bytes: list[int] = field(default_factory=list)
    nodes: int = 1
    """Nodes of the job: above 1, a comm job measures within and across nodes."""

    def write(self) -> Path:
        path = Path(self.out_dir) / "job.json"
        path.write_text(json.dumps(dataclasses.asdict(self)))
        return path

    @classmethod
    def read(cls, path: str | Path) -> JobSpec:
        return cls(**json.loads(Path(path).read_text()))


class EventLog:
    """A rank's JSON-lines event file; every line is flushed at once (a crash loses nothing)."""

    def __init__(self, path: str | Path, rank: int) -> None:
        self.rank = rank
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (lives as long as the rank)
        self._lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "rank": self.rank, "t": time.time(), **fields})
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


def read_new_events(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Complete lines written since ``offset``; a half-written last line waits for next time."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    events = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
    return events, offset + end


@dataclass
class JobOutcome:
    """How a job ended. ``status``: ok, error, oom, cancelled or timeout."""

    status: str
    result: dict[str, Any] | None
    error: str | None
    elapsed_s: float
    log_tail: str = ""
    events: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


def backend_for(device_type: str) -> str:
    """The process-group backend a job uses: NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device_type == "cuda" else "gloo"


def check_port(port: int | None) -> None:
    """Refuse a rendezvous port that is taken, before starting anything."""
    if port is None:
        return
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InputError.not_allowed("port", port, "a TCP port 1-65535, or None to pick a free one")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise InputError.not_allowed(
                "port", port, "a free TCP port: this one is in use; leave it unset to pick one"
            ) from None


def torchrun_command(nproc: int, job_path: Path, port: int | None) -> list[str]:
    """torchrun's agent for one node running our worker (``workbench.distributed.agent``:
    torchrun itself, whose store listens on ``127.0.0.1`` only and holds no pickle, where
    ``--standalone`` would listen on every interface with its rendezvous pickled in it);
    ``port``: the store's, else one the system picks."""
    rdzv = [] if port is None else [f"--rdzv-endpoint=127.0.0.1:{port}"]
    return [
        sys.executable, "-m", "workbench.distributed.agent", *rdzv, "--nnodes=1",
        f"--nproc-per-node={nproc}", "--max-restarts=0", "--monitor-interval=0.1",
        "-m", "workbench.distributed.rank", str(job_path),
    ]  # fmt: skip


class TorchrunJob:
    """One torchrun job: start it, follow its ranks' events, end it within a deadline."""

    def __init__(self, spec: JobSpec, nproc: int, env: dict[str, str], port: int | None = None):
        self.spec, self.nproc, self.env, self.port = spec, nproc, env, port
        self.out_dir = Path(spec.out_dir)
        self._offsets: dict[int, int] = {}
        self.events: dict[int, list[dict[str, Any]]] = {r: [] for r in range(nproc)}
        self.agents: list[Traced] = []
        """The agents this process started (pid and start time, taken at the start)."""
        self.traced: dict[int, Traced] = {}
        """Ranks found among the agents' descendants, by the pid their start event named."""

    def run(
        self,
        cancel: threading.Event | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> JobOutcome:
        """Start, wait, and always leave no process behind (also on Ctrl-C)."""
        cmd = torchrun_command(self.nproc, self.spec.write(), self.port)
        start = time.monotonic()
        with open(self.out_dir / "job.log", "wb") as log:
            proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=os.getcwd())  # fmt: skip
        self.agents = [t for t in [Traced.of(proc.pid)] if t is not None]
        try:
            status = self._follow(proc, start, cancel, on_event)
        finally:
            stop_process_tree(proc, self.traced.values())
        self._poll_events(None)  # what the ranks wrote while they were being stopped
        return self._outcome(status, proc.returncode, time.monotonic() - start)

    def _follow(self, proc, start, cancel, on_event) -> str:
        return self._wait(lambda: proc.poll() is not None, start, cancel, on_event)

    def _wait(self, exited: Callable[[], bool], start, cancel, on_event) -> str:
        """Relay the ranks' events until ``exited()``, a cancel or the timeout: which one."""
        while True:
            self._poll_events(on_event)
            if exited():
                return "exited"
            if cancel is not None and cancel.is_set():
                return "cancelled"
            if time.monotonic() - start > self.spec.timeout_s:
                return "timeout"
            time.sleep(_POLL_S)

    def _poll_events(self, on_event: Callable[[dict[str, Any]], None] | None) -> None:
        for rank in range(self.nproc):
            path = self.out_dir / f"rank{rank}.jsonl"
            new, self._offsets[rank] = read_new_events(path, self._offsets.get(rank, 0))
            self._take(rank, new, on_event)

    def _take(self, rank: int, new: list[dict[str, Any]], on_event) -> None:
        """Record a rank's new events (tracing the process a start event names) and relay."""
        for event in new:
            if event.get("event") == "start":
                self._trace(rank, event.get("pid"))
        self.events[rank].extend(new)
        if on_event is not None:
            for event in new:
                on_event(event)

    def _trace(self, rank: int, pid: Any) -> None:
        """Remember the rank's process if it descends from one of this job's agents."""
        if not self.agents or Traced.of(pid) is None:
            return  # agents elsewhere (ssh, srun), or a rank gone already: nothing to signal
        found = Traced.descendant(pid, self.agents)
        if found is None:
            log.warning("rank %s's start event names pid %r, which is not a process of this "
                        "job's agents: it will not be signalled", rank, pid)  # fmt: skip
        else:
            self.traced[found.pid] = found

    def _log_tail(self) -> str:
        return _tail(self.out_dir / "job.log")

    def _who(self, rank: int) -> str:
        """How a message names a rank (a multi-node job adds its node)."""
        return f"rank {rank}"

    def _outcome(self, how: str, returncode: int | None, elapsed_s: float) -> JobOutcome:
        tail = self._log_tail()
        result = next((e for e in self.events.get(0, []) if e["event"] == "result"), None)
        if how == "exited" and returncode == 0 and result is not None:
            return JobOutcome("ok", result, None, elapsed_s, tail, self.events)
        if how == "cancelled":
            return JobOutcome("cancelled", None, "stopped before the job finished", elapsed_s,
                              tail, self.events)  # fmt: skip
        if how == "timeout":
            why = f"the job did not finish within {self.spec.timeout_s:g} s and was stopped; "
            return JobOutcome("timeout", None, why + self._laggards(), elapsed_s, tail,
                              self.events)  # fmt: skip
        status, error = self._first_error(returncode, tail)
        return JobOutcome(status, None, error, elapsed_s, tail, self.events)

    def _first_error(self, returncode: int | None, tail: str) -> tuple[str, str]:
        """The error of the rank that failed first: later ones usually fail *because* of it
        (a peer closed the connection), so the earliest is the cause."""
        errors = sorted(
            (e for evs in self.events.values() for e in evs if e["event"] == "error"),
            key=lambda e: e["t"],
        )
        if errors:
            first = errors[0]
            return first.get("status", "error"), f"{self._who(first['rank'])}: {first['error']}"
        silent = [r for r in range(self.nproc) if not self._has(r, ("result", "done"))]
        who = self._who(silent[0]) if silent else "torchrun"
        last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
        return "error", (
            f"{who} ended without a Python error (killed, crashed or out of host memory); "
            f"torchrun exit code {returncode}; last log line: {last}"
        )

    def _has(self, rank: int, kinds: tuple[str, ...]) -> bool:
        evs = self.events.get(rank, [])
        return any(e["event"] in kinds or e.get("phase") in kinds for e in evs)

    def _laggards(self) -> str:
        """Which ranks were furthest behind when the job was stopped: the likely hang."""
        now = time.time()
        where = {}
        for rank in range(self.nproc):
            phases = [e for e in self.events.get(rank, []) if e["event"] == "phase"]
            where[rank] = phases[-1] if phases else None

        def order(rank: int) -> int:
            ev = where[rank]
            return -1 if ev is None else PHASES.index(ev["phase"])

        behind = min(order(r) for r in where)
        parts = []
        for rank in sorted(where):
            ev = where[rank]
            state = "never started" if ev is None else (
                f"last in phase '{ev['phase']}' ({now - ev['t']:.0f} s ago)")  # fmt: skip
            mark = " <- furthest behind" if order(rank) == behind and len(where) > 1 else ""
            parts.append(f"{self._who(rank)} {state}{mark}")
        return "; ".join(parts)


@dataclass(frozen=True)
class Traced:
    """A process known by its pid and its start time: the pair, not the pid alone, says it is
    still the process that was traced (a pid is reused once its process is gone)."""

    pid: int
    start_time: float

    @classmethod
    def of(cls, pid: Any) -> Traced | None:
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            return None
        try:
            return cls(pid, psutil.Process(pid).create_time())
        except psutil.Error:
            return None

    @classmethod
    def descendant(cls, pid: Any, roots: Iterable[Traced]) -> Traced | None:
        """``pid`` traced, if it is (still) a descendant of one of ``roots``."""
        found = cls.of(pid)
        live_roots = {r.pid for r in roots if r.process() is not None}
        if found is None or not live_roots:
            return None
        try:
            ancestors = {p.pid for p in psutil.Process(pid).parents()}
        except psutil.Error:
            return None
        return found if ancestors & live_roots else None

    def process(self) -> psutil.Process | None:
        """The process, if it is still the one traced (same start time); else None."""
        try:
            proc = psutil.Process(self.pid)
            return proc if proc.create_time() == self.start_time else None
        except psutil.Error:
            return None


def stop_process_tree(proc: subprocess.Popen, traced: Iterable[Traced] = ()) -> None:
    """Stop torchrun and everything under it; nothing survives this call.

    torchrun runs each rank in its own session, and a rank's DataLoader workers are its
    children, so the whole tree is collected *before* anything is signalled (a dead parent's
    children are re-parented and could not be found any more).
    """
    stop_process_trees([proc], traced)


def stop_process_trees(procs: list[subprocess.Popen], traced: Iterable[Traced] = ()) -> None:
    """``stop_process_tree`` for several torchrun agents (one per "node") at once: every tree
    collected first, every agent asked to stop, one shared grace period, then SIGKILL.

    Only what traces to this process: the agents it started and has not reaped (their pids
    cannot have been reused), their descendants, and ``traced`` processes whose start time
    still matches.
    """
    tree = _collect_tree([p for p in procs if p.returncode is None], traced)
    asked = [p for p in procs if p.poll() is None]
    for proc in asked:
        proc.send_signal(signal.SIGTERM)  # torchrun then stops its ranks (SIGTERM, then KILL)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in asked:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    for p in tree:
        try:
            if p.is_running():  # psutil compares the start time too
                p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(tree, timeout=STOP_GRACE_S)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _collect_tree(roots: list[subprocess.Popen], traced: Iterable[Traced]) -> list[psutil.Process]:
    found: dict[int, psutil.Process] = {}
    tops = [Traced.of(p.pid) for p in roots]  # not reaped: the pid is still that child's
    for top in [*tops, *traced]:
        proc = top.process() if top is not None else None
        try:
            for q in [proc, *proc.children(recursive=True)] if proc is not None else []:
                found[q.pid] = q
        except psutil.Error:
            continue
    for proc in roots:
        found.pop(proc.pid, None)  # the Popen objects handle the torchrun agents themselves
    return list(found.values())


def _tail(path: Path, max_chars: int = 4000) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return text[-max_chars:]
