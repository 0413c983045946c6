"""What a profiled window holds: the operator table and the time shares, from the profiler's
averages and from the Chrome trace (pure functions, so the CUDA arithmetic is tested without a
GPU). ``workbench.analysis.profiling`` runs the burst and writes the trace; this module reads it.

Time shares come from the trace's intervals, overlaps merged so each instant counts once, and
clipped to the ``workbench.window`` mark. The host's parts are made disjoint in priority order:
*loading data* (inside the DataLoader's ``__next__``: blocked on workers, or decoding when
``num_workers=0``), then *waiting for the device* (CUDA synchronize calls; none on a CPU, where
nothing runs asynchronously), then *running operators*; the rest is *other* (Python, framework
glue, starting a new epoch's workers). *Device busy* is the union of kernels, copies and memsets
on the GPU; on a CPU the operators run on the host itself, so it equals the operator share.

Marks (the window, the steps, the DataLoader's waits) are read from the host's annotations
only (category ``user_annotation``). On CUDA, Kineto also writes a ``gpu_user_annotation``
twin of every ``record_function`` range under which kernels or copies were launched: same
name, on the GPU stream's row, spanning the first to the last of that work on the device
(``GenericActivityProfiler::GpuUserEventMap``). Counted too, each step would count twice
(half the ``step_ms``), and a DataLoader range's twin would add device time to the host's
"loading data".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

WINDOW_MARK = "workbench.window"
STEP_MARK = "workbench.step#"
DRAIN_MARK = "workbench.window-end"  # after the last step: the closing synchronize
DATA_MARK = "enumerate(DataLoader)#"  # torch.utils.data annotates every __next__ with this
# record_function ranges on the host; on CUDA, Kineto adds "gpu_user_annotation" twins
HOST_MARK_CATEGORY = "user_annotation"
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
_RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
_NOT_OPERATORS = (WINDOW_MARK, STEP_MARK, DRAIN_MARK, DATA_MARK, "ProfilerStep#", "Optimizer.")
OPERATOR_COLUMNS = ("operator", "calls", "self_ms", "self_pct", "device_ms", "device_pct")

Interval = tuple[float, float]


@dataclass(frozen=True, kw_only=True, slots=True)
class TimeShares:
    """How the profiled window's wall time was spent, in percent of ``window_ms``.

    Host: ``data_pct + device_wait_pct + ops_pct + other_pct == 100`` (``device_wait_pct``
    counts as 0 where it is ``None``). ``device_busy_pct`` is the device's own timeline.
    """

    window_ms: float
    steps: int
    data_pct: float
    device_wait_pct: float | None
    ops_pct: float
    other_pct: float
    device_busy_pct: float | None
    device_type: str

    @property
    def host_wait_pct(self) -> float:
        """Share of the window the host was blocked: on the next batch or on the device."""
        return self.data_pct + (self.device_wait_pct or 0.0)

    @property
    def step_ms(self) -> float | None:
        return self.window_ms / self.steps if self.steps else None

    def frame(self) -> pd.DataFrame:
        """One row per part (``timeline`` host or device), the shape ``plots.profile`` reads."""
        busy_note = "kernels, copies, memsets" if self.device_type == "cuda" else "= operators"
        rows = [
            ("host", "loading data", self.data_pct, "inside the DataLoader's __next__"),
            ("host", "waiting for the device", self.device_wait_pct, "CUDA synchronize calls"),
            ("host", "running operators", self.ops_pct, "aten operators"),
            ("host", "other", self.other_pct, "Python, framework glue, epoch start"),
            ("device", "device busy", self.device_busy_pct, busy_note),
        ]
        if self.device_busy_pct is not None:
            idle = 100.0 - self.device_busy_pct
            rows.append(("device", "device idle", idle, "nothing running"))
        frame = pd.DataFrame(rows, columns=["timeline", "part", "pct", "what"])
        frame["ms"] = frame["pct"] * self.window_ms / 100.0
        return frame


# -- operators ---------------------------------------------------------------------------------


def empty_operators() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=object) for c in OPERATOR_COLUMNS})
    frame.attrs["sort_by"] = "self_ms"
    return frame


def top_operators(averages: Iterable[Any], *, cuda: bool, window_ms: float) -> pd.DataFrame:
    """One row per operator from ``prof.key_averages()``, the most expensive first.

    ``self_ms``: host time inside the operator itself (children excluded); ``device_ms``: time
    of the kernels it launched (CUDA only, else null). Percentages are of the window's wall
    time, so they read like the time shares. Sorted by device time on CUDA (what the GPU
    spent), by self time on a CPU.
    """
    rows = []
    for avg in averages:
        key = str(avg.key)
        if getattr(avg, "is_user_annotation", False) or key.startswith(_NOT_OPERATORS):
            continue
        if getattr(avg, "device_type", None) not in (None, torch.autograd.DeviceType.CPU):
            continue  # a kernel's own row: its time is in its operator's device_ms
        self_ms = avg.self_cpu_time_total / 1e3
        dev_us = getattr(avg, "self_device_time_total", None)
        if dev_us is None:  # torch < 2.4 spelled it with "cuda"
            dev_us = getattr(avg, "self_cuda_time_total", 0)
        device_ms = dev_us / 1e3 if cuda else None
        rows.append((key, int(avg.count), self_ms, device_ms))
    frame = pd.DataFrame(rows, columns=["operator", "calls", "self_ms", "device_ms"])
    scale = 100.0 / window_ms if window_ms > 0 else float("nan")
    frame["self_pct"] = frame["self_ms"] * scale
    frame["device_pct"] = frame["device_ms"] * scale if cuda else None
    sort_by = "device_ms" if cuda else "self_ms"
    frame = frame.sort_values([sort_by, "self_ms"], ascending=False, ignore_index=True)
    frame = frame[list(OPERATOR_COLUMNS)]
    frame.attrs["sort_by"] = sort_by
    return frame


def sort_column(operators: pd.DataFrame) -> str:
    return str(operators.attrs.get("sort_by", "self_ms"))


# -- time shares from the trace ----------------------------------------------------------------


def time_shares(events: Sequence[dict[str, Any]], device_type: str) -> TimeShares:
    """The window's time shares from Chrome-trace events (a pure function of the trace).

    The window is the ``workbench.window`` mark, or every complete event's span if the trace
    has none. Host parts are made disjoint in priority order (loading data, then waiting for
    the device, then operators); the rest is "other". Intervals are clipped to the window.
    """
    complete = [e for e in events if e.get("ph") == "X" and "dur" in e and "ts" in e]
    marks = [e for e in complete if _is_host_mark(e) and e.get("name") == WINDOW_MARK]
    if marks:
        window = _span(marks[0])
    else:
        spans = [_span(e) for e in complete]
        window = (min(s for s, _ in spans), max(e for _, e in spans)) if spans else (0.0, 0.0)
    length = window[1] - window[0]
    if length <= 0:
        raise ValueError("the trace has no profiled window (no complete events)")
    cuda = device_type == "cuda"

    def union(pick: Callable[[dict[str, Any]], bool]) -> list[Interval]:
        return _merge(_clip((_span(e) for e in complete if pick(e)), window))

    data = union(lambda e: _is_host_mark(e, DATA_MARK))
    sync = union(lambda e: e.get("cat") in _RUNTIME_CATEGORIES and _is_sync(e)) if cuda else []
    ops = union(lambda e: e.get("cat") == "cpu_op")
    busy = union(lambda e: e.get("cat") in DEVICE_CATEGORIES) if cuda else []
    # No GPU activity at all in a CUDA trace means CUPTI recorded nothing (no permission to
    # profile, or another profiler holds it): the device's share is unknown, not 0.
    seen_device = any(e.get("cat") in DEVICE_CATEGORIES for e in complete)
    wait = _subtract(sync, data)
    running = _subtract(_subtract(ops, data), sync)
    pct = 100.0 / length
    data_pct = _total(data) * pct
    wait_pct = _total(wait) * pct if cuda else None
    ops_pct = _total(running) * pct
    other = max(0.0, 100.0 - data_pct - (wait_pct or 0.0) - ops_pct)
    steps = sum(1 for e in complete if _is_host_mark(e, STEP_MARK))
    return TimeShares(
        window_ms=length / 1e3,
        steps=steps,
        data_pct=data_pct,
        device_wait_pct=wait_pct,
        ops_pct=ops_pct,
        other_pct=other,
        device_busy_pct=(_total(busy) * pct if seen_device else None) if cuda else ops_pct,
        device_type="cuda" if cuda else "cpu",
    )


def _is_host_mark(event: dict[str, Any], prefix: str = "") -> bool:
    """A ``record_function`` range on the host named ``prefix...``, not its GPU twin."""
    name = str(event.get("name", ""))
    return event.get("cat") == HOST_MARK_CATEGORY and name.startswith(prefix)


def _is_sync(event: dict[str, Any]) -> bool:
    """CUDA calls that block the host until the device catches up (cudaDeviceSynchronize,
    cudaStreamSynchronize, cudaEventSynchronize, cuCtxSynchronize, a synchronous cudaMemcpy)."""
    name = str(event.get("name", ""))
    return "Synchronize" in name or name in ("cudaMemcpy", "cuMemcpy")


def _span(event: dict[str, Any]) -> Interval:
    start = float(event["ts"])
    return start, start + float(event["dur"])


def _clip(spans: Iterable[Interval], window: Interval) -> list[Interval]:
    lo, hi = window
    return [(max(s, lo), min(e, hi)) for s, e in spans if e > lo and s < hi]


def _merge(spans: Iterable[Interval]) -> list[Interval]:
    """Overlapping or touching intervals joined: each instant counted once."""
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def _subtract(spans: list[Interval], cut: list[Interval]) -> list[Interval]:
    """``spans`` minus ``cut`` (both merged and sorted)."""
    out: list[Interval] = []
    j = 0
    for start, end in spans:
        cur = start
        while j < len(cut) and cut[j][1] <= cur:
            j += 1
        k = j
        while k < len(cut) and cut[k][0] < end:
            if cut[k][0] > cur:
                out.append((cur, cut[k][0]))
            cur = max(cur, cut[k][1])
            k += 1
        if cur < end:
            out.append((cur, end))
    return out


def _total(spans: list[Interval]) -> float:
    return sum(e - s for s, e in spans)


def empty_shares() -> pd.DataFrame:
    return pd.DataFrame(columns=["timeline", "part", "pct", "what", "ms"])


__all__ = [
    "DATA_MARK",
    "DRAIN_MARK",
    "HOST_MARK_CATEGORY",
    "STEP_MARK",
    "WINDOW_MARK",
    "TimeShares",
    "empty_operators",
    "empty_shares",
    "sort_column",
    "time_shares",
    "top_operators",
]
