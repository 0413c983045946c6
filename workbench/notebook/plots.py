"""Charts of the burst history: pure functions from a history DataFrame to Altair charts.

The input is ``HistoryStore.frame()`` (one row per burst), usually narrowed with
:func:`comparable` to the bursts that differ only in the knob on the x axis. Each chart is a
small ``alt.LayerChart`` that the panel shows with ``alt.JupyterChart`` and replaces in place.
Nothing here does I/O except :func:`save`.

Conventions shared by the charts:

- One point per burst: repeats at the same knob value are separate points, plus their median.
- Failed bursts (``oom``, ``error``) are marked with a cross, never dropped: at the bottom of the
  throughput axis, at the device-capacity line of the memory chart. ``cancelled`` bursts
  measured nothing and are left out.
- The burst ``highlight_id`` is drawn bigger, in another colour, and labelled "current".
- An empty frame or a missing knob column gives a "no bursts yet" placeholder, never an error.
- Field names never contain dots or parentheses: Altair reads ``f(x)`` as an aggregate.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from workbench.core.knobs import KNOB_NAMES, SPECS, KnobError, Knobs, knob_specs
from workbench.core.results import NOISY_MEANING

__all__ = [
    "comparable",
    "history_html",
    "history_table",
    "memory",
    "profile",
    "save",
    "step_split",
    "sweep",
    "throughput",
]

WIDTH, HEIGHT = 340, 220
FAILED = ("oom", "error")
_LOG2_KNOBS = frozenset({"batch_size", "grad_accum", "world_size", "bucket_cap_mb"})
_NCCL = re.compile(r"^NCCL_[A-Z0-9_]+$")
_MAX_SPEEDUP = 4.0
"""Cap on the fast end of a throughput error bar: with IQR/2 >= median the quartile estimate
``p50 - IQR/2`` reaches 0 ms (infinite throughput); we stop the bar at 4x the point instead."""

_BLUE, _LIGHT_BLUE, _ORANGE, _RED, _GREY = "#4c78a8", "#9ecae9", "#f58518", "#e45756", "#8c8c8c"
_BROWN = "#9d755d"
_STEP_PARTS = (  # (label, column, colour), stacked bottom to top
    ("data wait", "data_wait_ms_p50", "#b279a2"),
    ("host-to-device copy", "h2d_ms_p50", "#eeca3b"),
    ("compute", "compute_ms_p50", "#4c78a8"),
)
_METRIC_TITLES = {"samples_per_s": "samples/s", "tokens_per_s": "tokens/s",
                  "samples_per_s_corrected": "samples/s, drift-corrected",
                  "cost_per_million_samples": "cost per million samples"}  # fmt: skip
_ZOOM_RATIO = 2.0
"""The memory chart draws the capacity rule inside the axis only while the highest peak is
within 1/_ZOOM_RATIO of it; farther away (a CPU's system RAM against a burst's 1 GB) the axis
fits the data and the capacity is a labelled edge at the top, with the headroom beside it."""

# -- which bursts are comparable --------------------------------------------------------------


def comparable(
    df: pd.DataFrame,
    knobs: Knobs | Mapping[str, Any],
    vary: str,
    *,
    workload: str | None = None,
    device: str | None = None,
) -> pd.DataFrame:
    """The bursts that share every knob with ``knobs`` except ``vary`` (cancelled ones dropped).

    ``knobs`` is a ``Knobs`` or a dict read like one (missing knobs at their defaults; NCCL
    variables under ``nccl`` or flat as ``NCCL_X`` keys). A row's knobs come from its ``knobs``
    dict when the frame has one, else from its knob and ``NCCL_*`` columns. A null knob (None or
    NaN: a row written before the knob existed) counts as the knob's default; a null NCCL
    variable counts as unset. ``vary`` is a knob name, ``nccl`` (all NCCL variables) or one
    ``NCCL_*`` name, which leaves the other NCCL variables compared.
    """
    if vary not in KNOB_NAMES and not _NCCL.match(vary):
        raise KnobError(vary, vary, "unknown knob; known: " + ", ".join(KNOB_NAMES) + ", NCCL_*")
    target = _without(_canonical_knobs(_as_knobs(knobs).to_dict()), vary)
    keep = []
    for row in df.to_dict("records"):
        same = _without(_row_knobs(row), vary) == target
        keep.append(
            same
            and row.get("status") != "cancelled"
            and (workload is None or row.get("workload") == workload)
            and (device is None or row.get("device") == device)
        )
    return df.loc[pd.Series(keep, index=df.index, dtype=bool)]


def _as_knobs(knobs: Knobs | Mapping[str, Any]) -> Knobs:
    return knobs if isinstance(knobs, Knobs) else Knobs().replace(**dict(knobs))


def _row_knobs(row: Mapping[str, Any]) -> dict[str, Any]:
    """One frame row's knobs, canonical: every knob (nulls as defaults) and an nccl dict."""
    stored = row.get("knobs")
    if isinstance(stored, Mapping):
        return _canonical_knobs(stored)
    values = {name: _row_value(row, name) for name in KNOB_NAMES if name != "nccl"}
    values["nccl"] = {k: v for k, v in row.items() if isinstance(k, str) and _NCCL.match(k)}
    return _canonical_knobs(values)


def _row_value(row: Mapping[str, Any], name: str) -> Any:
    """``knob_<name>`` is the knob where the store had to rename it (a result shares the name)."""
    return row[f"knob_{name}"] if f"knob_{name}" in row else row.get(name)


def _canonical_knobs(values: Mapping[str, Any]) -> dict[str, Any]:
    out = {
        s.name: s.default if _null(values.get(s.name)) else _plain(values[s.name])
        for s in knob_specs()
        if s.kind != "mapping"
    }
    nccl = values.get("nccl")
    nccl = nccl if isinstance(nccl, Mapping) else {}
    out["nccl"] = {k: str(v).strip() for k, v in nccl.items() if not _null(v)}
    return out


