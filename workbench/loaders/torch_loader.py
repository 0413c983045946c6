"""The torch DataLoader, built from the knobs, as an endless batch stream.

Start method: worker processes are forked (``multiprocessing_context="fork"`` where the
platform has it). A notebook user's dataset is usually defined in a cell, and ``spawn`` /
``forkserver`` (Python 3.14's Linux default) must pickle it, which fails for such classes;
fork shares it as it is. Python 3.12+ warns that forking a multi-threaded process (a Jupyter
kernel has about 20 threads) may deadlock; DataLoader workers only touch the dataset, and that
has been the PyTorch default on Linux for years, so we keep it deliberately.
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from workbench.knobs import Knobs

# A worker that hangs (deadlock, dead NFS mount) becomes an error after this long, not a hang.
WORKER_TIMEOUT_S = 120.0


def dataloader_kwargs(knobs: Knobs, device: torch.device | str) -> dict[str, Any]:
    """The DataLoader keyword arguments these knobs mean on ``device`` (also used by configs)."""
    on_cuda = torch.device(device).type == "cuda"
    kwargs: dict[str, Any] = {
        "batch_size": knobs.batch_size,
        "shuffle": True,
        "drop_last": True,
        "num_workers": knobs.num_workers,
        "pin_memory": knobs.pin_memory and on_cuda,
    }
    if knobs.num_workers > 0:
        kwargs["persistent_workers"] = knobs.persistent_workers
        kwargs["prefetch_factor"] = knobs.prefetch_factor or 2
        kwargs["timeout"] = WORKER_TIMEOUT_S
        if "fork" in mp.get_all_start_methods():
            kwargs["multiprocessing_context"] = "fork"
    return kwargs


class TorchStream:
    """Batches from a torch DataLoader; a new epoch starts when one runs out."""

    backend = "torch"
    on_device = False

    def __init__(
        self,
        dataset: Dataset,
        knobs: Knobs,
        device: torch.device,
        seed: int = 0,
        shard: tuple[int, int] | None = None,
    ):
        generator = torch.Generator().manual_seed(seed)
        kwargs = dataloader_kwargs(knobs, device)
        self._sampler: DistributedSampler | None = None
        if shard is not None:
            rank, world_size = shard
            self._sampler = DistributedSampler(
                dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed
            )
            kwargs.pop("shuffle")  # the sampler shuffles, with the same seed on every rank
            kwargs["sampler"] = self._sampler
        self._loader = DataLoader(dataset, generator=generator, **kwargs)
        self._iter: Any = None
        self._batch_size = knobs.batch_size
        self.epochs = 0

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._iter is None:
            self._iter = iter(self._loader)
        try:
            return next(self._iter)
        except StopIteration:
            pass
        self.epochs += 1
        if self._sampler is not None:
            self._sampler.set_epoch(self.epochs)  # a new order each epoch, the same on all ranks
        self._iter = iter(self._loader)
        try:
            return next(self._iter)
        except StopIteration:
            n = len(self._loader.dataset)  # type: ignore[arg-type]
            where = "the dataset has"
            if self._sampler is not None:
                n, where = len(self._sampler), "each rank's share of the dataset has"
            raise ValueError(
                f"batch_size={self._batch_size} is not allowed: {where} only {n} "
                f"samples, fewer than one batch"
            ) from None

    def close(self) -> None:
        """Stop worker processes now rather than whenever the garbage collector runs."""
        for it in (self._iter, getattr(self._loader, "_iterator", None)):
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
        self._iter = None
        self._loader._iterator = None  # persistent workers' iterator
