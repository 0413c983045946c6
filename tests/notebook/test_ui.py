"""The panel without a browser: widgets work in-process, so behaviour is tested directly."""

import os
import time

import pytest
import torch
from workloads_for_tests import hungry_workload, sleepy_workload, tensor_workload

from workbench import Knobs
from workbench.notebook.ui import Bench


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
    from workbench.core.knobs import KNOB_NAMES

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
    assert controls["decode"].options == ("cpu", "gpu") and controls["decode"].value == "cpu"
    assert controls["decode"].disabled and "CUDA" in bench._ui.controls.notes["decode"].value


def test_decode_is_a_dropdown_that_acts_on_a_gpu():
    from workbench.core.knobs import knob_specs
    from workbench.notebook.ui import controls

    spec = next(s for s in knob_specs() if s.name == "decode")
    dropdown = controls.make_control(spec, "gpu", "cuda")
    assert dropdown.options == ("cpu", "gpu") and dropdown.value == "gpu"
    assert "nvJPEG" in dropdown.tooltip
    assert "decode" not in controls.disabled_reasons("cuda")
    assert "nvJPEG" in controls.disabled_reasons("cpu")["decode"]


def test_attention_is_a_dropdown_greyed_for_a_model_without_attention(tiny_data):
    from workbench.core.knobs import knob_specs
    from workbench.engine.workloads import resolve_workload
    from workbench.notebook.ui import controls

    spec = next(s for s in knob_specs() if s.name == "attention")
    dropdown = controls.make_control(spec, "flash", "cpu")
    assert dropdown.options == ("auto", "flash", "efficient", "cudnn", "math")
    assert "sdpa_kernel" in dropdown.tooltip
    cnn = resolve_workload("cnn", tiny_data)
    assert "no attention layers" in controls.disabled_reasons("cpu", cnn)["attention"]
    gpt = resolve_workload("gpt", tiny_data)  # flash and math have CPU kernels: it acts here
    assert "attention" not in controls.disabled_reasons("cpu", gpt)
    assert "attention" not in controls.disabled_reasons("cpu", tensor_workload())  # unknown


def test_nodes_is_a_slider_up_to_the_local_launchers_reach(store_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    bench = _bench(store_path)
    bench.panel(autorun=False)
    nodes = bench._ui.controls.controls["nodes"]
    assert not nodes.disabled  # local "nodes" on this CPU's cores
    assert (nodes.min, nodes.max) == (1, os.cpu_count())


def test_nodes_is_greyed_with_the_reason_where_no_launcher_reaches_a_second_node(monkeypatch):
    from workbench.notebook.ui import controls

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(controls.torch.cuda, "device_count", lambda: 1)
    reason = controls.disabled_reasons("cuda")["nodes"]
    assert "one GPU" in reason and "salloc" in reason
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "4")
    assert "nodes" not in controls.disabled_reasons("cuda")
    assert controls.max_nodes("cuda") == 4


def test_sharding_is_greyed_with_the_reason_where_the_machine_runs_one_rank(monkeypatch):
    from workbench.core.knobs import knob_specs
    from workbench.notebook.ui import controls

    spec = next(s for s in knob_specs() if s.name == "sharding")
    assert controls.make_control(spec, "fsdp", "cpu").options == ("ddp", "fsdp")
    monkeypatch.setattr(controls.torch.cuda, "device_count", lambda: 1)
    reasons = controls.disabled_reasons("cuda")
    assert reasons["sharding"] == reasons["reshard_after_forward"]
    assert "one GPU here runs one rank" in reasons["sharding"]
    monkeypatch.setattr(controls.torch.cuda, "device_count", lambda: 8)
    assert "sharding" not in controls.disabled_reasons("cuda")
    monkeypatch.setattr(controls.os, "cpu_count", lambda: 1)
    assert "one CPU core" in controls.disabled_reasons("cpu")["reshard_after_forward"]
    monkeypatch.setattr(controls.os, "cpu_count", lambda: 2)  # two gloo ranks, as the tests run
    assert "sharding" not in controls.disabled_reasons("cpu")


