"""``Bench``: the notebook panel. Move a knob, a real burst reruns, the charts move.

Bursts run on a background thread (``BurstRunner``) so the kernel and the panel stay live; a
newer knob move cancels the running burst at its next step boundary. Sliders use
``continuous_update=False``: a burst starts when the handle is released, not per pixel of a
drag. Every burst lands in the history store first and the charts are redrawn from the store,
so what the charts show is exactly what was recorded (and survives a kernel restart).

One thing measures at a time in a kernel: a burst, a diagnosis, a tune or a comm benchmark
holds the process's burst slot (``workbench.engine.slot.exclusive``), and a newer action cancels
the holder and waits for it, off the main thread. That covers a second panel made by
re-running the cell. Save writes the last burst that ended ok, or a finished tune's best.

The first burst, which ``panel()`` starts by itself, waits until the browser has drawn the
panel (``workbench.notebook.ui.drawn``): drawing it is the browser's biggest job, on the same cores.
"""

from __future__ import annotations

import html
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ipywidgets as w
import pandas as pd

from workbench.analysis.diagnosis import diagnose
from workbench.analysis.memory_views import memory_snapshot
from workbench.analysis.parity import parity
from workbench.config.saved import save_config
from workbench.core.cost import check_price, resolve_price
from workbench.core.knobs import KnobError, Knobs
from workbench.core.results import BurstResult
from workbench.distributed.jobs import comm_bench
from workbench.engine import hardware, openmp
from workbench.engine.burst import BurstProgress
from workbench.engine.slot import exclusive
from workbench.engine.window import BurstWindow
from workbench.engine.workloads import resolve_target
from workbench.history.store import open_store
from workbench.notebook import plots
from workbench.notebook.parity_chart import loss_overlay
from workbench.notebook.runner import BurstRunner
from workbench.notebook.ui.drawn import DRAWN_S, HELLO_S, FirstDraw, kernel_present
from workbench.notebook.ui.layout import PanelWidgets, note_target
from workbench.notebook.ui.status import (
    BurstEstimate,
    comm_label,
    comm_summary,
    knobs_summary,
    result_html,
    result_status,
    suspect_html,
)
from workbench.tuning.tuner import default_space, tune

_WINDOW_UPDATE_EVERY_S = 1.0  # status-line updates inside the measured window: one a second


class _QuietWindow:
    """Which progress events may touch the widgets. Each widget update is a comm message that
    the kernel serializes and the browser lays out and paints, on the cores the burst is
    measuring: inside the measured window only its first step and then one event per
    ``every_s`` of the window's own clock get through (a 2 s window: 2-3 updates, where one
    per step or ten a second used to). Set-up, warm-up and "done" are a handful of events
    outside the window, and all get through."""

    def __init__(self, every_s: float = _WINDOW_UPDATE_EVERY_S):
        self.every_s = every_s
        self._shown_at_s: float | None = None  # window clock of the last update shown

    def due(self, p: BurstProgress) -> bool:
        if p.phase != "measuring":
            self._shown_at_s = None
            return True
        if self._shown_at_s is not None and p.elapsed_s - self._shown_at_s < self.every_s:
            return False
        self._shown_at_s = p.elapsed_s
        return True


@dataclass
class _Task:
    """A long action (diagnose, auto-tune, comm) on its own thread; ``superseded`` when a
    newer action cancelled it, so it leaves the knobs and the message to that action."""

    name: str
    cancel: threading.Event
    thread: threading.Thread = field(init=False)
    superseded: bool = False


