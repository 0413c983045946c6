import threading
import time

from workloads_for_tests import tensor_workload

from workbench import Knobs
from workbench.notebook.runner import BurstRunner


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


def _overlap_counter():
    """Progress/result callbacks that count bursts running at once, across runners."""
    lock, active, peak = threading.Lock(), [0], [0]

    def progress(p):
        if p.phase == "setup":
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])

    def finished(_result):
        with lock:
            active[0] -= 1

    return progress, finished, peak


def test_a_second_runner_cancels_and_waits_for_the_first_ones_burst(store_path):
    """Re-running a notebook cell makes a new Bench (a new runner) in the same kernel."""
    progress, finished, peak = _overlap_counter()
    measuring, results = threading.Event(), []

    def old_progress(p):
        progress(p)
        if p.phase == "measuring":
            measuring.set()

    def old_result(r):
        time.sleep(0.3)  # a slow redraw: the new burst must still wait for it
        finished(r)
        results.append(("old", r))

    old = BurstRunner(tensor_workload(), on_progress=old_progress, on_result=old_result,
                      seconds=30, warmup_steps=1, store=store_path)  # fmt: skip
    new = BurstRunner(tensor_workload(), on_progress=progress,
                      on_result=lambda r: (finished(r), results.append(("new", r))),
                      seconds=0.2, warmup_steps=1, min_steps=2, store=store_path)  # fmt: skip
    old.submit(Knobs(batch_size=8))
    assert measuring.wait(30)
    new.submit(Knobs(batch_size=16))
    assert new.wait(60) and old.wait(5)
    assert [who for who, _ in results] == ["old", "new"]
    assert results[0][1].status == "cancelled" and results[1][1].ok
    assert peak[0] == 1


def test_a_held_slot_makes_a_burst_wait_and_cancels_the_holder(store_path):
    from workbench.engine.slot import exclusive

    cancel, events = threading.Event(), []

    def task():
        with exclusive(cancel):
            events.append("task holds the slot")
            cancel.wait(30)  # a diagnosis or tune, stopping when told to
            events.append("task released")

    holder = threading.Thread(target=task)
    holder.start()
    while not events:
        time.sleep(0.01)
    runner = BurstRunner(tensor_workload(), seconds=0.2, warmup_steps=1, store=store_path,
                         on_progress=lambda p: p.phase == "setup" and events.append("burst"),
                         on_result=lambda r: events.append(r.status))  # fmt: skip
    runner.submit(Knobs(batch_size=8))
    assert runner.wait(60)
    holder.join(5)
    assert cancel.is_set()
    assert events == ["task holds the slot", "task released", "burst", "ok"]


def test_a_failing_result_callback_is_reported_not_lost(store_path):
    errors = []

    def on_result(_r):
        raise RuntimeError("history store is gone")

    runner = BurstRunner(tensor_workload(), on_result=on_result, on_error=errors.append,
                         seconds=0.2, warmup_steps=1, min_steps=2, store=store_path)  # fmt: skip
    runner.submit(Knobs(batch_size=8))
    assert runner.wait(30)
    assert [str(e) for e in errors] == ["history store is gone"]
    runner.submit(Knobs(batch_size=16))  # and the runner still works
    assert runner.wait(30) and len(errors) == 2


def test_a_failing_progress_callback_does_not_fail_the_burst(store_path):
    errors, results = [], []

    def on_progress(_p):
        raise RuntimeError("status line broke")

    runner = BurstRunner(tensor_workload(), on_progress=on_progress, on_result=results.append,
                         on_error=errors.append, seconds=0.2, warmup_steps=1, min_steps=2,
                         store=store_path)  # fmt: skip
    runner.submit(Knobs(batch_size=8))
    assert runner.wait(30)
    assert results and results[0].ok
    assert [str(e) for e in errors] == ["status line broke"]  # reported once, not per step


def test_a_held_burst_starts_only_when_let_go_and_wait_covers_it(store_path):
    """The panel holds its first burst until the browser has drawn the panel: the burst
    counts as submitted (``wait`` waits for it), but no step runs before the release."""
    phases, results = [], []
    runner = BurstRunner(tensor_workload(), on_result=results.append, on_progress=lambda p:
                         phases.append(p.phase), seconds=0.2, warmup_steps=1,
                         store=store_path)  # fmt: skip
    release = runner.submit(Knobs(batch_size=8), held=True)
    assert not runner.wait(0.5)  # pending: held, not finished
    assert runner.busy and phases == [] and results == []
    release()
    assert runner.wait(30)
    assert phases[0] == "setup" and results[0].ok
    release()  # a second call does nothing
    assert len(results) == 1


def test_a_held_burst_that_is_stopped_or_superseded_never_runs(store_path):
    results = []
    runner = BurstRunner(tensor_workload(), on_result=results.append, seconds=0.2,
                         warmup_steps=1, store=store_path)  # fmt: skip
    runner.submit(Knobs(batch_size=8), held=True)
    runner.stop()
    assert runner.wait(5) and results == []  # ended without a burst, not left waiting

    stale = runner.submit(Knobs(batch_size=8), held=True)
    runner.submit(Knobs(batch_size=16))  # a knob move while the first burst is held
    assert runner.wait(30)
    stale()  # a late release of the replaced burst starts nothing
    time.sleep(0.2)
    assert [r.knobs.batch_size for r in results] == [16]
