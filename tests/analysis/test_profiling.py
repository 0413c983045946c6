"""profile_burst: a burst under torch.profiler; time shares, operators, trace, nsys line."""

from __future__ import annotations

import itertools
import json
import os
import random
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import workbench as wb
from workbench.analysis.profile_tables import (
    DATA_MARK,
    STEP_MARK,
    WINDOW_MARK,
    _merge,
    _subtract,
    _total,
    time_shares,
    top_operators,
)
from workbench.analysis.profiling import _check_single_process, _Recorder, nsys_command
from workbench.core.errors import InputError
from workbench.core.knobs import KnobError
from workbench.engine.burst import BurstProgress
from workbench.engine.window import BurstWindow

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def cpu_profile(tiny_data, tmp_path_factory):
    """One real profiled cnn burst on the CPU, shared by the tests that read it."""
    trace = tmp_path_factory.mktemp("traces") / "cnn.json"
    umask = os.umask(0o022)  # the usual one: a plainly written trace would be world-readable
    try:
        return wb.profile_burst(
            "cnn",
            wb.Knobs(batch_size=8),
            seconds=0.3,
            min_steps=3,
            warmup_steps=1,
            device="cpu",
            data_dir=tiny_data,
            trace=trace,
        )
    finally:
        os.umask(umask)


def test_cpu_profile_names_real_operators(cpu_profile):
    p = cpu_profile
    assert p.ok, p.error
    ops = p.operators
    assert len(ops) > 5
    assert all("::" in name for name in ops["operator"])  # aten::..., autograd::...
    assert not any(n.startswith((DATA_MARK, "workbench.", "Optimizer.")) for n in ops["operator"])
    names = set(ops["operator"])
    assert names & {"aten::convolution_backward", "aten::mkldnn_convolution", "aten::convolution"}
    assert list(ops["self_ms"]) == sorted(ops["self_ms"], reverse=True)
    assert (ops["calls"] >= 1).all() and (ops["self_ms"] >= 0).all()
    assert ops["self_pct"].between(0, 100).all()
    assert ops["device_ms"].isna().all()  # no device timeline on a CPU: null, never 0
    assert p.top_operator == ops["operator"].iloc[0]


def test_cpu_time_shares_are_consistent(cpu_profile):
    s = cpu_profile.shares
    assert s.device_type == "cpu" and s.device_wait_pct is None
    parts = [s.data_pct, s.ops_pct, s.other_pct]
    assert all(0 <= x <= 100 for x in parts)
    assert sum(parts) == pytest.approx(100.0)
    assert s.device_busy_pct == pytest.approx(s.ops_pct)  # on a CPU the host is the device
    assert s.host_wait_pct == pytest.approx(s.data_pct)
    assert s.data_pct > 0  # num_workers=0: JPEGs are decoded in the training thread
    assert s.ops_pct > 10  # a convnet's forward and backward are real work
    assert s.steps >= 2 and s.window_ms > 0 and s.step_ms == pytest.approx(s.window_ms / s.steps)
    frame = cpu_profile.shares_frame()
    host = frame[frame["timeline"] == "host"]["pct"].dropna()
    assert host.sum() == pytest.approx(100.0)


def test_trace_is_valid_chrome_json_with_the_window_marked(cpu_profile):
    path = cpu_profile.trace_path
    assert path is not None and path.is_file() and path.suffix == ".json"
    events = json.loads(path.read_text())["traceEvents"]
    names = [e.get("name", "") for e in events]
    assert names.count(WINDOW_MARK) == 1
    steps = [n for n in names if n.startswith(STEP_MARK)]
    assert len(steps) == cpu_profile.shares.steps == cpu_profile.burst.steps  # every step
    assert any(e.get("cat") == "cpu_op" and e.get("ph") == "X" for e in events)
    assert any(n.startswith(DATA_MARK) for n in names)
    assert str(path) in cpu_profile.summary()


