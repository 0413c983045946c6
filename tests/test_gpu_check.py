"""benchmarks/gpu_check.py and gpu_session.sh run only where CUDA is (a lent GPU, minutes at a
time): their plan, their row loop, their checks and every row's logic are tested here on CPU
results and recorded fakes, so a typo or a wrong sum cannot waste that time."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from workloads_for_tests import tensor_workload

from workbench import Knobs, run_burst
from workbench.core.results import BurstResult

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", _BENCH / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # builds every row's Knobs: a bad combination fails here
    return module


@pytest.fixture(scope="module")
def rows(gpu_check):
    return sys.modules["gpu_rows"]


# -- the plan ----------------------------------------------------------------------------------


def test_rows_run_riskiest_first_each_with_an_estimate_and_why(gpu_check):
    planned = gpu_check.plan()
    risks = [r.risk for r in planned]
    assert risks == sorted(risks) and len(set(risks)) == len(risks)
    assert planned[0].label.startswith("compile")  # the likeliest to fail, and the dearest
    assert all(r.est_s > 0 and r.why for r in planned)
    assert len({r.label for r in planned}) == len(planned)
    assert gpu_check.planned_s(planned) == gpu_check.SETUP_EST_S + sum(r.est_s for r in planned)


def test_the_plan_prints_as_a_table_without_a_gpu(gpu_check, capsys):
    assert gpu_check.main(["--plan"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| risk | row | est s | why |"
    assert lines[3].startswith("| 1 | compile default (tf32) | 22 | ")
    assert lines[-2].startswith("| 10 | compile max-autotune (tf32) | 85 | ")
    assert lines[-1] == f"| | total | {gpu_check.planned_s():.0f} | default budget 250 s |"
    assert len(lines) == 3 + len(gpu_check.plan()) + 1


def test_the_first_call_has_every_row_but_max_autotune_which_is_a_call_of_its_own(
    gpu_check, capsys
):  # fmt: skip
    assert gpu_check.main(["--plan", "--rows", "first"]) == 0
    first = capsys.readouterr().out
    assert gpu_check.main(["--plan", "--rows", "max-autotune"]) == 0
    alone = capsys.readouterr().out
    assert "max-autotune" not in first and "| 9 | comm benchmark |" in first
    assert [line.split("|")[2].strip() for line in alone.splitlines()[3:-1]] == [
        "compile max-autotune (tf32)"]  # fmt: skip


def test_the_rehearsal_runs_its_cpu_rows_through_the_same_loop_and_file(tmp_path):
    out = tmp_path / "rows.json"
    argv = [sys.executable, str(_BENCH / "gpu_check.py"), "--rehearse", "--json", str(out),
            "--data-dir", str(tmp_path / "data"), "--budget-s", "120"]  # fmt: skip
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["device"] == "cpu (a rehearsal)" and doc["running"] is None
    assert [(r["label"], r["status"]) for r in doc["rows"]] == [
        ("rehearsal: cnn, resident batch", "passed"),
        ("rehearsal: cnn, JPEGs, 1 worker", "passed"),
        ("rehearsal: cnn, resident batch again", "passed")]  # fmt: skip
    assert all(b["device"] == "cpu" for r in doc["rows"] for b in r["bursts"])


# -- the row loop ------------------------------------------------------------------------------


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _row(gpu_check, label, est_s, action, risk=1):
    return gpu_check.Row(label, risk, est_s, "test", action)


def test_a_row_that_would_not_fit_is_skipped_and_says_so(gpu_check):
    clock, said, writes = _Clock(), [], []

    def spend(seconds):
        def run(r):
            clock.now += seconds
            r.expect("ran", True)

        return run

    rows = [_row(gpu_check, "a", 4, spend(4)), _row(gpu_check, "big", 8, spend(8)),
            _row(gpu_check, "small", 3, spend(3))]  # fmt: skip
    records = gpu_check.run_rows(rows, 10, lambda recs, running: writes.append(running),
                                 clock=clock, say=said.append)  # fmt: skip
    assert [r["status"] for r in records] == ["passed", "skipped", "passed"]
    assert "big: skipped: would not fit (est 8 s, 6 s left)" in said
    assert records[1]["reason"] == "would not fit (est 8 s, 6 s left)"
    assert gpu_check.summary_line(records, 7.0) == "2 passed, 0 failed, 1 skipped of 3 rows, in 7 s"
    assert writes == ["a", None, None, "small", None]  # before and after each row that ran


def test_a_row_that_raises_fails_and_the_next_one_runs(gpu_check, tmp_path):
    def boom(r):
        raise RuntimeError("CUDA error: an illegal memory access")

    rows = [_row(gpu_check, "boom", 1, boom), _row(gpu_check, "fine", 1, lambda r: None)]
    path = tmp_path / "check.json"
    records = gpu_check.run_rows(rows, 100, gpu_check.json_writer(path, {"device": "x"}),
                                 say=lambda s: None)  # fmt: skip
    assert [r["status"] for r in records] == ["failed", "passed"]
    doc = json.loads(path.read_text())
    assert doc["rows"][0]["problems"] == [
        "ran without raising: RuntimeError: CUDA error: an illegal memory access"
    ]
    assert doc["summary"] == {"passed": 1, "failed": 1, "skipped": 0} and doc["running"] is None


def test_a_killed_run_keeps_the_rows_it_measured(tmp_path):
    """SIGKILL in the middle of the second row: the file holds the first row whole, names the
    row that was running, and no temporary file is left beside it."""
    path = tmp_path / "check.json"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(_BENCH)!r})
        import gpu_check as g

        def measured(r):
            r.expect("measured", True)
            r.facts["samples_per_s"] = 123.0

        def killed(r):
            os.kill(os.getpid(), signal.SIGKILL)

        rows = [g.Row("first", 1, 1, "", measured), g.Row("second", 2, 1, "", killed),
                g.Row("third", 3, 1, "", measured)]
        g.run_rows(rows, 100, g.json_writer({str(path)!r}, {{"device": "cpu"}}))
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stderr
    doc = json.loads(path.read_text())
    assert doc["running"] == "second"
    assert [r["label"] for r in doc["rows"]] == ["first"]
    assert doc["rows"][0]["facts"] == {"samples_per_s": 123.0}
    assert doc["rows"][0]["checks"] == [{"name": "measured", "ok": True, "detail": ""}]
    assert list(tmp_path.iterdir()) == [path]


def test_a_crashed_run_resumes_after_the_row_it_died_in(gpu_check, tmp_path):
    """A segfault in the second row (as compile=max-autotune gave on the first H200 session):
    resumed, the first row is kept, the second is failed with the reason, the third runs."""
    path = tmp_path / "check.json"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(_BENCH)!r})
        import gpu_check as g
        rows = [g.Row("first", 1, 1, "", lambda r: None),
                g.Row("second", 2, 1, "", lambda r: os.kill(os.getpid(), signal.SIGSEGV))]
        g.run_rows(rows, 100, g.json_writer({str(path)!r}, {{"device": "cpu"}}))
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == -11, p.stderr
    done = gpu_check.resumed(path)
    assert [(r["label"], r["status"]) for r in done] == [("first", "passed"), ("second", "failed")]
    assert "died in this row" in done[1]["reason"]
    ran = []
    rows = [_row(gpu_check, name, 1, lambda r, n=name: ran.append(n))
            for name in ("first", "second", "third")]  # fmt: skip
    records = gpu_check.run_rows(rows, 100, gpu_check.json_writer(path, {"device": "cpu"}),
                                 say=lambda s: None, done=done)  # fmt: skip
    assert ran == ["third"]
    assert [r["status"] for r in records] == ["passed", "failed", "passed"]
    assert json.loads(path.read_text())["summary"] == {"passed": 2, "failed": 1, "skipped": 0}


def test_nothing_to_resume_starts_from_the_first_row(gpu_check, tmp_path):
    assert gpu_check.resumed(tmp_path / "absent.json") == []


# -- the checks every burst gets, on CPU results -----------------------------------------------


@pytest.fixture(scope="module")
def cpu_result() -> BurstResult:
    r = run_burst(tensor_workload(), Knobs(batch_size=8), seconds=0.3, device="cpu",
                  record=False)  # fmt: skip
    assert r.ok, r.error
    return r


def _failed(checks):
    return {c.name: c.detail for c in checks if not c.ok}


def test_a_clean_cpu_burst_passes_every_burst_check(rows, cpu_result):
    state = rows.backend_state()
    assert _failed(rows.burst_checks(cpu_result, "ok", state, rows.backend_state())) == {}
    assert rows.step_sum_gap(cpu_result) < rows.STEP_SUM_TOLERANCE


def test_burst_checks_fail_with_reasons(rows, cpu_result):
    state = rows.backend_state()
    r = BurstResult.from_dict(cpu_result.to_dict())
    r.suspect = ["step times add up to 80% of the window"]
    r.step_ms = [v * 1.2 for v in r.step_ms]  # event clock and host clock 20% apart
    r.gpu_util_pct, r.temp_c = 130.0, 25.0
    failed = _failed(rows.burst_checks(r, "ok", state, state))
    assert failed["not suspect"] == "step times add up to 80% of the window"
    assert "% off the window" in failed["steps add up to the window"]
    assert failed["gpu_util_pct in 0..100"] == "gpu_util_pct=130.0"
    assert set(failed) == {"not suspect", "steps add up to the window", "gpu_util_pct in 0..100"}
    oom = BurstResult(status="oom", error="CUDA out of memory", knobs=Knobs())
    assert _failed(rows.burst_checks(oom, "oom", state, state)) == {}
    assert _failed(rows.burst_checks(oom, "ok", state, state)) == {
        "status": "expected ok, got oom: CUDA out of memory"
    }


def test_the_tf32_state_is_read_through_both_apis_and_a_mixed_one_fails(rows):
    """Real torch on a CPU: setting only the new per-backend API leaves the legacy readers
    raising (torch >= 2.9), which is what Inductor trips over while compiling."""
    before = rows.backend_state()
    assert not any(str(v).startswith("raised") for v in before.values()), before
    assert {"get_float32_matmul_precision()", "cuda.matmul.allow_tf32"} <= set(before)
    if "cuda.matmul.fp32_precision" not in before:
        pytest.skip("torch < 2.9 has only the legacy API")
    saved = torch.backends.cuda.matmul.fp32_precision
    try:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        after = rows.backend_state()
    finally:
        torch.backends.cuda.matmul.fp32_precision = saved
    check = rows.tf32_check(before, after)
    assert not check.ok
    assert check.detail == (
        "get_float32_matmul_precision(), cuda.matmul.allow_tf32 raised after the burst"
    )
    assert rows.backend_state() == before


def test_a_changed_tf32_state_fails(rows):
    before = {"get_float32_matmul_precision()": "highest", "cudnn.benchmark": False}
    after = {"get_float32_matmul_precision()": "high", "cudnn.benchmark": False}
    check = rows.tf32_check(before, after)
    assert not check.ok
    assert (
        check.detail == "changed by the burst: get_float32_matmul_precision(): 'highest' -> 'high'"
    )
    assert rows.tf32_check(before, dict(before)).ok


def test_nvml_figures_required_only_where_asked(rows):
    empty = BurstResult(status="ok", knobs=Knobs())
    assert _failed(rows.nvml_range_checks(empty, required=False)) == {}
    assert set(_failed(rows.nvml_range_checks(empty, required=True))) == {
        "gpu_util_pct in 0..100", "mem_busy_pct in 0..100", "temp_c in 0..120", "power_w > 0"
    }  # fmt: skip
    hot = BurstResult(status="ok", gpu_util_pct=50.0, mem_busy_pct=101.0, power_w=0.0,
                      temp_c=121.0, knobs=Knobs())  # fmt: skip
    assert set(_failed(rows.nvml_range_checks(hot, required=False))) == {
        "mem_busy_pct in 0..100",
        "temp_c in 0..120",
        "power_w > 0",
    }


# -- every row's logic, with recorded results --------------------------------------------------

_SPEED = {"default": 200.0, "fp32-strict": 100.0, "tf32": 240.0, "bf16": 400.0, "fp16": 390.0}


def _good(workload, knobs, **kw):
    """A result as a healthy H200 would give it for these knobs."""
    if knobs.batch_size == 8192:
        return BurstResult(status="oom", error="CUDA out of memory", workload=workload,
                           knobs=knobs)  # fmt: skip
    steps = 10
    r = BurstResult(
        status="ok", workload=workload, device=str(kw.get("device") or "cuda:0"),
        device_name="NVIDIA H200", knobs=knobs, samples_per_s=_SPEED[knobs.precision],
        steps=steps, samples=steps * knobs.batch_size * knobs.grad_accum, measured_s=2.0,
        step_ms=[200.0] * steps, peak_mem_mib=1000.0, peak_reserved_mib=1200.0,
        telemetry="nvml", gpu_util_pct=90.0, mem_busy_pct=40.0, power_w=500.0, temp_c=50.0,
        mfu_pct=30.0, h2d_ms_p50=1.0, final_loss=2.5,
        compile_s=20.0 if knobs.compile != "off" else None,
    )  # fmt: skip
    if knobs.nccl:
        r.backend, r.ranks, r.step_ms = "nccl", [{"nccl_env": dict(knobs.nccl)}], []
    return r


class _Profile:
    def __init__(self, burst, profiled_steps):
        self.burst, self.ok, self.status, self.error = burst, burst.ok, burst.status, None
        self.shares = type("Shares", (), {"steps": profiled_steps})()


class _Comm:
    def __init__(self, correct=(True, True)):
        self.ok, self.status, self.error = True, "ok", None
        self.rows = [{"size_bytes": 8192 * 2**i, "correct": c} for i, c in enumerate(correct)]

    def to_dict(self):
        return {"rows": self.rows}

    def table(self):
        return "all-reduce table"


def _tools(rows, burst=_good, profiled_steps=None, comm=None):
    def profile(workload, knobs, **kw):
        b = burst(workload, knobs, **kw)
        return _Profile(b, b.steps if profiled_steps is None else profiled_steps)

    return rows.Tools(burst=burst, profile=profile, comm=lambda n, **kw: comm or _Comm(),
                      device_count=lambda: 1)  # fmt: skip


def _run(rows, action, tools):
    run = rows.RowRun(None, 2.0, tools)
    action(run)
    return run


def test_every_row_passes_on_healthy_results(rows):
    """Each row's code runs end to end (no typo waits for the GPU) and passes on results a
    healthy GPU gives; the comm row prints the benchmark's table."""
    for row in rows.ROWS:
        run = _run(rows, row.run, _tools(rows))
        assert run.problems == [], (row.label, run.problems)
        assert run.checks, row.label
    assert _run(rows, rows.comm, _tools(rows)).text == ["all-reduce table"]


