"""``compare_formats``: every data format side by side, cold and warm, loader-only and full.

One row per (format, cache, mode): ``loader`` is the loader-only ceiling (``run_loader_burst``:
read, decode, augment, no model), ``full`` a training burst (``run_burst``). Formats not
converted yet are converted first (``build=True``; the conversion is reused afterwards), so a
notebook cell or the benchmark runs on a fresh data folder. Runs are interleaved by repeat, so
drift on a shared machine spreads over every format rather than landing on one; with two
repeats or more, the first format and cache of each mode (run at the start of every repeat)
is the reference that measures it (``workbench.analysis.drift``): each row gets
``drift_factor`` and ``samples_per_s_corrected``, and ``frame.attrs["drift"]`` the summary
per mode, with a sentence when the drift is larger than the differences between the formats.

*Cold* rows drop the dataset's pages first (``cache=cold``), but the page cache is the host's:
containers on one host share it, so a neighbour reading the same dataset (a JupyterHub room's
shared, read-only copy) can make a cold row read warm pages, and only root on the host can
empty the whole cache (``workbench.engine.storage``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.analysis.drift import Wording, estimate_drift
from workbench.analysis.loader_ceiling import run_loader_burst
from workbench.core.errors import InputError
from workbench.core.knobs import DATA_FORMATS, Knobs
from workbench.distributed.dispatch import run_burst
from workbench.engine.convert import convert_dataset
from workbench.engine.formats import image_size
from workbench.engine.formats.predecoded import resolution_for
from workbench.engine.window import BurstWindow
from workbench.engine.workloads import Workload, resolve_workload

MODES = ("loader", "full")
CACHES = ("warm", "cold")


def compare_formats(
    workload: str | Workload = "cnn",
    knobs: Knobs | None = None,
    *,
    formats: Sequence[str] = DATA_FORMATS,
    caches: Sequence[str] = CACHES,
    modes: Sequence[str] = MODES,
    seconds: float = 2.0,
    min_steps: int = 5,
    warmup_steps: int = 3,
    repeats: int = 1,
    data_dir: str | os.PathLike[str] | None = None,
    build: bool = True,
    record: bool = False,
    progress: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Measure each format; columns ``data_format, cache, mode, repeat, samples_per_s,
    status, error, bytes_on_disk, drift_factor, samples_per_s_corrected`` (module
    docstring), ``attrs["drift"]``: mode -> ``Drift.to_dict()``."""
    base = knobs or Knobs()
    window = BurstWindow(seconds=seconds, min_steps=min_steps, warmup_steps=warmup_steps)
    wl = resolve_workload(workload, data_dir)
    sizes = _ensure_formats(wl, formats, progress) if build else {}
    rows: list[dict[str, Any]] = []
    for repeat in range(repeats):
        for fmt in formats:
            for cache in caches:
                k = base.replace(data_format=fmt, cache=cache)
                for mode in modes:
                    if progress:
                        progress(f"{fmt}, {cache}, {mode} (repeat {repeat + 1}/{repeats})")
                    if mode == "loader":
                        r: Any = run_loader_burst(wl, k, window=window)
                    else:
                        r = run_burst(wl, k, window=window, record=record)
                    rows.append({
                        "data_format": fmt, "cache": cache, "mode": mode, "repeat": repeat,
                        "samples_per_s": r.samples_per_s if r.ok else None,
                        "status": r.status, "error": r.error,
                        "bytes_on_disk": sizes.get(fmt),
                    })  # fmt: skip
    return _with_drift(pd.DataFrame(rows))


def _with_drift(frame: pd.DataFrame) -> pd.DataFrame:
    """Per mode, the drift read from the first format and cache's run in each repeat (one
    repeat: one reading, factors 1.0 and no drift figure)."""
    frame["drift_factor"] = 1.0
    frame["samples_per_s_corrected"] = frame["samples_per_s"].astype(float)
    frame.attrs["drift"] = {}
    for mode, rows in frame.groupby("mode", sort=False):
        first = rows.iloc[0]
        reference = (rows["data_format"] == first["data_format"]) & (
            rows["cache"] == first["cache"]
        )
        words = Wording(over=f"the comparison ({mode})", effect="the {pct} between the formats",
                        cannot="these runs cannot rank them; rerun on a quiet machine",
                        corrected="; samples_per_s_corrected is corrected by it")  # fmt: skip
        sps = [None if pd.isna(v) else float(v) for v in rows["samples_per_s"]]
        groups = list(rows["data_format"] + ", " + rows["cache"])
        drift = estimate_drift(sps, list(reference), groups, words=words)
        frame.loc[rows.index, "drift_factor"] = drift.factors
        frame.loc[rows.index, "samples_per_s_corrected"] = [
            float("nan") if c is None else c for c in drift.corrected
        ]
        frame.attrs["drift"][str(mode)] = drift.to_dict()
    return frame


def _ensure_formats(
    wl: Workload, formats: Sequence[str], progress: Callable[[str], None] | None
) -> dict[str, int]:
    """Convert what is missing; bytes on disk of each format (files: the JPEGs)."""
    if wl.image_dir is None:
        why = "an image workload: this one reads no image folder, so it has no formats"
        raise InputError.not_allowed("workload", wl.name, why)
    sizes = {}
    dataset = wl.dataset()
    for fmt in formats:
        if fmt == "files":
            sizes[fmt] = sum(Path(p).stat().st_size for p, _ in dataset.samples)
            continue
        resolution = resolution_for(image_size(wl, dataset)) if fmt == "predecoded" else None
        done = convert_dataset(fmt, wl.image_dir, resolution=resolution, progress=progress)
        sizes[fmt] = done.bytes
    return sizes


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Median samples/s per format (rows) and cache x mode (columns), as the chart shows."""
    ok = frame[frame["status"] == "ok"]
    table = ok.pivot_table(index="data_format", columns=["mode", "cache"],
                           values="samples_per_s", aggfunc="median")  # fmt: skip
    order = [f for f in DATA_FORMATS if f in table.index]
    return table.reindex(order)


__all__ = ["CACHES", "MODES", "compare_formats", "summary"]
