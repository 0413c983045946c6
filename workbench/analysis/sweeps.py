"""``sweep``: one burst per value of one knob, the other knobs held; a DataFrame to plot.

Every value is checked before the first burst runs, so a typo in the last value does not
cost the bursts before it. Repeats are interleaved (all values, then all values again), so a
slow drift of the machine (thermal, another job) lands on every value alike instead of on
the values measured last. ``diagnose`` (diagnosis.py) and ``tune`` (tuner.py) build on the same
burst and the same helpers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from workbench.analysis.loader_ceiling import settled_warmup
from workbench.core.knobs import KnobError, Knobs, check_value
from workbench.core.results import BurstResult
from workbench.engine import hardware
from workbench.engine.burst import BurstProgress, check_burst_args, run_burst
from workbench.engine.workloads import Workload, default_workload_name, resolve_workload
from workbench.history.store import open_store, records_frame

if TYPE_CHECKING:
    import pandas as pd

WorkloadArg = str | Workload | Callable[[], Workload] | None


def sweep(
    workload: WorkloadArg,
    knob: str,
    values: Sequence[Any],
    base: Knobs | None = None,
    *,
    seconds: float = 3.0,
    repeats: int = 1,
    warmup_steps: int = 3,
    min_steps: int = 5,
    device: str | torch.device | None = None,
    data_dir: str | Path | None = None,
    record: bool = True,
    store: object = None,
    cancel: threading.Event | None = None,
    progress: Callable[[BurstResult], None] | None = None,
    burst_progress: Callable[[BurstProgress], None] | None = None,
    price_per_hour: float | None = None,
    epoch_samples: float | None = None,
) -> pd.DataFrame:
    """Run one burst per value of ``knob`` (``repeats`` times each) and return the bursts.

    The frame has one row per burst with every BurstResult field and one column per knob,
    shaped like ``wb.history()``; ``df.attrs["knob"]`` names the swept knob, so
    ``wb.plots.sweep(df)`` draws throughput and memory against it. ``progress`` gets each
    BurstResult as it lands; setting ``cancel`` stops the running burst at a step boundary
    and returns the bursts so far. Warm-up is at least ``warmup_steps`` and long enough to
    consume what loader workers prefetch (``settled_warmup``), so every value is measured in
    its steady state. ``price_per_hour``/``epoch_samples``: each burst's ``cost``
    (``workbench.core.cost``).
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise KnobError("repeats", repeats, "an integer >= 1")
    check_burst_args(seconds, min_steps, warmup_steps)
    base = Knobs() if base is None else base
    plan = [with_knob(base, knob, v) for v in check_values(knob, values)]
    dev = hardware.resolve_device(device)
    wl = resolve_workload(workload or default_workload_name(dev.type), data_dir)
    stop = cancel or threading.Event()
    target = open_store(store) if record else None
    results: list[BurstResult] = []
    for _ in range(repeats):
        for knobs in plan:
            if stop.is_set():
                break
            r = run_burst(
                wl,
                knobs,
                seconds=seconds,
                warmup_steps=settled_warmup(knobs, warmup_steps),
                min_steps=min_steps,
                device=dev,
                record=record,
                store=target,
                cancel=stop,
                progress=burst_progress,
                price_per_hour=price_per_hour,
                epoch_samples=epoch_samples,
            )
            results.append(r)
            if progress is not None:
                progress(r)
    return bursts_frame(results, knob=knob, workload=wl.name)


def check_values(knob: str, values: Iterable[Any]) -> list[Any]:
    """The values of one knob, each checked on its own; a clear error before any burst."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise KnobError(knob, values, "a list of values, e.g. [16, 32, 64]")
    checked = [check_value(knob, v) for v in values]
    if not checked:
        raise KnobError(knob, [], "at least one value (the list is empty)")
    return checked


def with_knob(base: Knobs, name: str, value: Any) -> Knobs:
    """``base`` with one knob changed, keeping what the change implies.

    Going to ``num_workers=0`` also unsets ``prefetch_factor`` and ``persistent_workers``:
    both mean nothing without worker processes (``Knobs`` refuses them there), and a sweep or
    tune over workers would otherwise stop at its first 0. The reverse is not repaired: asking
    for a prefetch factor with no workers is a KnobError that says so.
    """
    changes: dict[str, Any] = {name: value}
    if name == "num_workers" and value == 0:
        changes |= {"prefetch_factor": None, "persistent_workers": False}
    return base.replace(**changes)


def bursts_frame(
    results: Sequence[BurstResult], *, knob: str | None = None, workload: str | None = None
) -> pd.DataFrame:
    """BurstResults as a history-shaped frame (what plots read), the swept knob in ``attrs``."""
    frame = records_frame([r.to_dict() for r in results])
    frame.attrs.update({"knob": knob, "workload": workload})
    return frame


__all__ = ["bursts_frame", "check_values", "sweep", "with_knob"]
