"""A burst or comm benchmark across nodes: one torchrun job, one agent per node, run from here.

With ``knobs.nodes > 1`` the job is ``nodes x (world_size / nodes)`` ranks whose agents meet
in a static rendezvous: the launcher gives each node its rank, and every agent is a client of
the store the kernel (or CLI) process hosts (``torch.distributed.TCPStore``, ``is_master``;
``workbench.distributed.agent``), on ``127.0.0.1`` for the ``local`` launcher, elsewhere on
this host's name (``$WORKBENCH_RDZV_HOST`` replaces it where that name does not reach the
nodes). A launcher (``workbench.distributed.launchers``: local, ssh, slurm) starts one agent
per node.

The store is also the job's channel (``workbench.distributed.storejob``): the ranks read the
job from it, append their events to it, and exit when it stops answering, because a rank on
another host can neither read this machine's temp folder nor watch this process's pid. The
agents' own output goes to one log per node in a local temp folder (the ssh and srun clients
run here and copy it back), read only to explain a node that failed.

The store listens only on the address the agents are given (loopback for ``local``), the job
carries a secret of its own and every value on the channel an HMAC
(``workbench.distributed.storejob``, ``workbench.distributed.jobsecret``); on this host, only
processes traced to the agents this process started are ever signalled.

torchrun's own rendezvous is not used: its ``c10d`` backend keeps its state as a pickle in
the store, which anyone who reaches the port could replace (and so run code in every agent),
and its ``static`` one would have node 0's agent host a second store on every interface
(``workbench.distributed.agent`` says more). The ranks build their process group on the
kernel's store too (a prefix of its own, ``workbench.distributed.rank``) and exchange their
numbers as JSON, never as pickles (``workbench.distributed.jsoncomm``): in a multi-node job
the kernel's store is the only c10d store, and nothing read from it or from a peer is
unpickled. What stays beyond reach: the store has no authentication (someone who reaches
the port can disturb the job), and gloo and NCCL open their own sockets on the interface
GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME names (or the one the host name resolves to): a
cluster must keep the job on a network it trusts.

Before anything starts, every node is asked whether it has the interfaces the NCCL knobs
name (``workbench.distributed.netcheck``): a missing one is an error naming the node.

How it ends, as a single-node job does (``workbench.distributed.torchrun``): the result of
rank 0; or the error of the rank that failed first, named with its node; or the node whose
agent ended first (unreachable, killed); or the timeout, naming the ranks furthest behind;
or a cancel. Every way out goes through the launcher's ``stop``: nothing is left on any node.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.distributed.jobsecret import job_text
from workbench.distributed.launchers import (
    AgentLaunch,
    Launcher,
    LaunchError,
    agent_command,
    node_name,
)
from workbench.distributed.netcheck import check_interfaces
from workbench.distributed.storejob import StoreHost, listen_socket
from workbench.distributed.torchrun import (
    JobOutcome,
    JobSpec,
    TorchrunJob,
    Traced,
    _tail,
    stop_process_trees,
)

__all__ = ["MultiNodeJob", "node_rows", "rendezvous_address"]

RDZV_HOST_ENV = "WORKBENCH_RDZV_HOST"
_POLL_S = 0.05
AGENTS_EXIT_GRACE_S = 3.0
"""How long the agents may take to end once every rank has finished (rank 0's result in).
Their exit barrier lives in the store, which anyone who reaches its port can disturb (a hang
until torch's 300 s timeout); the measurement is complete by then, so agents still running
after this grace are stopped, not waited for."""


def rendezvous_address(launcher: Launcher) -> str:
    """Where the agents find the kernel's store: loopback for local "nodes"; else
    ``$WORKBENCH_RDZV_HOST`` or this host's fully qualified name."""
    if launcher.name == "local":
        return "127.0.0.1"
    return os.environ.get(RDZV_HOST_ENV) or socket.getfqdn()


def channel_listener(launcher: Launcher, address: str, hosts: list[str]) -> socket.socket:
    """The store's socket, bound where the agents are told to connect: ``address`` as given
    (loopback for ``local``, ``$WORKBENCH_RDZV_HOST``), or this host's address the nodes reach
    when ``address`` is merely this host's name (see ``storejob.listen_socket``)."""
    explicit = launcher.name == "local" or bool(os.environ.get(RDZV_HOST_ENV))
    return listen_socket(address, hosts, explicit=explicit)


class MultiNodeJob(TorchrunJob):
    """One torchrun job over several nodes, followed through the kernel's store."""

    def __init__(
        self,
        spec: JobSpec,
        launcher: Launcher,
        nodes: int,
        nproc_per_node: int,
        env: dict[str, str],
    ) -> None:
        super().__init__(spec, nodes * nproc_per_node, env)
        self.launcher, self.nodes, self.nproc_per_node = launcher, nodes, nproc_per_node
        self.hosts = [node_name(h) for h in launcher.hosts(nodes)]
        self.log_dir = Path(tempfile.mkdtemp(prefix="workbench-nodes-", dir=spec.out_dir))
        self._host: StoreHost | None = None
        self._agent_exit: tuple[int, int] | None = None  # (agent index, exit code) first seen
        self._launch_error = ""
        self._one_per_node = True

    def check_nodes(self, nccl: dict[str, str]) -> None:
        """Every node has the interfaces the NCCL knobs name (NcclError naming the node);
        LaunchError naming a node that cannot be asked."""
        check_interfaces(self.launcher.hosts(self.nodes), nccl, self.launcher.run_on)

    def run(
        self,
        cancel: Any = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> JobOutcome:
        """Host the store, start the agents, follow, and always stop every node."""
        job_id = f"wb-{uuid.uuid4().hex[:12]}"
        address = rendezvous_address(self.launcher)
        self._host = StoreHost(
            address,
            job_id,
            self.nproc,
            listener=channel_listener(self.launcher, address, self.hosts),
        )
        try:
            status, elapsed_s = self._run_agents(job_id, cancel, on_event)
        finally:
            self._host.close()  # a rank still running sees the store gone and exits
        if status == "launch":
            return JobOutcome("error", None, self._launch_error, elapsed_s, "", self.events)
        code = 0 if status == "exited" and self._agent_exit is None else self._exit_code()
        return self._outcome(status, code, elapsed_s)

    def _run_agents(self, job_id: str, cancel, on_event) -> tuple[str, float]:
        assert self._host is not None
        self._host.put_spec(self.spec)
        argv = agent_command(nnodes=self.nodes, nproc_per_node=self.nproc_per_node,
                             tag=uuid.uuid4().hex[:12])  # fmt: skip
        launch = AgentLaunch(argv, self.env, self.nodes, self.log_dir,
                             job_text(self._host.secret, self._host.url()))  # fmt: skip
        start = time.monotonic()
        procs: list = []
        try:
            procs = self.launcher.start(launch)
            if self.launcher.name == "local":  # the agents themselves, started here
                self.agents = [t for t in (Traced.of(p.pid) for p in procs) if t is not None]
            status = self._follow_agents(procs, start, cancel, on_event)
        except LaunchError as exc:
            status, self._launch_error = "launch", str(exc)
        finally:
            self._stop(procs)
        self._poll_events(None)  # what the ranks wrote while they were being stopped
        return status, time.monotonic() - start

    def _follow_agents(self, procs: list, start: float, cancel, on_event) -> str:
        self._one_per_node = len(procs) == self.nodes  # srun: one client for every node

        finished_at: list[float] = []

        def exited() -> bool:  # every agent done, or the first one that failed
            codes = [p.poll() for p in procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                self._agent_exit = failed[0]
            if failed or all(c == 0 for c in codes):
                return True
            if not finished_at and self._ranks_finished():
                finished_at.append(time.monotonic())
            return bool(finished_at) and time.monotonic() - finished_at[0] > AGENTS_EXIT_GRACE_S

        return self._wait(exited, start, cancel, on_event)

    def _ranks_finished(self) -> bool:
        """Every rank said ``done`` and rank 0 wrote the job's result."""
        result = any(e["event"] == "result" for e in self.events.get(0, []))
        return result and all(self._has(r, ("done",)) for r in range(self.nproc))

    def _exit_code(self) -> int | None:
        return self._agent_exit[1] if self._agent_exit else None

    def _stop(self, procs: list) -> None:
        """The launcher stops its agents on every node; ranks of local "nodes" traced to
        their agents are stopped here too, should any have left its agent's tree (a rank's
        pid alone is never enough: see ``torchrun.Traced``)."""
        try:
            self.launcher.stop(procs)
        finally:
            if self.traced:
                stop_process_trees([], self.traced.values())

    def _poll_events(self, on_event: Callable[[dict[str, Any]], None] | None) -> None:
        if self._host is None or self._host.store is None:
            return
        self._host.guard()
        for rank in range(self.nproc):
            self._take(rank, self._host.read_events(rank), on_event)

    def _node_of(self, rank: int) -> str | None:
        starts = [e for e in self.events.get(rank, []) if e["event"] == "start"]
        return starts[0].get("node") if starts else None

    def _who(self, rank: int) -> str:
        node = self._node_of(rank)
        return f"node {node}, rank {rank}" if node else f"rank {rank}"

    def _log_tail(self) -> str:
        parts = []
        for log in sorted(self.log_dir.glob("*.log")):
            text = _tail(log, 2000).strip()
            if text:
                parts.append(f"--- {log.stem} ---\n{text}")
        return "\n".join(parts)

    def _first_error(self, returncode: int | None, tail: str) -> tuple[str, str]:
        """A rank's own error first; else the node whose agent ended first, with the last
        line of its output (ssh's "Could not resolve hostname", torchrun's failure)."""
        has_errors = any(e["event"] == "error" for evs in self.events.values() for e in evs)
        if has_errors or self._agent_exit is None:
            return super()._first_error(returncode, tail)
        index, code = self._agent_exit
        node = self.hosts[index] if self._one_per_node else ",".join(self.hosts)
        log = self.log_dir / f"{node}.log"
        if not log.exists():
            log = self.log_dir / "srun.log"
        lines = _tail(log, 2000).strip().splitlines()
        last = lines[-1] if lines else "no output"
        return "error", (f"node {node}: its torchrun agent ended with exit code {code} before "
                         f"the job finished; last line of its output: {last}")  # fmt: skip


def node_rows(ranks: list[dict[str, Any]], device_type: str) -> list[dict[str, Any]]:
    """One row per node from the ranks' rows: ``node``, ``host``, ``ranks``, and their
    ``samples_per_s`` (sum), ``step_ms_p50`` (the node's slowest rank: it holds the others
    back at each all-reduce), ``data_wait_pct`` (mean) and ``peak_mem_mib`` (the largest
    rank's on GPUs, each with its own memory; the sum on a CPU, whose memory they share)."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for row in ranks:
        by_node.setdefault(row.get("node") or "?", []).append(row)
    out = []
    for node, rows in by_node.items():
        samples_per_s = [r["samples"] / r["measured_s"] for r in rows if r.get("measured_s")]
        steps = [r["step_ms_p50"] for r in rows if r.get("step_ms_p50") is not None]
        waits = [r["data_wait_pct"] for r in rows if r.get("data_wait_pct") is not None]
        mems = [r["peak_mem_mib"] for r in rows if r.get("peak_mem_mib") is not None]
        mem = (max(mems) if device_type == "cuda" else sum(mems)) if mems else None
        out.append({
            "node": node, "host": rows[0].get("host"), "ranks": [r["rank"] for r in rows],
            "samples_per_s": sum(samples_per_s) if samples_per_s else None,
            "step_ms_p50": max(steps) if steps else None,
            "data_wait_pct": sum(waits) / len(waits) if waits else None,
            "peak_mem_mib": mem,
        })  # fmt: skip
    return out