def test_compile_rows_fail_on_a_fallback_or_no_compile_time(rows):
    def burst(workload, knobs, **kw):
        r = _good(workload, knobs, **kw)
        if knobs.compile == "max-autotune":
            r.compile_s = 0.0
            r.no_effect["compile"] = "torch.compile fell back to eager: recompile limit"
        return r

    tools = _tools(rows, burst)
    assert _run(rows, rows.compile_burst("default"), tools).problems == []
    run = _run(rows, rows.compile_burst("max-autotune"), tools)
    assert run.problems == [
        "compile=max-autotune: compile_s > 0: compile_s=0.0",
        "compile=max-autotune: compiled: torch.compile fell back to eager: recompile limit",
    ]
    assert [r.knobs.precision for _, r in run.bursts] == ["tf32"]


def test_precisions_fail_when_tf32_is_no_faster_than_fp32_strict(rows):
    def burst(workload, knobs, **kw):
        r = _good(workload, knobs, **kw)
        r.samples_per_s = 100.0 if knobs.precision == "tf32" else r.samples_per_s
        return r

    run = _run(rows, rows.precisions, _tools(rows, burst))
    assert run.problems == ["tf32 >= 1.15x fp32-strict: tf32/fp32-strict = 1.00: TF32 did not act"]
    assert [label for label, _ in run.bursts] == ["default", "fp32-strict", "tf32", "bf16", "fp16"]


