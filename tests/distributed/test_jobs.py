"""Distributed bursts as real torchrun jobs on the CPU (gloo, 2 ranks)."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import torch

import workbench as wb
from workbench.core.errors import InputError
from workbench.core.knobs import KnobError
from workbench.distributed.allreduce import FAULT_RANK_ENV
from workbench.distributed.jobs import comm_bench, run_distributed_burst, worker_env
from workbench.distributed.rank import COUNT_GRAD_SYNCS_ENV, rank_device
from workbench.distributed.torchrun import JobSpec, TorchrunJob
from workbench.engine.window import BurstWindow
from workbench.history.store import open_store

pytestmark = pytest.mark.concurrent  # torchrun jobs: mostly waiting on other processes

FAST = {"seconds": 0.5, "warmup_steps": 1, "min_steps": 3}
WINDOW = BurstWindow(**FAST)
TWO = wb.Knobs(batch_size=4, world_size=2)
TORCH_DEFAULT_MASTER_PORT = 29500


@pytest.fixture(autouse=True)
def _no_ambient_nccl(monkeypatch):
    """NVIDIA's containers set NCCL_* variables; the ranks inherit them (as they should), so
    every test here starts from an environment without any and sets the ones it means."""
    for name in [n for n in os.environ if n.startswith("NCCL_")]:
        monkeypatch.delenv(name)


def _no_children_left() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _port_taken(port: int) -> Iterator[None]:
    """``port`` is in use while the block runs: held here, or already held by someone else
    (then it is taken all the same, and this test must not fail for it)."""
    with socket.socket() as s:
        with contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port))
            s.listen()
        yield


def test_two_rank_burst_counts_every_rank_and_keeps_the_env_out_of_this_process(
    tiny_data, store_path, monkeypatch
):
    # Ambient NCCL variables (as NVIDIA's containers set them) reach the ranks and are reported
    # in each rank's nccl_env; a knob of the same name wins; this process keeps its own values.
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    knobs = TWO.replace(NCCL_ALGO="Ring", static_graph=True)
    with _port_taken(TORCH_DEFAULT_MASTER_PORT):  # torch's default master port: still runs
        r = wb.run_burst("cnn", knobs, data_dir=tiny_data, store=store_path, **FAST)
    assert r.status == "ok", r.error
    assert r.backend == "gloo" and [row["rank"] for row in r.ranks] == [0, 1]
    assert r.plan["processes"] is True and r.plan["sharding"] == "ddp"  # the ranks' plan
    assert r.samples == sum(row["samples"] for row in r.ranks) == 2 * r.ranks[0]["samples"]
    assert r.samples_per_s == pytest.approx(r.samples / r.measured_s)
    assert r.ranks[0]["steps"] == r.ranks[1]["steps"] >= 3  # the window ends on the same step
    assert all(row["nccl_env"] == {"NCCL_ALGO": "Ring", "NCCL_DEBUG": "WARN"} for row in r.ranks)
    assert os.environ["NCCL_ALGO"] == "Tree"
    # recorded by this process, once: the ambient NCCL_DEBUG is, the knob-replaced NCCL_ALGO not
    assert r.ambient_env["NCCL_DEBUG"] == "WARN" and "NCCL_ALGO" not in r.ambient_env
    assert [n for n in r.ambient_notes if n.startswith("NCCL_ALGO")] == [
        "NCCL_ALGO=Tree in the environment was replaced by the knob's 'Ring' (a torchrun job's "
        "ranks get the knob's value)"
    ]
    assert "gloo" in r.no_effect["nccl"] and r.nccl_flags.keys() == {"NCCL_ALGO"}
    assert "static_graph" not in r.no_effect
    assert r.device == "cpu" and all(row["device"] == "cpu" for row in r.ranks)
    assert "grad_sync_rounds" not in r.ranks[0]  # the test-only counter is off by default
    assert [row["id"] for row in open_store(store_path).records()] == [r.id]
    assert _no_children_left() == []


def test_gradient_accumulation_under_real_ddp_all_reduces_once_per_optimizer_step(
    tiny_data, monkeypatch
):
    # The micro-batches before the last run under DDP's no_sync: one all-reduce round per
    # optimizer step, counted by a comm hook in each real rank (an all-reduce per micro-batch
    # would measure grad_accum times the communication of real training).
    monkeypatch.setenv(COUNT_GRAD_SYNCS_ENV, "1")
    r = run_distributed_burst("cnn", TWO.replace(grad_accum=2), data_dir=tiny_data,
                              record=False, port=_free_port(), window=WINDOW)  # fmt: skip
    assert r.status == "ok", r.error
    assert r.samples == 2 * r.ranks[0]["steps"] * 4 * 2  # ranks x steps x batch x micro-batches
    for row in r.ranks:
        assert row["optimizer_steps"] >= row["steps"] >= 3  # warm-up steps come on top
        assert row["grad_sync_rounds"] == row["optimizer_steps"]
    assert _no_children_left() == []


def test_an_fsdp_job_shards_the_model_and_each_rank_holds_half_of_it(tiny_data):
    """sharding=fsdp through the real rank code on two gloo ranks: every rank's parameters,
    gradients and optimizer state are half the whole model's (its fp32 bytes, Adam's two
    moments); DDP's figures, and the numerics against it, are tests/engine/test_sharding.py's."""
    from workbench.engine.workloads.gpt import GPTShape, TinyGPT

    knobs = TWO.replace(sharding="fsdp", reshard_after_forward=False)
    r = run_distributed_burst("workloads_for_tests:tiny_gpt", knobs, data_dir=tiny_data,
                              record=False, port=_free_port(), window=WINDOW)  # fmt: skip
    assert r.status == "ok", r.error
    shape = GPTShape(block=32, layers=2, heads=2, width=64)  # tiny_gpt's
    whole_mib = sum(p.numel() for p in TinyGPT(shape).parameters()) * 4 / 2**20
    for row in r.ranks:
        assert row["param_mib_per_rank"] == pytest.approx(whole_mib / 2, rel=0.01)
        assert row["optimizer_state_mib_per_rank"] == pytest.approx(whole_mib, rel=0.01)
    assert r.param_mib_per_rank == max(row["param_mib_per_rank"] for row in r.ranks)
    assert r.grad_mib_per_rank == pytest.approx(whole_mib / 2, rel=0.01)
    assert r.memory_breakdown["params_mib"] == pytest.approx(whole_mib / 2, rel=0.01)
    assert r.no_effect == {} and r.notes == []  # it acted, on blocks of its own
    assert r.plan["sharding"] == "fsdp"
    assert r.final_loss is not None and r.final_loss == r.final_loss
    assert _no_children_left() == []


def test_a_failing_rank_ends_the_job_with_its_own_error():
    r = run_distributed_burst("workloads_for_tests:rank1_crashes", TWO, record=False,
                              timeout_s=120, window=WINDOW)  # fmt: skip
    assert r.status == "error"
    assert r.error.startswith("rank 1: RuntimeError: rank 1 was told to fail")
    # the rank's own traceback made the trip (its burst's, not the rank's RankFailed)
    assert "in model" in r.traceback and "RankFailed" not in r.traceback
    assert r.traceback.rstrip().endswith("RuntimeError: rank 1 was told to fail")
    assert _no_children_left() == []


def test_ranks_count_samples_by_the_workloads_hook_which_travels_with_it():
    # the ranks build the workload by name: its samples_of comes with it, and each rank's
    # burst loop counts with it (the flattened item ids would count about 26 a user)
    r = run_distributed_burst("workloads_for_tests:counted_recommender",
                              wb.Knobs(batch_size=16, world_size=2), record=False,
                              port=_free_port(), window=WINDOW)  # fmt: skip
    assert r.status == "ok", r.error
    assert r.samples_from == "samples_of"
    assert [row["samples_from"] for row in r.ranks] == ["samples_of", "samples_of"]
    assert r.samples == sum(row["steps"] for row in r.ranks) * 16
    assert _no_children_left() == []


def test_a_hanging_rank_is_stopped_after_the_timeout_and_named():
    # 40 s: both ranks reach 'setup' first, even beside another test (make test runs this
    # module two at a time with others); 25 s was enough on the CI VM alone.
    r = run_distributed_burst("workloads_for_tests:rank1_hangs", TWO, record=False,
                              timeout_s=40, window=WINDOW)  # fmt: skip
    assert r.status == "error"
    assert "did not finish within 40 s" in r.error
    assert "rank 1 last in phase 'setup'" in r.error and "furthest behind" in r.error
    assert _no_children_left() == []


def test_cancel_stops_the_job_and_leaves_no_process():
    import threading

    cancel = threading.Event()
    timer = threading.Timer(3.0, cancel.set)
    timer.start()
    r = run_distributed_burst("workloads_for_tests:rank1_hangs", TWO, record=False,
                              timeout_s=120, cancel=cancel, window=WINDOW)  # fmt: skip
    assert r.status == "cancelled" and r.launch_s < 60
    assert _no_children_left() == []


def test_bad_input_is_refused_before_anything_starts():
    with pytest.raises(KnobError, match=r"NCCL_PROTO='LL2'.*LL, LL128, Simple"):
        TWO.replace(NCCL_PROTO="LL2")
    with pytest.raises(KnobError, match=r"world_size=64.*one rank per core"):
        wb.run_burst("cnn", wb.Knobs(world_size=64))
    with pytest.raises(InputError, match="fresh processes"):
        wb.run_burst(lambda: None, TWO)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(InputError, match=rf"port={port}.*in use"):
            run_distributed_burst("cnn", TWO, port=port)
    assert _no_children_left() == []


def test_a_factory_in_main_is_refused_at_once_with_the_module_to_move_it_into(monkeypatch):
    """A script's or a notebook's function cannot be imported by the ranks: refused before
    torchrun starts (it used to launch for seconds, then fail in every rank)."""
    namespace: dict = {"__name__": "__main__"}  # as a notebook cell or a script defines it
    exec("def make_model():\n    pass\n", namespace)
    started: list[object] = []
    popen = "workbench.distributed.torchrun.subprocess.Popen"
    monkeypatch.setattr(popen, lambda *a, **k: started.append(a))
    for workload in (namespace["make_model"], "__main__:make_model"):
        start = time.monotonic()
        with pytest.raises(InputError) as caught:
            wb.run_burst(workload, TWO, record=False)
        assert time.monotonic() - start < 1.0
        assert "move make_model into make_model.py" in str(caught.value)
        assert str(caught.value).endswith("and pass workload='make_model:make_model'")
    assert started == [] and _no_children_left() == []


def test_a_scripts_factory_is_refused_with_its_fix_in_a_real_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import time, workbench as wb, workbench.distributed.jobs  # imported: time the check\n"
        "def make_model():\n    pass\n"
        "start = time.monotonic()\n"
        "try:\n"
        "    wb.run_burst(make_model, wb.Knobs(batch_size=4, world_size=2), record=False)\n"
        "except ValueError as exc:\n"
        "    print(f'{time.monotonic() - start:.3f}', exc)\n"
    )
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)  # fmt: skip
    elapsed, _, message = p.stdout.partition(" ")
    assert p.returncode == 0, p.stderr
    assert float(elapsed) < 1.0, message
    assert message.strip().endswith(
        f"move make_model into make_model.py next to train.py ({tmp_path.resolve()}) and pass "
        "workload='make_model:make_model'"
    )


def test_unknown_nccl_variable_is_passed_with_a_warning(monkeypatch):
    knobs = TWO.replace(NCCL_SHINY_NEW_THING="1")
    monkeypatch.setattr("workbench.distributed.jobs.TorchrunJob.run", _refuse_to_launch)
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
    assert res.nccl_env == {"NCCL_PROTO": "LL"} and res.suspect == []
    assert "busbw GB/s" in res.table() and res.frame().shape[0] == 2
    assert _no_children_left() == []


def test_a_rank_that_contributes_a_wrong_value_makes_the_comm_result_say_the_sum_is_wrong(
    monkeypatch,
):
    monkeypatch.setenv(FAULT_RANK_ENV, "1")  # rank 1 adds 3 instead of 2: the sum is 4, not 3
    monkeypatch.setenv("NCCL_DEBUG", "WARN")  # an ambient variable: the ranks ran with it
    res = comm_bench(2, sizes=[8 * 1024])
    assert res.ok, res.error  # the bandwidth was measured; the data it carried was wrong
    assert [row["correct"] for row in res.rows] == [False]
    assert len(res.suspect) == 1 and "wrong sum at 8 KiB" in res.suspect[0]
    assert res.table().splitlines()[2].endswith("NO") and "SUSPECT: all-reduce" in res.table()
    assert res.nccl_env == {"NCCL_DEBUG": "WARN"} and res.nccl == {}
    assert _no_children_left() == []


# The process a notebook kernel is: it launches a burst job that does not end by itself
# (rank 1 never finishes building its model; rank 0 waits for it in DDP's constructor).
KERNEL = """
import workbench as wb
from workbench.distributed.jobs import run_distributed_burst
from workbench.engine.window import BurstWindow
run_distributed_burst("workloads_for_tests:rank1_hangs", wb.Knobs(batch_size=4, world_size=2),
                      record=False, timeout_s=600,
                      window=BurstWindow(seconds=0.5, warmup_steps=1, min_steps=3))
