"""NCCL variable checks: what NCCL's own parser accepts passes, what it refuses is named."""

import pytest

import workbench as wb
from workbench.core.knobs import KnobError
from workbench.core.nccl import (
    VARIABLES,
    NcclError,
    check_env,
    check_variable,
    parse_interfaces,
)

GOOD = [
    ("NCCL_ALGO", "Ring"),
    ("NCCL_ALGO", "ring,tree"),  # case-insensitive, as NCCL's strcasecmp
    ("NCCL_ALGO", "^NVLS,NVLSTree"),
    ("NCCL_ALGO", "CollNetDirect,CollNetChain,PAT"),
    ("NCCL_ALGO", "Ring;allreduce:Tree,CollNetDirect;broadcast:Ring"),
    ("NCCL_PROTO", "Simple"),
    ("NCCL_PROTO", "^LL128"),
    ("NCCL_PROTO", "LL,Simple;allreduce:^LL"),
    ("NCCL_DEBUG", "INFO"),
    ("NCCL_DEBUG", "warn"),
    ("NCCL_MIN_NCHANNELS", "4"),
    ("NCCL_MAX_NCHANNELS", "32"),
    ("NCCL_BUFFSIZE", "8388608"),
    ("NCCL_P2P_DISABLE", "1"),
    ("NCCL_IB_DISABLE", "0"),
    ("NCCL_SOCKET_IFNAME", "^docker,lo"),
    ("NCCL_SOCKET_IFNAME", "eth,ib"),
    ("NCCL_SOCKET_IFNAME", "=eth0,eth1"),
    ("NCCL_SOCKET_IFNAME", "^=docker0"),
    ("NCCL_SOCKET_IFNAME", "enp1s0f0.100"),  # a VLAN interface
    ("NCCL_IB_HCA", "mlx5_0:1,mlx5_1:1"),
    ("NCCL_IB_HCA", "=mlx5_0"),
    ("NCCL_IB_HCA", "^mlx5_3"),
    ("NCCL_NET_GDR_LEVEL", "PHB"),
    ("NCCL_NET_GDR_LEVEL", "2"),
    ("NCCL_NET_GDR_READ", "1"),
    ("NCCL_CROSS_NIC", "2"),
    ("NCCL_SOCKET_NTHREADS", "4"),
    ("NCCL_NSOCKS_PERTHREAD", "16"),
    ("NCCL_IB_GID_INDEX", "3"),
    ("NCCL_IB_GID_INDEX", "-1"),
    ("NCCL_IB_TIMEOUT", "22"),
    ("NCCL_IB_RETRY_CNT", "7"),
    ("NCCL_SOCKET_FAMILY", "AF_INET6"),
    ("NCCL_NET", "Socket"),
    ("NCCL_NET", "IB"),
]
BAD = [
    ("NCCL_ALGO", "Rign"),
    ("NCCL_ALGO", "CollNet"),  # split into CollNetDirect/CollNetChain (NCCL 2.14); refused now
    ("NCCL_ALGO", ""),
    ("NCCL_ALGO", "^"),
    ("NCCL_ALGO", "Ring;Tree"),  # only the first entry may leave out the collective
    ("NCCL_ALGO", "allgatherv:Ring"),
    ("NCCL_PROTO", "LL256"),
    ("NCCL_DEBUG", "LOUD"),
    ("NCCL_MIN_NCHANNELS", "0"),
    ("NCCL_MAX_NCHANNELS", "-2"),
    ("NCCL_MAX_NCHANNELS", "many"),
    ("NCCL_P2P_DISABLE", "yes"),
    ("NCCL_SOCKET_IFNAME", ""),
    ("NCCL_SOCKET_IFNAME", "eth0,,eth1"),
    ("NCCL_SOCKET_IFNAME", "eth 0"),
    ("NCCL_SOCKET_IFNAME", "eth0:1"),  # a port belongs to HCAs only
    ("NCCL_IB_HCA", "mlx5_0:"),
    ("NCCL_IB_HCA", "mlx5_0:one"),
    ("NCCL_IB_HCA", "^"),
    ("NCCL_NET_GDR_LEVEL", "NVL"),  # a P2P level, not a GPU-NIC one
    ("NCCL_NET_GDR_LEVEL", "6"),
    ("NCCL_NET_GDR_READ", "2"),
    ("NCCL_CROSS_NIC", "3"),
    ("NCCL_SOCKET_NTHREADS", "0"),
    ("NCCL_SOCKET_NTHREADS", "17"),
    ("NCCL_NSOCKS_PERTHREAD", "65"),
    ("NCCL_IB_GID_INDEX", "-2"),
    ("NCCL_IB_TIMEOUT", "32"),
    ("NCCL_IB_RETRY_CNT", "8"),
    ("NCCL_SOCKET_FAMILY", "inet"),
    ("NCCL_NET", "I B"),
]


