"""``sweep``: one burst per value of one knob, the other knobs held; a DataFrame to plot.

Every value is checked before the first burst runs, so a typo in the last value does not
cost the bursts before it. Repeats are interleaved (all values, then all values again), so a
slow drift of the machine (thermal, another job) lands on every value alike instead of on
the values measured last. ``diagnose`` (diagnosis.py) and ``tune`` (tuner.py) build on the same
burst and the same helpers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

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


def sweep(
    workload: WorkloadArg,
    knob: str,
    values: Sequence[Any],
    base: Knobs | None = None,
    *,
    repeats: int = 1,
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
    """
    setup = BurstSetup.of("sweep", options)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InputError.not_allowed("repeats", repeats, "an integer >= 1")
    base = Knobs() if base is None else base
    plan = [with_knob(base, knob, v) for v in check_values(knob, values)]
    wl, _ = resolve_target(workload, setup.device, setup.data_dir)
    results: list[BurstResult] = []
    for _ in range(repeats):
        for knobs in plan:
            if setup.cancel.is_set():
                break
            r = run_burst(wl, knobs, window=setup.window.settled(knobs), progress=burst_progress,
                          price_per_hour=price_per_hour, epoch_samples=epoch_samples,
                          **setup.burst_args())  # fmt: skip
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


def bursts_frame(
    results: Sequence[BurstResult], *, knob: str | None = None, workload: str | None = None
) -> pd.DataFrame:
    """BurstResults as a history-shaped frame (what plots read), the swept knob in ``attrs``."""
    frame = records_frame([r.to_dict() for r in results])
    frame.attrs.update({"knob": knob, "workload": workload})
    return frame


__all__ = ["WorkloadArg", "bursts_frame", "check_values", "sweep", "with_knob"]
