"""What every launcher shares (``workbench.distributed.launchers``, ``.slurm``): the variables
that name a node to its ranks, the WORKBENCH_* variables a rank may be given, which names no
agent is given, and the error that names a node. Its own module so that the SLURM launcher,
which ``launchers`` imports only when asked for, needs nothing from ``launchers`` itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

NODE_ENV = "WORKBENCH_NODE"
"""The node's name, as each rank reports it (``local-0``, the ssh host, the SLURM node)."""
NODE_INDEX_ENV = "WORKBENCH_NODE_INDEX"
"""Set by the local launcher only: which block of this machine's GPUs the node's ranks take."""
NODE_RANK_ENV = "WORKBENCH_NODE_RANK"
"""The node's rank in the job (0 hosts nothing: the kernel hosts the store), assigned by the
launcher (local, ssh); under SLURM each task's ``SLURM_NODEID`` says it instead."""
RANK_WORKBENCH_VARS = ("WORKBENCH_HOME", "WORKBENCH_DATA", "WORKBENCH_FORMATS",
                       "WORKBENCH_DEBUG", "WORKBENCH_COUNT_GRAD_SYNCS",
                       "WORKBENCH_COMM_FAULT_RANK")  # fmt: skip
"""The WORKBENCH_* variables a rank reads: its data and caches, debug and test switches."""
_PRIVATE_WORDS = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "CREDENTIAL", "PGPASS")


@dataclass(frozen=True)
class AgentLaunch:
    """What a launcher's ``start`` puts on the nodes: one agent per node running ``argv`` with
    ``env`` (plus the node's own variables), its output in a file of ``log_dir`` (a private
    folder), and the job's file (``job_text``: the secret and the store's address, see
    ``workbench.distributed.jobsecret``) made readable to the agents as a 0600 file named by
    WORKBENCH_JOB_SECRET_FILE, never through a command line."""

    argv: list[str]
    env: Mapping[str, str]
    nodes: int
    log_dir: Path
    job_text: str = field(default="", repr=False)


class LaunchError(RuntimeError):
    """A node could not be reached, or a command there failed; ``host`` names the node."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(f"node {host}: {message}")
        self.host = host


def private_names(names: Sequence[str]) -> list[str]:
    """Of ``names``, those no agent is given: WORKBENCH_* variables ranks do not read (the
    store's DSN, the class identity, the lab's token) and any name that says it holds a
    password, a secret or a token (the job's secret travels as a file, never as a value)."""
    return [n for n in names if _private(n)]


def _private(name: str) -> bool:
    if name.startswith("WORKBENCH_"):
        return name not in RANK_WORKBENCH_VARS  # the secret file's path is set per launcher
    return any(word in name.upper() for word in _PRIVATE_WORDS)


__all__ = ["NODE_ENV", "NODE_INDEX_ENV", "NODE_RANK_ENV", "RANK_WORKBENCH_VARS", "AgentLaunch",
           "LaunchError", "private_names"]  # fmt: skip
