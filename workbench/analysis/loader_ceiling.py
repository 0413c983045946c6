"""The loader-only ceiling: iterate the data pipeline with the burst's knobs and no model.

Measured like a burst (DESIGN.md, "Measurement method") so the two can be compared: the
loader is built from the same knobs, warm-up batches absorb worker start-up and the first
decodes, then a time-boxed window counts the samples delivered. A batch counts once it is
where the model would read it: on a GPU that includes the host-to-device copy (pinned or
not, as the knobs say), because the copy is part of what feeding the model costs; the device
is synchronized at both ends of the window only.

On a CPU the loader alone gets every core, while in a real burst its workers share them with
the model: the ceiling is an upper bound, which is what a ceiling is for.

Loader-only runs are not written to the burst history: they train nothing, and a point at
the same knobs would read as a training burst in the charts.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from workbench.core.knobs import KnobError, Knobs
from workbench.core.results import spread
from workbench.engine import hardware
from workbench.engine.batches import count_samples, move_batch
from workbench.engine.failures import describe_error, is_oom_error
from workbench.engine.loaders import BatchStream, build_loader, drop_before_window
from workbench.engine.timing import synchronize
from workbench.engine.workloads import Workload, default_workload_name, resolve_workload

Clock = Callable[[], float]


@dataclass(kw_only=True, slots=True)
class LoaderResult:
    """What the loader alone delivered. Unknown values are None, as in BurstResult."""

    status: str = "ok"
    error: str | None = None
    workload: str = ""
    device: str = ""
    knobs: Knobs = field(default_factory=Knobs)
    samples_per_s: float | None = None
    batches: int = 0
    samples: int = 0
    measured_s: float | None = None
    setup_s: float | None = None
    warmup_s: float | None = None
    batch_ms_p50: float | None = None
    batch_ms_iqr: float | None = None
    noisy: bool | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["knobs"] = self.knobs.to_dict()
        return out


def prefetched_batches(knobs: Knobs) -> int:
    """Batches the DataLoader's workers may have ready before the first one is asked for.

    Workers start decoding as soon as the loader is iterated, so by the end of set-up and a
    few warm-up steps the queue is full. A short window that starts there measures how fast
    the model empties the queue, not how fast the workers fill it, and a deep queue looks
    faster than it is: on cnn with 3 workers x prefetch 4 (12 batches of 64), a 1 s window
    read 239 samples/s with 1% data wait where an 8 s window read 183 with 20%.
    """
    if knobs.loader != "torch" or knobs.num_workers == 0:
        return 0
    return knobs.num_workers * (knobs.prefetch_factor or 2)


def settled_warmup(knobs: Knobs, warmup_steps: int) -> int:
    """Warm-up steps that also consume the prefetched queue (a step takes grad_accum batches).

    Sweeps, diagnoses and tunes use it so that configs are compared in their steady state;
    ``run_burst`` itself keeps the warm-up it is given.
    """
    return max(warmup_steps, math.ceil(prefetched_batches(knobs) / knobs.grad_accum))


def run_loader_burst(
    workload: str | Workload | Callable[[], Workload] | None = None,
    knobs: Knobs | None = None,
    *,
    seconds: float = 3.0,
    min_batches: int = 5,
    warmup_batches: int = 3,
    device: str | torch.device | None = None,
    data_dir: str | Path | None = None,
    cancel: threading.Event | None = None,
    clock: Clock = time.perf_counter,
) -> LoaderResult:
    """Time-boxed iteration of the loader these knobs build; no model, nothing recorded.

    Warm-up takes at least the batches the workers prefetch (``prefetched_batches``): with
    no model to slow it down, the window would otherwise start by emptying a full queue.
    Failures are results (``status`` oom/error/cancelled), as in ``run_burst``.
    """
    _check_args(seconds, min_batches, warmup_batches)
    knobs = Knobs() if knobs is None else knobs
    warmup_batches = max(warmup_batches, prefetched_batches(knobs))
    dev = hardware.resolve_device(device)
    wl = resolve_workload(workload or default_workload_name(dev.type), data_dir)
    result = LoaderResult(workload=wl.name, device=str(dev), knobs=knobs)
    stop = cancel or threading.Event()
    try:
        _measure(result, wl, knobs, dev, stop, clock, (seconds, min_batches, warmup_batches))
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a failed loader is a result, as a failed burst is
        result.status = "oom" if is_oom_error(exc) else "error"
        result.error = describe_error(exc)
    return result


def _check_args(seconds: float, min_batches: int, warmup_batches: int) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise KnobError("seconds", seconds, "a number of seconds > 0 (the measured window)")
    if not math.isfinite(seconds) or seconds <= 0:
        raise KnobError("seconds", seconds, "a number of seconds > 0 (the measured window)")
    counts = (("min_batches", min_batches, 1), ("warmup_batches", warmup_batches, 0))
    for name, value, low in counts:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise KnobError(name, value, f"an integer >= {low}")


def _measure(
    r: LoaderResult,
    wl: Workload,
    knobs: Knobs,
    dev: torch.device,
    stop: threading.Event,
    clock: Clock,
    limits: tuple[float, int, int],
) -> None:
    seconds, min_batches, warmup_batches = limits
    t0 = clock()
    stream = build_loader(wl, knobs, dev)
    try:
        r.setup_s = clock() - t0
        t1 = clock()
        for _ in range(warmup_batches):
            if stop.is_set():
                break
            _deliver(stream, knobs, dev)
        synchronize(dev)
        r.warmup_s = clock() - t1
        drop_before_window(stream)  # cache=cold only
        _window(r, stream, knobs, dev, stop, clock, seconds, min_batches)
    finally:
        stream.close()


def _window(
    r: LoaderResult,
    stream: BatchStream,
    knobs: Knobs,
    dev: torch.device,
    stop: threading.Event,
    clock: Clock,
    seconds: float,
    min_batches: int,
) -> None:
    batch_ms: list[float] = []
    start = last = clock()
    while not stop.is_set():
        r.samples += _deliver(stream, knobs, dev)
        now = clock()
        batch_ms.append((now - last) * 1e3)  # host clock: copies are waited for below
        last = now
        if now - start >= seconds and len(batch_ms) >= min_batches:
            break
    synchronize(dev)
    r.measured_s = clock() - start
    r.batches = len(batch_ms)
    if stop.is_set():
        r.status, r.error = "cancelled", "stopped before the window closed"
    if r.batches and r.measured_s > 0:
        r.samples_per_s = r.samples / r.measured_s
        s = spread(batch_ms)
        r.batch_ms_p50, r.batch_ms_iqr, r.noisy = s.p50, s.iqr, s.noisy


def _deliver(stream: BatchStream, knobs: Knobs, dev: torch.device) -> int:
    """One batch, put where the model would read it; returns its sample count."""
    batch = next(stream)
    if not stream.on_device:
        pinned = knobs.pin_memory and dev.type == "cuda"
        batch = move_batch(batch, dev, non_blocking=pinned)
    return count_samples(batch)
