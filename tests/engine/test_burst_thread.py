"""workbench.engine.burst_thread: a burst on a fresh thread, under the caller's conditions."""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch
from torch import nn
from workloads_for_tests import tensor_workload

from workbench import Knobs, run_burst
from workbench.engine import burst_thread, openmp


def _where() -> threading.Thread:
    return threading.current_thread()


def test_a_gpu_burst_runs_on_a_fresh_thread_once_the_callers_team_is_released(monkeypatch):
    released: list[threading.Thread] = []
    monkeypatch.setattr(openmp, "release_pool", lambda: released.append(_where()) or True)
    ran_on = burst_thread.run_as_production(_where, threading.Event(), "cuda")
    assert released == [_where()]  # released by the caller, on the caller's thread
    assert ran_on is not _where() and ran_on.name == "workbench-burst"


@pytest.mark.parametrize("released", [True, False])
def test_a_gpu_burst_gets_a_fresh_thread_whatever_openmp_allows(monkeypatch, released):
    # cuDNN's plan cache is thread-local: a fresh thread even where OpenMP cannot be asked.
    monkeypatch.setattr(openmp, "release_pool", lambda: released)
    assert burst_thread.run_as_production(_where, threading.Event(), "cuda") is not _where()


def test_a_cpu_burst_runs_on_the_callers_own_thread(monkeypatch):
    # The user's loop runs on the main thread: a CPU burst called there runs there too.
    monkeypatch.setattr(openmp, "release_pool", lambda: pytest.fail("nothing to release"))
    assert burst_thread.run_as_production(_where, threading.Event(), "cpu") is _where()


def test_an_error_on_the_burst_thread_is_raised_to_the_caller():
    def fail() -> None:
        raise ValueError("from the burst")

    with pytest.raises(ValueError, match="from the burst"):
        burst_thread.on_fresh_thread(fail, threading.Event())


def test_an_interrupted_wait_tells_the_burst_to_stop(monkeypatch):
    stop, started = threading.Event(), threading.Event()

    def burst() -> str:
        started.set()
        stop.wait(5)
        return "stopped"

    def interrupted_join(self, timeout=None):
        started.wait(5)
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "join", interrupted_join)
    with pytest.raises(KeyboardInterrupt):
        burst_thread.on_fresh_thread(burst, stop)
    assert stop.is_set()


def test_a_cpu_burst_steps_on_the_main_thread_with_the_callers_torch_threads():
    """Why a burst reads what a plain loop on the main thread reads (benchmarks/fidelity.py
    measures the ratio: bursts on a fresh thread read 1.33-1.50x the plain loop on a 2-core
    machine): every step of a real burst runs where the caller's loop would, with the same
    intra-op threads. Asserted on where the steps ran, not on timings: no test here depends
    on the machine being quiet."""
    seen: set[tuple[str, int]] = set()

    class Recording(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.add((threading.current_thread().name, torch.get_num_threads()))
            return super().forward(x)

    wl = dataclasses.replace(tensor_workload(), model=lambda: Recording(16, 2))
    r = run_burst(wl, Knobs(batch_size=8), seconds=0.05, warmup_steps=1, min_steps=3,
                  record=False, device="cpu")  # fmt: skip
    assert r.ok and r.steps >= 3
    assert seen == {(threading.main_thread().name, torch.get_num_threads())}
