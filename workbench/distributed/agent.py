"""torchrun's agent with a static rendezvous: in the kernel's store, or, for one node, its own.

``python -m workbench.distributed.agent TORCHRUN-ARGS`` runs torchrun itself
(``torch.distributed.run.main``: the same elastic agent, the same variables for the ranks as a
production launch) with one change: the rendezvous. Why not torchrun's ``c10d`` rendezvous:
its state is a pickle in the store (``dynamic_rendezvous.py``,
``_BackendRendezvousStateHolder.sync``: ``pickle.loads`` of ``torch.rendezvous.<id>``, read
again by every agent's keep-alive), and a ``TCPStore`` authenticates nobody: whoever reaches
the port can list its keys and write a pickle that every agent then runs. Why not its
``static`` one: the node of rank 0 would host a second store, on every interface.

So the launcher assigns each node its rank (``WORKBENCH_NODE_RANK``, or SLURM's
``SLURM_NODEID``) and every agent, node 0 too, is a client of the store the kernel hosts:
nothing is elected, nothing is unpickled. Every node runs the same number of ranks, so ranks
are computed, not exchanged (``TORCH_ELASTIC_WORKER_IDENTICAL=1``); what the agents still
keep in the store (their exit barrier: counters) can be disturbed by someone who reaches the
port, which fails the job, and runs nothing. The store's address and the job's id come from
the job's private file (``workbench.distributed.jobsecret``), never from argv.

A one-node job (no job file: ``workbench.distributed.torchrun``) gets the same treatment
instead of torchrun's ``--standalone`` (a ``c10d`` rendezvous, its pickle in a store on every
interface): the agent hosts the ranks' store itself, on a socket it binds to ``127.0.0.1``
(``master_listen_fd``), at the port ``--rdzv-endpoint`` names or one the system picks.

An agent also watches the kernel, as its ranks do: torchrun asks the rendezvous every
``--monitor-interval`` how many nodes wait to join (:meth:`num_nodes_waiting`), and that call
checks, once a second, that the kernel's store still answers and keeps its ``alive`` key.
When it does not, the call raises and torchrun stops the node's ranks and exits: a killed
kernel leaves nothing behind, even ranks still connecting.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from datetime import timedelta

from torch.distributed import PrefixStore, TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    RendezvousStoreInfo,
    rendezvous_handler_registry,
)

from workbench.distributed.jobsecret import SECRET_FILE_ENV, job_from_env
from workbench.distributed.nodes import NODE_RANK_ENV
from workbench.distributed.storejob import (
    ALIVE_MISSING_S,
    CONNECT_TIMEOUT_S,
    WATCH_EVERY_S,
    agents_prefix,
    alive_key,
    parse_job_url,
)

BACKEND = "workbench"
"""The rendezvous backend's name in torchrun's registry (this process's only)."""
LOCAL_BACKEND = "workbench-local"
"""The one-node backend: the agent's own store on loopback."""
LOOPBACK = "127.0.0.1"
IDENTICAL_ENV = "TORCH_ELASTIC_WORKER_IDENTICAL"


class KernelStoreRendezvous(RendezvousHandler):
    """Every agent a client of the kernel's store, each with the node rank it was given."""

    def __init__(self, host: str, port: int, run_id: str, rank: int, nnodes: int) -> None:
        self.host, self.port, self.run_id = host, port, run_id
        self.rank, self.nnodes = rank, nnodes
        self._client: TCPStore | None = None
        self._store: PrefixStore | None = None
        self._checked = time.monotonic()
        self._missing_since: float | None = None

    def get_backend(self) -> str:
        return BACKEND

    @property
    def use_agent_store(self) -> bool:
        return False  # the ranks build their process group on the kernel's store themselves

    def next_rendezvous(self) -> RendezvousInfo:
        if self._store is None:
            self._client = TCPStore(self.host, self.port, is_master=False, wait_for_workers=False,
                                    timeout=timedelta(seconds=CONNECT_TIMEOUT_S))  # fmt: skip
            self._store = PrefixStore(agents_prefix(self.run_id), self._client)
        return RendezvousInfo(self._store, self.rank, self.nnodes,
                              RendezvousStoreInfo(self.host, self.port))  # fmt: skip

    def is_closed(self) -> bool:
        return False

    def set_closed(self) -> None:
        pass

    def num_nodes_waiting(self) -> int:
        """None ever (the nodes are fixed); raises once the kernel is gone (see above)."""
        now = time.monotonic()
        if self._client is None or now - self._checked < WATCH_EVERY_S:
            return 0
        self._checked = now
        alive = self._client.check([alive_key(self.run_id)])  # raises: the store is gone
        self._missing_since = None if alive else (self._missing_since or now)
        if self._missing_since is not None and now - self._missing_since > ALIVE_MISSING_S:
            raise RuntimeError("the kernel no longer follows this job: stopping its ranks")
        return 0

    def get_run_id(self) -> str:
        return self.run_id

    def shutdown(self) -> bool:
        return True


class LoopbackRendezvous(RendezvousHandler):
    """A one-node job: the agent hosts the ranks' store, bound to ``127.0.0.1`` only."""

    def __init__(self, port: int, run_id: str) -> None:
        self.port, self.run_id = port, run_id
        self._store: PrefixStore | None = None

    def get_backend(self) -> str:
        return LOCAL_BACKEND

    @property
    def use_agent_store(self) -> bool:
        return True  # the ranks' process group joins this store (MASTER_ADDR/PORT: its own)

    def next_rendezvous(self) -> RendezvousInfo:
        if self._store is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((LOOPBACK, self.port))
                sock.listen(socket.SOMAXCONN)
                self.port = sock.getsockname()[1]
                server = TCPStore(LOOPBACK, self.port, is_master=True, wait_for_workers=False,
                                  timeout=timedelta(seconds=CONNECT_TIMEOUT_S),
                                  master_listen_fd=sock.fileno())  # fmt: skip
            except BaseException:
                sock.close()
                raise
            sock.detach()  # the store's server owns the descriptor now
            self._store = PrefixStore(self.run_id, server)
        return RendezvousInfo(self._store, 0, 1, RendezvousStoreInfo(LOOPBACK, self.port))

    def is_closed(self) -> bool:
        return False

    def set_closed(self) -> None:
        pass

    def num_nodes_waiting(self) -> int:
        return 0

    def get_run_id(self) -> str:
        return self.run_id

    def shutdown(self) -> bool:
        return True


def node_rank(nnodes: int) -> int:
    """This node's rank: ``WORKBENCH_NODE_RANK`` (local, ssh) or ``SLURM_NODEID`` (srun)."""
    text = os.environ.get(NODE_RANK_ENV) or os.environ.get("SLURM_NODEID") or ""
    if not text.isdigit() or not 0 <= int(text) < nnodes:
        raise ValueError(f"{NODE_RANK_ENV}={text!r}: a node rank 0..{nnodes - 1} from the "
                         "launcher (or SLURM_NODEID under srun)")  # fmt: skip
    return int(text)


def _create_local(params: RendezvousParameters) -> RendezvousHandler:
    host, _, port = params.endpoint.rpartition(":")
    if host != LOOPBACK or not port.isdigit() or params.max_nodes != 1:
        raise ValueError(f"a one-node workbench rendezvous is on {LOOPBACK}:PORT, one node")
    return LoopbackRendezvous(int(port), params.run_id)


def _create(params: RendezvousParameters) -> RendezvousHandler:
    host, port, run_id = parse_job_url(params.endpoint)
    if run_id != params.run_id or params.min_nodes != params.max_nodes:
        raise ValueError("a workbench rendezvous has a fixed node count and its own job id")
    return KernelStoreRendezvous(host, port, run_id, node_rank(params.max_nodes),
                                 params.max_nodes)  # fmt: skip


def torchrun_args(argv: list[str]) -> list[str]:
    """torchrun's arguments: the rendezvous read from the job's file (a multi-node job), else
    the agent's own store on loopback (``--rdzv-endpoint=127.0.0.1:PORT`` in ``argv``, or a
    port the system picks); then ``argv``."""
    if not os.environ.get(SECRET_FILE_ENV):
        given = [a for a in argv if a.startswith("--rdzv-endpoint=")]
        endpoint = [] if given else [f"--rdzv-endpoint={LOOPBACK}:0"]
        return [f"--rdzv-backend={LOCAL_BACKEND}", *endpoint,
                f"--rdzv-id=wb-{uuid.uuid4().hex[:12]}", *argv]  # fmt: skip
    _, url = job_from_env()
    _, _, job_id = parse_job_url(url)
    return [f"--rdzv-backend={BACKEND}", f"--rdzv-endpoint={url}", f"--rdzv-id={job_id}", *argv]


def main(argv: list[str] | None = None) -> None:
    from torch.distributed import run  # torchrun itself, with these rendezvous registered

    rendezvous_handler_registry.register(BACKEND, _create)
    rendezvous_handler_registry.register(LOCAL_BACKEND, _create_local)
    os.environ[IDENTICAL_ENV] = "1"
    run.main(torchrun_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
