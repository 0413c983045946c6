"""Merging the ranks' numbers into one job result (the rank code itself runs in
test_distributed.py, under torchrun)."""

import subprocess
import sys
import time

import psutil
import pytest

from workbench.distributed.rank import HELD_PER_RANK, is_alive, merge_ranks


def _row(rank, samples, measured_s, mem, wait):
    return {"rank": rank, "samples": samples, "measured_s": measured_s, "peak_mem_mib": mem,
            "data_wait_pct": wait, "steps": samples // 8}  # fmt: skip


RANK0 = {"samples_per_s": 100.0, "tokens_per_s": None, "flops_per_sample": 1e9,
         "peak_tflops": 100.0, "peak_mem_mib": 500.0, "data_wait_pct": 10.0}  # fmt: skip


def test_samples_count_every_rank_over_the_longest_window():
    rows = [_row(0, 160, 2.0, 500.0, 10.0), _row(1, 160, 2.5, 700.0, 30.0)]
    out = merge_ranks(RANK0, rows, "nccl", "cuda")
    assert out["samples"] == 320 and out["measured_s"] == 2.5
    assert out["samples_per_s"] == pytest.approx(128.0)
    assert out["peak_mem_mib"] == 700.0  # each GPU has its own limit: the largest matters
    assert out["data_wait_pct"] == pytest.approx(20.0)
    assert out["backend"] == "nccl" and out["ranks"] == rows
    # MFU over both devices' peak: 1e9 FLOP x 128/s over 2 x 100 TFLOP/s
    assert out["mfu_pct"] == pytest.approx(100 * 1e9 * 128 / (2 * 100e12))


def test_setups_peak_is_the_largest_ranks_beside_the_training_peak():
    rows = [{**_row(0, 80, 1.0, 500.0, 0.0), "setup_peak_mem_mib": 900.0},
            {**_row(1, 80, 1.0, 700.0, 0.0), "setup_peak_mem_mib": 650.0}]  # fmt: skip
    out = merge_ranks(dict(RANK0, setup_peak_mem_mib=900.0), rows, "nccl", "cuda")
    assert out["setup_peak_mem_mib"] == 900.0 and out["peak_mem_mib"] == 700.0
    cpu = merge_ranks(dict(RANK0, setup_peak_mem_mib=None), [_row(0, 80, 1.0, 300.0, 0.0)],
                      "gloo", "cpu")  # fmt: skip
    assert cpu["setup_peak_mem_mib"] is None  # a CPU has none: unknown, not 0


def test_cpu_ranks_share_the_host_so_memory_adds_up_and_tokens_follow_samples():
    rank0 = dict(RANK0, tokens_per_s=25600.0, peak_tflops=None)
    rows = [_row(0, 80, 1.0, 300.0, 0.0), _row(1, 80, 1.0, 310.0, 0.0)]
    out = merge_ranks(rank0, rows, "gloo", "cpu")
    assert out["peak_mem_mib"] == 610.0
    assert out["tokens_per_s"] == pytest.approx(160.0 * 256)
    assert out["mfu_pct"] is None


def test_what_a_rank_holds_is_the_largest_ranks_even_on_a_shared_cpu():
    """FSDP's shards differ by a row where a dimension does not divide: the rank that must fit
    is the one holding more. Unlike the peak, nothing adds up: the fields are per rank."""
    rows = [_row(0, 80, 1.0, 300.0, 0.0), _row(1, 80, 1.0, 310.0, 0.0)]
    held = [(5.0, 5.0, 10.0), (5.25, 5.25, 10.5)]
    for row, figures in zip(rows, held, strict=True):
        row.update(zip(HELD_PER_RANK, figures, strict=True))
    out = merge_ranks(dict(RANK0), rows, "gloo", "cpu")
    assert [out[name] for name in HELD_PER_RANK] == [5.25, 5.25, 10.5]
    assert out["peak_mem_mib"] == 610.0
    for row in rows:
        row.update(dict.fromkeys(HELD_PER_RANK))  # a rank that built no model knows none
    assert all(merge_ranks(dict(RANK0), rows, "gloo", "cpu")[n] is None for n in HELD_PER_RANK)


def test_a_ranks_failed_self_check_is_the_jobs_and_names_the_rank():
    rows = [_row(0, 80, 1.0, 300.0, 0.0), _row(1, 80, 1.0, 310.0, 0.0)]
    rows[1]["suspect"] = ["the result names cuda:1 but the model ran on cuda:0"]
    out = merge_ranks(dict(RANK0, suspect=[]), rows, "nccl", "cuda")
    assert out["suspect"] == ["rank 1: the result names cuda:1 but the model ran on cuda:0"]


def test_a_killed_launcher_is_dead_to_its_ranks_even_before_it_is_reaped():
    # A killed kernel stays a zombie until its parent waits for it; signal 0 still answers.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    launcher = psutil.Process(proc.pid)
    assert is_alive(launcher)
    proc.kill()
    deadline = time.monotonic() + 10
    while launcher.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.05)
    assert launcher.status() == psutil.STATUS_ZOMBIE and not is_alive(launcher)
    proc.wait()
    assert not is_alive(launcher) and not is_alive(None)