def _without(knobs: dict[str, Any], vary: str) -> dict[str, Any]:
    out = {name: value for name, value in knobs.items() if name != vary}
    if _NCCL.match(vary):
        out["nccl"] = {name: value for name, value in knobs["nccl"].items() if name != vary}
    return out


def _null(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _plain(value: Any) -> Any:
    """numpy scalars as Python values, so that comparisons and labels behave."""
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, (str, bytes)) else value


# -- the knob on the x axis -------------------------------------------------------------------


def _knob_values(df: pd.DataFrame, knob: str) -> pd.Series | None:
    """The knob's value per row (nulls of known knobs as defaults); None if the frame lacks it."""
    if f"knob_{knob}" in df.columns:
        raw = df[f"knob_{knob}"]
    elif knob in df.columns:
        raw = df[knob]
    elif "knobs" in df.columns and (knob in KNOB_NAMES or _NCCL.match(knob)):
        rows = df["knobs"].map(lambda d: _canonical_knobs(d if isinstance(d, Mapping) else {}))
        raw = rows.map(lambda k: k["nccl"].get(knob) if _NCCL.match(knob) else k[knob])
    else:
        return None
    spec = SPECS.get(knob)
    default = spec.default if spec is not None and spec.kind != "mapping" else None
    return raw.map(lambda v: default if _null(v) else _plain(v)).astype(object)


@dataclass(frozen=True, slots=True)
class _Axis:
    """How a knob is drawn on x: ``log2`` and ``linear`` are quantitative, ``ordinal`` is not."""

    knob: str
    kind: str
    order: tuple[str, ...] = ()  # ordinal: the labels in order
    ticks: tuple[float, ...] = ()  # log2: power-of-two tick values

    def encode(self, *, ordinal: bool = False) -> alt.X:
        if ordinal or self.kind == "ordinal":
            return alt.X(
                "knob_label:O", title=self.knob, sort=list(self.order), axis=alt.Axis(labelAngle=0)
            )
        if self.kind == "log2":
            scale = alt.Scale(type="log", base=2, nice=False, padding=16)
            return alt.X(
                "knob_value:Q", title=self.knob, scale=scale, axis=alt.Axis(values=list(self.ticks))
            )
        scale = alt.Scale(zero=False, nice=False, padding=16)
        axis = alt.Axis(tickMinStep=1, format="d")  # workers are whole: no "0.5" ticks
        if self.ticks:
            axis = alt.Axis(values=list(self.ticks), format="d")
        return alt.X("knob_value:Q", title=self.knob, scale=scale, axis=axis)


def _axis_kind(knob: str, values: pd.Series) -> str:
    spec = SPECS.get(knob)
    if spec is None:
        numeric = values.map(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))
        return "linear" if len(values) and numeric.all() else "ordinal"
    if spec.kind in ("int", "float"):
        return "log2" if knob in _LOG2_KNOBS else "linear"
    return "ordinal"  # choices, booleans, optional ints (prefetch_factor: "unset"), NCCL


def _make_axis(knob: str, values: pd.Series) -> _Axis:
    kind = _axis_kind(knob, values)
    labels = sorted(set(values.map(_label)), key=_order_key(knob))
    if kind == "linear" and SPECS.get(knob) is not None and SPECS[knob].kind == "int":
        ints = [int(v) for v in pd.to_numeric(values, errors="coerce").dropna()]
        span = range(min(ints), max(ints) + 1) if ints else range(0)
        return _Axis(knob, kind, order=tuple(labels), ticks=tuple(span) if len(span) <= 17 else ())
    if kind != "log2":
        return _Axis(knob, kind, order=tuple(labels))
    numbers = [v for v in pd.to_numeric(values, errors="coerce") if v > 0]
    if not numbers:
        return _Axis(knob, "ordinal", order=tuple(labels))
    low, high = math.floor(math.log2(min(numbers))), math.ceil(math.log2(max(numbers)))
    return _Axis(knob, kind, order=tuple(labels), ticks=tuple(2.0**e for e in range(low, high + 1)))


def _label(value: Any) -> str:
    if _null(value):
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Mapping):  # the whole nccl mapping
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "unset"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _order_key(knob: str) -> Callable[[str], tuple[Any, ...]]:
    choices = SPECS[knob].choices if knob in SPECS else None

    def key(label: str) -> tuple[Any, ...]:
        if label == "unset":
            return (0, 0.0, label)
        if choices and label in choices:
            return (1, float(choices.index(label)), label)
        if label in ("false", "true"):
            return (1, float(label == "true"), label)
        try:
            return (1, float(label), label)
        except ValueError:
            return (2, 0.0, label)

    return key


# -- one row per burst, with the fields every chart and tooltip uses -----------------------------


def _bursts(
    df: pd.DataFrame, knob: str, metric: str = "samples_per_s"
) -> tuple[pd.DataFrame, _Axis] | None:
    """Plottable bursts (not cancelled, knob known) with fixed, Altair-safe column names."""
    if "status" in df.columns:
        df = df[df["status"] != "cancelled"]
    values = _knob_values(df, knob)
    if values is None or df.empty:
        return None
    status = df["status"] if "status" in df.columns else pd.Series("ok", index=df.index)
    ids = df["id"] if "id" in df.columns else pd.Series(range(1, len(df) + 1), index=df.index)
    out = pd.DataFrame(
        {
            "id": [None if _null(i) else int(i) for i in ids],
            "status": [str(v) if not _null(v) else "error" for v in status],
            "error": [None if _null(e) else str(e) for e in _col(df, "error", numeric=False)],
            "knob_value": pd.to_numeric(values, errors="coerce").to_numpy(),
            "knob_label": values.map(_label).to_numpy(),
        }
    )
    if metric == "cost_per_million_samples" and metric not in df.columns:
        df = df.assign(cost_per_million_samples=cost_column(df))
    columns = [metric, "step_ms_p50", "step_ms_iqr", "data_wait_pct", "peak_mem_mib"]
    columns += ["peak_reserved_mib"] + [column for _, column, _ in _STEP_PARTS]
    for name in dict.fromkeys(columns):
        out[name] = _col(df, name).to_numpy()
    out["failed"] = out["status"] != "ok"
    return out, _make_axis(knob, values)


