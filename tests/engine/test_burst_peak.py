"""The burst's peak memory restarts where set-up ends and warm-up begins (burst._restart_peak).

No GPU here: the CUDA calls are recorded, not made. A burst runs on the CPU with its set-up and
warm-up steps recorded too, and its restart run as on a CUDA device, so the test fails if the
peak is restarted before set-up's last eager pass or after the first training step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from workloads_for_tests import tensor_workload

from workbench import Knobs, Workload, run_burst
from workbench.engine import burst

FAST = {"seconds": 0.05, "warmup_steps": 2, "min_steps": 2, "record": False, "device": "cpu"}
SETUP = ("build", "check", "attention", "flops")
"""Set-up's calls, in its order: the model built, the first batch through it (evaluation),
the training-mode probe of its attention calls (and the activations), the FLOP count."""


class FakeCudaPeak:
    """torch.cuda's peak counters, recorded: ``max_memory_allocated`` reads ``peak_bytes``."""

    def __init__(self, events: list[str], peak_bytes: int = 300 * 2**20) -> None:
        self.events = events
        self.peak_bytes = peak_bytes

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", self.max_memory_allocated)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", self.reset)
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: self.events.append("empty"))

    def max_memory_allocated(self, device: Any = None) -> int:
        self.events.append("read peak")
        return self.peak_bytes

    def reset(self, device: Any = None) -> None:
        self.events.append("reset peak")


def _record(events: list[str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def recorded(*args: Any, **kwargs: Any) -> Any:
        events.append(name)
        return fn(*args, **kwargs)

    return recorded


def _watch(monkeypatch: pytest.MonkeyPatch, events: list[str]) -> None:
    """Record set-up's calls and the training steps; the restart runs as on a CUDA device."""
    for name, attr in zip(SETUP, ("build_train_state", "check_model_takes", "_check_attention",
                                  "_count_flops"), strict=True):  # fmt: skip
        monkeypatch.setattr(burst, attr, _record(events, name, getattr(burst, attr)))
    monkeypatch.setattr(burst, "_train_one_step", _record(events, "step", burst._train_one_step))
    monkeypatch.setattr(burst, "fit_with_trainer", _record(events, "fit", burst.fit_with_trainer))
    restart = burst._restart_peak
    monkeypatch.setattr(burst, "_restart_peak", lambda dev: restart(torch.device("cuda", 0)))
    FakeCudaPeak(events).install(monkeypatch)


def _assert_restart_between_setup_and_warmup(events: list[str], first_step: str) -> None:
    restart = events.index("reset peak")
    assert events.count("reset peak") == 1
    assert max(events.index(name) for name in SETUP) < events.index("read peak") < restart
    assert restart < events.index(first_step)  # before the first warm-up step
    assert events[restart - 1] == "empty"  # reserved restarts from what training holds


def test_the_peak_restarts_after_setup_and_before_warm_up(monkeypatch):
    events: list[str] = []
    _watch(monkeypatch, events)
    r = run_burst(tensor_workload(), Knobs(batch_size=16), **FAST)
    assert r.status == "ok", r.error
    _assert_restart_between_setup_and_warmup(events, "step")
    assert r.setup_peak_mem_mib == 300.0  # set-up's peak, read before the restart
    assert r.to_dict()["setup_peak_mem_mib"] == 300.0


def test_a_lightning_burst_restarts_the_peak_before_trainer_fit(monkeypatch):
    L = pytest.importorskip("lightning")

    class Lit(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(16, 2)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return F.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Data(L.LightningDataModule):
        def train_dataloader(self) -> DataLoader:
            x = torch.randn(96, 16)
            return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16)

    events: list[str] = []
    _watch(monkeypatch, events)
    r = run_burst(Workload.from_lightning(Lit, Data), Knobs(batch_size=16), **FAST)
    assert r.status == "ok", r.error
    _assert_restart_between_setup_and_warmup(events, "fit")


def test_restart_keeps_setups_peak_then_resets_on_cuda(monkeypatch):
    events: list[str] = []
    FakeCudaPeak(events, peak_bytes=512 * 2**20).install(monkeypatch)
    monkeypatch.setattr(burst.gc, "collect", lambda: events.append("gc") or 0)
    assert burst._restart_peak(torch.device("cuda", 0)) == 512.0
    assert events == ["read peak", "gc", "empty", "reset peak"]


def test_a_cpu_burst_has_no_setup_peak_and_keeps_its_pss_peak():
    r = run_burst(tensor_workload(), Knobs(batch_size=16), **FAST)
    assert r.setup_peak_mem_mib is None  # unknown, not 0: nothing to restart on a CPU
    assert r.to_dict()["setup_peak_mem_mib"] is None
    assert r.peak_mem_mib > 50 and r.peak_mem_kind in {"pss", "rss"}
