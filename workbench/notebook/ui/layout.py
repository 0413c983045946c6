"""The panel's widgets and their layout: knob controls, buttons, status row, charts, history.

Layout only: ``Bench`` (workbench/notebook/ui/panel.py) owns what happens when a control moves or a
button is pressed; the widgets here call back into it.
"""

from __future__ import annotations

import html
from typing import Any, Protocol

import altair as alt
import ipywidgets as w
import torch

from workbench.core.knobs import Knobs
from workbench.engine.hardware import DeviceInfo
from workbench.engine.workloads import Workload
from workbench.notebook import plots
from workbench.notebook.chart_widget import PanelChart
from workbench.notebook.ui.controls import KnobControls, disabled_reasons
from workbench.notebook.ui.drawn import drawn_signal


class PanelActions(Protocol):
    """What the widgets read from and call back into: the Bench (ui/panel.py) is one. The
    layout depends on this, not on the Bench, so the two modules do not import each other."""

    device: torch.device
    knobs: Knobs
    workload: Workload
    info: DeviceInfo
    seconds: float
    price_per_hour: float | None
    y_metric: str

    def on_knob(self, name: str) -> None: ...
    def set_price(self, value: Any) -> None: ...
    def set_y_metric(self, metric: str) -> None: ...
    def memory_snapshot(self) -> None: ...
    def message(self, text: str, error: bool = False) -> None: ...
    def save_config(self, path: str) -> Any: ...
    def saved_what(self) -> str: ...
    def run(self) -> None: ...
    def stop(self) -> None: ...
    def diagnose(self) -> None: ...
    def autotune(self) -> None: ...
    def comm(self) -> None: ...
    def loss_parity(self) -> None: ...


CHARTS = ("throughput", "memory", "split", "comm")


class PanelWidgets:
    """The widgets of one displayed panel, wired to a Bench: each control's change and each
    button calls back into the Bench, which owns the behaviour."""

    def __init__(self, bench: PanelActions):
        # first: its model reaches the browser first, and says "frontend" the soonest
        self.drawn = drawn_signal([f"wb-chart-{n}" for n in CHARTS])
        self.syncing = False
        self.disabled = disabled_reasons(bench.device.type, bench.workload)
        self.controls = KnobControls(bench.knobs, bench.device.type, bench.workload)
        for name, control in self.controls.controls.items():
            control.observe(lambda _c, n=name: bench.on_knob(n), names="value")
        self.status = _with_class(w.Label("ready"), "wb-status")
        self.progress = _with_class(w.FloatProgress(min=0.0, max=1.0), "wb-progress")
        self.result = _with_class(w.HTML(), "wb-result")
        self.message = _with_class(w.HTML(), "wb-message")
        self.suspect = _with_class(w.HTML(), "wb-suspect")  # failed self-checks, loudly
        self.history = _with_class(w.HTML(), "wb-history")
        self.charts = {n: _with_class(PanelChart(_placeholder(n)), f"wb-chart-{n}")
                       for n in CHARTS}  # fmt: skip
        self.snapshot_chart = _with_class(PanelChart(_placeholder("snapshot")),
                                          "wb-chart-snapshot")  # fmt: skip
        self.price, self.y_metric = _price_field(bench), _y_field(bench)
        self.root = _with_class(w.VBox([self._header(bench), self.controls.box(),
                                        self._buttons(bench), self._status_row(),
                                        self.message, self.suspect, self.result,
                                        self._charts_box(), self.snapshot_chart,
                                        self.history, self.drawn]), "wb-panel")  # fmt: skip

    def _header(self, bench: PanelActions) -> w.Widget:
        wl, info = bench.workload, bench.info
        text = (f"<b>workbench</b> — {html.escape(wl.name)} ({html.escape(wl.description)}) "
                f"on {html.escape(str(bench.device))} ({html.escape(info.name)}), "
                f"{bench.seconds:g} s bursts")  # fmt: skip
        return w.HTML(text)

    def _buttons(self, bench: PanelActions) -> w.Widget:
        run = _with_class(w.Button(description="Run", icon="play", tooltip="rerun"), "wb-run")
        stop = _with_class(w.Button(description="Stop", icon="stop"), "wb-stop")
        path = _with_class(w.Text(value="tuned.yaml", layout={"width": "180px"},
                                  continuous_update=False), "wb-save-path")  # fmt: skip
        save = _with_class(w.Button(description="Save config", icon="save"), "wb-save")
        diag = _with_class(w.Button(description="Diagnose", icon="stethoscope"), "wb-diagnose")
        tune = _with_class(w.Button(description="Auto-tune", icon="magic"), "wb-tune")
        comm_tip = "all-reduce bus bandwidth by message size, on world_size ranks"
        comm = _with_class(
            w.Button(description="Comm bench", icon="exchange", tooltip=comm_tip), "wb-comm"
        )
        snap_tip = "one burst under PyTorch's memory recorder: memory at every step (CUDA: a file"
        snap_tip += " for pytorch.org/memory_viz)"
        snap = _with_class(w.Button(description="Memory snapshot", icon="camera",
                                    tooltip=snap_tip), "wb-snapshot")  # fmt: skip
        snap.on_click(lambda _b: bench.memory_snapshot())
        parity_tip = "the current knobs against the defaults from the same weights on the same "
        parity_tip += "batches: the loss at every step, and whether it stays within noise"
        parity = _with_class(w.Button(description="Loss parity", icon="balance-scale",
                                      tooltip=parity_tip), "wb-parity")  # fmt: skip
        parity.on_click(lambda _b: bench.loss_parity())
        comm.on_click(lambda _b: bench.comm())
        diag.on_click(lambda _b: bench.diagnose())
        tune.on_click(lambda _b: bench.autotune())
        run.on_click(lambda _b: bench.run())
        stop.on_click(lambda _b: bench.stop())
        save.on_click(lambda _b: self._save(bench, path.value))
        return w.VBox([w.HBox([run, stop, diag, tune, comm, snap, parity]),
                       w.HBox([save, path, self.price, self.y_metric])])  # fmt: skip

    def _save(self, bench: PanelActions, path: str) -> None:
        try:
            saved = bench.save_config(path)
        except (ValueError, OSError) as exc:
            bench.message(str(exc), error=True)
            return
        bench.message(f"saved {saved}: {bench.saved_what()}")

    def _status_row(self) -> w.Widget:
        return w.HBox([self.progress, self.status])

    def _charts_box(self) -> w.Widget:
        c = self.charts
        return w.VBox([w.HBox([c["throughput"], c["memory"]]), w.HBox([c["split"], c["comm"]])])