def cost_column(df: pd.DataFrame) -> pd.Series:
    """``cost.per_million_samples`` of each burst (NaN without a price): the y of a cost chart."""
    costs = df["cost"] if "cost" in df.columns else pd.Series([None] * len(df), index=df.index)
    return pd.Series(
        [c.get("per_million_samples") if isinstance(c, Mapping) else None for c in costs],
        index=df.index,
        dtype=float,
    )


def _col(df: pd.DataFrame, name: str, *, numeric: bool = True) -> pd.Series:
    if name not in df.columns:
        return pd.Series([float("nan") if numeric else None] * len(df), index=df.index)
    if not numeric:
        return df[name].astype(object)
    return pd.to_numeric(df[name], errors="coerce").astype(float)


def _tooltip(axis: _Axis, metric: str, *extra: alt.Tooltip) -> list[alt.Tooltip]:
    return [
        alt.Tooltip("knob_label:N", title=axis.knob),
        alt.Tooltip(f"{metric}:Q", title=_METRIC_TITLES.get(metric, metric), format=",.1f"),
        alt.Tooltip("step_ms_p50:Q", title="step ms p50", format=",.2f"),
        alt.Tooltip("step_ms_iqr:Q", title="step ms IQR", format=",.2f"),
        alt.Tooltip("data_wait_pct:Q", title="data wait %", format=".1f"),
        alt.Tooltip("peak_mem_mib:Q", title="peak MiB", format=",.0f"),
        alt.Tooltip("peak_reserved_mib:Q", title="peak reserved MiB", format=",.0f"),
        alt.Tooltip("id:Q", title="burst id"),
        alt.Tooltip("status:N", title="status"),
        *extra,
    ]


# -- layers shared by the charts --------------------------------------------------------------


def _chart(data: pd.DataFrame, name: str) -> alt.Chart:
    """A named layer over ``data``, handed to Altair as plain JSON values (NaN as null).

    Altair sanitizes a DataFrame column by column on every ``to_dict``; for the few rows of a
    chart that costs more than building the chart, and the panel redraws on every burst.
    """
    rows = data.to_dict("records")
    return alt.Chart(alt.InlineData(values=[_json_row(row) for row in rows]), name=name)


def _json_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {key: None if _null(v) or v is pd.NaT else _plain(v) for key, v in row.items()}


def _failure_layer(fails: pd.DataFrame, x: alt.X, tips: list[alt.Tooltip]) -> alt.Chart:
    """Red cross for OOM, grey for other errors, at ``fail_y``; the tooltip carries the error."""
    colour = alt.condition(alt.datum.status == "oom", alt.value(_RED), alt.value(_GREY))
    return (
        _chart(fails, "failures")
        .mark_point(shape="cross", size=110, filled=True, opacity=0.9)
        .encode(x=x, y="fail_y:Q", color=colour, tooltip=[*tips, alt.Tooltip("error:N")])
    )


def _current_point(current: pd.DataFrame, x: alt.X, y: str, tips: list[alt.Tooltip]) -> alt.Chart:
    """The highlighted burst: a big orange point."""
    return (
        _chart(current, "current")
        .mark_point(size=220, filled=True, color=_ORANGE, stroke="white", strokeWidth=1.5)
        .encode(x=x, y=f"{y}:Q", tooltip=tips)
    )


def _current_label(current: pd.DataFrame, x: alt.X, y: str) -> alt.Chart:
    """The word "current" above the highlighted burst."""
    return (
        _chart(current, "current_label")
        .mark_text(dy=-13, color=_ORANGE, fontWeight="bold")
        .encode(x=x, y=f"{y}:Q", text=alt.value("current"))
    )


def _message_layer(message: str) -> alt.Chart:
    return (
        _chart(pd.DataFrame({"message": [message]}), "message")
        .mark_text(fontSize=13, color=_GREY)
        .encode(x=alt.value(WIDTH / 2), y=alt.value(HEIGHT / 2), text="message:N")
    )


def _placeholder(title: str, message: str = "no bursts yet") -> alt.LayerChart:
    title_params = alt.TitleParams(title, anchor="start")
    return alt.layer(_message_layer(message), title=title_params, width=WIDTH, height=HEIGHT)


def waiting(title: str, message: str) -> alt.LayerChart:
    """An empty chart that says what fills it (the panel's charts before their first data)."""
    return _placeholder(title, message)


def _title(text: str, bursts: pd.DataFrame) -> alt.TitleParams:
    failed = int(bursts["failed"].sum())
    parts = [f"{len(bursts)} burst{'s' if len(bursts) != 1 else ''}"]
    if failed:
        parts.append(f"{failed} failed (× red: out of memory, grey: error)")
    return alt.TitleParams(text, subtitle=", ".join(parts), anchor="start")


def _series_colour(names: list[str]) -> alt.Color:
    palette = [_BLUE, _LIGHT_BLUE, _BROWN]  # memory: up to 3 kinds of peak
    legend = alt.Legend(orient="bottom", title=None) if len(names) > 1 else None
    return alt.Color(
        "series:N", scale=alt.Scale(domain=names, range=palette[: len(names)]), legend=legend
    )


