"""workbench.notebook.plots: charts tested on ``chart.to_dict()`` (which validates against
Vega-Lite 6)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from typing import Any

import pandas as pd
import pytest

from workbench.core.knobs import KnobError, Knobs
from workbench.notebook import plots

# -- helpers ------------------------------------------------------------------------------------


def spec_of(chart) -> dict[str, Any]:
    return chart.to_dict()  # validates the spec against the Vega-Lite schema


def layers(spec: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [layer for layer in spec.get("layer", []) if layer.get("name") == name]


def layer(spec: dict[str, Any], name: str) -> dict[str, Any]:
    found = layers(spec, name)
    assert len(found) == 1, f"expected one {name!r} layer, got {[x.get('name') for x in found]}"
    return found[0]


def rows(spec: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The data rows of a named layer (its own dataset, or the chart's)."""
    data = layer(spec, name).get("data") or spec["data"]
    return spec["datasets"][data["name"]] if "name" in data else data["values"]


def names(spec: dict[str, Any]) -> list[str]:
    return [layer.get("name") for layer in spec.get("layer", [])]


def burst(i: int, status: str = "ok", **fields: Any) -> dict[str, Any]:
    """One hand-made history row (the columns of HistoryStore.frame())."""
    row: dict[str, Any] = {
        "id": i,
        "created_at": pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(minutes=i),
        "workload": "cnn",
        "device": "cuda",
        "status": status,
        "error": None,
        "batch_size": 32,
        "num_workers": 0,
        "precision": "default",
        "samples_per_s": None,
        "step_ms_p50": None,
        "step_ms_iqr": None,
        "data_wait_pct": None,
        "peak_mem_mib": None,
        "peak_reserved_mib": None,
        "data_wait_ms_p50": None,
        "h2d_ms_p50": None,
        "compute_ms_p50": None,
        "noisy": None,
    }
    if status == "ok":
        row |= {"samples_per_s": 1000.0 + 10 * i, "step_ms_p50": 20.0}
    return row | fields