@pytest.mark.parametrize(("name", "value"), GOOD)
def test_values_nccl_accepts_pass(name, value):
    assert check_variable(name, value) is None


@pytest.mark.parametrize(("name", "value"), BAD)
def test_values_nccl_refuses_are_named_with_what_is_allowed(name, value):
    with pytest.raises(NcclError) as info:
        check_variable(name, value)
    assert isinstance(info.value, KnobError) and isinstance(info.value, ValueError)
    assert str(info.value) == f"{name}={value!r} is not allowed: {VARIABLES[name].allowed}"


def test_an_unknown_name_is_accepted_with_a_warning():
    note = check_variable("NCCL_SHINY_NEW_THING", "1")
    assert note is not None and "NCCL_SHINY_NEW_THING is not an NCCL variable" in note


def test_check_env_looks_only_at_nccl_names_and_collects_warnings():
    env = {"NCCL_ALGO": "Tree", "NCCL_NEW": "x", "OMP_NUM_THREADS": "anything"}
    assert len(check_env(env)) == 1
    with pytest.raises(NcclError, match="NCCL_PROTO='LL2'"):
        check_env({"NCCL_PROTO": "LL2", "NCCL_ALGO": "Tree"})


def test_interface_lists_select_as_nccl_does():
    names = ["lo", "eth0", "eth1", "eth10", "docker0", "ib0"]
    assert parse_interfaces("eth").selects(names) == ["eth0", "eth1", "eth10"]
    assert parse_interfaces("=eth1").selects(names) == ["eth1"]  # not eth10
    assert parse_interfaces("^docker,lo").selects(names) == ["eth0", "eth1", "eth10", "ib0"]
    assert parse_interfaces("^=eth1").selects(names) == ["lo", "eth0", "eth10", "docker0", "ib0"]
    hca = parse_interfaces("mlx5_0:1,mlx5_1", with_port=True)
    assert hca.items == (("mlx5_0", 1), ("mlx5_1", None))
    assert hca.selects(["mlx5_0", "mlx5_1", "mlx4_0"]) == ["mlx5_0", "mlx5_1"]
    assert parse_interfaces("mlx5_0:1") is None  # ports only where asked for


def test_socket_threads_times_sockets_is_capped_at_64_in_knobs_and_env():
    wb.Knobs(nccl={"NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "16"})  # 64: fine
    with pytest.raises(KnobError, match=r"NCCL_NSOCKS_PERTHREAD='16'.*at most 8.*here 128"):
        wb.Knobs(nccl={"NCCL_SOCKET_NTHREADS": "8", "NCCL_NSOCKS_PERTHREAD": "16"})
    with pytest.raises(NcclError, match="NCCL_SOCKET_NTHREADS=16"):
        check_env({"NCCL_SOCKET_NTHREADS": "16", "NCCL_NSOCKS_PERTHREAD": "8"})


@pytest.mark.parametrize("value", ["/tmp/nccl.log\nexport LD_PRELOAD=/x.so", "Ring\x00", "a\tb",
                                   "x\x1b[2J", "x\ry"])  # fmt: skip
@pytest.mark.parametrize("name", ["NCCL_ALGO", "NCCL_DEBUG_FILE", "NCCL_NOT_IN_THE_TABLE"])
def test_a_control_character_in_any_value_is_refused_naming_variable_and_value(name, value):
    """A newline would start a line of its own in the exports, the sbatch script or an ssh
    command a value is written into; a NUL cannot be put in an environment at all."""
    with pytest.raises(NcclError) as caught:
        wb.Knobs(nccl={name: value})
    assert (caught.value.knob, caught.value.value) == (name, value.strip())
    assert "without control characters" in str(caught.value)


def test_the_table_marks_what_nccls_guide_lists_under_debugging():
    from workbench.core.nccl import DEBUG_ONLY, DEBUG_SOURCE, flags, is_debug_only

    marked = {name for name, rule in VARIABLES.items() if rule.debug_only}
    assert marked == DEBUG_ONLY & set(VARIABLES)
    for name in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ"):
        assert is_debug_only(name) and "debugging only" in flags({name: "1"})[name]
    for name in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_DEBUG", "NCCL_CROSS_NIC"):
        assert not is_debug_only(name)  # system configuration: kept in scripts
    assert is_debug_only("NCCL_NTHREADS")  # listed by NCCL, not (yet) in our table
    assert "docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html" in DEBUG_SOURCE