_EMPTY = {
    "throughput": ("Throughput", "waiting for the first burst: it starts once the panel is "
                   "drawn (or press Run)"),
    "memory": ("Peak memory", "each burst's peak memory lands here"),
    "split": ("Step time split", "each burst's data wait and compute land here"),
    "comm": ("All-reduce bus bandwidth", "press Comm bench to measure all-reduce by size"),
    "snapshot": ("Memory at every step", "press Memory snapshot to record one burst"),
}  # fmt: skip
"""What each empty chart says fills it."""
Y_METRICS = [
    ("samples/s", "samples_per_s"),
    ("cost per million samples", "cost_per_million_samples"),
]
PRICE_TIP = ("price of one device hour (GPU hour; the machine on a CPU): every burst then has a "
             "cost per million samples; empty for none")  # fmt: skip


def _placeholder(name: str) -> alt.LayerChart:
    title, message = _EMPTY[name]
    return plots.waiting(title, message)


def _price_field(bench: PanelActions) -> w.Text:
    field = w.Text(value=_price_text(bench.price_per_hour), placeholder="none",
                   description="price / device h", style={"description_width": "110px"},
                   layout={"width": "220px"}, continuous_update=False,
                   tooltip=PRICE_TIP)  # fmt: skip
    field.observe(lambda _c: bench.set_price(field.value), names="value")
    return _with_class(field, "wb-price")


def _y_field(bench: PanelActions) -> w.Dropdown:
    field = w.Dropdown(options=Y_METRICS, value=bench.y_metric, description="throughput chart",
                       style={"description_width": "110px"}, layout={"width": "330px"})  # fmt: skip
    field.observe(lambda _c: bench.set_y_metric(field.value), names="value")
    return _with_class(field, "wb-y-metric")


def _price_text(price: float | None) -> str:
    return "" if price is None else f"{price:g}"


def _with_class(widget: Any, css: str) -> Any:
    widget.add_class(css)
    return widget


def note_target(knob: str, ui: PanelWidgets) -> str:
    """The control a message about ``knob`` goes next to (NCCL variables share one box)."""
    return knob if knob in ui.controls.controls else "nccl"
