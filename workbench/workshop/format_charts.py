"""The formats side by side: one bar per format, cold and warm, loader-only and full burst.

A pure function from ``format_bench.compare_formats``'s frame to an Altair chart (no I/O), as
the charts in ``plots.py``. Repeats are drawn as their median bar and each run as a tick.
Failed runs (a format not built, an error) get a cross at zero, never a silent gap.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from workbench.core.knobs import DATA_FORMATS

_COLOURS = {"warm": "#f58518", "cold": "#4c78a8"}


def formats(frame: pd.DataFrame) -> alt.FacetChart | alt.Chart:
    """Samples/s by data format; colour: cache; columns: loader alone, full burst."""
    if frame.empty:
        return alt.Chart(pd.DataFrame({"text": ["no runs yet"]})).mark_text().encode(text="text:N")
    data = frame.assign(
        what=frame["mode"].map({"loader": "loader alone", "full": "full burst"}),
        rate=frame["samples_per_s"].fillna(0.0),
        failed=frame["status"] != "ok",
    )
    order = [f for f in DATA_FORMATS if f in set(data["data_format"])]
    x = alt.X("data_format:N", sort=order, title="data_format")
    colour = alt.Color("cache:N", scale=alt.Scale(domain=list(_COLOURS),
                                                  range=list(_COLOURS.values())))  # fmt: skip
    offset = alt.XOffset("cache:N", sort=list(_COLOURS))
    tips = [alt.Tooltip("data_format:N"), alt.Tooltip("cache:N"), alt.Tooltip("what:N"),
            alt.Tooltip("rate:Q", title="samples/s", format=",.1f"),
            alt.Tooltip("status:N"), alt.Tooltip("error:N")]  # fmt: skip
    base = alt.Chart().encode(x=x, xOffset=offset, color=colour)
    bars = (
        base.transform_filter("!datum.failed")
        .mark_bar()
        .encode(y=alt.Y("median(rate):Q", title="samples/s"), tooltip=tips[:4])
    )
    ticks = (
        base.transform_filter("!datum.failed")
        .mark_tick(color="black", thickness=1)
        .encode(y="rate:Q", tooltip=tips)
    )
    crosses = (
        base.transform_filter("datum.failed")
        .mark_point(shape="cross", size=80)
        .encode(y="rate:Q", tooltip=tips)
    )
    layered = alt.layer(bars, ticks, crosses, data=data).properties(width=220, height=200)
    return layered.facet(column=alt.Column("what:N", title=None, sort=["loader alone",
                                                                       "full burst"]))  # fmt: skip


__all__ = ["formats"]