def _measured(
    bursts: pd.DataFrame,
    axis: _Axis,
    series: dict[str, str],
    *,
    metric: str,
    y_title: str,
    highlight_id: int | None,
    zero: bool = True,
) -> list[alt.Chart]:
    """Points per burst and series, medians, failure crosses (at ``fail_y``), the current burst.

    ``series`` maps a legend name to a column; the first one is where "current" is drawn.
    """
    x, tips = axis.encode(), _tooltip(axis, metric)
    ok = bursts[~bursts["failed"]]
    long = pd.concat(
        [ok.assign(series=name, y=ok[col]) for name, col in series.items()], ignore_index=True
    ).dropna(subset=["y"])
    colour = _series_colour(list(series))
    y = alt.Y("y:Q", title=y_title, scale=alt.Scale(zero=zero))
    layers: list[alt.Chart] = []
    if "y_lo" in long.columns:
        bars = long.dropna(subset=["y_lo", "y_hi"])
        layers.append(
            _chart(bars, "errorbars")
            .mark_rule(color=_BLUE, opacity=0.5)
            .encode(x=x, y=alt.Y("y_lo:Q", title=y_title), y2="y_hi:Q", tooltip=tips)
        )
    points = _chart(long, "points").mark_point(filled=True, size=55, opacity=0.85)
    layers.append(points.encode(x=x, y=y, color=colour, tooltip=[*tips, alt.Tooltip("series:N")]))
    layers.append(_median_layer(long, axis, x, colour))
    fails = bursts[bursts["failed"]]
    if not fails.empty:
        layers.append(_failure_layer(fails, x, tips))
    first = long[long["series"] == next(iter(series))]
    current = pd.concat([first.assign(at=first["y"]), fails.assign(at=fails["fail_y"])])
    current = current[current["id"] == highlight_id] if highlight_id is not None else current[:0]
    if not current.empty:
        layers += [_current_point(current, x, "at", tips), _current_label(current, x, "at")]
    if long.empty:
        layers.append(_message_layer("no successful bursts yet"))
    return layers


def _median_layer(long: pd.DataFrame, axis: _Axis, x: alt.X, colour: alt.Color) -> alt.Chart:
    """The median of repeats at each value: a line across numeric knobs, a tick per category."""
    base = _chart(long, "median")
    y = alt.Y("y:Q", aggregate="median")
    if axis.kind == "ordinal":
        return base.mark_tick(thickness=2, size=22).encode(x=x, y=y, color=colour)
    return base.mark_line(strokeWidth=1.5, opacity=0.7).encode(x=x, y=y, color=colour)


# -- the charts -------------------------------------------------------------------------------


def throughput(
    df: pd.DataFrame,
    knob: str,
    *,
    highlight_id: int | None = None,
    metric: str = "samples_per_s",
) -> alt.LayerChart:
    """Throughput (``metric``) against ``knob``: one point per burst, medians, failures marked.

    Error bars show the step-time spread as a throughput range. Step times have median p50 and
    interquartile range IQR, so about half the steps took p50 ± IQR/2; the throughput of a step
    scales as 1/step time, so the bar runs from ``value · p50 / (p50 + IQR/2)`` to
    ``value · p50 / (p50 - IQR/2)``, scaled to the point's own ``value`` (which is measured over
    the whole window, not from p50). It is asymmetric, and its fast end is capped at 4x the value
    when IQR/2 approaches p50 (a very noisy burst). Failed bursts sit at 0 as crosses.
    """
    name = _METRIC_TITLES.get(metric, metric)
    title = f"Throughput ({name}) vs {knob}"
    found = _bursts(df, knob, metric)
    if found is None:
        return _placeholder(title, _no_bursts(df, knob))
    bursts, axis = found
    if metric == "cost_per_million_samples":
        title = f"Cost per million samples vs {knob}"
        if bursts.loc[~bursts["failed"], metric].isna().all():
            return _placeholder(title, "no burst with a price yet: set price_per_hour and run")
    lo, hi = _throughput_range(bursts[metric], bursts["step_ms_p50"], bursts["step_ms_iqr"])
    if metric == "cost_per_million_samples":  # cost scales as step time: the bar flips
        lo, hi = bursts[metric] * bursts[metric] / hi, bursts[metric] * bursts[metric] / lo
    bursts = bursts.assign(y_lo=lo, y_hi=hi, fail_y=0.0)
    layers = _measured(
        bursts, axis, {name: metric}, metric=metric, y_title=name, highlight_id=highlight_id
    )
    return alt.layer(*layers, title=_title(title, bursts), width=WIDTH, height=HEIGHT)


def _throughput_range(
    value: pd.Series, p50: pd.Series, iqr: pd.Series
) -> tuple[pd.Series, pd.Series]:
    """(slow end, fast end) of the error bar; NaN where p50 or IQR is unknown (see throughput)."""
    half = iqr / 2
    known = (p50 > 0) & half.notna() & value.notna()
    slow = value * p50 / (p50 + half)
    fast = value * p50 / (p50 - half).clip(lower=p50 / _MAX_SPEEDUP)
    return slow.where(known), fast.where(known)


def memory(
    df: pd.DataFrame,
    knob: str,
    *,
    capacity_mib: float | None = None,
    capacity_label: str = "device memory",
    highlight_id: int | None = None,
) -> alt.LayerChart:
    """Peak memory (allocated, and reserved where known) against ``knob``.

    With ``capacity_mib`` (e.g. the ``device_mem_mib`` column) a dashed rule marks the device's
    memory and OOM bursts sit on it; without, they sit at their own recorded peak (0 if none).
    ``capacity_label`` names what the rule is: on a CPU the peak is the host memory of the
    process and its loader workers, so the rule there is ``"system RAM"``.

    The legend says what each peak is (``_peak_label``): torch's allocator on CUDA, PSS or
    summed RSS of the process tree on a CPU. Peaks of different kinds (a history from before
    PSS) are separate series, never one line.
    """
    title = f"Peak memory (MiB) vs {knob}"
    found = _bursts(df, knob)
    if found is None:
        return _placeholder(title, _no_bursts(df, knob))
    bursts, axis = found
    top = _highest_peak(bursts)
    edge = capacity_mib is not None and top is not None and capacity_mib > _ZOOM_RATIO * top
    fail_y = capacity_mib if capacity_mib is not None else bursts["peak_mem_mib"].fillna(0.0)
    if edge:  # OOMs at the top of the zoomed axis, under the capacity's edge
        fail_y = top * 1.05
    bursts = bursts.assign(fail_y=fail_y)
    series = _peak_series(bursts, _peak_labels(df), highlight_id)
    if bursts.loc[~bursts["failed"], "peak_reserved_mib"].notna().any():
        series["peak reserved"] = "peak_reserved_mib"
    layers = _measured(bursts, axis, series, metric="samples_per_s", y_title="MiB",
                       highlight_id=highlight_id, zero=not edge)  # fmt: skip
    if capacity_mib is not None:
        layers[:0] = _capacity_layers(capacity_mib, capacity_label, top if edge else None)
    return alt.layer(*layers, title=_title(title, bursts), width=WIDTH, height=HEIGHT)


