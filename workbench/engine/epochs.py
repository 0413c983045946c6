"""Short epochs: what a burst does when its window would cross epoch restarts.

A torch DataLoader's iterator ends with its epoch; the next epoch's iterator starts with an
empty prefetch queue (and, without ``persistent_workers``, new worker processes). A long run
pays that once per epoch; a burst whose epoch is a handful of batches pays it every few steps
inside its window, and then measures the restarts rather than the loader. Seen on an H200: the
800 sample JPEGs at batch 128 with ``drop_last`` are 6 batches an epoch, and the step times
turned bimodal (median 35.6 ms, mean 183 ms).

An epoch is *short* when it holds fewer than ``SHORT_EPOCH_BATCHES`` (50) full batches. Why 50:
a restart costs about one batch's decode time, that is about ``num_workers`` batches of a
data-bound loader's steady output (plus forking the workers without ``persistent_workers``).
At 6 batches an epoch and 8 workers that is more than the epoch itself (the H200 row above). At
50, a window of a few seconds crosses a restart or two, each up to ``num_workers / 50`` of an
epoch's time for a data-bound loader (8 workers: about a sixth) and little for a compute-bound
one; ``step_ms_mean`` against ``step_ms_p50`` still shows it, and ``loader_epochs`` counts
them. A real epoch (ImageNet at batch 256: 5,000 batches) pays it about 0.2%. A higher bound
would need bigger sample sets, and their build time grows with them (12,800 images, batch 256
at 50 batches: 297 s on the 2-core test machine, ``datasets.ensure_datasets_for_batch``).
The number lives in ``workbench.core.results`` (the CLI and the summaries read it without torch).

What a burst does with a short epoch (its result's ``short_epochs`` records it either way):

- ``continued``: the built-in workloads on the generated sample sets (``SAMPLE_SET`` in their
  ``extras``). Their size is an arbitrary sample of a real data set, so a restart every few
  steps is an artefact of the sample: the loader runs across epoch boundaries instead
  (``ContinuingSampler``: shuffled passes back to back, one iterator, workers that persist),
  as it would in the middle of a long epoch.
- ``measured``: a user's own Dataset. A short epoch is what their own plain loop restarts too,
  and fidelity with that loop comes first, so the burst measures it as it is and says so (the
  summary shows the median step against the mean, and what to do about it).
- Not applicable (``short_epochs`` None): epochs of ``SHORT_EPOCH_BATCHES`` or more; an
  IterableDataset (shards: it has no length to count batches by, and it orders itself); DALI
  (its own reader and iterator run the epochs: there is no sampler to continue, and what its
  reset costs at an epoch's end is not measured yet; ``loader_epochs`` still counts them); the
  synthetic loader (one batch, no epochs); a Lightning workload (its Trainer runs the loop).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DistributedSampler, Sampler

from workbench.core.results import SHORT_EPOCH_BATCHES

SAMPLE_SET = "sample_set"
"""``Workload.extras`` key: True when the workload reads a generated sample set, whose size is
arbitrary (``workbench.engine.datasets.is_sample_data``); its short epochs are continued."""
CONTINUED, MEASURED = "continued", "measured"


def batches_per_epoch(n_samples: int, batch_size: int, world_size: int = 1) -> int:
    """Full batches one rank gets from an epoch (``drop_last``). A DDP rank's share is
    ``ceil(n / world_size)``, as DistributedSampler pads it."""
    share = math.ceil(n_samples / world_size) if world_size > 1 else n_samples
    return share // batch_size


def epoch_handling(sample_set: bool, per_epoch: int | None) -> str | None:
    """``continued``, ``measured`` or None (not short, or not countable): the decision above.
    No full batch at all (0) is None too: the loader refuses that batch size itself."""
    if not per_epoch or per_epoch >= SHORT_EPOCH_BATCHES:
        return None
    return CONTINUED if sample_set else MEASURED


class ContinuingSampler(Sampler[int]):
    """Indices without end: one shuffled pass over the dataset after another, back to back, so
    the DataLoader's iterator never runs out and never restarts.

    Each pass holds every index once, in the order its epoch would have: a permutation seeded
    by ``seed + pass``, or, for a DDP rank (``shard=(rank, world_size)``), exactly what
    DistributedSampler gives that rank in that epoch (same padding, same order on every rank).
    A batch may hold the end of one pass and the start of the next; no sample is dropped.
    """

    def __init__(self, n_samples: int, seed: int = 0, shard: tuple[int, int] | None = None):
        self._n = n_samples
        self._seed = seed
        self._ranked: DistributedSampler | None = None
        if shard is not None:
            rank, world_size = shard
            self._ranked = DistributedSampler(
                range(n_samples), num_replicas=world_size, rank=rank, shuffle=True, seed=seed
            )

    def __iter__(self) -> Iterator[int]:
        done = 0
        while True:
            yield from self.pass_order(done)
            done += 1

    def pass_order(self, index: int) -> list[int]:
        """The indices of pass ``index`` (0 first), in order."""
        if self._ranked is not None:
            self._ranked.set_epoch(index)
            return list(self._ranked)
        generator = torch.Generator().manual_seed(self._seed + index)
        return torch.randperm(self._n, generator=generator).tolist()


def short_epochs_report(
    handling: str | None,
    per_epoch: int | None,
    restarts: int,
    batches: int,
    step_ms: Sequence[float],
) -> dict[str, Any] | None:
    """A result's ``short_epochs``: None unless the epoch is short (``handling`` set).

    ``restarts``: the loader's epoch restarts inside the window; ``batches``: the batches the
    window drew (steps x grad_accum), from which ``epochs_in_window`` is figured.
    """
    if handling is None or not per_epoch:
        return None
    return {
        "handling": handling,
        "batches_per_epoch": per_epoch,
        "threshold_batches": SHORT_EPOCH_BATCHES,
        "restarts_in_window": restarts,
        "epochs_in_window": round(batches / per_epoch, 2),
        "step_ms_p50": statistics.median(step_ms) if step_ms else None,
        "step_ms_mean": statistics.fmean(step_ms) if step_ms else None,
    }


__all__ = [
    "CONTINUED",
    "MEASURED",
    "SAMPLE_SET",
    "SHORT_EPOCH_BATCHES",
    "ContinuingSampler",
    "batches_per_epoch",
    "epoch_handling",
    "short_epochs_report",
]
