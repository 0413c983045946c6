"""Where a burst runs: a thread of its own, under the conditions of the thread that called it.

A burst must measure what the user's own loop gets, and that loop runs on the main thread of a
script or a notebook kernel. It also must not depend on the bursts before it. Two things pull
apart here:

- **cuDNN** keeps its chosen convolution plans in a *thread-local* cache whose key leaves out
  ``cudnn.benchmark`` (aten/src/ATen/native/cudnn/Conv_v8.cpp, ``thread_local BenchmarkCache``),
  so in one thread an earlier ``cudnn_benchmark=False`` burst makes a later ``True`` burst reuse
  the heuristic plans (and the reverse): an A/B would depend on the order of the bursts. PyTorch
  offers no call that empties that cache; a new thread starts with an empty one, as a new
  training process does. CUDA's current device is per thread too.
- **OpenMP**: a fresh thread meets the CPU thread pools differently from the main thread
  (``workbench.engine.openmp``), and read 1.4x the main thread's speed on a 2-core machine.

So a burst runs on a fresh thread, and first the *calling* thread lets go of its OpenMP team
(``openmp.release_pool``): the burst's team is then the only one in the process, as a production
loop's is on its main thread. Called from a cell or a script, the caller is the main thread, and
the burst meets exactly the conditions of the user's loop there; ``benchmarks/fidelity.py``
checks it against a hand-written loop. The panel's bursts are started from a runner thread, so
the panel's runner releases the main thread's team itself, when a knob moves (the observer runs
on the kernel's main thread; ``workbench.notebook.runner``).

Where the OpenMP runtime cannot be asked (no ``omp_pause_resource_all``), a CPU burst runs on
the calling thread itself (the main thread's conditions by construction; no cuDNN on a CPU) and a
GPU burst on a fresh thread (cuDNN's cache matters there, and a GPU loop's host thread opens
almost no CPU parallel regions).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from workbench.engine import openmp

T = TypeVar("T")


def run_as_production(run: Callable[[], T], stop: threading.Event, device_type: str) -> T:
    """``run()`` where a burst measures what production gets (module docstring); its result.

    If the caller is interrupted while it waits (a second Ctrl-C), ``stop`` is set: the burst
    stops at its next step boundary.
    """
    released = openmp.release_pool()
    if not released and device_type != "cuda":
        return run()
    return on_fresh_thread(run, stop)


def on_fresh_thread(run: Callable[[], T], stop: threading.Event) -> T:
    """Run ``run()`` on a new thread and wait for it; its exception is raised here."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = run()
        except BaseException as exc:  # handed to the caller's thread, raised there
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="workbench-burst", daemon=True)
    thread.start()
    try:
        thread.join()
    except BaseException:
        stop.set()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


__all__ = ["on_fresh_thread", "run_as_production"]