def test_a_multi_node_result_lists_its_nodes_and_marks_the_slowest():
    from workbench.notebook.ui.status import nodes_html

    nodes = [
        {"node": "local-0", "ranks": [0, 1], "samples_per_s": 80.0, "step_ms_p50": 40.0,
         "data_wait_pct": 5.0, "peak_mem_mib": 900.0},
        {"node": "local-1", "ranks": [2, 3], "samples_per_s": 50.0, "step_ms_p50": 64.0,
         "data_wait_pct": 31.0, "peak_mem_mib": None},
    ]  # fmt: skip
    table = nodes_html(nodes)
    assert table.count("<tr>") == 3 and "2,3" in table
    row_of_slow = table.split("local-1")[1].split("</tr>")[0]
    assert "slowest" in row_of_slow and "64.0" in row_of_slow
    assert "slowest" not in table.split("local-1")[0]
    assert nodes_html(nodes[:1]) == ""  # one node: the burst's own line says it all


def test_comm_summary_names_the_peak_within_and_across_nodes():
    from types import SimpleNamespace

    from workbench.notebook.ui.status import comm_summary

    rows = [
        {"scope": "intra", "size_bytes": 1 << 20, "busbw_gbps": 9.0},
        {"scope": "inter", "size_bytes": 1 << 20, "busbw_gbps": 1.5},
        {"scope": "inter", "size_bytes": 1 << 24, "busbw_gbps": 2.5},
    ]
    res = SimpleNamespace(world_size=4, rows=rows, backend="gloo")
    text = comm_summary(res)
    assert "peak inter-node busbw 2.50 GB/s at 16,777,216" in text
    assert "peak intra-node busbw 9.00 GB/s" in text


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


def _moved_to_batch_32(store_path, workload):
    """A panel whose first burst ran at batch size 32: a move of the slider, as a person's."""
    bench = _bench(store_path, workload=workload)
    bench.panel(autorun=False)
    bench._ui.controls.controls["batch_size"].value = 32
    _settle(bench)
    return bench, bench._ui


def test_oom_shows_next_to_the_knob_and_the_panel_keeps_working(store_path):
    bench, ui = _moved_to_batch_32(store_path, hungry_workload(limit=8))
    assert bench.last_result.status == "oom"
    assert "oom" in ui.controls.notes["batch_size"].value
    assert "oom" in ui.status.value
    ui.controls.controls["batch_size"].value = 4
    _settle(bench)
    assert bench.last_result.ok


def test_a_batch_bigger_than_the_dataset_is_noted_at_batch_size(store_path):
    bench, ui = _moved_to_batch_32(store_path, tensor_workload(n=24))
    ui.controls.controls["num_workers"].value = 1  # fails again, still for the batch size
    _settle(bench)
    assert bench.last_result.bad_knob == "batch_size"
    assert "the dataset has only 24 samples" in ui.controls.notes["batch_size"].value
    assert ui.controls.notes["num_workers"].value == ""
    ui.controls.controls["batch_size"].value = 16
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
    assert "no burst has finished ok yet" in bench._ui.message.value
    bench.run()
    _settle(bench)
    bench._ui._save(bench, str(tmp_path / "t.yaml"))
    assert "saved" in bench._ui.message.value
    from workbench.config.saved import load_knobs

    assert load_knobs(tmp_path / "t.yaml") == bench.last_result.knobs


