"""workbench.engine.openmp: the calling thread's OpenMP team, released on request."""

from __future__ import annotations

import os
import sys
import threading

import pytest
import torch

from workbench.engine import openmp

needs_gomp = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and torch.backends.openmp.is_available()),
    reason="PyTorch's Linux builds run on libgomp; elsewhere the runtime may differ",
)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _parallel_op() -> None:
    """An elementwise op large enough for at::parallel_for to open an OpenMP team."""
    torch.ones(4_000_000).sin_()


@needs_gomp
def test_torchs_openmp_runtime_can_be_asked():
    assert openmp.can_release()


@needs_gomp
def test_releasing_ends_the_calling_threads_team():
    # The team's workers are OS threads of this process: after a parallel op they are there
    # (idle, waiting for the next region); released, they exit.
    if torch.get_num_threads() < 2:
        pytest.skip("one intra-op thread: OpenMP runs no team")
    _parallel_op()
    with_team = _threads()
    assert openmp.release_pool()
    without = _threads()
    assert without <= with_team - (torch.get_num_threads() - 1)
    _parallel_op()  # the next parallel op builds a new team
    assert _threads() > without


@needs_gomp
def test_releasing_without_a_team_is_harmless():
    done: list[bool] = []
    t = threading.Thread(target=lambda: done.append(openmp.release_pool()))
    t.start()
    t.join()
    assert done == [True]
    assert openmp.release_pool() and openmp.release_pool()


def test_no_runtime_means_nothing_is_released(monkeypatch):
    openmp._pause_entry_point.cache_clear()
    monkeypatch.setattr(openmp, "_loaded_runtimes", lambda: [])
    try:
        assert not openmp.can_release()
        assert openmp.release_pool() is False
    finally:
        openmp._pause_entry_point.cache_clear()
