"""The panel without a browser: widgets work in-process, so behaviour is tested directly."""

import os
import time

import pytest
from workloads_for_tests import hungry_workload, tensor_workload

from workbench import Knobs
from workbench.ui import Bench


def _bench(store_path, workload=None, **kw):
    return Bench(workload or tensor_workload(), Knobs(batch_size=8), seconds=0.2,
                 warmup_steps=1, min_steps=2, store=store_path, **kw)  # fmt: skip


def _points(chart_widget) -> list[dict]:
    """Data rows behind the throughput chart as the browser would get them."""
    spec = chart_widget.chart.to_dict()
    rows = []
    for ds in (spec.get("datasets") or {}).values():
        rows.extend(ds)
    return rows


def _settle(bench, timeout=60):
    assert bench.wait(timeout)
    time.sleep(0.05)


def test_panel_has_a_control_for_every_knob_with_tooltips(store_path):
    from workbench.knobs import KNOB_NAMES

    bench = _bench(store_path)
    bench.panel(autorun=False)
    controls = bench._ui.controls.controls
    assert set(controls) == set(KNOB_NAMES)
    assert all(c.tooltip for c in controls.values())
    assert controls["batch_size"].options[:4] == ((("1", 1), ("2", 2), ("4", 4), ("8", 8)))
    assert controls["num_workers"].min == 0
    assert controls["pin_memory"].disabled  # no CUDA here
    assert "CUDA" in bench._ui.controls.notes["pin_memory"].value
    assert not controls["world_size"].disabled  # ranks on CPU cores, over gloo
    assert (controls["world_size"].min, controls["world_size"].max) == (1, os.cpu_count())
    assert controls["nccl"].disabled and "gloo" in bench._ui.controls.notes["nccl"].value
    assert not controls["static_graph"].disabled


def test_first_burst_then_a_knob_move_adds_a_point(store_path):
    bench = _bench(store_path)
    bench.panel()  # autorun: the first burst starts
    _settle(bench)
    ui = bench._ui
    first = bench.last_result
    assert first.ok and f"burst #{first.id}" in ui.status.value
    ui.controls.controls["batch_size"].value = 16  # what a slider release does
    _settle(bench)
    second = bench.last_result
    assert second.id != first.id and second.knobs.batch_size == 16
    assert "batch_size=16" in ui.result.value
    assert "samples/s" in ui.result.value
    bench._redraw(highlight_id=second.id, knobs=second.knobs)
    ids = {row.get("id") for row in _points(ui.charts["throughput"])}
    assert {first.id, second.id} <= ids
    assert f"#{second.id}" in ui.history.value or str(second.id) in ui.history.value


def test_a_combination_that_cannot_work_is_a_message_not_a_burst(store_path):
    bench = _bench(store_path)
    bench.panel(autorun=False)
    ui = bench._ui
    ui.controls.controls["prefetch_factor"].value = 4  # with num_workers=0
    assert not bench._runner.busy and bench.last_result is None
    assert "needs num_workers" in ui.controls.notes["prefetch_factor"].value
    assert "needs num_workers" in ui.message.value
    ui.controls.controls["num_workers"].value = 1  # now it works: the error clears, a burst runs
    _settle(bench)
    assert bench.last_result.ok and bench.last_result.knobs.prefetch_factor == 4
    assert "needs num_workers" not in ui.controls.notes["prefetch_factor"].value


def test_oom_shows_next_to_the_knob_and_the_panel_keeps_working(store_path):
    bench = _bench(store_path, workload=hungry_workload(limit=8))
    bench.panel(autorun=False)
    ui = bench._ui
    ui.controls.controls["batch_size"].value = 32
    _settle(bench)
    assert bench.last_result.status == "oom"
    assert "oom" in ui.controls.notes["batch_size"].value
    assert "oom" in ui.status.value
    ui.controls.controls["batch_size"].value = 4
    _settle(bench)
    assert bench.last_result.ok