"""
ORPHAN_EXIT_BOUND_S = 15.0


def test_killing_the_launching_process_ends_torchrun_and_every_rank(tmp_path):
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]), *sys.path]),
        TMPDIR=str(tmp_path),
    )  # the job's folder, which a killed kernel leaves behind
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], env=env, cwd=tmp_path)
    job: list[psutil.Process] = []
    try:
        job = _wait_for_waiting_ranks(kernel.pid, tmp_path, deadline_s=120)
        kernel.send_signal(signal.SIGKILL)  # no finally, no stop_process_tree: a killed kernel
        # Not reaped yet on purpose: a kernel its server has not waited for is a zombie, and
        # a zombie is not a live launcher.
        t0 = time.monotonic()
        alive = _wait_gone(job, ORPHAN_EXIT_BOUND_S)
        exit_s = time.monotonic() - t0
    finally:
        for p in job:
            with contextlib.suppress(psutil.Error):
                p.kill()
        kernel.kill()
        kernel.wait()
    assert len(job) >= 3  # torchrun and two ranks at least
    assert alive == [], f"still running {ORPHAN_EXIT_BOUND_S:g} s after the kernel died: {alive}"
    assert exit_s < ORPHAN_EXIT_BOUND_S


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """The processes still running after ``timeout_s`` (a zombie has exited: only its parent,
    not this test, can reap it)."""
    end = time.monotonic() + timeout_s
    while True:
        alive = [p for p in procs if _running(p)]
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.1)


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_for_waiting_ranks(
    kernel_pid: int, tmp_dir: Path, deadline_s: float
) -> list[psutil.Process]:
    """torchrun and everything under it, once rank 0 waits in DDP (both ranks have started)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        logs = "".join(p.read_text() for p in tmp_dir.glob("workbench-job-*/rank0.jsonl"))
        if '"phase": "ddp"' in logs:
            return psutil.Process(kernel_pid).children(recursive=True)
        time.sleep(0.2)
    raise AssertionError(f"the job did not reach DDP within {deadline_s:g} s")


