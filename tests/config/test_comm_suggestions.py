"""A saved config's comm section: checked on load, described with where it was measured."""

import pytest

from workbench.config.comm_suggestions import check_comm, describe_comm
from workbench.config.yaml_text import ConfigError

WINNER = {"from_bytes": 8192, "to_bytes": 65536, "value": "Ring", "sizes_bytes": [8192, 65536],
          "busbw_gbps": [0.5, 1.25], "margin_pct": 12.0}  # fmt: skip
SECTION = {"variable": "NCCL_ALGO", "values": ["Ring", "Tree"], "backend": "nccl",
           "device": "NVIDIA H200", "world_size": 16, "nodes": 2, "winners": [WINNER],
           "bucket_cap_mb": None}  # fmt: skip


def test_across_nodes_the_description_says_the_inter_node_rows_decided():
    lines = describe_comm(SECTION)
    assert lines[0] == ("# comm sweep over NCCL_ALGO (nccl, 16 ranks, NVIDIA H200, 2 nodes: "
                        "inter-node rows): suggestions, not knobs")  # fmt: skip
    assert (
        lines[1]
        == "#   8 KiB - 64 KiB: NCCL_ALGO=Ring (busbw 0.5, 1.25 GB/s, +12.0% over the next)"
    )


def test_a_section_saved_before_nodes_was_kept_reads_as_one_node():
    old = {k: v for k, v in SECTION.items() if k != "nodes"}
    assert check_comm(old, "old.yaml") == old
    assert describe_comm(old)[0].startswith(
        "# comm sweep over NCCL_ALGO (nccl, 16 ranks, NVIDIA H200)"
    )


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({**SECTION, "node": 2}, "comm.node"),
        ({**SECTION, "variable": "ALGO"}, "comm.variable"),
        ({**SECTION, "winners": [{"value": "Ring"}]}, "comm.winners"),
        (["NCCL_ALGO"], "comm"),
    ],
)
def test_a_wrong_key_is_named(section, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        check_comm(section, "bad.yaml")
