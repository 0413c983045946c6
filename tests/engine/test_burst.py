import contextlib
import os
import shutil
import signal
import threading
import time

import psutil
import pytest
import torch
from workloads_for_tests import (
    crashing_workload,
    eager_only_workload,
    hoarding_workload,
    hungry_workload,
    layout_workload,
    stuck_workload,
    tensor_workload,
)

from workbench import Knobs, Workload, run_burst
from workbench.core.errors import InputError
from workbench.core.knobs import KnobError
from workbench.engine.burst import BurstInterrupted, BurstPlan, measure_here
from workbench.engine.coordinator import Solo
from workbench.engine.failures import describe_error, is_oom_error
from workbench.engine.window import BurstWindow
from workbench.history.store import open_store

FAST = {"seconds": 0.3, "warmup_steps": 1, "record": False}


def _children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()]


def test_burst_on_cpu_fills_contract_fields(store_path):
    r = run_burst(tensor_workload(), Knobs(batch_size=16), seconds=0.3, store=store_path)
    assert r.status == "ok" and r.error is None
    assert r.device == "cpu" and r.workload == "tiny"
    assert r.steps >= 5 and r.samples == r.steps * 16
    assert r.measured_s >= 0.3
    assert r.samples_per_s == pytest.approx(r.samples / r.measured_s)
    assert r.step_ms_p50 > 0 and r.step_ms_iqr >= 0 and isinstance(r.noisy, bool)
    assert len(r.step_ms) == r.steps
    assert 0 <= r.data_wait_pct <= 100
    assert r.peak_mem_mib > 50  # RSS of a process with torch loaded
    assert r.peak_reserved_mib is None and r.gpu_util_pct is None  # unknown is None, not 0
    assert r.mfu_pct is None  # no peak FLOP/s for a CPU: never made up
    # forward 2*(16*32 + 32*2) multiply-adds; backward: both weight grads, and the input grad
    # of the second layer only (the batch itself needs no gradient)
    assert r.flops_per_sample == 2 * 2 * (16 * 32 + 32 * 2) + 2 * 32 * 2
    assert r.achieved_tflops > 0
    assert r.warmup_s > 0 and r.setup_s >= 0 and r.compile_s is None
    assert r.telemetry == "cpu" and r.cpu_util_pct is not None
    assert r.versions["torch"] == torch.__version__
    rows = open_store(store_path).records()
    assert [row["id"] for row in rows] == [r.id]
    assert rows[0]["samples_per_s"] == pytest.approx(r.samples_per_s)


def test_min_steps_and_time_box():
    r = run_burst(tensor_workload(), Knobs(batch_size=8), seconds=1e-4, min_steps=7, **{
        k: v for k, v in FAST.items() if k != "seconds"})  # fmt: skip
    assert r.steps == 7


def test_fake_clock_makes_the_window_deterministic():
    ticks = iter(range(10**6))

    def clock() -> float:  # every read advances 10 ms
        return next(ticks) * 0.01

    r = run_burst(tensor_workload(), Knobs(batch_size=8), clock=clock, seconds=1.0,
                  min_steps=1, warmup_steps=1, record=False)  # fmt: skip
    # the window closes at the first step boundary at or after 1.0 s of (fake) time
    assert 1.0 <= r.measured_s < 1.2
    assert r.samples_per_s == pytest.approx(r.samples / r.measured_s)
    assert r.step_ms_p50 == pytest.approx(r.step_ms[0]) and r.step_ms_iqr == pytest.approx(0)
    assert r.noisy is False


def test_grad_accum_counts_every_micro_batch():
    r = run_burst(tensor_workload(), Knobs(batch_size=8, grad_accum=3), **FAST)
    assert r.samples == r.steps * 8 * 3


