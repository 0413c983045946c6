"""The Workload's step= and scheduler= hooks on a plain PyTorch workload (no Lightning)."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

from workbench import Knobs, Workload, run_burst

FAST = {"seconds": 0.3, "warmup_steps": 2, "record": False, "device": "cpu"}


def _triples() -> TensorDataset:
    """Items of three tensors, (x, y, weight): not (input, target), so only a step takes them."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 8, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long(), torch.rand(128, generator=g))


def _weighted_step(model: nn.Module, batch) -> torch.Tensor:
    x, y, w = batch
    return (F.cross_entropy(model(x), y, reduction="none") * w).mean()


def test_a_step_hook_takes_the_whole_batch_and_a_schedule_steps_per_optimizer_step():
    schedules: list[torch.optim.lr_scheduler.LRScheduler] = []

    def schedule(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        schedules.append(torch.optim.lr_scheduler.LinearLR(optimizer, total_iters=10_000))
        return schedules[-1]

    wl = Workload(name="weighted", model=lambda: nn.Linear(8, 2), dataset=_triples,
                  step=_weighted_step, scheduler=schedule)  # fmt: skip
    r = run_burst(wl, Knobs(batch_size=16, grad_accum=2), **FAST)
    assert r.status == "ok", r.error
    (sched,) = schedules
    assert sched.last_epoch >= r.steps + 2  # warm-up and window, one schedule step each
    assert r.samples == 16 * 2 * r.steps and r.flops_per_sample == 2 * 8 * 2 * 2


def test_without_a_schedule_the_optimizer_is_rebuilt_for_optimizer_impl():
    wl = Workload(name="plain", model=lambda: nn.Linear(8, 2), dataset=_triples,
                  step=_weighted_step)  # fmt: skip
    r = run_burst(wl, Knobs(batch_size=16, optimizer_impl="for-loop"), **FAST)
    assert r.status == "ok", r.error
    assert "optimizer_impl" not in r.no_effect  # with a schedule it would be kept as built