def _highest_peak(bursts: pd.DataFrame) -> float | None:
    ok = bursts[~bursts["failed"]]
    peaks = pd.concat([ok["peak_mem_mib"], ok["peak_reserved_mib"]]).dropna()
    return float(peaks.max()) if not peaks.empty and peaks.max() > 0 else None


_PEAK_LABELS = {
    "allocated": "peak allocated",
    "pss": "peak memory (PSS, process + workers)",
    "rss": "peak memory (RSS summed, process + workers)",
}


def _peak_label(kind: Any, device: Any) -> str:
    """What a burst's ``peak_mem_mib`` is, from its ``peak_mem_kind`` ("allocated", "pss",
    "rss"); a row without one is named by its device (CUDA: the allocator)."""
    if isinstance(kind, str) and kind in _PEAK_LABELS:
        return _PEAK_LABELS[kind]
    if isinstance(device, str) and device.startswith("cuda"):
        return _PEAK_LABELS["allocated"]
    return "peak memory (process + workers)"


def _peak_labels(df: pd.DataFrame) -> list[str]:
    """One label per row of ``_bursts(df, ...)`` (the same rows: cancelled ones dropped)."""
    if "status" in df.columns:
        df = df[df["status"] != "cancelled"]
    kinds = _col(df, "peak_mem_kind", numeric=False)
    devices = _col(df, "device", numeric=False)
    return [_peak_label(k, d) for k, d in zip(kinds, devices, strict=True)]


def _peak_series(
    bursts: pd.DataFrame, labels: list[str], highlight_id: int | None
) -> dict[str, str]:
    """Legend name -> column, one per kind of peak, adding a ``peak_<n>`` column to ``bursts``
    for each. The highlighted burst's kind comes first (the current point is drawn on it),
    else the latest burst's."""
    order = list(dict.fromkeys(labels))
    at = [i for i, b in enumerate(bursts["id"]) if highlight_id is not None and b == highlight_id]
    first = labels[at[0]] if at else (labels[-1] if labels else None)
    order.sort(key=lambda label: label != first)
    series: dict[str, str] = {}
    for n, label in enumerate(order):
        column = f"peak_{n}"
        mine = pd.Series(labels, index=bursts.index) == label
        bursts[column] = bursts["peak_mem_mib"].where(mine)
        series[label] = column
    return series


def _capacity_layers(capacity_mib: float, label: str, top: float | None = None) -> list[alt.Chart]:
    """The capacity as a dashed rule in the axis; with ``top`` (the highest peak, far below
    it) as a dashed edge along the top of a zoomed axis, labelled with the headroom."""
    data = pd.DataFrame(
        {"capacity_mib": [float(capacity_mib)], "label": [f"{label} {capacity_mib:,.0f} MiB"]}
    )
    if top is not None:
        return _capacity_edge(data, capacity_mib - top)
    base = _chart(data, "capacity").encode(y=alt.Y("capacity_mib:Q", title="MiB"))
    rule = base.mark_rule(color=_RED, strokeDash=[5, 3])
    text = base.mark_text(align="left", baseline="bottom", dx=3, dy=-3, color=_RED).encode(
        x=alt.value(0), text="label:N"
    )
    return [rule, text.properties(name="capacity_label")]


def _capacity_edge(data: pd.DataFrame, headroom_mib: float) -> list[alt.Chart]:
    edge = data.assign(edge=data["label"] + f" above: {headroom_mib:,.0f} MiB of headroom")
    base = _chart(edge, "capacity")
    rule = base.mark_rule(color=_RED, strokeDash=[5, 3]).encode(y=alt.value(0))
    text = base.mark_text(align="left", baseline="top", dx=3, dy=3, color=_RED).encode(
        x=alt.value(0), y=alt.value(0), text="edge:N"
    )
    return [rule, text.properties(name="capacity_label")]


def sweep(
    df: pd.DataFrame, knob: str | None = None, *, capacity_mib: float | None = None
) -> alt.HConcatChart:
    """Throughput and peak memory against the swept knob, side by side.

    For the frame ``wb.sweep`` returns: ``knob`` defaults to the one it swept
    (``df.attrs["knob"]``). The first value's extra runs for drift (``reference`` True) are
    left out, so that value counts its own repeats only; where the sweep measured its drift
    (``df.attrs["drift"]``), throughput is the drift-corrected ``samples_per_s_corrected``.
    """
    knob = knob or df.attrs.get("knob")
    if not knob:
        raise ValueError("which knob? pass knob=... (this frame does not say what was swept)")
    drift = df.attrs.get("drift") or {}
    if "reference" in df.columns:
        df = df[~df["reference"].eq(True)]
    measured = drift.get("drift_pct") is not None and "samples_per_s_corrected" in df.columns
    metric = "samples_per_s_corrected" if measured else "samples_per_s"
    return alt.hconcat(
        throughput(df, knob, metric=metric), memory(df, knob, capacity_mib=capacity_mib)
    )


