"""workbench.workshop.format_charts: the formats chart, checked on its Vega-Lite spec."""

from __future__ import annotations

import pandas as pd

from workbench.workshop.format_charts import formats


def _frame() -> pd.DataFrame:
    rows = []
    for fmt, rate in (("files", 100.0), ("shards", 150.0), ("lmdb", None)):
        for cache in ("warm", "cold"):
            for mode in ("loader", "full"):
                ok = rate is not None
                rows.append({
                    "data_format": fmt, "cache": cache, "mode": mode, "repeat": 0,
                    "samples_per_s": rate, "status": "ok" if ok else "error",
                    "error": None if ok else "no lmdb copy", "bytes_on_disk": 1,
                })  # fmt: skip
    return pd.DataFrame(rows)


def test_bars_per_format_coloured_by_cache_faceted_by_mode_with_failures_marked():
    spec = formats(_frame()).to_dict()
    assert spec["facet"]["column"]["field"] == "what"
    layers = spec["spec"]["layer"]
    assert [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"]
            for layer in layers] == ["bar", "tick", "point"]  # fmt: skip
    assert layers[0]["encoding"]["x"]["sort"] == ["files", "shards", "lmdb"]
    assert layers[0]["encoding"]["color"]["field"] == "cache"
    data = pd.DataFrame(next(iter(spec["datasets"].values())))
    assert data.loc[data["data_format"] == "lmdb", "failed"].all()
    assert set(data["what"]) == {"loader alone", "full burst"}


def test_an_empty_frame_says_so():
    assert formats(pd.DataFrame()).to_dict()["mark"]["type"] == "text"