def frame(*bursts: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(list(bursts))


@pytest.fixture
def sweep() -> pd.DataFrame:
    """batch_size 16 (x2), 32, 64, an OOM at 128, an error at 8, a cancelled burst."""
    ok = {"step_ms_iqr": 2.0, "data_wait_pct": 5.0, "peak_mem_mib": 1000.0}
    return frame(
        burst(1, batch_size=16, samples_per_s=800.0, **ok),
        burst(2, batch_size=16, samples_per_s=820.0, **ok),
        burst(3, batch_size=32, samples_per_s=1500.0, **ok),
        burst(4, batch_size=64, samples_per_s=2500.0, **ok),
        burst(5, "oom", batch_size=128, error="OutOfMemoryError: CUDA out of memory."),
        burst(6, "error", batch_size=8, error="ValueError: <bad> batch"),
        burst(7, "cancelled", batch_size=16),
    )


# -- comparable -------------------------------------------------------------------------------


def test_comparable_keeps_rows_that_share_every_other_knob():
    df = frame(
        burst(1, batch_size=16),
        burst(2, batch_size=64),
        burst(3, batch_size=64, num_workers=2),  # another knob differs
        burst(4, batch_size=64, precision="bf16"),
        burst(5, "cancelled", batch_size=128),  # cancelled bursts measured nothing
        burst(6, "oom", batch_size=256),  # failures are kept
        burst(7, batch_size=16, workload="gpt"),
    )
    got = plots.comparable(df, Knobs(batch_size=32), "batch_size")
    assert got["id"].tolist() == [1, 2, 6, 7]
    assert plots.comparable(df, Knobs(), "batch_size", workload="cnn")["id"].tolist() == [1, 2, 6]
    assert plots.comparable(df, Knobs(), "precision")["id"].tolist() == []
    assert plots.comparable(df, Knobs(batch_size=64), "precision")["id"].tolist() == [2, 4]
    assert plots.comparable(df, Knobs(), "batch_size", device="cpu").empty


def test_comparable_reads_none_and_nan_as_the_default_and_ignores_float_columns():
    df = frame(
        burst(1, num_workers=2, prefetch_factor=None),
        burst(2, num_workers=2, prefetch_factor=float("nan")),
        burst(3, num_workers=2, prefetch_factor=4),
        burst(4, num_workers=2, prefetch_factor=None, pin_memory=float("nan")),
        burst(5, num_workers=2, prefetch_factor=None, pin_memory=True),
    )
    df["batch_size"] = df["batch_size"].astype(float)  # a column with NaN elsewhere is float
    two = Knobs(num_workers=2)
    assert plots.comparable(df, two, "batch_size")["id"].tolist() == [1, 2, 4]
    assert plots.comparable(df, two, "prefetch_factor")["id"].tolist() == [1, 2, 3, 4]
    missing = df.drop(columns=["pin_memory"])  # a knob column absent: every row at its default
    assert plots.comparable(missing, two, "batch_size")["id"].tolist() == [1, 2, 4, 5]


def test_comparable_handles_nccl_columns_and_the_mapping():
    df = frame(
        burst(1, NCCL_ALGO="Ring", NCCL_PROTO=None),
        burst(2, NCCL_ALGO="Ring", NCCL_PROTO=float("nan"), batch_size=64),
        burst(3, NCCL_ALGO="Tree", NCCL_PROTO=None),
        burst(4, NCCL_ALGO=None, NCCL_PROTO=None),
        burst(5, NCCL_ALGO=float("nan"), NCCL_PROTO="LL"),
    )
    ring = Knobs(nccl={"NCCL_ALGO": "Ring"})
    assert plots.comparable(df, ring, "batch_size")["id"].tolist() == [1, 2]
    # varying one NCCL variable still compares the others (NCCL_PROTO=LL is not comparable)
    assert plots.comparable(df, ring, "NCCL_ALGO")["id"].tolist() == [1, 3, 4]
    assert plots.comparable(df, ring, "nccl")["id"].tolist() == [1, 3, 4, 5]
    assert plots.comparable(df, Knobs(), "batch_size")["id"].tolist() == [4]
    # a plain dict, partial, with a flat NCCL name, reads like Knobs
    assert plots.comparable(df, {"NCCL_ALGO": "Tree"}, "batch_size")["id"].tolist() == [3]


def test_comparable_prefers_the_whole_knobs_dict_and_refuses_unknown_knobs():
    stored = [Knobs(batch_size=b, nccl={"NCCL_ALGO": "Ring"}).to_dict() for b in (16, 64)]
    df = pd.DataFrame({"id": [1, 2], "status": ["ok", "ok"], "knobs": stored})
    ring = Knobs(nccl={"NCCL_ALGO": "Ring"})
    assert plots.comparable(df, ring, "batch_size")["id"].tolist() == [1, 2]
    assert plots.comparable(df, Knobs(), "batch_size").empty
    with pytest.raises(KnobError, match="colour"):
        plots.comparable(df, Knobs(), "colour")


def test_comparable_on_an_empty_history():
    empty = pd.DataFrame(columns=["id", "created_at", "workload", "device", "status"])
    assert plots.comparable(empty, Knobs(), "batch_size").empty


# -- throughput -------------------------------------------------------------------------------


def test_throughput_has_one_point_per_ok_burst_and_marks_failures(sweep):
    spec = spec_of(plots.throughput(sweep, "batch_size"))
    assert sorted(r["id"] for r in rows(spec, "points")) == [1, 2, 3, 4]
    fails = {r["id"]: r for r in rows(spec, "failures")}
    assert set(fails) == {5, 6}
    assert all(r["fail_y"] == 0 for r in fails.values())
    assert fails[5]["error"].startswith("OutOfMemoryError")
    failure = layer(spec, "failures")
    assert failure["mark"]["shape"] == "cross"
    assert {"field": "error", "type": "nominal"} in failure["encoding"]["tooltip"]
    assert "current" not in names(spec)
    assert "samples/s" in spec["title"]["text"] and "batch_size" in spec["title"]["text"]
    assert "2 failed" in spec["title"]["subtitle"]
    assert 320 <= spec["width"] <= 380 and spec["height"] == 220


def test_throughput_highlight_layer_holds_only_the_current_burst(sweep):
    spec = spec_of(plots.throughput(sweep, "batch_size", highlight_id=3))
    assert [r["id"] for r in rows(spec, "current")] == [3]
    assert rows(spec, "current")[0]["at"] == 1500.0
    assert layer(spec, "current_label")["encoding"]["text"] == {"value": "current"}
    assert layer(spec, "current")["mark"]["size"] > layer(spec, "points")["mark"]["size"]
    # a failed current burst is highlighted where its cross is
    failed = spec_of(plots.throughput(sweep, "batch_size", highlight_id=5))
    assert [(r["id"], r["at"]) for r in rows(failed, "current")] == [(5, 0.0)]


def test_throughput_x_scale_is_log2_for_batch_size_and_linear_for_workers(sweep):
    spec = spec_of(plots.throughput(sweep, "batch_size"))
    x = layer(spec, "points")["encoding"]["x"]
    assert x["type"] == "quantitative"
    assert x["scale"]["type"] == "log" and x["scale"]["base"] == 2
    assert x["axis"]["values"] == [8, 16, 32, 64, 128]

    workers = sweep.assign(num_workers=[0, 1, 2, 4, 4, 8, 0])
    x = layer(spec_of(plots.throughput(workers, "num_workers")), "points")["encoding"]["x"]
    assert x["type"] == "quantitative"
    assert x["scale"].get("type") in (None, "linear")
    assert x["axis"]["values"] == list(range(9)) and x["axis"]["format"] == "d"  # whole workers


def test_throughput_categorical_knobs_are_ordinal_in_their_natural_order(sweep):
    df = sweep.assign(
        precision=["bf16", "default", "fp16", "tf32", "default", "bf16", "default"],
        pin_memory=[True, False, True, False, True, False, True],
    )
    spec = spec_of(plots.throughput(df, "precision"))
    x = layer(spec, "points")["encoding"]["x"]
    assert x["type"] == "ordinal" and x["sort"] == ["default", "tf32", "bf16", "fp16"]
    assert layer(spec, "median")["mark"]["type"] == "tick"
    x = layer(spec_of(plots.throughput(df, "pin_memory")), "points")["encoding"]["x"]
    assert x["type"] == "ordinal" and x["sort"] == ["false", "true"]


def test_throughput_median_of_repeats_and_error_bars_from_the_step_spread(sweep):
    spec = spec_of(plots.throughput(sweep, "batch_size"))
    median = layer(spec, "median")
    assert median["mark"]["type"] == "line"
    assert median["encoding"]["y"]["aggregate"] == "median"
    bars = {r["id"]: r for r in rows(spec, "errorbars")}
    # p50 20 ms, IQR 2 ms: steps of 19..21 ms, so 800 samples/s spans 800*20/21..800*20/19
    assert bars[1]["y_lo"] == pytest.approx(800 * 20 / 21)
    assert bars[1]["y_hi"] == pytest.approx(800 * 20 / 19)
    assert bars[1]["y_lo"] < bars[1]["y"] < bars[1]["y_hi"]


def test_throughput_error_bar_is_capped_when_the_spread_reaches_zero():
    df = frame(burst(1, samples_per_s=100.0, step_ms_p50=10.0, step_ms_iqr=30.0), burst(2))
    bars = {r["id"]: r for r in rows(spec_of(plots.throughput(df, "batch_size")), "errorbars")}
    assert bars[1]["y_hi"] == pytest.approx(400.0)
    assert bars[1]["y_lo"] == pytest.approx(100 * 10 / 25)
    assert 2 not in bars  # no IQR: no bar, the point stays


def test_throughput_of_tokens_and_of_nccl_variables():
    df = frame(
        burst(1, NCCL_ALGO="Ring", tokens_per_s=5e4),
        burst(2, NCCL_ALGO=None, tokens_per_s=4e4),
    )
    spec = spec_of(plots.throughput(df, "NCCL_ALGO", metric="tokens_per_s"))
    assert "tokens/s" in spec["title"]["text"]
    assert sorted(r["tokens_per_s"] for r in rows(spec, "points")) == [4e4, 5e4]
    assert layer(spec, "points")["encoding"]["x"]["sort"] == ["unset", "Ring"]


# -- memory -----------------------------------------------------------------------------------


def test_memory_draws_the_capacity_rule_and_puts_ooms_on_it(sweep):
    df = sweep.assign(peak_reserved_mib=[1200.0] * 4 + [None] * 3)
    # a capacity near the peaks (within 2x): a rule inside the axis, OOMs on it
    spec = spec_of(plots.memory(df, "batch_size", capacity_mib=2000, highlight_id=4))
    assert rows(spec, "capacity") == [{"capacity_mib": 2000.0, "label": "device memory 2,000 MiB"}]
    assert layer(spec, "capacity")["mark"]["type"] == "rule"
    assert layer(spec, "capacity_label")["encoding"]["text"]["field"] == "label"
    fails = {r["id"]: r["fail_y"] for r in rows(spec, "failures")}
    assert fails == {5: 2000, 6: 2000}
    series = {(r["id"], r["series"]): r["y"] for r in rows(spec, "points")}
    assert series[(1, "peak allocated")] == 1000.0 and series[(1, "peak reserved")] == 1200.0
    assert [r["id"] for r in rows(spec, "current")] == [4]
    assert rows(spec, "current")[0]["series"] == "peak allocated"


def test_memory_capacity_rule_says_what_it_is(sweep):
    spec = spec_of(
        plots.memory(sweep, "batch_size", capacity_mib=1900, capacity_label="system RAM")
    )
    assert rows(spec, "capacity") == [{"capacity_mib": 1900.0, "label": "system RAM 1,900 MiB"}]


def test_a_far_capacity_does_not_flatten_the_peaks(sweep):
    """A CPU's system RAM (24 GB) against bursts of about 1 GB: the axis fits the peaks (no
    zero, no capacity inside it) and the capacity is a labelled edge with the headroom."""
    spec = spec_of(
        plots.memory(sweep, "batch_size", capacity_mib=24000, capacity_label="system RAM")
    )
    points = layer(spec, "points")["encoding"]["y"]
    assert points["scale"]["zero"] is False
    (edge,) = rows(spec, "capacity")
    assert edge["capacity_mib"] == 24000.0
    assert edge["edge"] == "system RAM 24,000 MiB above: 23,000 MiB of headroom"
    assert layer(spec, "capacity")["encoding"]["y"] == {"value": 0}  # the top edge, in pixels
    assert layer(spec, "capacity_label")["encoding"]["text"]["field"] == "edge"
    fails = {r["fail_y"] for r in rows(spec, "failures")}
    assert fails == {1050.0}  # at the top of the data, not 24 GB up


def test_cost_on_the_y_axis(sweep):
    priced = sweep.assign(cost=[{"per_million_samples": 2.0e6 / 3600 / v} if v else None
                                for v in sweep["samples_per_s"].fillna(0)])  # fmt: skip
    spec = spec_of(plots.throughput(priced, "batch_size", metric="cost_per_million_samples"))
    assert spec["title"]["text"] == "Cost per million samples vs batch_size"
    ys = {r["id"]: r["y"] for r in rows(spec, "points")}
    assert ys[4] == pytest.approx(2.0e6 / 3600 / 2500)  # $2/h at 2,500 samples/s
    for r in rows(spec, "errorbars"):
        assert r["y_lo"] <= r["y"] <= r["y_hi"]
    empty = spec_of(plots.throughput(sweep, "batch_size", metric="cost_per_million_samples"))
    assert "no burst with a price yet" in rows(empty, "message")[0]["message"]


def test_memory_without_capacity_or_reserved(sweep):
    spec = spec_of(plots.memory(sweep, "batch_size"))
    assert "capacity" not in names(spec)
    assert {r["series"] for r in rows(spec, "points")} == {"peak allocated"}
    assert layer(spec, "points")["encoding"]["color"]["legend"] is None


def test_memory_legend_says_what_the_peak_is_and_keeps_kinds_apart():
    cpu = {"device": "cpu", "peak_reserved_mib": None}
    df = frame(
        burst(1, batch_size=16, peak_mem_mib=1289.0, peak_mem_kind="rss", **cpu),
        burst(2, batch_size=16, peak_mem_mib=738.0, peak_mem_kind="pss", **cpu),
        burst(3, batch_size=32, peak_mem_mib=800.0, peak_mem_kind="pss", **cpu),
        burst(4, batch_size=64, peak_mem_mib=900.0, **cpu),  # a row that does not say
    )
    spec = spec_of(plots.memory(df, "batch_size", highlight_id=3))
    series = {r["id"]: r["series"] for r in rows(spec, "points")}
    assert series == {
        1: "peak memory (RSS summed, process + workers)",
        2: "peak memory (PSS, process + workers)",
        3: "peak memory (PSS, process + workers)",
        4: "peak memory (process + workers)",
    }
    colour = layer(spec, "points")["encoding"]["color"]
    assert colour["scale"]["domain"][0] == "peak memory (PSS, process + workers)"  # current's
    assert colour["legend"] is not None  # several kinds: the legend tells them apart
    assert [r["series"] for r in rows(spec, "current")] == ["peak memory (PSS, process + workers)"]
    medians = {r["series"] for r in rows(spec, "median")}
    assert len(medians) == 3  # a median line per kind, never one across PSS and RSS


def test_memory_of_one_kind_has_one_series_named_by_it(sweep):
    pss = sweep.assign(device="cpu", peak_mem_kind="pss")
    spec = spec_of(plots.memory(pss, "batch_size", capacity_label="system RAM"))
    assert {r["series"] for r in rows(spec, "points")} == {"peak memory (PSS, process + workers)"}
    assert layer(spec, "points")["encoding"]["color"]["legend"] is None


# -- step split -------------------------------------------------------------------------------


def test_step_split_stacks_the_parts_of_the_latest_burst_per_value():
    df = frame(
        burst(1, batch_size=16, data_wait_ms_p50=4.0, h2d_ms_p50=1.0, compute_ms_p50=10.0),
        burst(2, batch_size=16, data_wait_ms_p50=3.0, h2d_ms_p50=1.5, compute_ms_p50=11.0),
        burst(3, batch_size=32, data_wait_ms_p50=2.0, h2d_ms_p50=None, compute_ms_p50=20.0),
        burst(4, "oom", batch_size=64),
    )
    spec = spec_of(plots.step_split(df, "batch_size"))
    parts = rows(spec, "parts")
    assert {r["id"] for r in parts} == {2, 3}  # the latest at 16, the only one at 32
    by_id: dict[int, dict[str, float]] = {}
    for r in parts:
        by_id.setdefault(r["id"], {})[r["part"]] = r["part_ms"]
    assert by_id[2] == {"data wait": 3.0, "host-to-device copy": 1.5, "compute": 11.0}
    assert by_id[3] == {"data wait": 2.0, "compute": 20.0}  # no copy time measured: no part
    for r in parts:
        assert math.isclose(r["split_ms"], sum(by_id[r["id"]].values()))
    bars = layer(spec, "parts")["encoding"]
    assert bars["y"]["stack"] == "zero" and bars["x"]["type"] == "ordinal"
    assert bars["x"]["sort"] == ["16", "32", "64"]
    assert bars["color"]["scale"]["domain"] == ["data wait", "host-to-device copy", "compute"]
    assert [r["id"] for r in rows(spec, "failures")] == [4]

    current = spec_of(plots.step_split(df, "batch_size", highlight_id=1))
    assert {r["id"] for r in rows(current, "parts")} == {1, 3}
    assert [r["id"] for r in rows(current, "current_label")] == [1]


# -- nothing to plot --------------------------------------------------------------------------

EMPTY = pd.DataFrame(columns=["id", "created_at", "workload", "device", "status"])
CHARTS = [plots.throughput, plots.memory, plots.step_split]


NO_BURSTS = "no bursts yet: run one (Run, move a knob, or wb.run_burst)"


@pytest.mark.parametrize("chart", CHARTS)
def test_charts_of_an_empty_history_are_placeholders(chart):
    spec = spec_of(chart(EMPTY, "batch_size"))
    assert names(spec) == ["message"]
    assert rows(spec, "message") == [{"message": NO_BURSTS}]  # says what fills it


@pytest.mark.parametrize("chart", CHARTS)
def test_charts_without_the_knob_are_placeholders(chart, sweep):
    spec = spec_of(chart(sweep, "NCCL_ALGO_UNKNOWN"))
    unknown = "NCCL_ALGO_UNKNOWN"
    message = f"no bursts with {unknown} recorded yet: move {unknown} to add one"
    assert rows(spec, "message") == [{"message": message}]
    spec = spec_of(chart(sweep[sweep["status"] == "cancelled"], "batch_size"))
    assert rows(spec, "message") == [{"message": NO_BURSTS}]  # says what fills it


@pytest.mark.parametrize("chart", CHARTS)
def test_charts_of_failed_bursts_only_mark_them(chart):
    df = frame(burst(1, "oom", batch_size=64, error="OOM"), burst(2, "error", batch_size=8))
    spec = spec_of(chart(df, "batch_size", highlight_id=1))
    assert {r["id"] for r in rows(spec, "failures")} == {1, 2}
    assert rows(spec, "message") == [{"message": "no successful bursts yet"}]


# -- the history table ------------------------------------------------------------------------


def test_history_table_newest_first_with_changed_knobs_and_readable_cells(sweep):
    df = sweep.assign(NCCL_ALGO=[None] * 6 + ["Ring"], noisy=[True] + [False] * 6)
    table = plots.history_table(df, n=6)
    assert table["id"].tolist() == ["7", "6", "5", "4", "3", "2"]
    assert list(table.columns[:5]) == ["id", "time", "workload", "device", "status"]
    assert "batch_size" in table.columns and "NCCL_ALGO" in table.columns
    assert "num_workers" not in table.columns  # at its default everywhere
    by_id = table.set_index("id")
    assert by_id.loc["4", "samples/s"] == "2,500" and by_id.loc["4", "step ms"] == "20.0"
    assert by_id.loc["4", "peak MiB"] == "1,000" and by_id.loc["4", "data wait %"] == "5.0"
    assert by_id.loc["5", "status"] == "out of memory" and by_id.loc["5", "samples/s"] == "n/a"
    assert by_id.loc["5", "note"] == "OutOfMemoryError: CUDA out of memory."
    assert by_id.loc["7", "NCCL_ALGO"] == "Ring" and by_id.loc["6", "NCCL_ALGO"] == "unset"
    assert plots.history_table(df, n=10).iloc[-1]["samples/s"] == "800 *"
    html = plots.history_html(df)
    assert html.startswith("<table") and "&lt;bad&gt;" in html
    # what noisy means, said once under the table, not in each noisy row
    assert html.count("noisy") == 1 and html.endswith("compare configs over repeated bursts "
                                                      "(a tune does)</em></p>")  # fmt: skip
    quiet = plots.history_html(df.assign(noisy=False))
    assert "noisy" not in quiet and " *<" not in quiet


def test_history_table_of_an_empty_history():
    assert plots.history_table(EMPTY).empty
    assert "no bursts yet" in plots.history_html(EMPTY)


# -- saving -----------------------------------------------------------------------------------


def test_save_writes_png_svg_and_json_offline(tmp_path, sweep):
    chart = plots.throughput(sweep, "batch_size", highlight_id=3)
    assert plots.save(chart, tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in plots.save(chart, tmp_path / "t.svg").read_text()[:200]
    assert json.loads(plots.save(chart, tmp_path / "t.json").read_text())["layer"]
    with pytest.raises(ValueError, match=r"\.png, \.svg, \.html, \.json"):
        plots.save(chart, tmp_path / "t.gif")


def test_save_html_inlines_the_javascript(tmp_path):
    html = plots.save(plots.memory(EMPTY, "batch_size"), tmp_path / "t.html").read_text()
    assert "<html" in html and "cdn.jsdelivr" not in html  # opens without a network


# -- a real history ---------------------------------------------------------------------------


def test_a_real_store_plots(tmp_path):
    from workloads_for_tests import hungry_workload, tensor_workload

    import workbench as wb

    store = tmp_path / "h.sqlite"
    fast = {"seconds": 0.05, "min_steps": 2, "warmup_steps": 1, "store": store}
    for b in (8, 16):
        wb.run_burst(tensor_workload(), wb.Knobs(batch_size=b), **fast)
    oom = wb.run_burst(hungry_workload(limit=16), wb.Knobs(batch_size=32), **fast)
    assert oom.status == "oom"
    df = wb.open_store(store).frame()
    same = plots.comparable(df, wb.Knobs(batch_size=16), "batch_size")
    assert same["id"].tolist() == [1, 2, 3]
    spec = spec_of(plots.throughput(same, "batch_size", highlight_id=2))
    assert sorted(r["id"] for r in rows(spec, "points")) == [1, 2]
    assert [r["id"] for r in rows(spec, "failures")] == [3]
    capacity = float(df["device_mem_mib"].dropna().max())
    spec_of(plots.memory(same, "batch_size", capacity_mib=capacity, highlight_id=3))
    spec_of(plots.step_split(same, "batch_size", highlight_id=2))
    assert plots.history_table(df)["status"].tolist() == ["out of memory", "ok", "ok"]


def test_import_workbench_does_not_import_plots_or_altair():
    code = "import sys, workbench; workbench.history; assert 'altair' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_history_html_lines_headings_up_with_their_columns(sweep):
    df = sweep.assign(noisy=[True] + [False] * 6)
    html = plots.history_html(df)
    head = re.findall(r"<th style=\"text-align:(\w+)", html)
    table = plots.history_table(df)
    first_row = re.search(r"<tbody><tr>(.*?)</tr>", html).group(1)
    cells = re.findall(r"<td style=\"text-align:(\w+);padding:2px 10px", first_row)
    assert head == cells and len(head) == len(table.columns)  # each heading aligned as its cells
    by_name = dict(zip(table.columns, head, strict=True))
    assert by_name["samples/s"] == "right" and by_name["step ms"] == "right"
    assert by_name["workload"] == "left" and by_name["note"] == "left"
    assert "800 *</td><td" in html  # its own cell, padded: never "800 * 20.0"


def test_history_table_shows_cost_where_a_price_was_given(sweep):
    priced = sweep.assign(cost=[{"per_million_samples": 1.25}] + [None] * 6)
    table = plots.history_table(priced, n=10)
    assert table["cost/M samples"].tolist()[-1] == "1.25"
    assert "cost/M samples" not in plots.history_table(sweep).columns


def test_memory_timeline_fits_the_steps_and_says_what_fills_it_when_empty():
    steps = [{"step": 1, "phase": "warmup", "process_mib": 600.0},
             {"step": 2, "phase": "measuring", "process_mib": 640.0}]  # fmt: skip
    spec = plots.memory_timeline(steps, device_mem_mib=24000).to_dict()
    assert spec["encoding"]["y"]["scale"] == {"zero": False}  # the steps, not the capacity
    assert "capacity 24,000 MiB" in spec["title"]
    assert "run a burst" in str(plots.memory_timeline([]).to_dict())