def step_split(df: pd.DataFrame, knob: str, *, highlight_id: int | None = None) -> alt.LayerChart:
    """Where a step's time goes, per knob value: data wait, host-to-device copy, compute.

    One stacked bar per knob value, from the latest successful burst at that value (the
    highlighted burst instead, at its own value). Each part is that burst's per-step median, so
    the bar is the sum of the parts; medians do not add up exactly, so the burst's median step
    time is drawn beside it as a black tick. The copy part appears only where it was measured.
    """
    title = f"Step time split (ms) vs {knob}"
    found = _bursts(df, knob)
    if found is None:
        return _placeholder(title, _no_bursts(df, knob))
    bursts, axis = found
    chosen = _one_per_value(bursts, highlight_id)
    parts = _step_parts(chosen)
    x, tips = axis.encode(ordinal=True), _tooltip(axis, "samples_per_s")
    layers: list[alt.Chart] = [_bars(parts, x, tips)]
    layers.append(
        _chart(chosen.dropna(subset=["step_ms_p50"]), "step_p50")
        .mark_tick(color="black", thickness=2, size=26)
        .encode(x=x, y="step_ms_p50:Q", tooltip=tips)
    )
    fails = bursts[bursts["failed"]].assign(fail_y=0.0)
    if not fails.empty:
        layers.append(_failure_layer(fails, x, tips))
    current = chosen[chosen["id"] == highlight_id] if highlight_id is not None else chosen[:0]
    if not current.empty:
        layers.append(_current_label(current, x, "split_ms"))
    if parts.empty:
        layers.append(_message_layer("no successful bursts yet"))
    return alt.layer(*layers, title=_title(title, bursts), width=WIDTH, height=HEIGHT)


def _one_per_value(bursts: pd.DataFrame, highlight_id: int | None) -> pd.DataFrame:
    """The latest ok burst with a known split at each value; the highlighted one at its value."""
    columns = [column for _, column, _ in _STEP_PARTS]
    ok = bursts[~bursts["failed"] & bursts[columns].notna().any(axis=1)]
    ok = ok.assign(current=ok["id"] == highlight_id, split_ms=ok[columns].sum(axis=1, min_count=1))
    ok = ok.sort_values(["current", "id"], na_position="first")
    return ok.drop_duplicates("knob_label", keep="last").sort_values("id")


def _step_parts(chosen: pd.DataFrame) -> pd.DataFrame:
    """Long format: one row per burst and known part, with its stacking order."""
    rows = [
        chosen.assign(part=label, part_order=i, part_ms=chosen[column])
        for i, (label, column, _) in enumerate(_STEP_PARTS)
    ]
    return pd.concat(rows, ignore_index=True).dropna(subset=["part_ms"])


def _bars(parts: pd.DataFrame, x: alt.X, tips: list[alt.Tooltip]) -> alt.Chart:
    shown = [(label, c) for label, _, c in _STEP_PARTS if (parts["part"] == label).any()]
    shown = shown or [(label, c) for label, _, c in _STEP_PARTS]  # the legend of an empty chart
    colour = alt.Color(
        "part:N",
        scale=alt.Scale(domain=[label for label, _ in shown], range=[c for _, c in shown]),
        legend=alt.Legend(orient="bottom", title=None),
    )
    return (
        _chart(parts, "parts")
        .mark_bar(size=26)
        .encode(
            x=x,
            y=alt.Y("part_ms:Q", title="ms per step (median)", stack="zero"),
            color=colour,
            order=alt.Order("part_order:Q"),
            tooltip=[
                alt.Tooltip("part:N"),
                alt.Tooltip("part_ms:Q", title="part ms", format=",.2f"),
                alt.Tooltip("split_ms:Q", title="sum of parts ms", format=",.2f"),
                *tips,
            ],
        )
    )


def _no_bursts(df: pd.DataFrame, knob: str) -> str:
    usable = df if "status" not in df.columns else df[df["status"] != "cancelled"]
    if usable.empty:
        return "no bursts yet: run one (Run, move a knob, or wb.run_burst)"
    return f"no bursts with {knob} recorded yet: move {knob} to add one"


# -- the history table ------------------------------------------------------------------------

_STATUS_WORDS = {"ok": "ok", "oom": "out of memory", "error": "error", "cancelled": "cancelled"}
_NOTE_CHARS = 80


