"""Distributed bursts as real torchrun jobs on the CPU (gloo, 2 ranks)."""

import os
import socket
import warnings

import psutil
import pytest
import torch

import workbench as wb
from workbench.distributed import comm_bench, run_distributed_burst, worker_env
from workbench.knobs import KnobError
from workbench.store import open_store

FAST = {"seconds": 0.5, "warmup_steps": 1, "min_steps": 3}
TWO = wb.Knobs(batch_size=4, world_size=2)


def _no_children_left() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()]


def test_two_rank_burst_counts_every_rank_and_keeps_the_env_out_of_this_process(
    tiny_data, store_path
):
    knobs = TWO.replace(NCCL_ALGO="Ring", static_graph=True)
    with socket.socket() as busy:  # torch's default master port is taken: still runs
        busy.bind(("127.0.0.1", 29500))
        busy.listen()
        r = wb.run_burst("cnn", knobs, data_dir=tiny_data, store=store_path, **FAST)
    assert r.status == "ok", r.error
    assert r.backend == "gloo" and [row["rank"] for row in r.ranks] == [0, 1]
    assert r.samples == sum(row["samples"] for row in r.ranks) == 2 * r.ranks[0]["samples"]
    assert r.samples_per_s == pytest.approx(r.samples / r.measured_s)
    assert r.ranks[0]["steps"] == r.ranks[1]["steps"] >= 3  # the window ends on the same step
    assert all(row["nccl_env"] == {"NCCL_ALGO": "Ring"} for row in r.ranks)
    assert "NCCL_ALGO" not in os.environ
    assert "gloo" in r.no_effect["nccl"] and "NCCL_ALGO" in r.nccl_flags
    assert "static_graph" not in r.no_effect
    assert [row["id"] for row in open_store(store_path).records()] == [r.id]
    assert _no_children_left() == []


def test_gradient_accumulation_under_real_ddp(tiny_data):
    # The micro-batches before the last run under DDP's no_sync: one all-reduce per step.
    r = wb.run_burst("cnn", TWO.replace(grad_accum=2), data_dir=tiny_data, record=False, **FAST)
    assert r.status == "ok", r.error
    assert r.samples == 2 * r.ranks[0]["steps"] * 4 * 2  # ranks x steps x batch x micro-batches
    assert _no_children_left() == []


def test_a_failing_rank_ends_the_job_with_its_own_error():
    r = run_distributed_burst("workloads_for_tests:rank1_crashes", TWO, record=False,
                              timeout_s=120, **FAST)  # fmt: skip
    assert r.status == "error"
    assert r.error.startswith("rank 1: RuntimeError: rank 1 was told to fail")
    assert _no_children_left() == []


def test_a_hanging_rank_is_stopped_after_the_timeout_and_named():
    r = run_distributed_burst("workloads_for_tests:rank1_hangs", TWO, record=False,
                              timeout_s=25, **FAST)  # fmt: skip
    assert r.status == "error"
    assert "did not finish within 25 s" in r.error
    assert "rank 1 last in phase 'setup'" in r.error and "furthest behind" in r.error
    assert _no_children_left() == []


def test_cancel_stops_the_job_and_leaves_no_process():
    import threading

    cancel = threading.Event()
    timer = threading.Timer(3.0, cancel.set)
    timer.start()
    r = run_distributed_burst("workloads_for_tests:rank1_hangs", TWO, record=False,
                              timeout_s=120, cancel=cancel, **FAST)  # fmt: skip
    assert r.status == "cancelled" and r.launch_s < 60
    assert _no_children_left() == []


def test_bad_input_is_refused_before_anything_starts():
    with pytest.raises(KnobError, match=r"NCCL_PROTO='LL2'.*LL, LL128, Simple"):
        TWO.replace(NCCL_PROTO="LL2")
    with pytest.raises(KnobError, match=r"world_size=64.*one rank per core"):
        wb.run_burst("cnn", wb.Knobs(world_size=64))
    with pytest.raises(KnobError, match="fresh processes"):
        wb.run_burst(lambda: None, TWO)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(KnobError, match=rf"port={port}.*in use"):
            run_distributed_burst("cnn", TWO, port=port)
    assert _no_children_left() == []


def test_unknown_nccl_variable_is_passed_with_a_warning(monkeypatch):
    knobs = TWO.replace(NCCL_SHINY_NEW_THING="1")
    monkeypatch.setattr("workbench.distributed.TorchrunJob.run", _refuse_to_launch)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(_NotLaunched):
        warnings.simplefilter("always")
        run_distributed_burst("cnn", knobs, record=False)
    assert any("NCCL_SHINY_NEW_THING" in str(w.message) for w in caught)


class _NotLaunched(Exception):
    pass


def _refuse_to_launch(self, *args, **kwargs):
    raise _NotLaunched


def test_worker_env_is_a_copy_with_the_knobs_and_a_fair_thread_share(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = worker_env({"NCCL_ALGO": "Tree"}, nproc=2)
    assert env["NCCL_ALGO"] == "Tree" and "NCCL_ALGO" not in os.environ
    assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))
    assert os.path.dirname(__file__) in env["PYTHONPATH"].split(os.pathsep)


def test_comm_bench_on_two_cpu_ranks_reports_nccl_tests_figures():
    res = comm_bench(2, sizes=[8 * 1024, 256 * 1024], knobs=wb.Knobs(nccl={"NCCL_PROTO": "LL"}))
    assert res.ok, res.error
    assert [r["size_bytes"] for r in res.rows] == [8192, 262144]
    assert all(r["correct"] for r in res.rows)
    for row in res.rows:
        assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] / row["time_us"] / 1e3)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"])  # 2(n-1)/n = 1 for n=2
    assert res.backend == "gloo" and "nccl" in res.no_effect
    assert "busbw GB/s" in res.table() and res.frame().shape[0] == 2
    assert _no_children_left() == []


@pytest.mark.gpu
def test_one_gpu_rank_runs_the_nccl_path_end_to_end():
    knobs = wb.Knobs(batch_size=32, nccl={"NCCL_ALGO": "Ring"})
    r = wb.run_burst("cnn", knobs, device="cuda", record=False, **FAST)
    assert r.status == "ok", r.error
    assert r.backend == "nccl" and len(r.ranks) == 1 and "nccl" not in r.no_effect
    res = comm_bench(1, device="cuda", sizes=[8 * 1024, 64 * 2**20])
    assert res.ok and all(row["correct"] for row in res.rows)
    assert torch.cuda.is_available()