def test_the_synthetic_loader_leaves_out_the_wait_for_decoding_jpegs(tiny_data):
    """The compute-only ceiling replays a resident batch: its steps wait for no data, where
    decoding full-size JPEGs in the loop (no workers) is waited for at every step. Judged by
    each burst's own split of its steps, not by comparing two bursts' samples/s: a machine
    busy with other work slows both, by amounts no test can hold still."""
    common = {"data_dir": tiny_data, "seconds": 0.3, "warmup_steps": 1, "record": False}
    real = run_burst("cnn", Knobs(batch_size=8), **common)
    ceiling = run_burst("cnn", Knobs(batch_size=8, loader="synthetic"), **common)
    assert real.ok and ceiling.ok
    assert ceiling.data_wait_pct < 1 < real.data_wait_pct


def test_workers_and_prefetch_run_and_leave_no_process(tiny_data):
    k = Knobs(batch_size=8, num_workers=2, prefetch_factor=2, persistent_workers=True)
    r = run_burst("cnn", k, data_dir=tiny_data, seconds=0.5, warmup_steps=1, record=False)
    assert r.ok, r.error
    # 36 images / 8 per batch (drop_last): 4 batches an epoch, a short epoch of a sample set,
    # so one iterator runs across the epochs (workbench.engine.epochs) and never restarts.
    assert r.steps >= 4
    assert r.loader_epochs == 0 and r.short_epochs["handling"] == "continued", r.short_epochs
    assert _children() == []


def test_oom_is_a_result_and_the_next_burst_runs(store_path):
    before = len(open_store(store_path))
    r = run_burst(hungry_workload(limit=16), Knobs(batch_size=32), seconds=0.2, store=store_path)
    assert r.status == "oom"
    assert "allocate" in r.error
    assert r.samples_per_s is None and r.steps == 0
    again = run_burst(hungry_workload(limit=16), Knobs(batch_size=16), seconds=0.2,
                      store=store_path)  # fmt: skip
    assert again.ok
    statuses = [row["status"] for row in open_store(store_path).records()]
    assert statuses[before:] == ["oom", "ok"]


def test_an_oom_holding_real_memory_gives_it_back_and_the_same_size_runs_again():
    # The failing forward holds 512 MiB of touched memory when the allocator refuses; the
    # traceback keeps that frame alive until the burst lets go of it.
    wl = hoarding_workload(mib=512)
    rss_before_mib = psutil.Process().memory_info().rss / 2**20
    host_before_mib = _host_mib()  # in the burst's own measure (PSS on Linux), not RSS
    r = run_burst(wl, Knobs(batch_size=16), **FAST)
    assert r.status == "oom", r.error
    assert r.peak_mem_mib > host_before_mib + 400  # it really held the memory when it failed
    assert psutil.Process().memory_info().rss / 2**20 < rss_before_mib + 150  # given back
    again = run_burst(wl, Knobs(batch_size=16), **FAST)  # the same batch size: full size
    assert again.ok, again.error
    assert again.peak_mem_mib > host_before_mib + 400


def _host_mib() -> float:
    """This process's memory as a CPU burst's peak_mem_mib counts it: PSS where Linux gives it
    (shared library pages split with every process that maps them), else RSS."""
    info = psutil.Process().memory_full_info()
    return getattr(info, "pss", info.rss) / 2**20


def test_worker_crash_is_an_error_result_and_no_orphans():
    r = run_burst(crashing_workload(), Knobs(batch_size=4, num_workers=1), **FAST)
    assert r.status == "error"
    assert "worker" in r.error.lower()
    assert _children() == []


def test_worker_crash_on_a_background_thread_is_seen_within_seconds():
    # The panel runs bursts off the main thread, where torch's SIGCHLD handler does not exist:
    # a dead worker is noticed only when a wait for data times out (it took 120 s).
    out = {}

    def burst():
        t0 = time.perf_counter()
        out["r"] = run_burst(crashing_workload(), Knobs(batch_size=4, num_workers=1), **FAST)
        out["s"] = time.perf_counter() - t0

    t = threading.Thread(target=burst)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive()
    assert out["r"].status == "error" and "exited unexpectedly" in out["r"].error
    assert out["s"] < 15
    assert _children() == []


