"""Bursts on a background thread, newest request wins: what keeps a notebook panel live.

A knob move calls ``submit``; it returns at once. The running burst (if any) is told to stop
at its next step boundary, and the new burst's thread first joins the old one, so two bursts
never compete for the device (or the CPU) and never share loader workers. ``stop`` cancels
without starting anything. Callbacks run on the burst's thread. A burst may be submitted
``held``: it waits, already counted as the newest, until the function ``submit`` returned is
called (the panel's first burst waits so for the browser to draw the panel; notebook/ui/drawn.py).

The same holds across runners: one process has one burst slot (``engine.slot``). Re-running
a notebook cell makes a second panel, with its own runner, while the first one's burst may
still run; a new burst cancels whoever holds the slot (a burst, a diagnosis, a tune) and
waits for it to end before it starts. Measurements taken side by side would each be wrong.

A burst on this thread would meet OpenMP differently from one on the main thread, on a CPU:
libgomp gives each thread that runs parallel work a team of its own, and once a process manages
more OpenMP threads than it has CPUs their workers spin 100 times instead of 300,000 before
sleeping (``workbench.engine.openmp``). A kernel's main thread owns a team; a burst's thread
adds a second. On the 2-core test machine that made a burst read 1.05x (cores free) to 2-4x
(one core busy elsewhere) the same burst on the main thread. So ``submit``, which the panel
calls on the kernel's main thread, first releases that thread's team: the burst's team is then
the only one, as a production loop's is (``workbench.engine.burst_thread``), and a cell's
``run_burst`` and the panel's bursts meet the same conditions as the user's own loop.

No widgets here: the runner is engine code, tested without a browser.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.distributed.dispatch import run_burst
from workbench.engine import openmp
from workbench.engine.burst import BurstProgress
from workbench.engine.slot import exclusive

_log = logging.getLogger(__name__)


@dataclass
class _Job:
    knobs: Knobs
    cancel: threading.Event = field(default_factory=threading.Event)
    go: threading.Event = field(default_factory=threading.Event)  # set: may start
    thread: threading.Thread | None = None
    submitted_s: float = field(default_factory=time.perf_counter)

    def stop(self) -> None:
        """Cancel; a held job is let go too, so that its thread ends without a burst."""
        self.cancel.set()
        self.go.set()


class BurstRunner:
    """Runs one burst at a time on a daemon thread; a newer submit cancels the older burst."""

    def __init__(
        self,
        workload: Any,
        *,
        on_progress: Callable[[BurstProgress], None] | None = None,
        on_result: Callable[[BurstResult], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        **burst_kwargs: Any,
    ):
        self._workload = workload
        self._on_progress = on_progress
        self._on_result = on_result
        self._on_error = on_error
        self._burst_kwargs = burst_kwargs
        self._lock = threading.Lock()
        self._job: _Job | None = None

    @property
    def busy(self) -> bool:
        job = self._job
        return job is not None and job.thread is not None and job.thread.is_alive()

    def submit(self, knobs: Knobs, *, held: bool = False) -> Callable[[], None]:
        """Start a burst with these knobs; the running one (if any) stops at a step boundary.

        ``held``: the burst waits until the returned function is called (the panel holds its
        first burst until the browser has drawn it). It counts as submitted meanwhile:
        ``wait`` waits for it, ``stop`` and a newer submit cancel it before it starts. The
        returned function lets this burst go, and no other; calling it again does nothing.
        """
        # The caller is the kernel's main thread (a widget's observer, the panel's cell): its
        # OpenMP team goes, so the burst's is the only one, as a training loop's on the main
        # thread is (engine.burst_thread). The burst itself can only release its runner's.
        openmp.release_pool()
        with self._lock:
            previous = self._job
            if previous is not None:
                previous.stop()
            job = _Job(knobs)
            if not held:
                job.go.set()
            job.thread = threading.Thread(
                target=self._run, args=(job, previous), name="workbench-burst", daemon=True
            )
            self._job = job
            job.thread.start()
        return job.go.set

    def stop(self) -> None:
        """Cancel the running burst (it ends as ``status="cancelled"``), or a held one."""
        job = self._job
        if job is not None:
            job.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the newest burst to finish (a held one: to be let go, and to finish);
        True if it did within ``timeout``."""
        job = self._job
        if job is None or job.thread is None:
            return True
        job.thread.join(timeout)
        return not job.thread.is_alive()

    def _run(self, job: _Job, previous: _Job | None) -> None:
        if previous is not None and previous.thread is not None:
            previous.thread.join()
        job.go.wait()  # a held burst: until it is let go, or cancelled
        if job.cancel.is_set():
            return
        with exclusive(job.cancel) as got:
            if got and not job.cancel.is_set():  # superseded while waiting: never started
                self._burst(job)

    def _burst(self, job: _Job) -> None:
        try:
            result = run_burst(
                self._workload,
                job.knobs,
                cancel=job.cancel,
                progress=self._guarded_progress(),
                **self._burst_kwargs,
            )
        except Exception as exc:  # bad input: reported, the kernel keeps going
            self._report_error(exc)
            return
        if self._on_result is not None:
            try:
                self._on_result(result)
            except Exception as exc:  # a failing redraw must not vanish with the thread
                self._report_error(exc)

    def _guarded_progress(self) -> Callable[[BurstProgress], None] | None:
        """The progress callback, made harmless: a status line that fails to update must
        not fail the measurement; the first failure is reported, the burst goes on."""
        callback = self._on_progress
        if callback is None:
            return None
        failed: list[bool] = []

        def progress(p: BurstProgress) -> None:
            if failed:
                return
            try:
                callback(p)
            except Exception as exc:
                failed.append(True)
                self._report_error(exc)

        return progress

    def _report_error(self, exc: BaseException) -> None:
        if self._on_error is None:
            _log.error("burst failed: %s", exc, exc_info=exc)
            return
        try:
            self._on_error(exc)
        except Exception:  # nowhere left to show it: the log at least keeps it
            _log.exception("burst error handler failed on %r", exc)
