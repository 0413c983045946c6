"""workbench.engine.burst_thread: a burst on a fresh thread, under the caller's conditions."""

from __future__ import annotations

import threading

import pytest

from workbench.engine import burst_thread, openmp


def _where() -> threading.Thread:
    return threading.current_thread()


def test_a_burst_runs_on_a_fresh_thread_once_the_callers_team_is_released(monkeypatch):
    released: list[threading.Thread] = []
    monkeypatch.setattr(openmp, "release_pool", lambda: released.append(_where()) or True)
    ran_on = burst_thread.run_as_production(_where, threading.Event(), "cpu")
    assert released == [_where()]  # released by the caller, on the caller's thread
    assert ran_on is not _where() and ran_on.name == "workbench-burst"


@pytest.mark.parametrize(("device_type", "fresh"), [("cpu", False), ("cuda", True)])
def test_without_openmp_control_a_cpu_burst_stays_on_the_callers_thread(
    monkeypatch, device_type, fresh
):
    # The caller's own thread is the main thread's conditions by construction; on a GPU the
    # cuDNN plan cache (thread-local) still wants a fresh thread.
    monkeypatch.setattr(openmp, "release_pool", lambda: False)
    ran_on = burst_thread.run_as_production(_where, threading.Event(), device_type)
    assert (ran_on is not _where()) is fresh


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
