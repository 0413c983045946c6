"""Per-step timing for the measured window, on the host clock or on CUDA events.

Why two clocks: on a GPU the host runs ahead of the device (kernel launches are queued), so a
host clock read per step measures how fast Python *enqueues* work, not how long the device
took. CUDA events are recorded into the stream and timestamp the device's own timeline
without stopping the host; they are read once, after the window's closing synchronize. On a
CPU every op runs synchronously and the host clock is the truth.

Which device: events are recorded on the current stream *of the burst's device* and the
window closes with a synchronize *of that device*. CUDA's current device is per thread and
defaults to 0, so without naming the device a burst on ``cuda:1`` (or one run from a thread
whose current device is another GPU) would time an idle GPU and end its window unsynchronized.

What is recorded per optimizer step: the step time (start of one step to start of the next,
on the device timeline: includes any time the device sat idle waiting for data), the time the
host was blocked waiting for the next batch (``data_wait``), and the host-to-device copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch


def synchronize(device: torch.device) -> None:
    """Wait for all queued device work; a clock read is only honest after this."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class StepSamples:
    step_ms: list[float] = field(default_factory=list)
    data_wait_ms: list[float] = field(default_factory=list)
    h2d_ms: list[float] = field(default_factory=list)


class StepTimer:
    """Collects StepSamples without synchronizing inside the window."""

    def __init__(self, device: torch.device, clock: Callable[[], float]):
        self._cuda = device.type == "cuda"
        self._device = device
        self._stream = torch.cuda.current_stream(device) if self._cuda else None
        self._clock = clock
        self._marks: list[object] = []  # step-start marks: CUDA events or host times
        self._copies: list[tuple[object, object]] = []
        self._wait_s = 0.0
        self.samples = StepSamples()

    def _mark(self) -> object:
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(self._stream)
            return event
        return self._clock()

    def step_start(self) -> None:
        self._marks.append(self._mark())
        self._wait_s = 0.0

    def add_wait(self, seconds: float) -> None:
        self._wait_s += seconds

    def copy_marks(self) -> tuple[object, object] | None:
        """Marks around a host-to-device copy (CUDA only: on a CPU there is no copy)."""
        return (self._mark(), None) if self._cuda else None

    def copy_done(self, marks: tuple[object, object] | None) -> None:
        if marks is not None:
            self._copies.append((marks[0], self._mark()))

    def step_end(self) -> None:
        self.samples.data_wait_ms.append(self._wait_s * 1e3)

    def finish(self) -> StepSamples:
        """Close the last step and convert marks to milliseconds (after the final sync)."""
        self._marks.append(self._mark())
        if self._cuda:
            synchronize(self._device)
            pairs = zip(self._marks, self._marks[1:], strict=False)
            self.samples.step_ms = [a.elapsed_time(b) for a, b in pairs]  # type: ignore[attr-defined]
            self.samples.h2d_ms = [a.elapsed_time(b) for a, b in self._copies]  # type: ignore[attr-defined]
        else:
            pairs = zip(self._marks, self._marks[1:], strict=False)
            self.samples.step_ms = [(b - a) * 1e3 for a, b in pairs]  # type: ignore[operator]
        return self.samples