def history_table(df: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The newest ``n`` bursts, newest first, as text cells ready to show.

    Columns: id, time (local), workload, device, status, one column per knob that differs from
    its default in any shown row (NCCL variables included), then samples/s (tokens/s where
    measured; marked ``*`` when noisy, IQR/median > 10%: ``history_html`` says what that
    means once, under the table, not in every row), step ms (median and IQR), data wait %,
    peak MiB, and a note with the error of a failed burst. Unknown values read "n/a".
    """
    rows = _newest(df, n)
    records = rows.to_dict("records")
    knobs = [_row_knobs(r) for r in records]
    table: dict[str, list[str]] = {
        "id": [_text(r.get("id"), "{:.0f}") for r in records],
        "time": [_time(r.get("created_at")) for r in records],
        "workload": [_text(r.get("workload")) for r in records],
        "device": [_text(r.get("device")) for r in records],
        "status": [_STATUS_WORDS.get(str(r.get("status")), str(r.get("status"))) for r in records],
    }
    for name in _changed_knobs(knobs):
        values = [k["nccl"].get(name) if _NCCL.match(name) else k[name] for k in knobs]
        table[name] = [_label(v) for v in values]
    table["samples/s"] = [_rate(r, "samples_per_s") for r in records]
    if any(not _null(r.get("tokens_per_s")) for r in records):
        table["tokens/s"] = [_rate(r, "tokens_per_s") for r in records]
    table["step ms"] = [_text(r.get("step_ms_p50"), "{:,.1f}") for r in records]
    table["IQR ms"] = [_text(r.get("step_ms_iqr"), "{:,.1f}") for r in records]
    table["data wait %"] = [_text(r.get("data_wait_pct"), "{:.1f}") for r in records]
    table["peak MiB"] = [_text(r.get("peak_mem_mib"), "{:,.0f}") for r in records]
    costs = cost_column(rows)
    if costs.notna().any():
        table["cost/M samples"] = [_text(c, "{:,.4g}") for c in costs]
    table["note"] = [_note(r.get("error")) for r in records]
    return pd.DataFrame(table, columns=list(table))


def history_html(df: pd.DataFrame, n: int = 10) -> str:
    """:func:`history_table` as an HTML table (cells escaped), e.g. for an ``ipywidgets.HTML``."""
    table = history_table(df, n)
    if table.empty:
        return "<p><em>no bursts yet: each burst you run is listed here</em></p>"
    right = [_is_number_column(table[c]) for c in table.columns]
    head = "".join(_cell("th", c, r) for c, r in zip(table.columns, right, strict=True))
    body = "".join(
        "<tr>" + "".join(_cell("td", v, r) for v, r in zip(row, right, strict=True)) + "</tr>"
        for row in table.itertuples(index=False)
    )
    legend = ""
    if any(str(c).endswith(NOISY_MARK) for c in table["samples/s"]):
        legend = (f'<p style="margin:2px 0;font-size:90%"><em>{NOISY_MARK.strip()} noisy: '
                  f"{html.escape(NOISY_MEANING)}</em></p>")  # fmt: skip
    return (
        '<table class="workbench-history" style="border-collapse:collapse">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{legend}"
    )


NOISY_MARK = " *"
"""How a noisy burst's figure is marked in the history table (the legend says it once)."""


_NUMBER = re.compile(r"^-?[\d,.]+( \*)?$|^n/a$")


def _is_number_column(cells: pd.Series) -> bool:
    """Right-align a column of figures (and its heading with it); text stays on the left."""
    return all(_NUMBER.match(str(c)) for c in cells) and any(str(c) != "n/a" for c in cells)


def _cell(tag: str, value: Any, right: bool) -> str:
    """One cell with its own alignment and padding: headings line up with their column, and
    neighbouring figures ("185 *" beside "343.5") never run together."""
    style = f"text-align:{'right' if right else 'left'};padding:2px 10px;white-space:nowrap"
    return f'<{tag} style="{style}">{html.escape(str(value))}</{tag}>'


def _newest(df: pd.DataFrame, n: int) -> pd.DataFrame:
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    key = "id" if "id" in df.columns else "created_at" if "created_at" in df.columns else None
    rows = df.sort_values(key, kind="stable") if key is not None else df
    return rows.iloc[::-1].head(n)


def _changed_knobs(knobs: list[dict[str, Any]]) -> list[str]:
    """Knobs differing from their default in any row, in Knobs order, then NCCL names sorted."""
    names = [
        s.name
        for s in knob_specs()
        if s.kind != "mapping" and any(k[s.name] != s.default for k in knobs)
    ]
    return names + sorted({name for k in knobs for name in k["nccl"]})


def _text(value: Any, fmt: str = "{}") -> str:
    if _null(value):
        return "n/a"
    try:
        return fmt.format(_plain(value))
    except (TypeError, ValueError):
        return str(value)


def _rate(record: Mapping[str, Any], field: str) -> str:
    text = _text(record.get(field), "{:,.0f}")
    return f"{text}{NOISY_MARK}" if text != "n/a" and _plain(record.get("noisy")) is True else text


def _time(value: Any) -> str:
    if _null(value) or value is pd.NaT:
        return "n/a"
    stamp = pd.Timestamp(value)
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert(datetime.now().astimezone().tzinfo)
    return stamp.strftime("%Y-%m-%d %H:%M:%S")


def _note(error: Any) -> str:
    if _null(error):
        return ""
    text = " ".join(str(error).split())
    return text if len(text) <= _NOTE_CHARS else text[: _NOTE_CHARS - 1] + "…"


# -- memory at every step (wb.memory_snapshot) --------------------------------------------


def memory_timeline(steps: list[dict[str, Any]], device_mem_mib: float | None = None):
    """Allocated and reserved (CUDA) or process RSS (CPU) at every step, as an Altair chart;
    the y axis fits the data (the device's capacity is said in the title, not drawn)."""
    frame = pd.DataFrame(steps)
    series = [c for c in ("allocated_mib", "reserved_mib", "process_mib") if c in frame]
    if frame.empty or not series:
        return (
            alt.Chart(pd.DataFrame({"text": ["no steps recorded yet: run a burst"]}))
            .mark_text(size=14)
            .encode(text="text:N")
        )
    long = frame.melt(id_vars=["step", "phase"], value_vars=series, var_name="what",
                      value_name="MiB")  # fmt: skip
    title = "memory at every step"
    if device_mem_mib:
        title += f" (capacity {device_mem_mib:,.0f} MiB)"
    return (
        alt.Chart(long, title=title)
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", title="step (warm-up, then the measured window)"),
            y=alt.Y("MiB:Q", scale=alt.Scale(zero=False), title="MiB"),
            color=alt.Color("what:N", title=None),
            tooltip=["step", "phase", "what", alt.Tooltip("MiB:Q", format=",.1f")],
        )
        .properties(width=420, height=220)
    )


# -- saving -----------------------------------------------------------------------------------

_SAVE_FORMATS = ("png", "svg", "html", "json")


def save(chart: alt.TopLevelMixin, path: str | Path, *, scale_factor: float = 2.0) -> Path:
    """Write ``chart`` to ``path`` by its extension (.png, .svg, .html, .json), offline.

    PNG and SVG are rendered by vl-convert-python in this process; the HTML file inlines the
    Vega JavaScript, so it opens without a network. ``scale_factor`` sharpens PNGs.
    """
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in _SAVE_FORMATS:
        allowed = ", ".join(f".{f}" for f in _SAVE_FORMATS)
        raise ValueError(f"cannot save a chart as {path.name!r}: use {allowed}")
    if fmt == "png":
        chart.save(path, format="png", scale_factor=scale_factor)
    elif fmt == "html":
        chart.save(path, format="html", inline=True)
    else:
        chart.save(path, format=fmt)
    return path


