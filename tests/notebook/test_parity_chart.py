"""The loss overlay: the current config's loss against the reference's, step by step, in the
panel (the Loss parity button) and as a chart a lesson draws."""

import time

from workloads_for_tests import tensor_workload

from workbench import Knobs
from workbench.analysis.parity import parity
from workbench.notebook.parity_chart import loss_frame, loss_overlay
from workbench.notebook.ui import Bench


def _rows(chart) -> list[dict]:
    spec = chart.to_dict()
    return [row for ds in (spec.get("datasets") or {}).values() for row in ds]


def test_the_overlay_draws_both_runs_of_the_reference_and_the_current_config():
    r = parity(tensor_workload(), Knobs(batch_size=8), Knobs(batch_size=8, precision="bf16"),
               steps=3, device="cpu")  # fmt: skip
    frame = loss_frame(r)
    assert list(frame.groupby("run").size().items()) == [
        ("current", 3), ("reference", 3), ("reference, again", 3)]  # fmt: skip
    spec = loss_overlay(r).to_dict()
    assert spec["title"]["text"] == f"loss parity: {r.verdict}"
    assert spec["encoding"]["x"]["field"] == "step"
    assert {row["loss"] for row in _rows(loss_overlay(r))} >= set(r.candidate_losses)


def test_the_panel_s_loss_parity_button_draws_the_overlay_under_the_charts(store_path):
    bench = Bench(tensor_workload(), Knobs(batch_size=8, precision="bf16"), seconds=0.2,
                  warmup_steps=1, min_steps=2, store=store_path)  # fmt: skip
    bench.panel(autorun=False)
    bench.loss_parity(steps=3)
    deadline = time.perf_counter() + 60
    while bench.last_parity is None or bench._task.thread.is_alive():
        assert time.perf_counter() < deadline
        time.sleep(0.05)
    assert bench.last_parity.reference == Knobs(batch_size=8)
    assert bench._ui.snapshot_chart.chart.to_dict()["title"]["text"].startswith("loss parity")
    assert "parity within-noise" in bench._ui.message.value
