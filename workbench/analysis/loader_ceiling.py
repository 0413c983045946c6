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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from workbench.core.knobs import Knobs
from workbench.core.results import Outcome, spread
from workbench.engine.batches import Batch, SampleRule, SamplesOf, move_batch, sample_rule
from workbench.engine.failures import describe_error, is_oom_error
from workbench.engine.loaders import BatchStream, build_loader, drop_before_window
from workbench.engine.packing import RealTokens, documents_view, real_token_figures
from workbench.engine.timing import synchronize
from workbench.engine.window import BurstWindow, prefetched_batches, settled_warmup
from workbench.engine.workloads import Workload, WorkloadArg, resolve_target

Clock = Callable[[], float]


@dataclass(kw_only=True, slots=True)
class LoaderResult(Outcome):
    """What the loader alone delivered. Unknown values are None, as in BurstResult."""

    samples_per_s: float | None = None
    batches: int = 0
    samples: int = 0
    measured_s: float | None = None
    setup_s: float | None = None
    warmup_s: float | None = None
    batch_ms_p50: float | None = None
    batch_ms_iqr: float | None = None
    noisy: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["knobs"] = self.knobs.to_dict()
        return out


def run_loader_burst(
    workload: WorkloadArg = None,
    knobs: Knobs | None = None,
    *,
    window: BurstWindow = BurstWindow(),  # noqa: B008 (frozen: one shared default is safe)
    device: str | torch.device | None = None,
    data_dir: str | Path | None = None,
    cancel: threading.Event | None = None,
    clock: Clock = time.perf_counter,
) -> LoaderResult:
    """Time-boxed iteration of the loader these knobs build; no model, nothing recorded.

    The window is a burst's (``window``; a batch stands for a step). Warm-up takes at least
    the batches the workers prefetch (``prefetched_batches``): with no model to slow it down, the
    window would otherwise start by emptying a full queue. Failures are results (``status``
    oom/error/cancelled), as in ``run_burst``.
    """
    knobs = Knobs() if knobs is None else knobs
    win = replace(window, warmup_steps=max(window.warmup_steps, prefetched_batches(knobs)))
    wl, dev = resolve_target(workload, device, data_dir)
    result = LoaderResult(workload=wl.name, device=str(dev), knobs=knobs)
    stop = cancel or threading.Event()
    try:
        _measure(result, wl, knobs, dev, stop, clock, win)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a failed loader is a result, as a failed burst is
        result.status = "oom" if is_oom_error(exc) else "error"
        result.error = describe_error(exc)
    return result


def _measure(
    r: LoaderResult,
    wl: Workload,
    knobs: Knobs,
    dev: torch.device,
    stop: threading.Event,
    clock: Clock,
    window: BurstWindow,
) -> None:
    t0 = clock()
    wl = documents_view(wl, knobs, dev)  # packing: the rows a burst with these knobs reads
    stream = build_loader(wl, knobs, dev)
    count = _Counter(wl.samples_of, RealTokens.of(wl, knobs), wl.tokens_per_sample)
    try:
        r.setup_s = clock() - t0
        t1 = clock()
        for _ in range(window.warmup_steps):
            if stop.is_set():
                break
            _deliver(stream, knobs, dev, count)
        synchronize(dev)
        r.warmup_s = clock() - t1
        drop_before_window(stream)  # cache=cold only
        _window(r, stream, knobs, dev, stop, clock, window.seconds, window.min_steps, count)
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
    count: _Counter,
) -> None:
    batch_ms: list[float] = []
    count.reset()
    start = last = clock()
    while not stop.is_set():
        r.samples += _deliver(stream, knobs, dev, count)
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
        count.in_real_tokens(r)
        s = spread(batch_ms)
        r.batch_ms_p50, r.batch_ms_iqr, r.noisy = s.p50, s.iqr, s.noisy


def _deliver(stream: BatchStream, knobs: Knobs, dev: torch.device, count: _Counter) -> int:
    """One batch, put where the model would read it; returns its sample count."""
    batch = next(stream)
    count.tokens(batch)  # on the host, before the copy
    if not stream.on_device:
        pinned = knobs.pin_memory and dev.type == "cuda"
        batch = move_batch(batch, dev, non_blocking=pinned)
    return count(batch)


class _Counter:
    """Samples of each delivered batch, by the rule the first one decides, as a burst counts
    them (``sample_rule``): the loader's ceiling and the burst it is compared with must count
    the same samples. Documents (``packing``): samples of ``seq_len`` real tokens, as a
    burst's (``engine.packing``)."""

    def __init__(
        self,
        samples_of: SamplesOf | None,
        real: RealTokens | None = None,
        seq_len: int | None = None,
    ):
        self._samples_of = samples_of
        self._rule: SampleRule | None = None
        self._real, self._seq_len = real, seq_len

    def tokens(self, batch: Batch) -> None:
        if self._real is not None:
            self._real.add(batch)

    def reset(self) -> None:
        if self._real is not None:
            self._real.reset()

    def in_real_tokens(self, r: LoaderResult) -> None:
        """A document window's samples counted in real tokens (rows in ``r.samples``)."""
        if self._real is None or not self._seq_len or not r.measured_s:
            return
        figures = real_token_figures(r.samples, self._real.total, self._seq_len, r.measured_s)
        r.samples, r.samples_per_s = figures["samples"], figures["samples_per_s"]

    def __call__(self, batch: Batch) -> int:
        if self._rule is None:
            self._rule = sample_rule(batch, self._samples_of)
        return self._rule.count(batch)


__all__ = [  # prefetched_batches and settled_warmup: engine.window's, still importable here
    "LoaderResult", "prefetched_batches", "run_loader_burst", "settled_warmup",
]  # fmt: skip
