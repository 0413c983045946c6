"""The torch DataLoader, built from the knobs, as an endless batch stream.

Start method: worker processes are forked (``multiprocessing_context="fork"`` where the
platform has it). A notebook user's dataset is usually defined in a cell, and ``spawn`` /
``forkserver`` (Python 3.14's Linux default) must pickle it, which fails for such classes;
fork shares it as it is. Python 3.12+ warns that forking a multi-threaded process (a Jupyter
kernel has about 20 threads) may deadlock; DataLoader workers only touch the dataset, and that
has been the PyTorch default on Linux for years, so we keep it deliberately.

Epochs: a new iterator starts when one runs out, as a plain loop's ``for`` over the loader
does; a short epoch of a sample set (``workbench.engine.epochs``) is continued instead: a
``ContinuingSampler`` feeds one iterator that never runs out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

from workbench.core import loader_args
from workbench.core.knobs import Knobs
from workbench.core.loader_args import WORKER_POLL_S, WORKER_TIMEOUT_S
from workbench.engine.epochs import (
    CONTINUED,
    ContinuingSampler,
    batches_per_epoch,
    epoch_handling,
)
from workbench.engine.loaders.stream import check_batch_fits

_TIMED_OUT = "DataLoader timed out after"


def dataloader_kwargs(knobs: Knobs, device: torch.device | str) -> dict[str, Any]:
    """The DataLoader keyword arguments these knobs mean on ``device`` (``core.loader_args``,
    torch-free for saved configs), with this module's wait slice."""
    return loader_args.dataloader_kwargs(knobs, device, poll_s=WORKER_POLL_S)


class TorchStream:
    """Batches from a torch DataLoader; a new epoch starts when one runs out, unless the
    epoch is short and ``sample_set`` (``workbench.engine.epochs``): then one shuffled pass
    follows another in a single iterator."""

    backend = "torch"
    on_device = False

    def __init__(
        self,
        dataset: Dataset,
        knobs: Knobs,
        device: torch.device,
        seed: int = 0,
        shard: tuple[int, int] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        sample_set: bool = False,
    ):
        generator = torch.Generator().manual_seed(seed)
        kwargs = dataloader_kwargs(knobs, device)
        self._sampler: DistributedSampler | None = None
        self.batches_per_epoch: int | None = None
        """Full batches in one epoch (this rank's share); None for an IterableDataset."""
        self.epoch_handling: str | None = None
        """How a short epoch is run: ``continued`` or ``measured``; None when not short."""
        dataset = self._order(dataset, kwargs, seed, shard, sample_set)
        if collate_fn is not None:  # the workload's own: the pipeline production will run
            kwargs["collate_fn"] = collate_fn
        self._loader = DataLoader(dataset, generator=generator, **kwargs)
        self._iter: Any = None
        self._batch_size = knobs.batch_size
        self.epochs = 0
        """Times the iterator ran out and a new epoch's began (0 when epochs continue)."""

    def _order(
        self,
        dataset: Dataset,
        kwargs: dict[str, Any],
        seed: int,
        shard: tuple[int, int] | None,
        sample_set: bool,
    ) -> Dataset:
        """Decide who orders the samples (into ``kwargs``) and the short-epoch handling;
        returns the dataset to load (an IterableDataset's share for this rank)."""
        if isinstance(dataset, IterableDataset):  # shards: it shuffles itself, by shard
            kwargs.pop("shuffle")
            return dataset.for_rank(*shard) if shard else dataset  # type: ignore[attr-defined]
        n = len(dataset)  # type: ignore[arg-type]
        self.batches_per_epoch = batches_per_epoch(
            n, kwargs["batch_size"], shard[1] if shard else 1
        )
        self.epoch_handling = epoch_handling(sample_set, self.batches_per_epoch)
        if self.epoch_handling == CONTINUED:
            kwargs.pop("shuffle")  # the sampler shuffles each pass
            kwargs["sampler"] = ContinuingSampler(n, seed=seed, shard=shard)
        elif shard is not None:
            rank, world_size = shard
            self._sampler = DistributedSampler(
                dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed
            )
            kwargs.pop("shuffle")  # the sampler shuffles, with the same seed on every rank
            kwargs["sampler"] = self._sampler
        return dataset

    def __next__(self) -> Any:
        if self._iter is None:
            self._iter = iter(self._loader)
        try:
            return self._next_batch()
        except StopIteration:
            pass
        self.epochs += 1
        if self._sampler is not None:
            self._sampler.set_epoch(self.epochs)  # a new order each epoch, the same on all ranks
        self._iter = iter(self._loader)
        try:
            return self._next_batch()
        except StopIteration:
            sharded = self._sampler is not None
            n = len(self._sampler if sharded else self._loader.dataset)  # type: ignore[arg-type]
            check_batch_fits(self._batch_size, n, sharded)
            raise RuntimeError("the DataLoader gave no batch in a fresh epoch") from None

    def _next_batch(self) -> Any:
        """The iterator's next batch, waited for in ``WORKER_POLL_S`` slices: after each slice
        torch checks that every worker is alive (a dead one raises "exited unexpectedly"). A
        timed-out wait leaves the iterator as it was, so waiting again is safe."""
        waited_s = 0.0
        while True:
            try:
                return next(self._iter)
            except RuntimeError as exc:
                if not str(exc).startswith(_TIMED_OUT) or self._loader.timeout <= 0:
                    raise
                waited_s += self._loader.timeout
                if waited_s >= WORKER_TIMEOUT_S:
                    raise RuntimeError(
                        f"no batch from the DataLoader's workers for {waited_s:.0f} s: a worker "
                        f"hangs (a deadlock, or storage that stopped answering?)"
                    ) from None

    def hand_over(self) -> DataLoader:
        """The DataLoader itself, for a loop that iterates it on its own (a Lightning
        Trainer, ``workbench.engine.lightning_fit``): this stream's workers are stopped (that
        loop starts its own, as production's first epoch does), and a wait for a batch times
        out after ``WORKER_TIMEOUT_S`` (the short slices are this stream's own retry loop,
        which that loop does not have)."""
        self.close()
        if self._loader.timeout > 0:
            self._loader.timeout = WORKER_TIMEOUT_S  # read when an iterator is made
        return self._loader

    def close(self) -> None:
        """Stop worker processes now rather than whenever the garbage collector runs."""
        for it in (self._iter, getattr(self._loader, "_iterator", None)):
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
        self._iter = None
        self._loader._iterator = None  # persistent workers' iterator
