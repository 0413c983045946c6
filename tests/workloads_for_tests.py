"""Small, fast workloads for tests: real models and real optimizer steps, tiny sizes."""

from __future__ import annotations

import os
import signal
import typing

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from workbench import Workload


def tensor_workload(n: int = 256, features: int = 16, name: str = "tiny") -> Workload:
    """A linear classifier over an in-memory TensorDataset: milliseconds per step."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    y = (x[:, 0] > 0).long()
    return Workload(
        name=name,
        model=lambda: nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Linear(32, 2)),
        dataset=lambda: TensorDataset(x, y),
    )


class _Hungry(nn.Module):
    """Asks the allocator for 16 TiB when the batch is larger than ``limit``: a real OOM."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit
        self.fc = nn.Linear(16, 2)

    def forward(self, x):
        if x.shape[0] > self.limit:
            torch.empty(2**44, dtype=torch.uint8, device=x.device)
        return self.fc(x)


def hungry_workload(limit: int = 16) -> Workload:
    base = tensor_workload()
    return Workload(name="hungry", model=lambda: _Hungry(limit), dataset=base.dataset)


class _Crashing(Dataset):
    """A dataset whose worker process dies (SIGKILL) on the 5th sample it loads."""

    def __init__(self):
        self.x = torch.randn(64, 16)
        self.count = 0

    def __len__(self):
        return 64

    def __getitem__(self, i):
        self.count += 1
        if self.count == 5 and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.x[i], int(i % 2)


def crashing_workload() -> Workload:
    return Workload(
        name="crashing",
        model=lambda: nn.Linear(16, 2),
        dataset=_Crashing,
    )


class _Layout(nn.Module):
    """Records whether inputs arrive channels_last."""

    seen: typing.ClassVar[list[bool]] = []

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        _Layout.seen.append(x.is_contiguous(memory_format=torch.channels_last))
        return self.conv(x).mean(dim=(2, 3))


def layout_workload() -> Workload:
    x = torch.randn(64, 3, 8, 8)
    y = torch.randint(0, 4, (64,))
    return Workload(name="layout", model=_Layout, dataset=lambda: TensorDataset(x, y))
