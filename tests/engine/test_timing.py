"""StepTimer on a GPU other than the current one, checked with a recorded fake of torch.cuda
(no GPU here): the events must go on the burst device's stream and the closing synchronize
must wait for that device, not for the thread's current device (0 by default)."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

from workbench.engine.timing import StepTimer


class _FakeStream:
    def __init__(self, device: torch.device):
        self.device = device


class _FakeEvent:
    log: ClassVar[list[tuple[str, object]]] = []

    def __init__(self, enable_timing: bool = False):
        self.at_ms = None

    def record(self, stream=None):
        # a recorded event on a real GPU: the stream it was put on, and a device timestamp
        self.stream = stream if stream is not None else _FakeStream(torch.device("cuda", 0))
        self.at_ms = 10.0 * len([e for e in _FakeEvent.log if e[0] == "record"])
        _FakeEvent.log.append(("record", self.stream.device))

    def elapsed_time(self, other: _FakeEvent) -> float:
        return other.at_ms - self.at_ms


@pytest.fixture
def fake_cuda(monkeypatch):
    _FakeEvent.log = []
    synced: list[object] = []
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _FakeStream(device))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    return synced


def test_events_and_the_closing_sync_belong_to_the_burst_device(fake_cuda):
    dev = torch.device("cuda", 1)
    timer = StepTimer(dev, clock=lambda: 0.0)
    for _ in range(3):
        timer.step_start()
        timer.copy_done(timer.copy_marks())
        timer.step_end()
    samples = timer.finish()
    assert {where for _, where in _FakeEvent.log} == {dev}  # never the current device 0
    assert fake_cuda == [dev]
    assert samples.step_ms == [30.0, 30.0, 30.0]  # three events a step, 10 ms apart
    assert samples.h2d_ms == [10.0, 10.0, 10.0]


def test_host_clock_on_a_cpu():
    ticks = iter([0.0, 0.010, 0.030, 0.060])
    timer = StepTimer(torch.device("cpu"), clock=lambda: next(ticks))
    for _ in range(3):
        timer.step_start()
        timer.add_wait(0.002)
        timer.step_end()
    samples = timer.finish()
    assert samples.step_ms == pytest.approx([10.0, 20.0, 30.0])
    assert samples.data_wait_ms == pytest.approx([2.0, 2.0, 2.0]) and samples.h2d_ms == []
