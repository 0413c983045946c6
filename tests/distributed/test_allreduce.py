"""The all-reduce benchmark's arithmetic and its result (a real 2-rank run is in
test_distributed.py)."""

import pytest

from workbench.core.knobs import KnobError
from workbench.distributed.allreduce import CommResult, bus_factor, parse_sizes, wrong_sums


def test_bus_factor_is_nccl_tests_ring_factor():
    assert bus_factor(1) == 0.0
    assert bus_factor(2) == 1.0
    assert bus_factor(8) == pytest.approx(1.75)


def test_sizes_parse_like_nccl_tests_and_bad_ones_name_themselves():
    assert parse_sizes("8K, 1M,256m,4096,1G") == [8192, 2**20, 256 * 2**20, 4096, 2**30]
    assert parse_sizes("8KiB") == [8192]
    with pytest.raises(KnobError, match="sizes='12Q'"):
        parse_sizes("8K,12Q")


def _row(size, time_us, world=2):
    algbw = size / (time_us * 1e-6) / 1e9
    return {"size_bytes": size, "count": size // 4, "dtype": "float32", "calls": 10,
            "time_us": time_us, "algbw_gbps": algbw, "busbw_gbps": algbw * bus_factor(world),
            "correct": True}  # fmt: skip


def test_table_and_frame_show_every_size():
    res = CommResult(world_size=2, backend="gloo", device="cpu",
                     rows=[_row(8192, 50.0), _row(2**20, 900.0)])  # fmt: skip
    lines = res.table().splitlines()
    assert "2 rank(s), gloo on cpu" in lines[0]
    assert lines[2].split()[:2] == ["8", "KiB"] and lines[3].split()[:2] == ["1", "MiB"]
    assert res.peak_busbw_gbps == pytest.approx(2**20 / 900e-6 / 1e9)
    df = res.frame()
    assert list(df["size_bytes"]) == [8192, 2**20] and set(df["world_size"]) == {2}


def test_one_rank_says_why_busbw_is_zero_and_failures_say_what_happened():
    one = CommResult(world_size=1, backend="nccl", device="cuda", rows=[_row(8192, 5.0, 1)])
    assert one.rows[0]["busbw_gbps"] == 0.0 and one.peak_busbw_gbps is None
    assert "nothing crosses a link" in one.table()
    failed = CommResult(status="error", error="rank 1: boom")
    assert failed.table() == "comm error: rank 1: boom" and not failed.ok


def test_a_wrong_sum_is_named_by_size_and_shown_in_the_table():
    rows = [_row(8192, 50.0), dict(_row(2**20, 900.0), correct=False)]
    assert wrong_sums(rows[:1]) == []
    (note,) = wrong_sums(rows)
    assert note.startswith("all-reduce gave a wrong sum at 1 MiB:") and "8 KiB" not in note
    res = CommResult(world_size=2, backend="nccl", device="cuda", rows=rows, suspect=[note])
    lines = res.table().splitlines()
    assert lines[2].endswith("yes") and lines[3].endswith("NO")
    assert lines[-1] == f"SUSPECT: {note}" and res.to_dict()["suspect"] == [note]
