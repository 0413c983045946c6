import threading
import time

from workloads_for_tests import tensor_workload

from workbench import Knobs
from workbench.runner import BurstRunner


def test_newer_submit_cancels_the_running_burst(store_path):
    results, started = [], threading.Event()

    def progress(p):
        if p.phase == "measuring":
            started.set()

    runner = BurstRunner(tensor_workload(), on_result=results.append, on_progress=progress,
                         seconds=30, warmup_steps=1, store=store_path)  # fmt: skip
    runner.submit(Knobs(batch_size=8))
    assert started.wait(30)
    t0 = time.perf_counter()
    runner.submit(Knobs(batch_size=16))
    time.sleep(0.05)
    runner.stop()  # the second one too, so the test ends quickly
    assert runner.wait(30)
    cancel_latency = time.perf_counter() - t0
    assert results[0].status == "cancelled"
    assert results[0].knobs.batch_size == 8
    assert all(r.status == "cancelled" for r in results)
    assert cancel_latency < 10
    assert not runner.busy


def test_bursts_never_overlap(store_path):
    active, overlaps, results = [0], [], []
    lock = threading.Lock()

    def progress(p):
        with lock:
            if p.phase == "setup":
                active[0] += 1
                overlaps.append(active[0])
            elif p.phase == "done":
                active[0] -= 1

    runner = BurstRunner(tensor_workload(), on_result=results.append, on_progress=progress,
                         seconds=0.2, warmup_steps=1, store=store_path)  # fmt: skip
    for bs in (4, 8, 16, 32):
        runner.submit(Knobs(batch_size=bs))
    assert runner.wait(60)
    assert max(overlaps) == 1
    assert results[-1].knobs.batch_size == 32 and results[-1].ok


def test_bad_input_goes_to_on_error(store_path):
    errors = []
    runner = BurstRunner(tensor_workload(), on_error=errors.append, seconds=0.2,
                         store=store_path)  # fmt: skip
    runner.submit(Knobs(world_size=64))  # more ranks than CPU cores
    assert runner.wait(30)
    assert errors and "world_size" in str(errors[0])