def test_a_hung_worker_becomes_an_error_after_the_timeout(monkeypatch):
    from workbench.engine.loaders import torch_loader

    monkeypatch.setattr(torch_loader, "WORKER_POLL_S", 0.5)
    monkeypatch.setattr(torch_loader, "WORKER_TIMEOUT_S", 2.0)
    t0 = time.perf_counter()
    r = run_burst(stuck_workload(), Knobs(batch_size=4, num_workers=1), **FAST)
    assert r.status == "error" and "no batch from the DataLoader's workers for 2 s" in r.error
    assert time.perf_counter() - t0 < 30  # 2 s of waiting, then the stuck worker is stopped
    assert _children() == []


def test_corrupt_jpeg_is_an_error_naming_the_file(tiny_data, tmp_path):
    folder = tmp_path / "imgs"
    shutil.copytree(tiny_data / "images", folder)
    victim = sorted(folder.rglob("*.jpg"))[0]
    victim.write_bytes(victim.read_bytes()[:300])
    for workers in (0, 1):
        r = run_burst("cnn", Knobs(batch_size=12, num_workers=workers), data_dir=folder,
                      seconds=0.5, warmup_steps=1, record=False)  # fmt: skip
        assert r.status == "error"
        assert str(victim) in r.error
    assert _children() == []


def test_cancel_event_stops_at_a_step_boundary():
    cancel = threading.Event()
    seen = []

    def progress(p):
        seen.append(p)
        if p.phase == "measuring" and p.steps == 3:
            threading.Thread(target=cancel.set).start()  # as the panel would: another thread

    t0 = time.perf_counter()
    r = run_burst(tensor_workload(), Knobs(batch_size=8), seconds=30, cancel=cancel,
                  progress=progress, warmup_steps=1, record=False)  # fmt: skip
    assert r.status == "cancelled" and "stopped" in r.error
    assert time.perf_counter() - t0 < 10
    assert 3 <= r.steps <= 5 and r.samples_per_s is not None
    assert [p.phase for p in seen][:2] == ["setup", "warmup"]