def test_rerunning_the_cell_gives_a_fresh_panel_over_the_same_history(store_path):
    bench = _bench(store_path)
    bench.panel()
    _settle(bench)
    again = _bench(store_path)
    again.panel(autorun=False)
    assert str(bench.last_result.id) in again._ui.history.value


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("NCCL_ALGO", ["NCCL_ALGO", "one NCCL_NAME=value per line"]),
        ("NCCL_ALGO=Bogus", ["NCCL_ALGO", "Bogus", "Ring"]),
        ("ALGO=Ring", ["ALGO", "NCCL_[A-Z0-9_]+"]),
    ],
)
def test_bad_nccl_text_is_refused_with_a_message(store_path, text, words):
    bench = _bench(store_path)
    bench.panel(autorun=False)
    ui = bench._ui
    ui.controls.controls["nccl"].value = text  # what typing and leaving the box does
    note = ui.controls.notes["nccl"]
    assert all(word in note.value for word in words), note.value
    assert "wb-error" in note._dom_classes
    assert all(word in ui.message.value for word in words)
    assert not bench._runner.busy and bench.last_result is None
    assert bench.store.frame().empty  # no burst ran, none was recorded


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


@pytest.mark.parametrize(
    ("readings", "shown"),
    [
        # a loaded machine: the pick reads 1.25x the start, each run anywhere in 0.4-2.5x
        ({4: [100.0, 40.0, 250.0], 8: [125.0, 50.0, 300.0]}, "words"),
        ({4: [50.0, 51.0, 49.0], 8: [100.0, 98.0, 102.0]}, "figures"),
    ],
)
def test_autotune_shows_words_not_figures_when_the_runs_cannot_tell(
    store_path, monkeypatch, readings, shown
):
    from workbench.core.results import BurstResult

    calls: list[Knobs] = []

    def bursts(workload, knobs, **kwargs):  # scripted per batch size, by how often it ran
        seq = readings[knobs.batch_size]
        calls.append(knobs)
        return BurstResult(workload="tiny", device="cpu", knobs=knobs, peak_mem_mib=100.0,
                           samples_per_s=seq[(calls.count(knobs) - 1) % len(seq)],
                           data_wait_pct=5.0, step_ms_p50=10.0)  # fmt: skip

    monkeypatch.setattr("workbench.tuning.tuner.run_burst", bursts)
    bench = _bench(store_path)
    bench.knobs = Knobs(batch_size=4)  # the start
    bench.panel(autorun=False)
    bench.autotune(space={"batch_size": [4, 8]}, budget=6)
    _settle(bench)
    t, text = bench.last_tune, bench._ui.message.value
    assert t is not None and t.best == Knobs(batch_size=8)
    if shown == "words":
        assert t.speedup_uncertain is True and t.start_runs == 3
        assert "the runs cannot separate the best from the start" in text
        assert "more bursts" in text and f"{t.speedup:.2f}x" not in text and "95%" not in text
    else:
        assert t.speedup_uncertain is False
        assert f"{t.speedup:.2f}x ({t.speedup_low:.2f}-{t.speedup_high:.2f}, 95%)" in text


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


def _widgets(root):
    """Every widget under ``root`` (boxes and tabs hold theirs in ``children``)."""
    found, todo = [], [root]
    while todo:
        widget = todo.pop()
        found.append(widget)
        todo.extend(getattr(widget, "children", ()))
    return found


def test_no_control_reports_per_keystroke_or_per_pixel(store_path):
    bench = _bench(store_path)
    root = bench.panel(autorun=False)
    live = [w for w in _widgets(root) if w.has_trait("continuous_update")]
    assert {type(w).__name__ for w in live} >= {"Textarea", "FloatText", "SelectionSlider"}
    assert [w.description or type(w).__name__ for w in live if w.continuous_update] == []


@pytest.mark.parametrize(
    ("knob", "value", "allowed"),
    [
        ("bucket_cap_mb", 10000.0, "a number from 0.1 to 4096"),
        ("bucket_cap_mb", 0.0, "a number from 0.1 to 4096"),
        ("dali_hw_decoder_load", 1.5, "a number from 0 to 1"),
    ],
)
def test_an_out_of_range_number_is_a_knob_error_not_a_silent_clamp(
    store_path, knob, value, allowed
):
    bench = _bench(store_path)
    bench.panel(autorun=False)
    ui = bench._ui
    ui.controls.controls[knob].value = value
    assert ui.controls.controls[knob].value == value  # kept as typed, so the error is visible
    expected = f"{knob}={value!r} is not allowed: {allowed}"
    assert expected in ui.controls.notes[knob].value
    assert expected in ui.message.value
    assert not bench._runner.busy and bench.last_result is None