def test_the_trace_is_readable_by_its_owner_only(cpu_profile):
    """It names the user's code paths; Kineto writes it with the umask's mode (0644)."""
    assert stat.S_IMODE(cpu_profile.trace_path.stat().st_mode) == 0o600


def test_nsys_line_runs_the_same_burst(cpu_profile):
    line = cpu_profile.nsys_command
    assert line.startswith("nsys profile ")
    assert "python -m workbench burst --workload cnn" in line
    assert "--set batch_size=8" in line and "--seconds 0.3 --min-steps 3 --warmup-steps 1" in line
    assert "--device cpu" in line
    assert f"--output={cpu_profile.trace_path.with_suffix('')}" in line
    assert line in cpu_profile.summary()


def test_profile_chart_and_json(cpu_profile):
    spec = cpu_profile.chart().to_dict()
    assert len(spec["vconcat"]) == 2
    doc = json.loads(json.dumps(cpu_profile.to_dict(), allow_nan=False))
    assert doc["status"] == "ok" and doc["operators"][0]["operator"] == cpu_profile.top_operator
    assert doc["shares"]["device_wait_pct"] is None
    assert doc["trace_path"] == str(cpu_profile.trace_path)


def test_profiling_does_not_record_by_default(cpu_profile):
    assert cpu_profile.burst.id is None  # set only when the burst is written to the history


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [
        ({"knobs": wb.Knobs(world_size=2)}, "world_size"),
        ({"top": 0}, "top"),
        ({"min_steps": 0}, "min_steps"),
        ({"seconds": 0}, "seconds"),
        ({"trace": "trace.txt"}, "trace"),
    ],
)
def test_bad_input_names_the_knob(kwargs, knob, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as err:
        wb.profile_burst("cnn", **{"device": "cpu", **kwargs})
    assert err.value.name == knob
    assert not list(tmp_path.iterdir())  # refused before any work: nothing written


def test_nccl_variables_are_refused_on_a_gpu_only():
    knobs = wb.Knobs(nccl={"NCCL_ALGO": "Ring"})
    _check_single_process(knobs, torch.device("cpu"))  # no NCCL on a CPU: one process will do
    with pytest.raises(KnobError) as err:
        _check_single_process(knobs, torch.device("cuda"))
    assert err.value.knob == "nccl"


# -- the profiler's start: before the window, which it profiles whole --------------------------


def _spy_on_the_profiler(monkeypatch, log):
    """Log when torch.profiler prepares (Kineto/CUPTI start: the expensive part), starts and
    stops recording, on the host clock the burst uses."""
    for name in ("prepare_trace", "start_trace", "stop_trace"):
        real = getattr(torch.profiler.profile, name)

        def spy(self, *args, _real=real, _name=name, **kwargs):
            log.append((_name, time.perf_counter(), None))
            out = _real(self, *args, **kwargs)
            log.append((f"{_name} done", time.perf_counter(), None))
            return out

        monkeypatch.setattr(torch.profiler.profile, name, spy)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_profiler_starts_before_the_window_and_profiles_every_step(
    device, tiny_data, tmp_path, monkeypatch
):
    log: list = []
    _spy_on_the_profiler(monkeypatch, log)

    def progress(report: BurstProgress) -> None:
        log.append((report.phase, time.perf_counter(), report))

    p = wb.profile_burst("cnn", wb.Knobs(batch_size=8), seconds=0.2, min_steps=3,
                         warmup_steps=2, device=device, data_dir=tiny_data,
                         trace=tmp_path / "t.json", progress=progress)  # fmt: skip
    assert p.ok, p.error
    at = {name: t for name, t, _ in reversed(log)}  # first time each name was logged
    done = next(r for name, _, r in log if name == "done")  # sent once the window's clock stopped
    window_start = at["done"] - done.elapsed_s  # the burst's clock is perf_counter
    warmup = [t for name, t, r in log if name == "warmup"]
    # Kineto's start runs between the two warm-up steps, so the last one runs under the tracer
    assert warmup[0] <= at["prepare_trace"] and at["prepare_trace done"] <= warmup[1]
    assert at["start_trace done"] <= window_start  # recording starts before the clock does
    assert at["stop_trace"] >= at["done"]  # and stops after it stopped
    assert p.profiler_start_ms is not None and p.profiler_start_ms > 0
    events = json.loads(p.trace_path.read_text())["traceEvents"]
    marks = [e for e in events if e.get("cat") == "user_annotation"]
    assert len([e for e in marks if e["name"].startswith(STEP_MARK)]) == p.burst.steps
    assert p.shares.steps == p.burst.steps == done.steps  # the window's every step, once


def test_a_profiler_started_on_the_bursts_thread_is_ended_from_the_callers(capfd):
    """A failed burst sends no ``done``, so the caller stops the profiler, from another thread
    than the burst's own. torch finds no session of that thread's to stop there, and Kineto's
    stayed open (CUPTI tracing every later burst on a GPU) until the next profile cancelled it,
    which torch reports as a disable that found no session."""
    rec = _Recorder(
        torch.device("cpu"), BurstWindow(seconds=1.0, min_steps=1, warmup_steps=0), None
    )

    def burst_thread() -> None:
        rec(BurstProgress("setup", 0.0, 1.0, 0))  # prepared
        rec.window_edge()  # recording; then the step fails: no more reports

    thread = threading.Thread(target=burst_thread)
    thread.start()
    thread.join()
    rec.finish()
    capfd.readouterr()
    with torch.profiler.profile() as prof:  # the next profile here finds no session to cancel
        torch.mm(torch.ones(4, 4), torch.ones(4, 4))
    assert "no active profiling session" not in capfd.readouterr().err
    assert "aten::mm" in {e.key for e in prof.key_averages()}


def test_a_burst_that_fails_in_the_window_leaves_no_profiler_running(tmp_path, capfd):
    from workloads_for_tests import tensor_workload

    calls = itertools.count()

    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # real calls: set-up's early check, the warm-up step and the window's first step pass
        # (the FLOP count's calls on the meta device are not steps)
        if output.device.type != "meta" and next(calls) == 3:
            raise RuntimeError("the second step fails")
        return torch.nn.functional.cross_entropy(output, target)

    base = tensor_workload()
    failing = wb.Workload(name="fails", model=base.model, dataset=base.dataset, loss=loss)
    p = wb.profile_burst(failing, seconds=0.2, min_steps=3, warmup_steps=1, device="cpu",
                         trace=tmp_path / "t.json")  # fmt: skip
    assert p.status == "error" and "the second step fails" in p.error and p.shares is None
    capfd.readouterr()
    with torch.profiler.profile() as prof:  # finds no session left open to cancel
        torch.mm(torch.ones(4, 4), torch.ones(4, 4))
    assert "no active profiling session" not in capfd.readouterr().err
    assert "aten::mm" in {e.key for e in prof.key_averages()}


# -- time shares from a trace: the CUDA arithmetic, checked without a GPU ----------------------


def _kineto_cuda_events() -> list[dict]:
    """A CUDA trace as Kineto writes it (tests/fixtures/kineto_cuda_trace.json): three steps of
    1 ms in a 3 ms window, the last 0.1 ms its closing cudaDeviceSynchronize. Each step: 0.1 ms
    in the DataLoader, a copy and two forward kernels launched from the main thread, a
    backward kernel from the autograd thread, the optimizer's kernel; the device is busy
    0.15-0.9 ms of each step. Kineto's gpu_user_annotation twins of the step and optimizer
    ranges sit on the stream's row, spanning the work launched under them."""
    return json.loads((FIXTURES / "kineto_cuda_trace.json").read_text())["traceEvents"]


def test_kinetos_gpu_twins_of_the_step_marks_do_not_count_as_steps():
    events = _kineto_cuda_events()
    twins = {e["name"] for e in events if e.get("cat") == "gpu_user_annotation"}
    assert twins == {f"{STEP_MARK}0", f"{STEP_MARK}1", f"{STEP_MARK}2", "Optimizer.step#SGD.step"}
    s = time_shares(events, "cuda")
    assert s.steps == 3 and s.window_ms == pytest.approx(3.0)
    assert s.step_ms == pytest.approx(1.0)  # not 0.5: each step counted once
    assert s.data_pct == pytest.approx(10.0)
    assert s.device_wait_pct == pytest.approx(3.0)
    assert s.ops_pct == pytest.approx(52.0)  # 40 + 240 + 180 (autograd thread) + 60 us a step
    assert s.other_pct == pytest.approx(35.0)
    assert s.device_busy_pct == pytest.approx(75.0)  # twins are not device work either


def test_a_data_loader_ranges_gpu_twin_is_not_loading_time():
    """A collate_fn that runs kernels (num_workers=0) gives the DataLoader's range a twin on
    the device, later than the host's range: device time, not the host loading data."""
    next_batch = DATA_MARK + "_SingleProcessDataLoaderIter.__next__"
    events = [
        _x(WINDOW_MARK, "user_annotation", 0, 1000),
        _x(f"{STEP_MARK}0", "user_annotation", 0, 1000),
        _x(next_batch, "user_annotation", 0, 200),
        _x("cudaLaunchKernel", "cuda_runtime", 100, 10),
        _x("aten::mm", "cpu_op", 300, 400),
        _x("collate kernel", "kernel", 250, 200, tid=7),
        _x(next_batch, "gpu_user_annotation", 250, 200, tid=7),
    ]
    s = time_shares(events, "cuda")
    assert s.data_pct == pytest.approx(20.0)  # the host's 0..200 only
    assert s.ops_pct == pytest.approx(40.0)  # 300..700: none of it taken for loading data
    assert s.steps == 1 and s.device_busy_pct == pytest.approx(20.0)


def _x(name, cat, ts, dur, tid=1):
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_gpu_time_shares_from_a_handmade_trace():
    events = [
        _x(WINDOW_MARK, "user_annotation", 0, 1000),
        _x(f"{STEP_MARK}0", "user_annotation", 0, 500),
        _x(f"{STEP_MARK}1", "user_annotation", 500, 400),
        _x(DATA_MARK + "_MultiProcessingDataLoaderIter.__next__", "user_annotation", 0, 100),
        _x("aten::copy_", "cpu_op", 50, 100),  # half inside the data wait: counted as data
        _x("aten::conv2d", "cpu_op", 150, 150),
        _x("autograd::engine::evaluate_function", "cpu_op", 200, 150, tid=2),  # other thread
        _x("cudaLaunchKernel", "cuda_runtime", 160, 10),  # not a sync: part of the operator
        _x("aten::item", "cpu_op", 580, 330),  # encloses a sync: only its own part is ops
        _x("cudaStreamSynchronize", "cuda_runtime", 600, 300),
        _x("kernel_a", "kernel", 150, 350),
        _x("kernel_b", "kernel", 450, 250),  # overlaps kernel_a: counted once
        _x("Memcpy HtoD", "gpu_memcpy", 950, 150),  # runs past the window: clipped
        _x("step on the GPU", "gpu_user_annotation", 0, 1000),  # an annotation, not work
        _x("before the window", "kernel", -500, 400),
    ]
    s = time_shares(events, "cuda")
    assert s.window_ms == pytest.approx(1.0) and s.steps == 2
    assert s.data_pct == pytest.approx(10.0)
    assert s.device_wait_pct == pytest.approx(30.0)
    # ops: 100..350 (copy_ past the data wait, conv2d, the autograd thread) + 580..600 + 900..910
    assert s.ops_pct == pytest.approx(28.0)
    assert s.other_pct == pytest.approx(32.0)
    assert s.device_busy_pct == pytest.approx(60.0)  # 150..700 and 950..1000
    assert s.host_wait_pct == pytest.approx(40.0)
    frame = s.frame()
    assert set(frame["timeline"]) == {"host", "device"}
    assert frame[frame["timeline"] == "device"]["pct"].sum() == pytest.approx(100.0)


def test_a_cuda_trace_without_gpu_activity_has_unknown_device_shares():
    events = [_x(WINDOW_MARK, "user_annotation", 0, 100), _x("aten::mm", "cpu_op", 0, 50)]
    s = time_shares(events, "cuda")
    assert s.device_busy_pct is None  # CUPTI saw nothing: unknown, never 0
    assert "device idle" not in set(s.frame()["part"])


def test_cpu_time_shares_ignore_device_categories():
    events = [
        _x(WINDOW_MARK, "user_annotation", 0, 200),
        _x("aten::mm", "cpu_op", 0, 50),
        _x("cudaDeviceSynchronize", "cuda_runtime", 100, 50),
    ]
    s = time_shares(events, "cpu")
    assert s.device_wait_pct is None and s.ops_pct == pytest.approx(25.0)
    assert s.device_busy_pct == pytest.approx(25.0) and s.other_pct == pytest.approx(75.0)


def test_time_shares_without_events_is_an_error():
    with pytest.raises(ValueError, match="no profiled window"):
        time_shares([], "cpu")


def test_interval_arithmetic_matches_brute_force():
    rng = random.Random(0)
    for _ in range(300):
        a = [(s, s + rng.randint(0, 8)) for s in (rng.randint(0, 40) for _ in range(6))]
        b = [(s, s + rng.randint(0, 8)) for s in (rng.randint(0, 40) for _ in range(6))]
        cells_a = {t for s, e in a for t in range(s, e)}
        cells_b = {t for s, e in b for t in range(s, e)}
        assert _total(_merge(a)) == len(cells_a)
        diff = _subtract(_merge(a), _merge(b))
        assert _total(diff) == len(cells_a - cells_b)
        assert all(e > s for s, e in diff)
        assert all(x[1] <= y[0] for x, y in itertools.pairwise(diff))


# -- the operator table on CUDA: sorted by device time, kernels and annotations left out -------


def _avg(key, self_us, device_us, count=1, annotation=False, device_type=None):
    return SimpleNamespace(
        key=key,
        count=count,
        self_cpu_time_total=self_us,
        self_device_time_total=device_us,
        is_user_annotation=annotation,
        device_type=device_type or torch.autograd.DeviceType.CPU,
    )


def test_top_operators_on_cuda_sort_by_device_time():
    averages = [
        _avg("aten::addmm", 500, 9000, count=10),
        _avg("aten::add_", 4000, 300, count=50),
        _avg(
            "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
            90000,
            0,
            annotation=True,
        ),
        _avg("ampere_sgemm_128x64_tn", 0, 9000, device_type=torch.autograd.DeviceType.CUDA),
        _avg(f"{STEP_MARK}3", 100000, 9300),
    ]
    ops = top_operators(averages, cuda=True, window_ms=100.0)
    assert list(ops["operator"]) == ["aten::addmm", "aten::add_"]
    assert ops.attrs["sort_by"] == "device_ms"
    assert ops["device_ms"].tolist() == [9.0, 0.3] and ops["device_pct"].tolist() == [9.0, 0.3]
    assert ops["self_pct"].tolist() == [0.5, 4.0]


# -- the nsys line for other workloads --------------------------------------------------------


def test_nsys_line_for_a_script_or_an_unnamed_workload():
    k = wb.Knobs(num_workers=2, pin_memory=True)
    line = nsys_command(None, k, script="train.py --config tuned.yaml", output="out/p")
    assert line.endswith("python train.py --config tuned.yaml")
    assert "--output=out/p" in line and "--trace=cuda,nvtx,osrt,cudnn,cublas" in line
    assert nsys_command(None, k).endswith("python YOUR_TRAINING_SCRIPT.py")
    named = nsys_command("gpt", k, window=BurstWindow(seconds=2))
    assert "--set num_workers=2 --set pin_memory=true --seconds 2 --min-steps 5" in named


# -- the command line ---------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", "profile", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_cli_profile_json(tiny_data, tmp_path):
    trace = tmp_path / "p.json"
    p = _cli("--workload", "cnn", "--data", str(tiny_data), "--device", "cpu", "--seconds", "0.2",
             "--set", "batch_size=8", "--trace", str(trace), "--top", "5", "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["status"] == "ok" and len(doc["operators"]) == 5
    assert doc["trace_path"] == str(trace) and trace.is_file()
    assert doc["nsys_command"].startswith("nsys profile")


def test_cli_profile_bad_input_is_one_line_exit_2():
    p = _cli("--set", "world_size=2", "--device", "cpu")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "world_size=2 is not allowed" in p.stderr


def test_profiling_imports_without_the_ui_packages():
    from blocked_imports import run_with_ui_blocked

    doc = run_with_ui_blocked(
        """
        import workbench as wb
        out["has"] = callable(wb.profile_burst)
        """
    )
    assert doc == {"has": True, "leaked": []}


# -- on a GPU: the CUDA branch for real ---------------------------------------------------------


@pytest.mark.gpu
def test_gpu_profile_sees_kernels(tiny_data, tmp_path):
    p = wb.profile_burst("cnn", wb.Knobs(batch_size=16), seconds=0.5, device="cuda",
                         data_dir=tiny_data, trace=tmp_path / "gpu.json")  # fmt: skip
    assert p.ok, p.error
    s = p.shares
    assert s.device_type == "cuda" and s.device_wait_pct is not None
    assert 0 < s.device_busy_pct <= 100
    parts = [s.data_pct, s.device_wait_pct, s.ops_pct, s.other_pct]
    assert sum(parts) == pytest.approx(100.0)
    assert p.operators.attrs["sort_by"] == "device_ms" and p.operators["device_ms"].iloc[0] > 0
    events = json.loads(p.trace_path.read_text())["traceEvents"]
    assert any(e.get("cat") == "kernel" for e in events)
    steps = [e for e in events if str(e.get("name", "")).startswith(STEP_MARK)]
    host = [e for e in steps if e.get("cat") == "user_annotation"]
    assert s.steps == len(host) == p.burst.steps  # Kineto's gpu twins in `steps` not counted
    assert s.step_ms == pytest.approx(s.window_ms / p.burst.steps)


def test_profile_chart_is_a_pure_function_of_its_frames():
    from workbench.analysis.profile_tables import empty_operators, empty_shares
    from workbench.notebook import plots

    empty = plots.profile(empty_operators(), empty_shares()).to_dict()
    assert len(empty["vconcat"]) == 2  # placeholders, not an error
    ops = top_operators([_avg("aten::mm", 100, 5000), _avg("aten::add_", 900, 100)],
                        cuda=True, window_ms=10.0)  # fmt: skip
    shares = time_shares(
        [_x(WINDOW_MARK, "user_annotation", 0, 100), _x("k", "kernel", 0, 40)], "cuda"
    ).frame()
    spec = plots.profile(ops, shares).to_dict()
    bars = spec["vconcat"][1]
    assert bars["encoding"]["x"]["title"] == "device ms"
    rows = spec["datasets"][bars["data"]["name"]]
    assert [r["operator"] for r in rows] == ["aten::mm", "aten::add_"]
    share_rows = spec["datasets"][spec["vconcat"][0]["data"]["name"]]
    parts = {r["part"]: r["pct"] for r in share_rows}
    assert parts["device busy"] == pytest.approx(40.0) and parts["device idle"] == pytest.approx(
        60.0
    )


def test_a_profiled_burst_records_the_kernels_environment(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    p = wb.profile_burst("cnn", wb.Knobs(batch_size=8), seconds=0.2, min_steps=2, warmup_steps=1,
                         device="cpu", data_dir=tiny_data, trace=tmp_path / "t.json")  # fmt: skip
    assert p.burst.ambient_env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert any(n.startswith("PYTORCH_CUDA_ALLOC_CONF=") for n in p.burst.ambient_notes)
