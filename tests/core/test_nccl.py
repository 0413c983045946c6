"""NCCL variable checks: what NCCL's own parser accepts passes, what it refuses is named."""

import pytest

from workbench.core.knobs import KnobError
from workbench.core.nccl import VARIABLES, NcclError, check_env, check_variable

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
    ("NCCL_SOCKET_IFNAME", "^docker,lo"),  # known, free text
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