def _wait_for_status(bench, *prefixes, timeout=60):
    deadline = time.perf_counter() + timeout
    while not bench._ui.status.value.startswith(prefixes):
        assert time.perf_counter() < deadline, bench._ui.status.value
        time.sleep(0.02)


def _spy_on_bursts(bench):
    """(whose, phase) of every burst the panel runs: "run" for its own (the runner's
    callback), "task" for a diagnosis's or tune's. Not told apart by thread: every burst
    runs on a fresh thread of its own (workbench.engine.burst)."""
    seen = []
    original = bench._on_progress

    def spy(whose):
        def record(p):
            seen.append((whose, p.phase))
            original(p)

        return record

    bench._on_progress = spy("task")  # tasks look it up when they start
    bench._runner._on_progress = spy("run")
    return seen


def _most_at_once(seen):
    active = most = 0
    for _whose, phase in seen:
        active += {"setup": 1, "done": -1}.get(phase, 0)
        most = max(most, active)
    return most


def test_run_during_an_autotune_cancels_the_tune_before_its_burst_starts(store_path):
    bench = Bench(tensor_workload(), Knobs(batch_size=8), seconds=30, warmup_steps=1,
                  min_steps=2, store=store_path)  # fmt: skip
    bench.panel(autorun=False)
    seen = _spy_on_bursts(bench)
    bench.autotune(space={"batch_size": [4, 8, 16]}, budget=5)
    _wait_for_status(bench, "measuring")
    bench.run()  # a newer action wins
    assert "auto-tune was cancelled" in bench._ui.message.value
    deadline = time.perf_counter() + 60
    while ("run", "measuring") not in seen:  # the panel's own burst is measuring
        assert time.perf_counter() < deadline
        time.sleep(0.02)
    bench.stop()
    _settle(bench)
    assert _most_at_once(seen) == 1
    starts = [whose for whose, phase in seen if phase == "setup"]
    assert starts == ["task", "run"]  # the tune's burst first, then the panel's own
    assert bench.last_result.status == "cancelled" and bench.last_result.knobs.batch_size == 8
    assert bench.knobs.batch_size == 8  # a superseded tune moves nothing into the controls
    assert bench._ui.controls.controls["batch_size"].value == 8
    assert "auto-tune was cancelled" in bench._ui.message.value


def test_rerunning_the_cell_cancels_the_old_panels_burst(store_path):
    old = Bench(tensor_workload(), Knobs(batch_size=8), seconds=30, warmup_steps=1,
                store=store_path)  # fmt: skip
    old.panel()
    _wait_for_status(old, "measuring")
    new = _bench(store_path)
    new.panel()  # autorun: its first burst waits for the old one to stop
    _settle(new)
    assert old.wait(5)
    assert old.last_result.status == "cancelled"
    assert new.last_result.ok


def test_save_after_stop_saves_the_last_burst_that_ended_ok(store_path, tmp_path):
    from workbench.config.saved import load_knobs

    bench = Bench(sleepy_workload(0.01), Knobs(batch_size=4), seconds=0.2, warmup_steps=1,
                  min_steps=2, store=store_path)  # fmt: skip
    bench.panel()
    _settle(bench)
    good = bench.last_result
    assert good.ok
    bench._ui.controls.controls["batch_size"].value = 128  # 1.3 s per step: stoppable
    _wait_for_status(bench, "warm-up", "measuring")
    bench.stop()
    _settle(bench)
    assert bench.last_result.status == "cancelled"
    bench._ui._save(bench, str(tmp_path / "t.yaml"))
    message = bench._ui.message.value
    assert "saved" in message and f"burst #{good.id} (batch_size=4, num_workers=0)" in message
    assert f"#{bench.last_result.id}, ended cancelled" in message
    assert load_knobs(tmp_path / "t.yaml") == good.knobs