class Bench:
    """A workload, a device, the history store and (once displayed) the panel over them."""

    def __init__(
        self,
        workload: Any = None,
        knobs: Knobs | None = None,
        *,
        seconds: float = 2.0,
        warmup_steps: int = 2,
        min_steps: int = 3,
        device: Any = None,
        data_dir: Any = None,
        store: Any = None,
        price_per_hour: float | None = None,
    ):
        self.workload, self.device = resolve_target(workload, device, data_dir)
        self.price_per_hour = resolve_price(price_per_hour)  # or $WORKBENCH_PRICE_PER_HOUR
        self.y_metric = "samples_per_s"
        self.last_snapshot: Any = None
        self.last_parity: Any = None  # the ParityResult of the last loss-parity check
        self.knobs = knobs or Knobs()
        self.store = open_store(store)
        self.info = hardware.device_info(self.device)
        self.window = BurstWindow(seconds=seconds, min_steps=min_steps, warmup_steps=warmup_steps)
        self.last_result: BurstResult | None = None  # the newest, whatever its status
        self.last_tune: Any = None  # the TuneResult of the last auto-tune that finished
        self._to_save: tuple[Any, BurstResult] | None = None  # (what Save writes, its burst)
        self._estimate = BurstEstimate(warmup_steps, min_steps)
        self.last_moved = "batch_size"
        self.events: list[dict[str, float]] = []  # per burst: submit/result/chart times
        self._ui: PanelWidgets | None = None
        self._runner = BurstRunner(
            self.workload,
            on_progress=self._on_progress,
            on_result=self._on_result,
            on_error=self._on_error,
            window=self.window,
            device=self.device,
            store=self.store,
            price_per_hour=self.price_per_hour,
        )
        self._quiet = _QuietWindow()
        self.hello_s, self.drawn_s = HELLO_S, DRAWN_S  # the first burst's wait for the browser
        self.first_draw: FirstDraw | None = None  # what let the first burst go, and when
        self._held_release: Any = None
        self._task: _Task | None = None
        self.comm_results: list[Any] = []  # CommResults of this panel, drawn together

    # -- what a notebook calls -------------------------------------------------------------
    def panel(self, autorun: bool = True) -> w.Widget:
        """Build (or rebuild) the panel; with ``autorun`` a first burst starts once the browser
        has drawn the panel (``notebook.ui.drawn``: at once without a kernel, after a second
        or two in a kernel with no browser), so the browser's drawing is not measured."""
        self._ui = PanelWidgets(self)  # its charts get Vega from this kernel (chart_widget)
        self._redraw(highlight_id=None)
        if autorun:
            self._run_when_drawn(self._ui)
        return self._ui.root

    def _run_when_drawn(self, ui: PanelWidgets) -> None:
        """The first burst, held until ``ui``'s signal says the browser has drawn it."""
        self.run(held=True)
        first = FirstDraw(self._held_release, hello_s=self.hello_s, drawn_s=self.drawn_s)
        self.first_draw = first
        ui.drawn.on_msg(lambda _w, content, _b: first.on_message(content))
        first.arm(kernel_present())
        if not first.released:
            ui.status.value = "waiting for the browser to draw the panel ..."

    def run(self, knobs: Knobs | None = None, *, held: bool = False) -> None:
        """Start a burst with ``knobs`` or the panel's knobs. A newer action wins: a running
        burst, diagnosis or tune is cancelled, and the burst starts once it has stopped."""
        if knobs is not None:
            self.knobs = knobs
        replaced = self._supersede_task()
        if replaced or self._runner.busy:
            self.message(f"restarted: the running {replaced or 'burst'} was cancelled")
        if self.first_draw is not None:  # a held first burst that this one replaces
            self.first_draw.cancel()
        self.events.append({"submit_s": time.perf_counter()})
        self._held_release = self._runner.submit(self.knobs, held=held)

    def stop(self) -> None:
        self._runner.stop()
        if self.first_draw is not None:
            self.first_draw.cancel()
        if self._task is not None:
            self._task.cancel.set()
        if self._ui is not None:
            self._ui.status.value = "stopping at the next step boundary ..."

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the newest burst (or diagnose / tune) has finished (scripts, tests)."""
        if self._task is not None:
            self._task.thread.join(timeout)
            if self._task.thread.is_alive():
                return False
        return self._runner.wait(timeout)

    def set_price(self, value: Any) -> None:
        """The price per device hour for the panel's bursts (text from the field, a number, or
        None/"" for none); a bad one is refused in the message line and changes nothing."""
        try:
            price = check_price(value)
        except ValueError as exc:
            self.message(str(exc), error=True)
            return
        self.price_per_hour = price
        self._runner._burst_kwargs["price_per_hour"] = price
        shown = "none" if price is None else f"{price:g} per device hour"
        self.message(f"price: {shown}; bursts from now on carry their cost")

    def set_y_metric(self, metric: str) -> None:
        """What the throughput chart plots: ``samples_per_s`` or ``cost_per_million_samples``."""
        self.y_metric = metric
        self._redraw(highlight_id=self.last_result.id if self.last_result else None)

    def memory_snapshot(self, path: Any = None) -> None:
        """One burst with the panel's knobs under PyTorch's memory recorder, in the background:
        its per-step memory is drawn under the charts and, on CUDA, the snapshot file for
        pytorch.org/memory_viz is named in the message line
        (``workbench.analysis.memory_views``)."""

        def work(task: _Task) -> str:
            snap = memory_snapshot(self.workload, self.knobs, path=path, window=self.window,
                                   device=self.device, store=self.store, cancel=task.cancel,
                                   progress=self._on_progress,
                                   price_per_hour=self.price_per_hour)  # fmt: skip
            self.last_snapshot = snap
            self._on_task_burst(snap.result)
            if self._ui is not None:
                self._ui.snapshot_chart.chart = plots.memory_timeline(
                    snap.steps, device_mem_mib=snap.result.device_mem_mib
                )
            return snap.summary()

        self._start_task("memory snapshot", "recording a burst's memory ...", work)

    def loss_parity(self, reference: Knobs | None = None, steps: int = 20) -> None:
        """The panel's knobs against ``reference`` (default: PyTorch's defaults at the panel's
        batch and accumulation) from the same weights on the same batches, in the background:
        the loss of both at every step is drawn under the charts, and the verdict (identical,
        within noise, drifting, diverged) lands in the message line
        (``workbench.analysis.parity``)."""
        current = self.knobs
        ref = reference or Knobs(batch_size=current.batch_size, grad_accum=current.grad_accum)

        def work(task: _Task) -> str:
            result = parity(self.workload, ref, current, steps=steps, device=self.device)
            self.last_parity = result
            if self._ui is not None:
                self._ui.snapshot_chart.chart = loss_overlay(result)
            return result.summary()

        label = f"loss parity: {steps} steps of the reference (twice) and of the current knobs"
        self._start_task("loss parity", label + " ...", work)

    def _supersede_task(self) -> str | None:
        """Cancel a running diagnose / tune for a newer action; its name, or None."""
        task = self._task
        if task is None or not task.thread.is_alive():
            return None
        task.superseded = True
        task.cancel.set()
        return task.name

    def diagnose(self) -> None:
        """Full vs loader-only vs compute-only with the panel's knobs, on a background thread;
        the verdict lands in the message line."""

        def work(task: _Task) -> str:
            d = diagnose(self.workload, self.knobs, window=self.window, device=self.device,
                         store=self.store, cancel=task.cancel, burst_progress=self._on_progress,
                         progress=lambda _stage, r: self._on_task_burst(r))  # fmt: skip
            return d.summary()

        self._start_task("diagnose", "diagnosing: full, loader-only, compute-only ...", work)

    def autotune(self, space: dict[str, list[Any]] | None = None, budget: int = 12) -> None:
        """Search ``space`` from the panel's knobs; bursts appear live in the charts. When the
        tuner finishes (or is stopped) its best config moves into the controls and becomes
        what Save writes; a newer action that cancels the tune leaves both alone."""
        space = space or default_space(self.device, self.workload, self.knobs)

        def work(task: _Task) -> str:
            t = tune(self.workload, space, budget=budget, base=self.knobs, window=self.window,
                     device=self.device, store=self.store, cancel=task.cancel,
                     price_per_hour=self.price_per_hour,
                     burst_progress=self._on_progress,
                     progress=lambda p: self._on_task_burst(p.result, p.knob))  # fmt: skip
            if not task.superseded:
                self._take_tune(t)
            return t.summary()

        label = f"auto-tuning over {', '.join(space)} (budget {budget}) ..."
        self._start_task("auto-tune", label, work)

    def _take_tune(self, t: Any) -> None:
        """The tune's best goes into the controls and Save; its last burst is a re-measure
        of the starting knobs, so ``last_result`` is not what was tuned."""
        self.last_tune = t
        best = t.best_result
        if t.best is not None and isinstance(best, BurstResult) and best.ok:
            self._to_save = (t, best)
            self._show_knobs(t.best)

    @property
    def seconds(self) -> float:
        return self.window.seconds

    def comm(self, sizes: list[int] | None = None) -> None:
        """All-reduce benchmark with the panel's world_size and NCCL knobs, in the background;
        every run of this panel is drawn in the busbw chart, so NCCL settings compare."""
        knobs = self.knobs

        def work(task: _Task) -> str:
            res = comm_bench(knobs.world_size, sizes=sizes, knobs=knobs, device=self.device,
                             cancel=task.cancel, nodes=knobs.nodes)  # fmt: skip
            if not res.ok:
                raise RuntimeError(f"comm benchmark {res.status}: {res.error}")
            self.comm_results.append(res)
            self._draw_comm()
            if self._ui is not None:  # CommResult.suspect: all-reduce sums that came out wrong
                checks = getattr(res, "suspect", [])
                self._ui.suspect.value = suspect_html("the comm benchmark", checks)
            return comm_summary(res)

        label = f"all-reduce benchmark on {knobs.world_size} rank(s) ..."
        self._start_task("comm benchmark", label, work)

    def _draw_comm(self) -> None:
        if self._ui is None or not self.comm_results:
            return
        frames = [_comm_frame(r) for r in self.comm_results]
        self._ui.charts["comm"].chart = plots.comm(pd.concat(frames, ignore_index=True))

    def _start_task(self, name: str, label: str, work: Any) -> None:
        """Start a long action on a thread; it replaces any running burst or task. The thread
        waits for the burst slot, so the main thread (and the panel) never blocks here."""
        self._runner.stop()
        self._supersede_task()
        openmp.release_pool()  # the kernel's main thread's team: bursts run as its loop would
        task = _Task(name, threading.Event())
        task.thread = threading.Thread(target=self._run_task, args=(task, work),
                                       name="workbench-task", daemon=True)  # fmt: skip
        self.message(label)
        self._task = task
        task.thread.start()

    def _run_task(self, task: _Task, work: Any) -> None:
        with exclusive(task.cancel) as got:
            try:
                text = work(task) if got else ""
            except Exception as exc:  # bad input: a message, the kernel keeps going
                text, error = f"{task.name} failed: {exc}", True
            else:
                error = False
        if task.superseded:  # the newer action's message stands
            return
        self.message(text or f"{task.name} cancelled", error=error)

    def _on_task_burst(self, result: Any, knob: str | None = None) -> None:
        if not isinstance(result, BurstResult):  # the loader-only measurement: no chart row
            return
        if knob:
            self.last_moved = knob
        self.last_result = result
        if self._ui is not None:
            self._ui.status.value = result_status(result)
            self._ui.result.value = result_html(result)
            self._ui.suspect.value = suspect_html(f"burst #{result.id}", result.suspect)
        self._redraw(highlight_id=result.id, knobs=result.knobs)

    def _show_knobs(self, knobs: Knobs) -> None:
        self.knobs = knobs
        if self._ui is not None:
            self._ui.syncing = True
            try:
                self._ui.controls.show(knobs)
            finally:
                self._ui.syncing = False

    def save_config(self, path: str | Path = "tuned.yaml") -> Path:
        """Save, as YAML, the last burst that ended ok (a stopped or superseded one measured
        nothing worth keeping), or the best of an auto-tune that finished after it."""
        if self._to_save is None:
            raise ValueError("no burst has finished ok yet: run one before saving a config")
        return save_config(self._to_save[0], path)

    def saved_what(self) -> str:
        """Which burst Save writes, in words (the message after a save says it)."""
        if self._to_save is None:
            return "nothing yet"
        what, r = self._to_save
        source = "the auto-tune best, burst" if what is not r else "burst"
        words = f"{source} #{r.id} ({knobs_summary(r.knobs)})"
        latest = self.last_result
        if latest is not None and latest.id != r.id and not latest.ok:
            words += f"; the latest, #{latest.id}, ended {latest.status}"
        return words

    # -- knob changes ----------------------------------------------------------------------
    def on_knob(self, name: str) -> None:
        ui = self._ui
        assert ui is not None
        if ui.syncing:
            return
        try:
            knobs = Knobs.from_dict(ui.controls.values())
        except KnobError as exc:
            ui.controls.note(note_target(exc.knob, ui), str(exc), kind="error")
            self.message(str(exc), error=True)
            return
        ui.controls.clear_errors(ui.disabled)
        self.message("")
        self.knobs, self.last_moved = knobs, name
        self.run()

    # -- callbacks from the burst thread -----------------------------------------------------
    def _on_progress(self, p: BurstProgress) -> None:
        """Every step of a burst reports here, on the burst's thread. The estimate follows
        every event (arithmetic only); the widgets only those ``_QuietWindow`` lets through,
        so the panel does not disturb the window it measures. The charts are redrawn after
        "done", in ``_on_result``, never inside a window."""
        self._estimate.update(p)
        ui = self._ui
        if ui is None or not self._quiet.due(p):
            return
        ui.status.value = self._estimate.text(p)
        ui.progress.value = self._estimate.fraction(p)

    def _on_result(self, result: BurstResult) -> None:
        """A panel burst ended. It is recorded already; showing it may still fail (a history
        store that cannot be read, a chart that cannot be built): that is a message too."""
        self.last_result = result
        if result.ok:
            self._to_save = (result, result)
        if self.events:
            self.events[-1]["result_s"] = time.perf_counter()
        try:
            self._show_result(result)
        except Exception as exc:
            self.message(f"burst #{result.id} ended {result.status}, but the panel could not "
                          f"show it: {type(exc).__name__}: {exc}", error=True)  # fmt: skip

    def _show_result(self, result: BurstResult) -> None:
        ui = self._ui
        if ui is None:
            return
        ui.status.value = result_status(result)
        ui.progress.value = 1.0 if result.ok else 0.0
        ui.result.value = result_html(result)
        ui.suspect.value = suspect_html(f"burst #{result.id}", result.suspect)
        if result.status in ("oom", "error"):
            where = note_target(result.bad_knob, ui) if result.bad_knob else self.last_moved
            ui.controls.note(where, f"{result.status}: {result.error}", kind="error")
            self.message(f"burst #{result.id} {result.status}: {result.error}", error=True)
        self._redraw(highlight_id=result.id, knobs=result.knobs, on_throughput=self._mark_chart)

    def _mark_chart(self) -> None:
        if self.events:
            self.events[-1]["chart_s"] = time.perf_counter()

    def _on_error(self, exc: BaseException) -> None:
        """A burst that could not start (bad input names its knob), or a failure the runner
        caught around it; either way a readable line, never a dead thread."""
        if self._ui is not None:
            self._ui.status.value = "not started"
            knob = getattr(exc, "knob", None)
            if knob:
                self._ui.controls.note(note_target(knob, self._ui), str(exc), kind="error")
            text = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            self.message(text, error=True)

    # -- drawing -----------------------------------------------------------------------------
    def _redraw(
        self, highlight_id: int | None, knobs: Knobs | None = None, on_throughput: Any = None
    ) -> None:
        """Redraw from the store. Throughput goes first: it is the chart a person watches, and
        building each Altair chart costs ~0.1-0.2 s on a small CPU."""
        ui = self._ui
        if ui is None:
            return
        df = self.store.frame(workload=self.workload.name, device=str(self.device))
        rows = plots.comparable(df, knobs or self.knobs, self.last_moved)
        knob = self.last_moved
        ui.charts["throughput"].chart = plots.throughput(rows, knob, highlight_id=highlight_id,
                                                         metric=self.y_metric)  # fmt: skip
        if on_throughput is not None:
            on_throughput()
        capacity_mib, capacity_label = self._capacity()
        ui.charts["memory"].chart = plots.memory(rows, knob, capacity_mib=capacity_mib,
                                                 capacity_label=capacity_label,
                                                 highlight_id=highlight_id)  # fmt: skip
        ui.charts["split"].chart = plots.step_split(rows, knob, highlight_id=highlight_id)
        ui.history.value = plots.history_html(df, n=8)

    def _capacity(self) -> tuple[float | None, str]:
        """The memory chart's rule: device memory on a GPU; on a CPU the peak is RSS, so the
        ceiling is system RAM (the same limit the tuner's memory margin uses)."""
        label = "device memory" if self.device.type == "cuda" else "system RAM"
        return self.info.total_mem_mib, label

    def message(self, text: str, error: bool = False) -> None:
        if self._ui is None:
            return
        colour = "#b00020" if error else "#333"
        body = html.escape(text)
        self._ui.message.value = f'<span style="color:{colour}">{body}</span>' if text else ""


def _comm_frame(res: Any) -> pd.DataFrame:
    """A comm result's rows, labelled for the chart; across nodes a line per scope (within a
    node, across nodes), so the link that limits shows as its own curve."""
    frame = res.frame()
    if "scope" in frame:
        return frame.assign(label=comm_label(res) + ", " + frame["scope"] + "-node")
    return frame.assign(label=comm_label(res))