def test_ctrl_c_stops_at_step_boundary_and_shuts_workers_down(tiny_data, store_path):
    sent = []

    def interrupt_once_measuring(p):  # no timer: nothing can fire later, into another test
        if p.phase == "measuring" and p.steps == 2 and not sent:
            sent.append(os.kill(os.getpid(), signal.SIGINT))

    with pytest.raises(KeyboardInterrupt) as stopped:  # BurstInterrupted is one
        run_burst("cnn", Knobs(batch_size=4, num_workers=2), data_dir=tiny_data, seconds=60,
                  warmup_steps=1, store=store_path,
                  progress=interrupt_once_measuring)  # fmt: skip
    assert stopped.value.result.steps <= 4  # stopped at a step boundary soon after
    assert _children() == []
    assert open_store(store_path).records()[-1]["status"] == "cancelled"
    # the interrupt carries the stopped burst: a caller running many bursts keeps it
    assert isinstance(stopped.value, BurstInterrupted)
    assert stopped.value.result.status == "cancelled"
    assert stopped.value.result.id == open_store(store_path).records()[-1]["id"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_no_effect_reports_knobs_that_cannot_act_on_cpu():
    k = Knobs(batch_size=8, pin_memory=True, precision="tf32", cudnn_benchmark=True,
              nccl={"NCCL_ALGO": "Ring"})  # fmt: skip
    r = run_burst(tensor_workload(), k, **FAST)
    assert r.ok
    assert set(r.no_effect) == {"pin_memory", "precision", "cudnn_benchmark", "nccl"}
    assert "CPU" in r.no_effect["pin_memory"]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_autocast_precisions_run_on_cpu(precision):
    r = run_burst(tensor_workload(), Knobs(batch_size=8, precision=precision), **FAST)
    assert r.ok, r.error
    assert "precision" not in r.no_effect
    assert r.final_loss is not None and r.final_loss == r.final_loss  # finite, not NaN


def test_channels_last_converts_inputs():
    from workloads_for_tests import _Layout

    _Layout.seen.clear()
    run_burst(layout_workload(), Knobs(batch_size=8, channels_last=True), **FAST)
    assert _Layout.seen and all(_Layout.seen)
    _Layout.seen.clear()
    run_burst(layout_workload(), Knobs(batch_size=8), **FAST)
    assert not any(_Layout.seen)


@pytest.mark.parametrize("channels_last", [True, False])
def test_the_synthetic_ceiling_feeds_the_same_layout(channels_last):
    # The compute-only ceiling must run the kernels the full pipeline runs: NHWC inputs when
    # channels_last is on, as the DataLoader path delivers them.
    from workloads_for_tests import _Layout

    _Layout.seen.clear()
    knobs = Knobs(batch_size=8, channels_last=channels_last, loader="synthetic")
    assert run_burst(layout_workload(), knobs, **FAST).ok
    assert _Layout.seen and all(seen == channels_last for seen in _Layout.seen)


def test_a_factory_function_is_a_workload():
    # A user's factory (not registered, not a Workload yet) runs in this process like a name.
    r = run_burst(tensor_workload, Knobs(batch_size=16), **FAST)
    assert r.ok, r.error
    assert r.workload == "tiny" and r.samples == r.steps * 16


def test_compile_time_is_outside_the_window():
    r = run_burst(tensor_workload(), Knobs(batch_size=8, compile="default"), seconds=0.3,
                  warmup_steps=2, record=False)  # fmt: skip
    assert r.ok, r.error
    assert r.compile_s is not None and r.compile_s > 0.2
    assert r.compile_s > 20 * r.step_ms_p50 / 1e3


def test_token_workload_reports_tokens_per_s(tiny_data):
    from workbench.engine.workloads.gpt import GPTShape, gpt

    wl = gpt(tiny_data, shape=GPTShape(block=32, layers=1, heads=2, width=32))
    r = run_burst(wl, Knobs(batch_size=4), **FAST)
    assert r.ok, r.error
    assert r.tokens_per_s == pytest.approx(r.samples_per_s * 32)
    assert r.flops_per_sample > 6 * 32 * 32 * 32  # at least the matmuls of one layer


@pytest.mark.parametrize("loader", ["torch", "synthetic"])
def test_a_batch_bigger_than_the_dataset_is_a_result_that_names_the_knob(loader):
    # found when the data is read, so a sweep or tune records it and goes on
    r = run_burst(tensor_workload(n=24), Knobs(batch_size=32, loader=loader), **FAST)
    assert r.status == "error" and r.bad_knob == "batch_size"
    assert r.error == "KnobError: batch_size=32 is not allowed: the dataset has only 24 samples"
    assert run_burst(tensor_workload(n=24), Knobs(batch_size=24, loader=loader), **FAST).ok


def test_bad_arguments_raise_before_any_work(tiny_data, tmp_path):
    with pytest.raises(InputError, match="seconds=0 is not allowed"):
        run_burst(tensor_workload(), seconds=0)
    with pytest.raises(ValueError, match="workload='nope' is not allowed: one of cnn"):
        run_burst("nope")
    with pytest.raises(ValueError, match="does not exist"):
        run_burst("cnn", data_dir=tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no images in class sub-folders"):
        run_burst("cnn", data_dir=tmp_path / "empty")
    with pytest.raises(KnobError, match="world_size"):
        run_burst(tensor_workload(), Knobs(world_size=64))  # more ranks than CPU cores


def test_backend_flags_are_restored_after_a_burst():
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark
    run_burst(tensor_workload(), Knobs(precision="tf32", cudnn_benchmark=True), **FAST)
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark) == before


def test_error_helpers():
    assert is_oom_error(torch.OutOfMemoryError("CUDA out of memory"))
    assert is_oom_error(RuntimeError("DefaultCPUAllocator: can't allocate memory"))
    assert not is_oom_error(RuntimeError("shape mismatch"))
    wrapped = ValueError(
        "Caught DataError in DataLoader worker process 0.\nOriginal Traceback (most recent "
        "call last):\n  File x\nworkbench.engine.datasets.DataError: corrupt or unreadable "
        "image /a/b.jpg"
    )
    assert describe_error(wrapped) == (
        "workbench.engine.datasets.DataError: corrupt or unreadable image /a/b.jpg"
    )
    assert describe_error(RuntimeError("boom")) == "RuntimeError: boom"


@pytest.mark.gpu
def test_gpu_burst_precisions_and_memory():
    for precision in ("default", "fp32-strict", "tf32", "bf16", "fp16"):
        r = run_burst("cnn", Knobs(batch_size=64, precision=precision, pin_memory=True),
                      seconds=1.0, record=False)  # fmt: skip
        assert r.ok, r.error
        assert r.peak_mem_mib > 0 and r.peak_reserved_mib >= r.peak_mem_mib
        assert r.h2d_ms_p50 is not None and "pin_memory" not in r.no_effect


@pytest.mark.gpu
def test_gpu_oom_frees_memory_for_the_next_burst():
    # gpt's activations at batch 8192 in fp32 are several hundred GiB: more than any GPU has,
    # while the default token file still holds more than one batch (a batch larger than the
    # dataset would be a data error, not an OOM).
    before_mib = torch.cuda.memory_allocated() / 2**20
    r = run_burst("gpt", Knobs(batch_size=8192, precision="fp32-strict"), seconds=1.0, record=False)
    assert r.status == "oom", r.error
    assert torch.cuda.memory_allocated() / 2**20 < before_mib + 64
    again = run_burst("gpt", Knobs(batch_size=32), seconds=1.0, record=False)
    assert again.ok, again.error
    ref = run_burst("gpt", Knobs(batch_size=32), seconds=1.0, record=False)
    # "full size again": the burst after an OOM uses the memory a fresh one does
    assert again.peak_mem_mib == pytest.approx(ref.peak_mem_mib, rel=0.1)


@pytest.mark.gpu
def test_gpu_allocator_refusal_is_an_oom_result():
    r = run_burst(hungry_workload(16), Knobs(batch_size=32), device="cuda", **FAST)
    assert r.status == "oom" and "memory" in r.error.lower()
    assert run_burst(hungry_workload(16), Knobs(batch_size=8), device="cuda", **FAST).ok


class _CountingDDP(torch.nn.Module):
    """Stands in for DDP: records, per forward, whether gradients would be all-reduced."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module, self.synced, self._skip = module, [], False

    def forward(self, x):
        self.synced.append(not self._skip)
        return self.module(x)

    @contextlib.contextmanager
    def no_sync(self):
        self._skip = True
        try:
            yield
        finally:
            self._skip = False


class _WrappingCoordinator(Solo):
    def __init__(self):
        self.wrapped: list[_CountingDDP] = []

    def wrap_model(self, model):
        self.wrapped.append(_CountingDDP(model))
        return self.wrapped[-1]


@pytest.mark.parametrize(
    ("grad_accum", "static_graph", "pattern"),
    [(3, False, [False, False, True]), (1, False, [True]), (3, True, [True, True, True])],
)
def test_ddp_all_reduces_once_per_optimizer_step(grad_accum, static_graph, pattern):
    # As a training loop does with no_sync: the micro-batches before the last skip the
    # all-reduce (except with static_graph, which DDP does not allow under no_sync).
    coord = _WrappingCoordinator()
    window = BurstWindow(seconds=0.2, min_steps=2, warmup_steps=1)
    plan = BurstPlan(window, threading.Event(), None, time.perf_counter, coord)
    knobs = Knobs(batch_size=8, grad_accum=grad_accum, static_graph=static_graph)
    assert measure_here(tensor_workload(), knobs, torch.device("cpu"), plan).ok
    synced = coord.wrapped[0].synced
    assert len(synced) % grad_accum == 0 and len(synced) >= 3 * grad_accum
    assert synced == pattern * (len(synced) // grad_accum)


def test_a_cpu_burst_runs_on_the_callers_thread_as_the_users_loop_would():
    # The user's loop runs on the main thread; a fresh thread meets OpenMP otherwise (1.4x on
    # a 2-core machine: workbench.engine.burst_thread).
    threads: list[threading.Thread] = []

    def note_thread(p):
        threads.append(threading.current_thread())

    assert run_burst(tensor_workload(), Knobs(batch_size=8), progress=note_thread, **FAST).ok
    assert threads and set(threads) == {threading.current_thread()}


def test_every_gpu_burst_asks_for_a_fresh_thread(monkeypatch):
    # cuDNN's plan cache is thread-local and blind to cudnn.benchmark: a new thread per GPU
    # burst keeps one burst's plans from deciding the next one's. The burst hands its device
    # type to run_as_production, which gives a "cuda" one a fresh thread (test_burst_thread).
    from workbench.engine import burst as burst_module

    seen: list[str] = []
    real = burst_module.run_as_production

    def spy(run, stop, device_type):
        seen.append(device_type)
        return real(run, stop, device_type)

    monkeypatch.setattr(burst_module, "run_as_production", spy)
    assert run_burst(tensor_workload(), Knobs(batch_size=8), **FAST).ok
    assert seen == ["cpu"]


def test_the_flop_sample_holds_no_batch():
    from workbench.engine.batches import flop_rows, sample_rule

    x, y = torch.randn(64, 16), torch.randint(0, 2, (64,))
    (sx, sy), samples = flop_rows((x, y), sample_rule((x, y)), meta=True)
    assert samples == 2
    assert sx.device.type == sy.device.type == "meta"  # a view x[:2] keeps all 64 alive
    assert sx.shape == (2, 16) and sy.shape == (2,) and sx.dtype == x.dtype


def test_two_compile_bursts_in_a_row_both_compile():
    # Without a clean compiler the second reuses the first's compiled code: no graph, and a
    # compile_s that measures nothing.
    window = {"seconds": 0.3, "warmup_steps": 2, "record": False}
    runs = [run_burst(tensor_workload(), Knobs(batch_size=b, compile="default"), **window)
            for b in (8, 8)]  # fmt: skip
    for r in runs:
        assert r.ok, r.error
        assert r.compile_graphs >= 1 and "compile" not in r.no_effect
        assert r.compile_s > 0  # Inductor's on-disk cache can make a recompile quick
        assert r.compile_window_graphs == 0 and r.suspect == []


def test_a_compile_that_captured_nothing_says_it_ran_eagerly():
    r = run_burst(eager_only_workload(), Knobs(batch_size=8, compile="default"), **FAST)
    assert r.ok, r.error
    assert r.compile_graphs == 0
    assert r.no_effect["compile"].startswith("torch.compile fell back to eager")


def test_a_burst_whose_clocks_disagree_is_suspect(monkeypatch):
    # The window's clock and the per-step clock are two clocks on a GPU (host and CUDA
    # events): break the per-step one and the burst must say so.
    from workbench.engine.timing import StepTimer

    real_finish = StepTimer.finish

    def half_speed_events(self):
        samples = real_finish(self)
        samples.step_ms = [ms / 2 for ms in samples.step_ms]
        return samples

    monkeypatch.setattr(StepTimer, "finish", half_speed_events)
    r = run_burst(tensor_workload(), Knobs(batch_size=8), **FAST)
    assert r.ok and any("step times add up" in s for s in r.suspect), r.suspect
    assert "SUSPECT" in r.summary()


def test_an_honest_burst_passes_every_self_check():
    r = run_burst(tensor_workload(), Knobs(batch_size=8), **FAST)
    assert r.ok and r.suspect == []


def test_noisy_steps_set_the_noisy_flag():
    # a swappable clock with seeded noise, as torch.utils.benchmark tests its timer
    import random

    rng, now = random.Random(0), [0.0]

    def jittery() -> float:
        now[0] += rng.choice([0.001, 0.02])
        return now[0]

    r = run_burst(tensor_workload(), Knobs(batch_size=8), clock=jittery, seconds=1.0,
                  min_steps=20, warmup_steps=1, record=False)  # fmt: skip
    assert r.noisy is True and r.step_ms_iqr / r.step_ms_p50 > 0.10
    assert "NOISY" in r.summary()


def test_the_kernels_own_environment_is_recorded_in_the_result_and_the_saved_config(
    tmp_path, monkeypatch
):
    # An ambient variable shapes a burst without being a knob: the result says so, and so does
    # a config saved from it (with a warning); a knob-set one is not reported as ambient.
    import warnings

    import yaml

    from workbench import load_config, save_config
    from workbench.config.saved import ConfigWarning

    monkeypatch.setenv("NCCL_ALGO", "Tree")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("NCCL_PROTO", "Simple")
    knobs = Knobs(batch_size=16, nccl={"NCCL_PROTO": "LL"})
    r = run_burst(tensor_workload(), knobs, **FAST)
    assert r.status == "ok", r.error
    assert r.ambient_env["NCCL_ALGO"] == "Tree"
    assert r.ambient_env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "NCCL_PROTO" not in r.ambient_env  # the knob's, not the environment's
    said = {n.split("=")[0]: n for n in r.ambient_notes}
    assert "no effect on this CPU burst" in said["PYTORCH_CUDA_ALLOC_CONF"]
    assert "replaced by the knob's 'LL'" in said["NCCL_PROTO"]
    assert sum("NCCL_PROTO" in n for n in r.ambient_notes) == 1
    assert "ENVIRONMENT: NCCL_ALGO=Tree" in r.summary()
    path = tmp_path / "tuned.yaml"
    with pytest.warns(ConfigWarning, match="NCCL_ALGO=Tree in the environment, not a knob"):
        save_config(r, path)
    text = path.read_text()
    assert "WARNING: ambient_env lists variables" in text
    prov = yaml.safe_load(text)["provenance"]
    assert prov["ambient_env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "NCCL_PROTO" not in prov["ambient_env"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(path)
    assert any("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in str(w.message)
               for w in caught)  # fmt: skip
    assert "NCCL_ALGO" not in cfg.env()  # production is told, not silently given it


def _refusing_model():
    raise RuntimeError("the model says no")


def test_a_failed_burst_keeps_its_traceback_as_text_and_in_the_history(store_path):
    base = tensor_workload()
    wl = Workload(name="refuses", model=_refusing_model, dataset=base.dataset)
    r = run_burst(wl, Knobs(batch_size=16), seconds=0.2, store=store_path)
    assert r.status == "error" and r.error == "RuntimeError: the model says no"
    assert r.traceback.startswith("Traceback (most recent call last)")
    assert "in _refusing_model" in r.traceback
    assert r.traceback.rstrip().endswith("RuntimeError: the model says no")
    assert open_store(store_path).records()[-1]["traceback"] == r.traceback
    oom = run_burst(hungry_workload(limit=16), Knobs(batch_size=32), **FAST)
    assert oom.status == "oom" and "in forward" in oom.traceback
    assert run_burst(base, Knobs(batch_size=16), **FAST).traceback is None