def test_save_after_an_autotune_writes_the_tuned_knobs(store_path, tmp_path):
    from workbench.config.saved import load_knobs

    bench = _bench(store_path)
    bench.knobs = Knobs(batch_size=4)
    bench.panel(autorun=False)
    bench.autotune(space={"batch_size": [4, 64]}, budget=5)
    _settle(bench, timeout=180)
    best = bench.knobs
    assert best == bench.last_tune.best  # the tuner moved its best into the controls
    # (which batch wins is the tuner's call under this machine's noise, not this test's)
    # the tuner's last burst may be a re-measure of the start: Save must not take that one
    bench._ui._save(bench, str(tmp_path / "t.yaml"))
    assert load_knobs(tmp_path / "t.yaml") == best
    assert "the auto-tune best, burst #" in bench._ui.message.value


def test_memory_chart_on_a_cpu_fits_the_peaks_under_a_system_ram_edge(store_path):
    """System RAM is far above a burst's peak: the axis fits the peaks (the growth with batch
    size stays visible) and system RAM is the labelled top edge, with the headroom."""
    from workbench.engine import hardware

    bench = _bench(store_path)
    bench.panel()
    _settle(bench)
    ram_mib = hardware.device_info(bench.device).total_mem_mib
    (capacity,) = [r for r in _points(bench._ui.charts["memory"]) if "capacity_mib" in r]
    assert capacity["capacity_mib"] == ram_mib
    assert capacity["label"] == f"system RAM {ram_mib:,.0f} MiB"
    assert capacity["edge"].startswith(f"system RAM {ram_mib:,.0f} MiB above: ")
    assert capacity["edge"].endswith("MiB of headroom")


def test_the_panel_prices_its_bursts_and_draws_cost(store_path):
    bench = _bench(store_path)
    bench.panel(autorun=False)
    bench._ui.price.value = "-2"  # refused in the message line, nothing changes
    assert bench.price_per_hour is None
    assert "price_per_hour=-2.0 is not allowed" in bench._ui.message.value
    bench._ui.price.value = "3"
    bench.run()
    _settle(bench)
    r = bench.last_result
    assert r.ok and r.cost["price_per_hour"] == 3.0
    bench._ui.y_metric.value = "cost_per_million_samples"
    spec = bench._ui.charts["throughput"].chart.to_dict()
    assert spec["title"]["text"].startswith("Cost per million samples")
    assert "cost/M samples" in bench._ui.history.value


def test_empty_charts_say_what_fills_them(store_path):
    bench = _bench(store_path)
    bench.panel(autorun=False)
    comm = str(bench._ui.charts["comm"].chart.to_dict())
    assert "press Comm bench" in comm and "waiting for the first burst" not in comm
    assert "press Memory snapshot" in str(bench._ui.snapshot_chart.chart.to_dict())


def test_status_line_estimates_the_time_left_from_step_times(store_path):
    from workbench.engine.burst import BurstProgress as P

    bench = Bench(tensor_workload(), seconds=2.0, warmup_steps=3, min_steps=10, store=store_path)
    bench.panel(autorun=False)
    status, bar = bench._ui.status, bench._ui.progress

    def show(phase, elapsed_s, steps):
        time.sleep(0.11)  # past the status line's update throttle
        bench._on_progress(P(phase, elapsed_s, 2.0, steps))
        return status.value

    assert show("setup", 0.0, 0).startswith("setting up")
    stretched = "(min_steps=10 outlasts the 2 s window)"
    # the first warm-up step took 0.9 s: 2 more of those, then 10 steps of 0.9 s
    assert show("warmup", 0.9, 1) == f"warm-up: step 1 of 3 (0.9 s); about 10.8 s left {stretched}"
    # the second took 0.3 s (the first carried start-up): 1 more, then max(2 s, 10 x 0.3 s)
    assert show("warmup", 1.2, 2) == f"warm-up: step 2 of 3 (1.2 s); about 3.3 s left {stretched}"
    assert show("warmup", 1.4, 3).endswith("about 2.0 s left (a 2 s window)")
    # 4 steps in 1.0 s: 6 more at 0.25 s outlast the 1.0 s left in the window
    assert show("measuring", 1.0, 4) == f"measuring: 1.0 s, 4 steps; about 1.5 s left {stretched}"
    assert bar.value == pytest.approx(1.0 / 2.5)
    show("setup", 0.0, 0)  # the next burst: its window's first step is shown at once
    assert show("measuring", 0.5, 20).endswith("about 1.5 s left (a 2 s window)")
    assert bar.value == pytest.approx(0.25)


