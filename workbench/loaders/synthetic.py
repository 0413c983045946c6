"""The compute-only ceiling: one real batch, resident on the device, replayed every step.

No decoding, no host-to-device copy: what the model and optimizer alone can do with these
knobs (nanoGPT's ``real_data=False``). The batch is real data, so the model sees realistic
values (no NaN from random inputs to an embedding, for instance).
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

from workbench.knobs import Knobs
from workbench.loaders import check_batch_fits


class SyntheticStream:
    backend = "synthetic"
    on_device = True

    def __init__(self, batch: tuple[torch.Tensor, torch.Tensor]):
        self._batch = batch
        self.epochs = 0

    @classmethod
    def from_dataset(cls, dataset: Dataset, knobs: Knobs, device: torch.device) -> SyntheticStream:
        loader = DataLoader(dataset, batch_size=knobs.batch_size, shuffle=False, num_workers=0)
        x, y = next(iter(loader))
        check_batch_fits(knobs.batch_size, x.shape[0])
        x = x.to(device)
        if knobs.channels_last and x.dim() == 4:
            # The same layout the other loaders deliver: the ceiling must run the kernels the
            # full pipeline runs (NHWC convolutions are a different, often faster, code path).
            x = x.contiguous(memory_format=torch.channels_last)
        return cls((x, y.to(device)))

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._batch

    def close(self) -> None:
        self._batch = None  # type: ignore[assignment]