def _fake_gpus(monkeypatch, count: int) -> list[int]:
    """A machine with ``count`` GPUs as torch reports them; returns set_device's calls."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "set_device", calls.append)
    return calls


def _launched_spec(monkeypatch, knobs: wb.Knobs, device: str) -> JobSpec:
    """The JobSpec a burst hands its ranks, caught where torchrun would start."""
    seen: list[JobSpec] = []

    def catch(self, *args, **kwargs):
        seen.append(JobSpec.read(self.spec.write()))  # what the ranks would read
        raise _NotLaunched

    monkeypatch.setattr(TorchrunJob, "run", catch)
    with pytest.raises(_NotLaunched):
        wb.run_burst("cnn", knobs, device=device, record=False)
    return seen[0]


def test_a_job_for_cuda_1_runs_its_rank_on_gpu_1(monkeypatch):
    # Recorded fake: no GPU here. What a real rank does with the spec it is given is run for
    # real (rank_device), with torch.cuda's answers faked: 2 GPUs, set_device recorded.
    set_device_calls = _fake_gpus(monkeypatch, 2)
    spec = _launched_spec(monkeypatch, wb.Knobs(batch_size=4, nccl={"NCCL_ALGO": "Ring"}), "cuda:1")
    assert spec.device == "cuda" and spec.device_indices == [1]
    assert rank_device(spec, local_rank=0) == torch.device("cuda", 1)  # torchrun's LOCAL_RANK
    assert set_device_calls == [1]


def test_a_multi_rank_job_uses_the_gpus_from_the_asked_one_on(monkeypatch):
    set_device_calls = _fake_gpus(monkeypatch, 4)
    spec = _launched_spec(monkeypatch, wb.Knobs(batch_size=4, world_size=2), "cuda:2")
    assert spec.device_indices == [2, 3]
    assert [rank_device(spec, local_rank) for local_rank in (0, 1)] == [
        torch.device("cuda", 2), torch.device("cuda", 3)]  # fmt: skip
    assert set_device_calls == [2, 3]
    with pytest.raises(KnobError, match=r"world_size=3.*1\.\.2: one rank per GPU from cuda:2"):
        wb.run_burst("cnn", wb.Knobs(batch_size=4, world_size=3), device="cuda:2")


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs a second GPU")
def test_a_burst_on_cuda_1_runs_and_reports_gpu_1():
    r = wb.run_burst("cnn", wb.Knobs(batch_size=32, nccl={"NCCL_ALGO": "Ring"}), device="cuda:1",
                     record=False, **FAST)  # fmt: skip
    assert r.status == "ok", r.error
    assert r.device == "cuda:1" and r.ranks[0]["device"] == "cuda:1"
    assert r.peak_mem_mib > 0  # torch's own peak on cuda:1: the model really ran there


@pytest.mark.gpu
def test_one_gpu_rank_runs_the_nccl_path_end_to_end():
    knobs = wb.Knobs(batch_size=32, nccl={"NCCL_ALGO": "Ring"})
    r = wb.run_burst("cnn", knobs, device="cuda", record=False, **FAST)
    assert r.status == "ok", r.error
    assert r.backend == "nccl" and len(r.ranks) == 1 and "nccl" not in r.no_effect
    res = comm_bench(1, device="cuda", sizes=[8 * 1024, 64 * 2**20])
    assert res.ok and all(row["correct"] for row in res.rows)
    assert torch.cuda.is_available()


def test_a_lightning_module_under_real_ddp_all_reduces_through_its_training_step(monkeypatch):
    """Two gloo ranks train examples/lightning_example.py's module: DDP wraps the step module,
    so training_step runs inside DDP's forward and every optimizer step all-reduces once (a
    training_step called beside DDP would all-reduce nothing)."""
    pytest.importorskip("lightning")
    monkeypatch.setenv(COUNT_GRAD_SYNCS_ENV, "1")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))  # examples.*
    r = run_distributed_burst("examples.lightning_example:workload", TWO.replace(grad_accum=2),
                              record=False, port=_free_port(), window=WINDOW)  # fmt: skip
    assert r.status == "ok", r.error
    for row in r.ranks:
        assert row["optimizer_steps"] >= row["steps"] >= 3
        assert row["grad_sync_rounds"] == row["optimizer_steps"]
    assert _no_children_left() == []


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH is Python 3.11+")
def test_a_torch_py_beside_the_workload_is_not_imported_by_the_launcher(tmp_path, monkeypatch):
    """``python -m torch.distributed.run`` puts the current directory first on the path; with
    the ranks' environment a ``torch.py`` there is not imported in torch's place, while the
    directory itself is still importable (after the installed packages)."""
    marker = tmp_path / "imported"
    (tmp_path / "torch.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (tmp_path / "mymod.py").write_text("VALUE = 7\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])  # as the CLI leaves it: last
    env = worker_env({}, 2)
    code = "import torch.distributed.run, mymod; print(mymod.VALUE, torch.__file__)"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("7 ") and "site-packages" in p.stdout
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--help"], env=env,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert not marker.exists()