def _window_spy(bench, monkeypatch):
    """Widget messages sent inside each measured window of the panel's bursts, and the
    progress events of those windows. A window runs from the last warm-up step's report to
    the "done" report (taken before the panel hears of it)."""
    import ipywidgets as w

    sent, windows, events, start = [], [], [], []
    original_send = w.Widget._send

    def send(widget, msg, buffers=None):
        sent.append(time.perf_counter())
        original_send(widget, msg, buffers)

    monkeypatch.setattr(w.Widget, "_send", send)
    deliver = bench._runner._on_progress

    def progress(p):
        if p.phase == "done":
            windows.append((start[-1], time.perf_counter()))
        events.append(p.phase)
        deliver(p)
        if p.phase == "warmup":
            start.append(time.perf_counter())

    bench._runner._on_progress = progress
    return lambda: [sum(a <= t <= b for t in sent) for a, b in windows], events


def test_the_panel_is_quiet_inside_the_measured_window(store_path, monkeypatch):
    """Issue 12: a panel burst read below the same burst run from a cell. Widget updates
    inside the window are comm messages and browser redraws on the measured cores: the
    panel sends a bounded few per window (one per second of it), not one per step."""
    seconds = 1.5
    bench = Bench(tensor_workload(), Knobs(batch_size=8), seconds=seconds, warmup_steps=1,
                  min_steps=2, store=store_path)  # fmt: skip
    bench.panel(autorun=False)
    in_window, events = _window_spy(bench, monkeypatch)
    bench.run()
    _settle(bench)
    assert bench.last_result.ok
    steps = events.count("measuring")
    assert steps == bench.last_result.steps >= 10  # milliseconds per step: many events
    window_s = bench.last_result.measured_s  # at least `seconds`; longer on a loaded machine
    updates_allowed = 1 + int(window_s / 1.0)  # the window's first step, then one a second
    (messages,) = in_window()
    assert 2 <= messages <= 2 * updates_allowed  # status line and progress bar per update
    assert f"burst #{bench.last_result.id}" in bench._ui.status.value  # shown after "done"


def test_failed_self_checks_are_shown_loudly_beside_the_result(store_path):
    import dataclasses

    bench = _bench(store_path)
    bench.panel()
    _settle(bench)
    ui, passed = bench._ui, bench.last_result
    assert passed.suspect == [] and ui.suspect.value == ""
    checks = ["window clock ran backwards", "samples <counted> twice"]
    bench._on_result(dataclasses.replace(passed, suspect=checks))  # what the runner calls
    warning = ui.suspect.value
    assert f"do not trust burst #{passed.id}: 2 self-checks failed" in warning
    assert "window clock ran backwards" in warning and "samples &lt;counted&gt; twice" in warning
    assert "#b00020" in warning  # the error colour, in a box of its own
    assert ui.root.children.index(ui.suspect) == ui.root.children.index(ui.message) + 1
    bench._on_result(passed)  # a newer burst that passed its checks: the warning goes
    assert ui.suspect.value == ""


# -- the first burst waits for the browser to draw the panel (issue 12) -----------------------


def _first_draw(hello_s=5.0, drawn_s=5.0):
    from workbench.notebook.ui.drawn import FirstDraw

    released = []
    first = FirstDraw(lambda: released.append(time.perf_counter()), hello_s=hello_s,
                      drawn_s=drawn_s)  # fmt: skip
    return first, released


