"""The compute-only ceiling: one real batch, resident on the device, replayed every step.

No decoding, no host-to-device copy: what the model and optimizer alone can do with these
knobs (nanoGPT's ``real_data=False``). The batch is real data, made by the workload's own
``collate_fn`` when it has one, so the model sees realistic values and shapes (no NaN from
random inputs to an embedding, the padded length of a real batch), nested as the full
pipeline delivers it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from workbench.core.knobs import Knobs
from workbench.engine.batches import Batch, move_batch
from workbench.engine.loaders.stream import check_batch_fits


class SyntheticStream:
    backend = "synthetic"
    on_device = True
    batches_per_epoch = None  # one batch replayed: no epochs
    epoch_handling = None

    def __init__(self, batch: Batch):
        self._batch = batch
        self.epochs = 0

    @classmethod
    def from_dataset(
        cls,
        dataset: Dataset,
        knobs: Knobs,
        device: torch.device,
        collate_fn: Callable[[list[Any]], Any] | None = None,
    ) -> SyntheticStream:
        loader = DataLoader(dataset, batch_size=knobs.batch_size, shuffle=False, num_workers=0,
                            collate_fn=collate_fn)  # fmt: skip
        batch = next(iter(loader))
        epoch = _length(dataset)
        if epoch is not None:  # the dataset's own length: a collate may drop items
            check_batch_fits(knobs.batch_size, epoch)
        # The same layout the other loaders deliver: the ceiling must run the kernels the full
        # pipeline runs (NHWC convolutions are a different, often faster, code path).
        return cls(move_batch(batch, device, channels_last=knobs.channels_last))

    def __next__(self) -> Batch:
        return self._batch

    def close(self) -> None:
        self._batch = None


def _length(dataset: Dataset) -> int | None:
    """The dataset's length, None for one that has none (an iterable dataset)."""
    try:
        return len(dataset)  # type: ignore[arg-type]
    except TypeError:
        return None