# -- a profiled burst -------------------------------------------------------------------------

_PROFILE_PARTS = (  # (part, colour): the host's parts, then the device's
    ("loading data", "#b279a2"),
    ("waiting for the device", "#eeca3b"),
    ("running operators", _BLUE),
    ("other", "#bab0ac"),
    ("device busy", "#54a24b"),
    ("device idle", "#e0e0e0"),
)


def profile(operators: pd.DataFrame, shares: pd.DataFrame, *, top: int = 10) -> alt.VConcatChart:
    """A profiled window: where its time went (host and device), and the top operators.

    ``shares`` is ``TimeShares.frame()`` (timeline, part, pct, ms), ``operators`` is
    ``top_operators()``; ``operators.attrs["sort_by"]`` names the bar length (``device_ms`` on
    CUDA, ``self_ms`` on a CPU). Empty frames give placeholders.
    """
    return alt.vconcat(_profile_shares(shares), _profile_operators(operators, top))


def _profile_shares(shares: pd.DataFrame) -> alt.Chart | alt.LayerChart:
    title = "Where the profiled window's time went (% of wall time)"
    known = shares.dropna(subset=["pct"]) if "pct" in shares.columns else shares
    if known.empty:
        return _placeholder(title, "no profile")
    order = {part: i for i, (part, _) in enumerate(_PROFILE_PARTS)}
    known = known.assign(part_order=known["part"].map(order))
    shown = [(p, c) for p, c in _PROFILE_PARTS if (known["part"] == p).any()]
    colour = alt.Color(
        "part:N",
        scale=alt.Scale(domain=[p for p, _ in shown], range=[c for _, c in shown]),
        legend=alt.Legend(orient="bottom", title=None, columns=3),
    )
    return (
        _chart(known, "shares")
        .mark_bar(size=28)
        .encode(
            y=alt.Y("timeline:N", title=None, sort=["host", "device"]),
            x=alt.X(
                "pct:Q", title="% of the window", stack="zero", scale=alt.Scale(domain=[0, 100])
            ),
            color=colour,
            order=alt.Order("part_order:Q"),
            tooltip=[
                alt.Tooltip("timeline:N"),
                alt.Tooltip("part:N"),
                alt.Tooltip("pct:Q", title="%", format=".1f"),
                alt.Tooltip("ms:Q", title="ms", format=",.1f"),
                alt.Tooltip("what:N"),
            ],
        )
        .properties(title=alt.TitleParams(title, anchor="start"), width=WIDTH * 1.6, height=90)
    )


def _profile_operators(operators: pd.DataFrame, top: int) -> alt.Chart | alt.LayerChart:
    sort_by = str(operators.attrs.get("sort_by", "self_ms"))
    where = "device time (kernels)" if sort_by == "device_ms" else "self time"
    title = f"Top operators by {where}, ms in the window"
    if operators.empty or sort_by not in operators.columns:
        return _placeholder(title, "no operators")
    rows = operators.head(top).assign(bar_ms=lambda f: f[sort_by])
    return (
        _chart(rows, "operators")
        .mark_bar(color=_BLUE)
        .encode(
            y=alt.Y("operator:N", title=None, sort="-x"),
            x=alt.X("bar_ms:Q", title=f"{sort_by.replace('_ms', '')} ms"),
            tooltip=[
                alt.Tooltip("operator:N"),
                alt.Tooltip("calls:Q"),
                alt.Tooltip("self_ms:Q", title="host self ms", format=",.1f"),
                alt.Tooltip("self_pct:Q", title="host self % of window", format=".1f"),
                alt.Tooltip("device_ms:Q", title="device ms", format=",.1f"),
            ],
        )
        .properties(title=alt.TitleParams(title, anchor="start"), width=WIDTH * 1.6)
    )


def comm(df: pd.DataFrame) -> alt.Chart | alt.LayerChart:
    """All-reduce bus bandwidth against message size (``CommResult.frame()``; log2 x axis).

    One line per run when ``df`` holds several (a ``label`` column, else the world size): put
    two frames together to compare NCCL settings. With one rank busbw is 0 by definition, so
    algbw is drawn instead and the title says so.
    """
    title = "All-reduce bus bandwidth (GB/s) vs message size"
    if df.empty:
        return _placeholder(title, "no comm benchmark yet")
    data = df.assign(size_kib=df["size_bytes"] / 1024)
    if "label" not in data.columns:
        pairs = zip(data["world_size"], data["backend"], strict=True)
        data = data.assign(label=[f"{w} rank(s), {b}" for w, b in pairs])
    metric, what = "busbw_gbps", "busbw"
    if (data["world_size"] <= 1).all():
        metric, what = "algbw_gbps", "algbw (one rank: no bus traffic)"
        title = "All-reduce algorithm bandwidth (GB/s) vs message size"
    return (
        _chart(data, "comm")
        .mark_line(point=True)
        .encode(
            x=alt.X("size_kib:Q", title="message size (KiB)", scale=alt.Scale(type="log", base=2)),
            y=alt.Y(f"{metric}:Q", title=f"{what} GB/s"),
            color=alt.Color("label:N", title=None),
            tooltip=[
                alt.Tooltip("label:N", title="run"),
                alt.Tooltip("size_bytes:Q", title="bytes", format=","),
                alt.Tooltip("time_us:Q", title="time us", format=",.1f"),
                alt.Tooltip("algbw_gbps:Q", title="algbw GB/s", format=".3f"),
                alt.Tooltip("busbw_gbps:Q", title="busbw GB/s", format=".3f"),
            ],
        )
        .properties(title=alt.TitleParams(title, anchor="start"), width=WIDTH, height=HEIGHT)
    )