def test_first_draw_lets_the_burst_go_on_the_browsers_drawn_message():
    first, released = _first_draw()
    first.arm(frontend_possible=True)
    first.on_message({"event": "frontend"})
    time.sleep(0.1)
    assert released == [] and first.frontend_s is not None
    first.on_message({"event": "drawn", "ms": 812.5})
    assert len(released) == 1 and first.how == "drawn" and first.browser_ms == 812.5
    assert first.waited_s < 1.0  # on the message, not at a timeout
    first.on_message({"event": "drawn", "ms": 900})  # a second view of the same panel
    time.sleep(0.1)
    assert len(released) == 1


def test_first_draw_without_a_frontend_lets_go_after_the_short_timeout():
    """nbclient, papermill: a kernel, nobody drawing. The wait is bounded by ``hello_s``."""
    first, released = _first_draw(hello_s=0.3, drawn_s=30.0)
    t0 = time.perf_counter()
    first.arm(frontend_possible=True)
    time.sleep(0.15)
    assert released == []
    deadline = time.perf_counter() + 10
    while not released and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert first.how == "no frontend"
    assert 0.3 <= released[0] - t0 < 2.0


def test_first_draw_when_the_browser_never_says_drawn_lets_go_at_the_long_timeout():
    first, released = _first_draw(hello_s=0.2, drawn_s=0.8)
    t0 = time.perf_counter()
    first.arm(frontend_possible=True)
    first.on_message({"event": "frontend"})  # a frontend: the short timeout no longer applies
    time.sleep(0.5)
    assert released == []
    deadline = time.perf_counter() + 10
    while not released and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert first.how == "not drawn in time" and 0.8 <= released[0] - t0 < 3.0


def test_first_draw_outside_a_kernel_and_after_cancel():
    first, released = _first_draw()
    first.arm(frontend_possible=False)  # a script: nothing can draw the panel
    assert first.how == "no kernel" and len(released) == 1
    second, released2 = _first_draw(hello_s=0.2)
    second.arm(frontend_possible=True)
    second.cancel()  # the held burst was replaced by a knob move
    time.sleep(0.4)
    assert released2 == [] and second.how == "cancelled"


def _custom(widget, content):
    """What the kernel does with a widget's custom message from the browser."""
    widget._handle_msg({"content": {"data": {"method": "custom", "content": content}},
                        "buffers": []})  # fmt: skip


def test_panel_first_burst_waits_for_the_drawn_message(store_path, monkeypatch):
    import workbench.notebook.ui.panel as panel_module

    monkeypatch.setattr(panel_module, "kernel_present", lambda: True)  # as in a kernel
    bench = _bench(store_path)
    bench.hello_s, bench.drawn_s = 30.0, 30.0
    bench.panel()
    assert not bench.wait(0.5)  # held, and wait() covers the pending start
    assert bench.last_result is None and "waiting for the browser" in bench._ui.status.value
    signal = bench._ui.drawn
    assert signal in bench._ui.root.children and signal.charts == [
        "wb-chart-throughput", "wb-chart-memory", "wb-chart-split", "wb-chart-comm"]  # fmt: skip
    _custom(signal, {"event": "frontend"})
    _custom(signal, {"event": "drawn", "ms": 640.0})
    _settle(bench)
    assert bench.first_draw.how == "drawn" and bench.first_draw.waited_s < 5
    assert bench.last_result.ok


def test_panel_in_a_kernel_without_a_browser_starts_after_the_short_timeout(
    store_path, monkeypatch
):
    import workbench.notebook.ui.panel as panel_module

    monkeypatch.setattr(panel_module, "kernel_present", lambda: True)
    bench = _bench(store_path)
    bench.hello_s = 0.5
    t0 = time.perf_counter()
    bench.panel()
    _settle(bench)  # wait() covers the pending start, then the burst
    assert bench.first_draw.how == "no frontend" and bench.last_result.ok
    assert bench.first_draw.waited_s >= 0.5 and time.perf_counter() - t0 >= 0.5