def test_the_burst_after_an_oom_must_use_a_clean_bursts_memory(rows):
    calls = []

    def burst(workload, knobs, **kw):
        calls.append(knobs.batch_size)
        r = _good(workload, knobs, **kw)
        if len(calls) == 3:
            r.peak_mem_mib = 1500.0  # what the failed burst left behind
        return r

    run = _run(rows, rows.oom_then_full_size, _tools(rows, burst))
    assert calls == [32, 8192, 32]
    assert run.problems == ["peak memory as a clean burst's: 1500 MiB after vs 1000 clean"]
    assert run.facts["peak_after_over_clean"] == 1.5


def test_the_torchrun_row_wants_nccl_on_cuda0(rows):
    def burst(workload, knobs, **kw):
        r = _good(workload, knobs, **kw)
        r.backend, r.device, r.ranks = "gloo", "cuda", [{"nccl_env": {}}]
        return r

    run = _run(rows, rows.torchrun_nccl, _tools(rows, burst))
    assert run.problems == ["backend nccl: backend=gloo", "device cuda:0: device=cuda",
                            "the rank saw NCCL_ALGO=Ring: saw {}"]  # fmt: skip


def test_a_profile_missing_a_step_fails(rows):
    run = _run(rows, rows.profiled, _tools(rows, profiled_steps=9))
    assert run.problems == ["profiled steps = burst steps: trace has 9 steps, the burst 10"]


