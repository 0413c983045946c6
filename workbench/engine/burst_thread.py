"""Where a burst runs: where the caller's own training loop would, and cuDNN none the wiser.

A burst must measure what the user's own loop gets, and that loop runs on the main thread of a
script or a notebook kernel. On a GPU it must also not depend on the bursts before it:

- **cuDNN** keeps its chosen convolution plans in a *thread-local* cache whose key leaves out
  ``cudnn.benchmark`` (aten/src/ATen/native/cudnn/Conv_v8.cpp, ``thread_local BenchmarkCache``),
  so in one thread an earlier ``cudnn_benchmark=False`` burst makes a later ``True`` burst reuse
  the heuristic plans (and the reverse): an A/B would depend on the order of the bursts. PyTorch
  offers no call that empties that cache; a new thread starts with an empty one, as a new
  training process does. CUDA's current device is per thread too.
- **OpenMP**: a fresh thread meets the CPU thread pools differently from the main thread
  (``workbench.engine.openmp``): the same plain loop read 1.36-1.49x faster on a fresh thread
  than on the main thread of a 2-core machine.

So:

- A **CPU** burst runs on the calling thread itself: a cell's or a script's ``run_burst`` runs
  on the main thread, as the user's loop does, by construction (there is no cuDNN to protect).
  ``benchmarks/fidelity.py`` checks it against a hand-written loop, interleaved.
- A **GPU** burst runs on a fresh thread, and first the calling thread lets go of its OpenMP
  team (``openmp.release_pool``): the burst's team is then the only one in the process, as a
  production loop's is on its main thread. Where the runtime cannot be asked, the fresh thread
  runs all the same (a GPU loop's host thread opens few CPU parallel regions; cuDNN's cache
  matters more).

The panel's bursts start from a runner thread; the runner releases the kernel main thread's
team when a knob moves (its observer runs on that thread; ``workbench.notebook.runner``), so
they meet the same conditions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from workbench.engine import openmp

T = TypeVar("T")


def run_as_production(run: Callable[[], T], stop: threading.Event, device_type: str) -> T:
    """``run()`` where a burst measures what production gets (module docstring); its result.

    If the caller is interrupted while it waits for a fresh thread (a second Ctrl-C), ``stop``
    is set: the burst stops at its next step boundary.
    """
    if device_type != "cuda":
        return run()
    openmp.release_pool()
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