def test_a_knob_move_while_the_first_burst_is_held_replaces_it(store_path, monkeypatch):
    import workbench.notebook.ui.panel as panel_module

    monkeypatch.setattr(panel_module, "kernel_present", lambda: True)
    bench = _bench(store_path)
    bench.hello_s = 30.0
    bench.panel()
    bench._ui.controls.controls["batch_size"].value = 16
    _settle(bench)
    assert bench.first_draw.how == "cancelled"
    assert [r["batch_size"] for _, r in bench.store.frame().iterrows()] == [16]


def test_the_memory_snapshot_button_draws_memory_at_every_step(store_path):
    bench = _bench(store_path)
    bench.panel(autorun=False)
    bench.memory_snapshot()
    _settle(bench)
    snap = bench.last_snapshot
    assert snap is not None and snap.result.ok and snap.path is None  # a CPU: no file
    rows = _points(bench._ui.snapshot_chart)
    assert rows and all(r["what"] == "process_mib" for r in rows)
    assert "only for CUDA" in bench._ui.message.value


def test_every_knob_name_fits_its_label():
    """dali_hw_decoder_load was cut to "dali_hw_decoder_..." at 130 px (20 characters: 6.5 px
    each fit). 7.4 px per character is an estimate with margin for a 13 px sans-serif font,
    not a measurement; the browser test's screenshot is where to look."""
    from workbench.core.knobs import KNOB_NAMES
    from workbench.notebook.ui.controls import _STYLE

    width_px = int(_STYLE["description_width"].removesuffix("px"))
    assert max(len(n) for n in KNOB_NAMES) * 7.4 <= width_px


def test_the_result_line_shows_the_ambient_environment_escaped():
    from workbench.core.results import BurstResult
    from workbench.notebook.ui.status import result_html

    r = BurstResult(device="cpu", id=3, status="error", error="x")
    assert "environment" not in result_html(r)
    r.ambient_notes = ["OMP_NUM_THREADS=<4> came from the environment, not a knob"]
    html = result_html(r)
    assert "environment, not knobs" in html and "OMP_NUM_THREADS=&lt;4&gt;" in html


def test_packing_is_greyed_for_a_workload_without_documents(tiny_data):
    from workbench.core.knobs import knob_specs
    from workbench.engine.workloads import resolve_workload
    from workbench.notebook.ui import controls

    spec = next(s for s in knob_specs() if s.name == "packing")
    assert controls.make_control(spec, "pack", "cpu").options == ("off", "pad", "pack")
    cnn = resolve_workload("cnn", tiny_data)
    assert controls.disabled_reasons("cpu", cnn)["packing"].startswith(
        "cnn: it has no documents to pad or pack"
    )
    assert "packing" in controls.disabled_reasons("cpu", tensor_workload())  # a user's own
    assert "packing" not in controls.disabled_reasons("cpu", resolve_workload("gpt", tiny_data))


def test_fp8_is_a_dropdown_greyed_where_float8_cannot_act(tiny_data, monkeypatch):
    from workbench.core.knobs import FP8_RECIPES, knob_specs
    from workbench.engine.workloads import resolve_workload
    from workbench.notebook.ui import controls

    spec = next(s for s in knob_specs() if s.name == "fp8")
    dropdown = controls.make_control(spec, "off", "cpu")
    assert dropdown.options == FP8_RECIPES and "convert_to_float8_training" in dropdown.tooltip
    gpt = resolve_workload("gpt", tiny_data)
    assert controls.disabled_reasons("cpu", gpt)["fp8"].endswith("this is a CPU")
    pytest.importorskip("torchao")  # the dev extra installs it
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert "fp8" not in controls.disabled_reasons("cuda", gpt)
    cnn = resolve_workload("cnn", tiny_data)  # its one Linear is its classifier
    said = "no Linear layer of cnn can train in float8 (head: the output head stays in bf16)"
    assert controls.disabled_reasons("cuda", cnn)["fp8"] == said