def test_run_twice_and_stop(store_path):
    bench = Bench(tensor_workload(), seconds=30, warmup_steps=1, store=store_path)
    bench.panel(autorun=False)
    bench.run()
    bench.run()  # the second press restarts
    assert "restarted" in bench._ui.message.value
    time.sleep(0.5)
    bench.stop()
    _settle(bench)
    assert bench.last_result.status == "cancelled"


def test_save_without_a_burst_is_a_message(store_path, tmp_path):
    bench = _bench(store_path)
    bench.panel(autorun=False)
    bench._ui._save(bench, str(tmp_path / "t.yaml"))
    assert "no burst has finished yet" in bench._ui.message.value
    bench.run()
    _settle(bench)
    bench._ui._save(bench, str(tmp_path / "t.yaml"))
    assert "saved" in bench._ui.message.value
    from workbench.config import load_knobs

    assert load_knobs(tmp_path / "t.yaml") == bench.last_result.knobs


def test_rerunning_the_cell_gives_a_fresh_panel_over_the_same_history(store_path):
    bench = _bench(store_path)
    bench.panel()
    _settle(bench)
    again = _bench(store_path)
    again.panel(autorun=False)
    assert str(bench.last_result.id) in again._ui.history.value


@pytest.mark.parametrize("text", ["NCCL_ALGO", "ALGO=Ring"])
def test_bad_nccl_text_is_refused_with_a_message(store_path, text):
    from workbench.knobs import KnobError
    from workbench.ui.controls import nccl_from_text

    with pytest.raises(KnobError):
        from workbench import Knobs as K

        K(nccl=nccl_from_text(text))


def test_diagnose_button_gives_a_verdict_in_plain_words(store_path):
    bench = _bench(store_path)
    bench.panel(autorun=False)
    bench.diagnose()
    _settle(bench, timeout=120)
    text = bench._ui.message.value.lower()
    assert any(word in text for word in ("data-bound", "compute-bound", "balanced"))
    assert bench.last_result is not None  # its bursts were drawn as they landed


def test_autotune_moves_the_best_config_into_the_controls(store_path):
    bench = _bench(store_path)
    bench.panel(autorun=False)
    bench.autotune(space={"batch_size": [4, 8, 16]}, budget=5)
    _settle(bench, timeout=180)
    controls = bench._ui.controls.controls
    assert controls["batch_size"].value == bench.knobs.batch_size
    assert bench.knobs.batch_size in (4, 8, 16)
    assert "samples/s" in bench._ui.message.value or "best" in bench._ui.message.value.lower()
    assert not bench._runner.busy  # moving the controls did not start a burst


def test_comm_button_draws_busbw_for_the_panels_world_size(store_path):
    bench = _bench(store_path)
    bench.panel(autorun=False)
    bench._ui.controls.controls["world_size"].value = 2
    _settle(bench)  # the knob move ran a burst: a hand-made workload cannot go to torchrun
    assert "fresh processes" in bench._ui.message.value
    bench.comm(sizes=[8192, 65536])
    _settle(bench, timeout=180)
    assert "peak busbw" in bench._ui.message.value, bench._ui.message.value
    rows = _points(bench._ui.charts["comm"])
    assert [r["size_bytes"] for r in rows] == [8192, 65536]
    assert {r["label"] for r in rows} == {"2 rank(s), defaults"}


def test_a_two_rank_burst_from_the_panel_lands_in_the_charts(store_path, tiny_data):
    bench = Bench("cnn", Knobs(batch_size=4), seconds=0.3, warmup_steps=1, min_steps=2,
                  store=store_path, data_dir=tiny_data)  # fmt: skip
    bench.panel(autorun=False)
    bench._ui.controls.controls["world_size"].value = 2
    _settle(bench, timeout=180)
    r = bench.last_result
    assert r is not None and r.status == "ok", bench._ui.message.value
    assert r.backend == "gloo" and len(r.ranks) == 2
    points = _points(bench._ui.charts["throughput"])
    assert {p["knob_value"] for p in points if p.get("id") == r.id} == {2}