def test_cudnn_rows_say_whether_the_ratio_depends_on_order(rows):
    order = iter([100.0, 110.0, 100.0, 100.0])  # off, on (on wins by 10%); on, off (a tie)

    def burst(workload, knobs, **kw):
        r = _good(workload, knobs, **kw)
        r.samples_per_s = next(order)
        return r

    run = _run(rows, rows.cudnn_both_orders, _tools(rows, burst))
    assert [r.knobs.cudnn_benchmark for _, r in run.bursts] == [False, True, True, False]
    assert run.facts["order_dependent"] is True
    assert "ORDER-DEPENDENT" in run.text[0]
    assert run.problems == [
        "order-independent: on/off 1.100 when off ran first, 1.000 when on ran first: 9.5% "
        "apart (tolerance 5%): drift between bursts exceeds the knob's effect"
    ]
    same = _run(rows, rows.cudnn_both_orders, _tools(rows))
    assert same.facts["order_dependent"] is False and same.problems == []


def test_the_first_sessions_cudnn_row_now_fails(rows):
    """The four bursts the first GPU session measured (4,306 / 3,990 / 3,819 / 3,816, off
    on on off): 7.7% apart, printed ORDER-DEPENDENT, and passed. Drift that large decides
    the knob's comparison, so the row fails now."""
    order = iter([4306.0, 3990.0, 3819.0, 3816.0])

    def burst(workload, knobs, **kw):
        r = _good(workload, knobs, **kw)
        r.samples_per_s = next(order)
        return r

    run = _run(rows, rows.cudnn_both_orders, _tools(rows, burst))
    assert run.facts["order_gap_pct"] == pytest.approx(7.7, abs=0.05)
    assert [p.split(":")[0] for p in run.problems] == ["order-independent"]


