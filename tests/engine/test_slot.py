"""One burst at a time in a process, whoever asks: runners, tasks, a run_burst in a cell."""

import threading
import time

from workloads_for_tests import tensor_workload

from workbench import Knobs, run_burst
from workbench.engine.slot import exclusive
from workbench.notebook.runner import BurstRunner

FAST = {"seconds": 0.2, "warmup_steps": 1, "record": False}


def test_a_burst_typed_in_a_cell_stops_the_panels_burst_first():
    events: list[tuple[str, float]] = []
    runner = BurstRunner(tensor_workload(), seconds=30, warmup_steps=1, record=False,
                         on_progress=lambda p: p.phase == "measuring" and not events
                         and events.append(("panel measuring", time.perf_counter())),
                         on_result=lambda r: events.append((f"panel {r.status}",
                                                            time.perf_counter())))  # fmt: skip
    runner.submit(Knobs(batch_size=8))
    deadline = time.monotonic() + 60
    while not events and time.monotonic() < deadline:
        time.sleep(0.01)
    started: list[float] = []
    r = run_burst(tensor_workload(), Knobs(batch_size=8),
                  progress=lambda p: not started and started.append(time.perf_counter()),
                  **FAST)  # fmt: skip
    assert runner.wait(30)
    assert r.ok
    _, (panel_status, panel_ended_at) = events
    assert panel_status == "panel cancelled"
    assert panel_ended_at <= started[0]  # the cell's burst began after the panel's had ended


def test_the_slot_is_reentrant_for_the_thread_that_holds_it():
    out = {}

    def tune_like():  # a task holding the slot runs its bursts itself
        with exclusive(threading.Event()) as got:
            out["got"] = got
            out["r"] = run_burst(tensor_workload(), Knobs(batch_size=8), **FAST)

    t = threading.Thread(target=tune_like)
    t.start()
    t.join(60)
    assert not t.is_alive(), "a holder's own burst waited for the holder: deadlock"
    assert out["got"] and out["r"].ok


def test_a_burst_cancelled_while_it_waits_never_starts():
    holding, let_go, holder_cancel = threading.Event(), threading.Event(), threading.Event()

    def slow_holder():  # something that takes a moment to stop when told
        with exclusive(holder_cancel):
            holding.set()
            let_go.wait(30)

    h = threading.Thread(target=slow_holder)
    h.start()
    holding.wait(10)
    mine, out = threading.Event(), {}
    waiter = threading.Thread(
        target=lambda: out.setdefault(
            "r", run_burst(tensor_workload(), Knobs(batch_size=8), cancel=mine, **FAST)
        )
    )
    waiter.start()
    deadline = time.monotonic() + 10
    while not holder_cancel.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert holder_cancel.is_set()  # the waiting burst asked the holder to stop
    mine.set()  # ... and is itself superseded before the holder lets go
    let_go.set()
    waiter.join(30)
    h.join(5)
    r = out["r"]
    assert r.status == "cancelled" and r.error == "cancelled before it started"
    assert r.steps == 0 and r.samples_per_s is None


def test_a_diagnosis_holds_the_slot_through_its_loader_only_run():
    # The loader-only run is no burst, but a panel burst beside it would share its cores: a
    # burst asked for during a diagnosis stops it and starts only once it has returned.
    from workbench import diagnose

    runner_started: list[float] = []
    runner = BurstRunner(tensor_workload(), seconds=0.2, warmup_steps=1, record=False,
                         on_progress=lambda p: not runner_started
                         and runner_started.append(time.perf_counter()))  # fmt: skip

    stage_done: list[float] = []

    def on_stage(stage, _result):
        if stage == "full":
            runner.submit(Knobs(batch_size=8))  # a knob moved while the diagnosis runs
            time.sleep(0.5)  # time for the runner to ask for the slot (and, unguarded, start)
            stage_done.append(time.perf_counter())

    d = diagnose(tensor_workload(), Knobs(batch_size=8), seconds=2.0, warmup_steps=1,
                 record=False, progress=on_stage)  # fmt: skip
    assert runner.wait(30)
    assert d.verdict == "unknown" and d.compute is None  # the newer burst stopped it
    assert runner_started and runner_started[0] >= stage_done[0]  # it waited for the slot


def test_a_superseded_distributed_burst_starts_no_job(monkeypatch, tiny_data):
    from workbench.distributed import jobs as distributed

    launched = []
    monkeypatch.setattr(distributed, "run_distributed_burst", lambda *a, **k: launched.append(a))
    cancelled = threading.Event()
    cancelled.set()  # superseded before the slot came free
    r = run_burst("cnn", Knobs(batch_size=4, world_size=2), cancel=cancelled, data_dir=tiny_data,
                  **FAST)  # fmt: skip
    assert r.status == "cancelled" and r.error == "cancelled before it started"
    assert launched == []  # no torchrun job was started (and stopped) beside the newer burst
