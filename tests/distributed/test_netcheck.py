"""check_interfaces: an NCCL interface list that selects nothing on a node is refused by name."""

import os
import subprocess

import pytest

from workbench.core.nccl import NcclError
from workbench.distributed.netcheck import check_interfaces


def _here(host: str, argv: list[str], timeout_s: float) -> str:
    """Every "node" is this machine: the real /sys/class/net."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                          check=True).stdout  # fmt: skip


def _nodes(interfaces: dict[str, str], hcas: dict[str, str] | None = None):
    """Nodes with the given interface listings; records who was asked what."""
    asked = []

    def run_on(host: str, argv: list[str], timeout_s: float) -> str:
        asked.append((host, argv[-1]))
        return (hcas or {}).get(host, "") if "infiniband" in " ".join(argv) else interfaces[host]

    return run_on, asked


def test_this_machines_interfaces_pass_and_a_missing_one_names_what_exists():
    have = sorted(os.listdir("/sys/class/net"))
    check_interfaces(["n1", "n2"], {"NCCL_SOCKET_IFNAME": "=lo"}, _here)
    check_interfaces(["n1"], {"NCCL_SOCKET_IFNAME": "^docker"}, _here)
    with pytest.raises(NcclError) as err:
        check_interfaces(["n1"], {"NCCL_SOCKET_IFNAME": "=nosuch9"}, _here)
    assert err.value.knob == "NCCL_SOCKET_IFNAME" and err.value.value == "=nosuch9"
    assert f"on node n1 it selects none of its interfaces ({', '.join(have)})" in str(err.value)


def test_the_node_that_lacks_the_interface_is_the_one_named():
    run_on, asked = _nodes({"a": "lo\neth0\nib0\n", "b": "lo\nens5\n"})
    check_interfaces(["a", "b"], {"NCCL_SOCKET_IFNAME": "^docker,lo"}, run_on)
    with pytest.raises(NcclError, match=r"NCCL_SOCKET_IFNAME='eth'.*node b.*\(ens5, lo\)"):
        check_interfaces(["a", "b"], {"NCCL_SOCKET_IFNAME": "eth"}, run_on)
    with pytest.raises(NcclError, match=r"node b .*\(ens5, lo\)"):
        check_interfaces(["a", "b"], {"NCCL_SOCKET_IFNAME": "^=lo,ens5"}, run_on)
    assert {host for host, _ in asked} == {"a", "b"}


def test_hcas_are_checked_only_where_nccl_would_use_infiniband():
    run_on, asked = _nodes({"a": "lo\n", "b": "lo\n"}, {"a": "mlx5_0\nmlx5_1\n", "b": ""})
    with pytest.raises(NcclError, match=r"NCCL_IB_HCA='mlx5_0:1'.*node b.*HCAs \(none\)"):
        check_interfaces(["a", "b"], {"NCCL_IB_HCA": "mlx5_0:1"}, run_on)
    asked.clear()
    check_interfaces(["a", "b"], {"NCCL_IB_HCA": "mlx5_0:1", "NCCL_IB_DISABLE": "1"}, run_on)
    check_interfaces(["a", "b"], {"NCCL_IB_HCA": "mlx5_0:1", "NCCL_NET": "Socket"}, run_on)
    check_interfaces(["a", "b"], {"NCCL_ALGO": "Ring"}, run_on)
    assert asked == []  # nothing to check: no node was asked