def test_grad_accum_and_nvml_rows_fail_with_reasons(rows):
    def burst(workload, knobs, **kw):
        r = _good(workload, knobs, **kw)
        r.samples = r.steps * knobs.batch_size  # counted one micro-batch per step
        r.telemetry, r.power_w = "unavailable", None
        return r

    accum = _run(rows, rows.grad_accum_fp16, _tools(rows, burst))
    assert accum.problems == ["samples = steps x 32 x 4: 320 samples in 10 steps"]
    nvml = _run(rows, rows.nvml_real_data, _tools(rows, burst))
    assert nvml.problems == ["telemetry nvml: telemetry=unavailable", "power_w > 0: power_w=None"]


def test_a_wrong_all_reduce_sum_fails_the_comm_row(rows):
    run = _run(rows, rows.comm, _tools(rows, comm=_Comm(correct=(True, False))))
    assert run.problems == ["every sum correct: wrong sums at [16384] bytes"]


# -- the table and the entry point -------------------------------------------------------------


def test_a_table_line_has_the_headers_columns(gpu_check, cpu_result):
    line = gpu_check.table_line("tiny: cpu", cpu_result, ["not suspect: x"])
    assert line.startswith("| tiny: cpu ") and line.endswith("| not suspect: x")
    assert line.count("|") == gpu_check.HEADER.count("|")


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA main() runs the whole check")
def test_without_cuda_it_says_so_and_fails(gpu_check, capsys):
    assert gpu_check.main(["--budget-s", "10"]) == 1
    assert "no CUDA device here" in capsys.readouterr().err


# -- the session script: tests/test_gpu_session.py ---------------------------------------------
