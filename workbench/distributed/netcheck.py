"""Before a multi-node job starts: does each node have the interfaces the NCCL knobs name?

``NCCL_SOCKET_IFNAME=eth1`` on a node whose interfaces are ``lo, ens5`` does not fail where it
is set: NCCL finds no interface when the first communicator is created, minutes into the job,
on that node only, and the others wait in the rendezvous until their timeout. Asking each node
for its interfaces first (``ls /sys/class/net``; for HCAs ``/sys/class/infiniband``) turns
that into an error that names the node, the value and what the node has, before anything runs.

The list is read as NCCL reads it (``workbench.core.nccl.parse_interfaces``: prefixes, ``^``
to exclude, ``=`` for exact names). HCA ports (``mlx5_0:1``) are not checked, only the
device names. The HCA list is not checked where NCCL will not use InfiniBand
(``NCCL_IB_DISABLE=1`` or ``NCCL_NET=Socket``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from workbench.core.nccl import NcclError, parse_interfaces

__all__ = ["LIST_HCAS", "LIST_INTERFACES", "check_interfaces"]

LIST_INTERFACES = ["ls", "-1", "/sys/class/net"]
LIST_HCAS = ["sh", "-c", "ls -1 /sys/class/infiniband 2>/dev/null; true"]
"""A node without InfiniBand has no such folder: an empty list there, not an error."""
TIMEOUT_S = 30.0


def check_interfaces(
    hosts: list[str],
    nccl: Mapping[str, str],
    run_on: Callable[[str, list[str], float], str],
) -> None:
    """Raise NcclError naming the node, the value and the node's interfaces when the
    NCCL_SOCKET_IFNAME or NCCL_IB_HCA in ``nccl`` selects nothing on one of ``hosts``.

    ``run_on(host, argv, timeout_s)`` runs a command on a node and returns its stdout (a
    launcher's ``run_on``; it raises the launcher's error, naming the host, when the node
    cannot be reached). Nodes are asked in parallel.
    """
    checks = _checks(nccl)
    if not checks or not hosts:
        return
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        found = list(pool.map(lambda h: _names_on(h, checks, run_on), hosts))
    for host, names in zip(hosts, found, strict=True):
        for (variable, value, with_port, _), have in zip(checks, names, strict=True):
            wanted = parse_interfaces(value, with_port)
            if wanted is not None and not wanted.selects(have):
                what = "HCAs" if with_port else "interfaces"
                listing = ", ".join(have) if have else "none"
                raise NcclError(
                    variable, value,
                    f"names that exist on every node: on node {host} it selects none of its "
                    f"{what} ({listing})",
                )  # fmt: skip


def _checks(nccl: Mapping[str, str]) -> list[tuple[str, str, bool, list[str]]]:
    """(variable, value, with_port, command) for each list the job will use."""
    out = []
    if nccl.get("NCCL_SOCKET_IFNAME"):
        out.append(("NCCL_SOCKET_IFNAME", nccl["NCCL_SOCKET_IFNAME"], False, LIST_INTERFACES))
    ib_off = nccl.get("NCCL_IB_DISABLE", "").strip() == "1"
    socket_net = nccl.get("NCCL_NET", "").strip().lower() == "socket"
    if nccl.get("NCCL_IB_HCA") and not (ib_off or socket_net):
        out.append(("NCCL_IB_HCA", nccl["NCCL_IB_HCA"], True, LIST_HCAS))
    return out


def _names_on(
    host: str,
    checks: list[tuple[str, str, bool, list[str]]],
    run_on: Callable[[str, list[str], float], str],
) -> list[list[str]]:
    return [sorted(run_on(host, argv, TIMEOUT_S).split()) for *_, argv in checks]
