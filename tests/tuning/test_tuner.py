"""``tune`` on real bursts: real OOMs, real memory, a real crashing worker, the real store."""

import dataclasses
import json
import os
import signal
import time
from pathlib import Path

import pytest
from blocked_imports import run_with_ui_blocked
from workloads_for_tests import crashing_workload, fat_workload, hungry_workload, tensor_workload

from workbench import Knobs, run_burst, tune
from workbench.engine import hardware
from workbench.history.store import open_store

FAST = {"seconds": 0.2, "warmup_steps": 1, "min_steps": 3}


def test_batch_search_answers_a_measured_size_below_a_real_oom(store_path):
    t = tune(hungry_workload(limit=64), {"batch_size": [16, 32, 64, 128, 256]}, budget=10,
             store=store_path, **FAST)  # fmt: skip
    assert t.best is not None and t.best.batch_size <= 64
    measured = {r.knobs.batch_size for r in t.bursts if r.ok}
    assert t.best.batch_size in measured and t.best_result.ok
    assert t.best_result.knobs == t.best
    ooms = {r.knobs.batch_size for r in t.bursts if r.status == "oom"}
    assert ooms and min(ooms) > 64 and 256 not in ooms | measured  # stopped at the edge
    assert [r["id"] for r in open_store(store_path).records()] == [r.id for r in t.bursts]
    json.dumps(t.to_dict())  # JSON-ready, as `workbench tune --json` prints it


def test_the_memory_margin_holds_on_real_peak_memory(monkeypatch):
    wl = fat_workload(mib_per_sample=8)  # peak RSS grows 8 MiB per sample of the batch
    base = run_burst(wl, Knobs(batch_size=8), record=False, **FAST).peak_mem_mib
    limit = base + 300  # batch 32 (+192 MiB over batch 8) fits; batch 64 (+448) does not
    real = hardware.device_info
    small = lambda d=None: dataclasses.replace(real(d), total_mem_mib=limit / 0.9)  # noqa: E731
    monkeypatch.setattr(hardware, "device_info", small)
    t = tune(wl, {"batch_size": [8, 16, 32, 64, 128]}, budget=10, memory_margin=0.1,
             base=Knobs(batch_size=8), record=False, **FAST)  # fmt: skip
    assert abs(t.limit_mib - limit) < 1e-6
    assert 16 <= t.best.batch_size < 64
    assert max(r.peak_mem_mib for r in t.bursts if r.knobs == t.best) <= limit
    over = [c for c in t.candidates if c.status == "over limit"]
    assert over and min(c.knobs.batch_size for c in over) > t.best.batch_size


def test_the_memory_limit_reads_pss_so_workers_sharing_pages_fit(monkeypatch):
    """Loader workers share the burst's pages: summed RSS counts them once per process, PSS
    once. A limit between the two must let the config with workers through."""
    from engine.test_telemetry import HAS_PSS, KeptSampler, shared_workload

    from workbench.engine import burst

    if not HAS_PSS:
        pytest.skip("PSS needs /proc/<pid>/smaps_rollup (Linux)")
    KeptSampler.kept = []
    monkeypatch.setattr(burst, "Sampler", KeptSampler)
    wl, workers = shared_workload(), Knobs(batch_size=8, num_workers=2)
    probe = run_burst(wl, workers, record=False, **FAST)
    summed_rss = KeptSampler.kept[-1].rss_peak_mib
    limit = (probe.peak_mem_mib + summed_rss) / 2  # PSS fits with room; summed RSS would not
    real = hardware.device_info
    small = lambda d=None: dataclasses.replace(real(d), total_mem_mib=limit / 0.9)  # noqa: E731
    monkeypatch.setattr(hardware, "device_info", small)
    t = tune(wl, {"num_workers": [0, 2]}, base=Knobs(batch_size=8), budget=4, record=False,
             memory_margin=0.1, **FAST)  # fmt: skip
    with_workers = [r for r in t.bursts if r.knobs.num_workers == 2]
    assert with_workers and all(r.peak_mem_kind == "pss" for r in with_workers)
    assert all(r.peak_mem_mib <= limit for r in with_workers)
    assert [c.status for c in t.candidates if c.status == "over limit"] == []


def test_a_crashing_worker_is_recorded_and_the_tune_goes_on(store_path):
    t = tune(crashing_workload(), {"num_workers": [0, 1]}, base=Knobs(batch_size=8),
             budget=6, store=store_path, **FAST)  # fmt: skip
    assert t.best == Knobs(batch_size=8)
    errors = [r for r in t.bursts if r.status == "error"]
    assert [r.knobs.num_workers for r in errors] == [1]
    assert any(row["status"] == "error" for row in open_store(store_path).records())
    assert "1 failed" in t.summary()


def test_a_real_ctrl_c_stops_the_running_burst_and_the_tune_keeps_it(store_path):
    """SIGINT (what Ctrl-C and a kernel interrupt send) during the second burst's window:
    run_burst stops it at a step boundary, records it and re-raises; the tune keeps it."""
    phases = []

    def ctrl_c(p):
        phases.append(p.phase)
        if p.phase == "measuring" and phases.count("setup") == 2 and "sent" not in phases:
            phases.append("sent")
            os.kill(os.getpid(), signal.SIGINT)

    began = time.perf_counter()
    t = tune(tensor_workload(), {"batch_size": [8, 16, 32]}, base=Knobs(batch_size=8),
             budget=6, store=store_path, burst_progress=ctrl_c, seconds=1.0, warmup_steps=1,
             min_steps=3)  # fmt: skip
    assert "sent" in phases and time.perf_counter() - began < 10
    assert t.stopped == "interrupted" and t.best == Knobs(batch_size=8)
    assert [(r.knobs.batch_size, r.status) for r in t.bursts] == [(8, "ok"), (16, "cancelled")]
    assert [row["id"] for row in open_store(store_path).records()] == [r.id for r in t.bursts]
    assert t.bursts[1].steps < t.bursts[0].steps  # stopped early, not run to its window's end


def test_sweep_diagnose_and_tune_need_no_ui_packages():
    """DESIGN.md: everything but plots and the UI runs on a bare GPU box."""
    out = run_with_ui_blocked(
        f"""
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        import workbench as wb
        from workloads_for_tests import tensor_workload
        fast = dict(seconds=0.1, warmup_steps=1, min_steps=2, record=False)
        df = wb.sweep(tensor_workload(), "batch_size", [8, 16], **fast)
        d = wb.diagnose(tensor_workload(), wb.Knobs(batch_size=8), **fast)
        t = wb.tune(tensor_workload(), {{"batch_size": [8, 16]}}, budget=3, **fast)
        out["facts"] = [len(df), d.verdict, t.best is not None, t.frame().shape[0]]
        """
    )
    rows, verdict, found, bursts = out["facts"]  # rows: 8, 16 and 8 again (drift)
    assert rows == 3 and verdict in ("data-bound", "compute-bound", "balanced") and found
    assert 1 <= bursts <= 3
    assert out["leaked"] == []
