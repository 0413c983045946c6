"""``sweep``: one burst per value of one knob, the other knobs held; a DataFrame to plot.

Every value is checked before the first burst runs, so a typo in the last value does not
cost the bursts before it. Repeats are interleaved (all values, then all values again), so a
slow drift of the machine (thermal, another job) lands on every value alike instead of on
the values measured last. Interleaving spreads drift but does not measure it, so the first value
is also run again every ``reference_every`` bursts and at the end (``drift.with_references``):
its readings give every burst a drift factor and a corrected throughput, and the frame says in
``attrs["drift"]`` whether the drift is larger than the differences between the values
(``workbench.analysis.drift``). ``diagnose`` (diagnosis.py) and ``tune`` (tuner.py) build on
the same burst and the same helpers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from workbench.analysis.drift import check_every, estimate_drift, with_references
from workbench.core.errors import InputError
from workbench.core.knobs import KnobError, Knobs, check_value, with_knob
from workbench.core.results import BurstResult
from workbench.distributed.dispatch import run_burst
from workbench.engine.burst import BurstProgress
from workbench.engine.window import BurstOptions, BurstSetup
from workbench.engine.workloads import WorkloadArg, resolve_target
from workbench.history.store import records_frame

if TYPE_CHECKING:
    import pandas as pd
    from typing_extensions import Unpack  # typing's own from Python 3.11; hints only


REFERENCE_EVERY = 5
"""Bursts between re-measurements of a sweep's first value. A sweep of up to 5 values then
costs one burst more (the first value again at the end); longer ones one more per 5 bursts,
and repeats fewer (each repeat begins with the first value, a reading of its own). Closer
readings follow a drift that is not steady more closely (the H200's slowed most in its first
bursts) but add a burst per ``REFERENCE_EVERY``: 5 keeps the usual sweep of 3-6 values cheap."""


def sweep(
    workload: WorkloadArg,
    knob: str,
    values: Sequence[Any],
    base: Knobs | None = None,
    *,
    repeats: int = 1,
    reference_every: int | None = REFERENCE_EVERY,
    progress: Callable[[BurstResult], None] | None = None,
    burst_progress: Callable[[BurstProgress], None] | None = None,
    price_per_hour: float | None = None,
    epoch_samples: float | None = None,
    **options: Unpack[BurstOptions],
) -> pd.DataFrame:
    """Run one burst per value of ``knob`` (``repeats`` times each) and return the bursts.

    ``options``: the window, device and history of every burst (``BurstOptions``: seconds,
    min_steps, warmup_steps, device, data_dir, record, store, cancel). The frame has one row
    per burst with every BurstResult field and one column per knob, shaped like
    ``wb.history()``; ``df.attrs["knob"]`` names the swept knob, so ``wb.plots.sweep(df)``
    draws throughput and memory against it. ``progress`` gets each BurstResult as it lands;
    setting ``cancel`` stops the running burst at a step boundary and returns the bursts so
    far. Warm-up is at least ``warmup_steps`` and long enough to consume what loader workers
    prefetch (``BurstWindow.settled``), so every value is measured in its steady state.
    ``price_per_hour``/``epoch_samples``: each burst's ``cost`` (``workbench.core.cost``).

    Drift: the first value (the reference) runs again after every ``reference_every`` bursts
    since its last run and at the end (None: never again beyond its repeats). Those extra
    bursts have ``reference`` True; every row has ``drift_factor`` and
    ``samples_per_s_corrected`` (``workbench.analysis.drift``), and ``df.attrs["drift"]`` the
    summary (``Drift.to_dict``: ``drift_pct``, ``effect_pct``, ``exceeds``, ``sentence``, ...).
    """
    setup = BurstSetup.of("sweep", options)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InputError.not_allowed("repeats", repeats, "an integer >= 1")
    every = check_every(reference_every)
    base = Knobs() if base is None else base
    configs = [with_knob(base, knob, v) for v in check_values(knob, values)]
    plan = with_references(configs * repeats, every)
    wl, _ = resolve_target(workload, setup.device, setup.data_dir)
    results: list[BurstResult] = []
    for knobs, _extra in plan:
        if setup.cancel.is_set():
            break
        r = run_burst(wl, knobs, window=setup.window.settled(knobs), progress=burst_progress,
                      price_per_hour=price_per_hour, epoch_samples=epoch_samples,
                      **setup.burst_args())  # fmt: skip
        results.append(r)
        if progress is not None:
            progress(r)
    frame = bursts_frame(results, knob=knob, workload=wl.name)
    return with_drift(frame, [extra for _, extra in plan[: len(results)]],
                      [k == configs[0] for k, _ in plan[: len(results)]])  # fmt: skip


def with_drift(frame: pd.DataFrame, extra: list[bool], reference: list[bool]) -> pd.DataFrame:
    """The sweep's frame with its drift: per row ``reference`` (an extra run of the first
    value), ``drift_factor`` and ``samples_per_s_corrected``; ``attrs["drift"]`` the summary.
    ``reference`` marks every burst of the first value (its regular runs are readings too)."""
    import pandas as pd  # here: the frame's own library, loaded already by records_frame

    ok = frame["status"] == "ok"
    sps = [float(s) if good and pd.notna(s) else None
           for s, good in zip(frame["samples_per_s"], ok, strict=True)]  # fmt: skip
    values = [str(v) for v in frame[frame.attrs["knob"]]]
    drift = estimate_drift(sps, reference, values)
    corrected = [float("nan") if c is None else c for c in drift.corrected]
    frame["reference"] = pd.Series(extra, index=frame.index, dtype=bool)
    frame["drift_factor"] = pd.Series(drift.factors, index=frame.index, dtype=float)
    frame["samples_per_s_corrected"] = pd.Series(corrected, index=frame.index, dtype=float)
    frame.attrs["drift"] = drift.to_dict()
    return frame


def check_values(knob: str, values: Iterable[Any]) -> list[Any]:
    """The values of one knob, each checked on its own; a clear error before any burst."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise KnobError(knob, values, "a list of values, e.g. [16, 32, 64]")
    checked = [check_value(knob, v) for v in values]
    if not checked:
        raise KnobError(knob, [], "at least one value (the list is empty)")
    return checked


def bursts_frame(
    results: Sequence[BurstResult], *, knob: str | None = None, workload: str | None = None
) -> pd.DataFrame:
    """BurstResults as a history-shaped frame (what plots read), the swept knob in ``attrs``."""
    frame = records_frame([r.to_dict() for r in results])
    frame.attrs.update({"knob": knob, "workload": workload})
    return frame


__all__ = [
    "REFERENCE_EVERY",
    "WorkloadArg",
    "bursts_frame",
    "check_values",
    "sweep",
    "with_drift",
    "with_knob",
]
