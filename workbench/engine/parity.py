"""A loss trace: ``steps`` optimizer steps of one config, the loss and gradient norm of each,
on batches any other trace of the same workload and seed also gets.

Why a run of its own and not a burst: a burst measures speed and keeps the last loss only; a
parity check (``workbench.analysis.parity``) compares two configs step by step, so both must
start from the same weights and train on the same samples in the same order with the same
augmentation draws, whatever their loader knobs. What makes that so here:

- **The weights**: the model is built under ``torch.manual_seed(seed)`` (the caller's random
  state is put back after), so every trace of a workload starts from the same initial weights;
  the loader is built after, under ``seed + 1`` (a synthetic loader draws its batch then).
- **The order**: the torch loader's sampler shuffles with a generator seeded by ``seed``
  (``TorchStream``): the same permutation for 0 workers or 16.
- **The augmentation draws**: each sample is drawn with torch's, Python's and NumPy's global
  generators seeded from ``(seed, index)`` (:class:`SeededSamples`), in a worker or in this
  process alike, and the generators are put back after: a sample's random crop is a function
  of its index, not of which worker read it or of what was drawn before it. An augmentation
  that draws from a generator of its own (``random.Random()`` kept on the dataset) escapes
  this; that is what the data fingerprints catch.
- **The evidence**: every step keeps a fingerprint of the samples it trained on (their sums,
  sorted: independent of the order inside the batch), so a comparison knows whether two traces
  saw the same data before it reads anything into their losses.

``reverse_samples`` trains each batch with its samples in reverse order: the same math summed
in another order, which is what a GPU's nondeterministic reductions do to a run. A CPU is
deterministic, so the same run twice there measures nothing; the reversed run measures the
rounding noise that any change of summation order brings (the parity band).

The knobs act as in a burst: the model, optimizer, autocast, loss scaling, channels_last,
compile, fp8 and the math switches come from ``build_train_state`` and the burst's plan
(``engine.plan``); the loop is the burst's (``micro_step``, ``optimizer_step``). A config that
needs fresh processes (world_size > 1, NCCL variables or alloc_conf on a GPU) is refused: a
trace runs in this process.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset

from workbench.core.errors import InputError
from workbench.core.knobs import Knobs
from workbench.engine.batches import Batch, map_tensors, sample_rule, tensor_leaves
from workbench.engine.epochs import SAMPLE_SET
from workbench.engine.formats import dataset_for
from workbench.engine.loaders import BatchStream, build_loader
from workbench.engine.loaders.torch_loader import TorchStream
from workbench.engine.packing import documents_view
from workbench.engine.plan import plan_burst
from workbench.engine.training import (
    TrainState,
    build_train_state,
    micro_step,
    numerics_scope,
    optimizer_step,
    to_device,
)
from workbench.engine.workloads import Workload

SEEDED = "each sample's augmentation seeded from its index (torch, random and NumPy generators)"
"""How a trace's data was drawn, when its loader is the torch DataLoader over an indexable
dataset (``LossTrace.data_seeding``)."""


@dataclass(frozen=True, slots=True)
class LossTrace:
    """One config's training, step by step (module docstring)."""

    knobs: Knobs
    losses: list[float]
    """The loss of each optimizer step (the mean over its micro-batches), as trained."""
    grad_norms: list[float]
    """The gradient's global L2 norm at each step, unscaled (fp16's loss scale taken out)."""
    fingerprints: list[str]
    """Each step's data: a digest of its samples' sums, independent of their order."""
    samples_per_step: int
    """Samples one optimizer step trains on (batch_size x grad_accum)."""
    seconds: float
    """Wall time of the trace, set-up included."""
    device: str
    data_seeding: str
    """How the data's random draws were fixed (``SEEDED``), or why they could not be."""
    reversed_samples: bool = False
    no_effect: dict[str, str] = field(default_factory=dict)
    """Knobs that could not act here, with the reason (as in a burst's result)."""
    scaler: bool = False
    """Whether fp16's GradScaler scaled the loss."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "knobs": self.knobs.changes(),
            "losses": list(self.losses),
            "grad_norms": list(self.grad_norms),
            "samples_per_step": self.samples_per_step,
            "seconds": self.seconds,
            "device": self.device,
            "data_seeding": self.data_seeding,
            "reversed_samples": self.reversed_samples,
            "no_effect": dict(self.no_effect),
            "scaler": self.scaler,
        }


class SeededSamples(Dataset):
    """``dataset`` with each item drawn under generators seeded from ``(seed, index)``; the
    global generators are put back after each item (module docstring). Attributes not its own
    are the wrapped dataset's."""

    def __init__(self, dataset: Dataset, seed: int = 0) -> None:
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        if name in ("dataset", "seed"):  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __getitem__(self, index: int) -> Any:
        with _seeded(_item_seed(self.seed, int(index))):
            return self.dataset[index]


def _item_seed(seed: int, index: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    torch_state, py_state, np_state = (
        torch.get_rng_state(),
        random.getstate(),
        np.random.get_state(),
    )
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        random.setstate(py_state)
        np.random.set_state(np_state)


def trace_losses(
    workload: Workload,
    knobs: Knobs,
    steps: int,
    device: torch.device,
    *,
    seed: int = 0,
    reverse_samples: bool = False,
    scaler: bool = True,
) -> LossTrace:
    """Train ``steps`` optimizer steps of ``knobs`` on ``workload`` and keep each step's loss,
    gradient norm and data fingerprint (module docstring). ``scaler=False`` trains fp16
    without its GradScaler (what loss scaling prevents, for a lesson); it changes nothing
    for another precision. Raises InputError for a config a trace cannot run here."""
    plan = plan_burst(knobs, workload, device)
    if plan.processes:
        raise InputError.not_allowed(
            "knobs", knobs.changes(),
            f"a config this process can train: {plan.processes_why}; a loss trace runs here",
        )  # fmt: skip
    began = time.perf_counter()
    wl = documents_view(workload, knobs, device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)  # the weights: the same for every trace of the workload
        state = build_train_state(wl, knobs, device, plan=plan)
        if not scaler:
            state.scaler = None
        torch.manual_seed(seed + 1)  # what a loader draws as it is built (a synthetic batch)
        stream, seeding = _stream(wl, knobs, device, seed, plan.decode_on_device)
        try:
            with numerics_scope(plan):
                record = _train(state, stream, knobs, device, steps, reverse_samples, wl)
        finally:
            stream.close()
    losses, norms, prints, per_step = record
    return LossTrace(
        knobs=knobs, losses=losses, grad_norms=norms, fingerprints=prints,
        samples_per_step=per_step, seconds=time.perf_counter() - began, device=str(device),
        data_seeding=seeding, reversed_samples=reverse_samples,
        no_effect={**plan.no_effect, **(state.no_effect or {})},
        scaler=state.scaler is not None,
    )  # fmt: skip


def _stream(
    wl: Workload, knobs: Knobs, device: torch.device, seed: int, on_device: bool
) -> tuple[BatchStream, str]:
    """The torch loader over :class:`SeededSamples` where the loader is torch's and the
    dataset indexable; another loader as the burst builds it, and the reason its draws are
    its own."""
    if knobs.loader != "torch" or on_device:
        why = f"loader={knobs.loader}" if knobs.loader != "torch" else "decode=gpu"
        return build_loader(wl, knobs, device, decode_on_device=on_device), (
            f"{why}: the loader draws its own augmentation (not seeded per sample)"
        )
    dataset = dataset_for(wl, knobs)
    if isinstance(dataset, IterableDataset):
        return TorchStream(dataset, knobs, device, seed=seed, collate_fn=wl.collate_fn), (
            f"data_format={knobs.data_format}: a stream of samples has no index to seed from"
        )
    sample_set = bool(wl.extras.get(SAMPLE_SET))
    stream = TorchStream(SeededSamples(dataset, seed), knobs, device, seed=seed,
                         collate_fn=wl.collate_fn, sample_set=sample_set)  # fmt: skip
    return stream, SEEDED


def _train(
    state: TrainState,
    stream: BatchStream,
    knobs: Knobs,
    device: torch.device,
    steps: int,
    reverse: bool,
    wl: Workload,
) -> tuple[list[float], list[float], list[str], int]:
    losses: list[float] = []
    norms: list[float] = []
    prints: list[str] = []
    pinned = knobs.pin_memory and device.type == "cuda"
    rule = None
    per_step = 0
    for _ in range(steps):
        digest = hashlib.blake2b(digest_size=8)
        loss, samples = 0.0, 0
        for _ in range(state.grad_accum):
            batch = next(stream)
            rule = rule or sample_rule(batch, wl.samples_of)
            n = rule.count(batch)
            samples += n
            if reverse:
                batch = _reversed(batch, n)
            _fingerprint(batch, n, digest)
            if not stream.on_device:
                batch = to_device(batch, state, device, pinned)
            loss += float(micro_step(state, batch))
        norms.append(_grad_norm(state))
        optimizer_step(state)
        losses.append(loss)
        prints.append(digest.hexdigest())
        per_step = per_step or samples
    return losses, norms, prints, per_step


def _reversed(batch: Batch, n: int) -> Batch:
    """The batch with its samples in reverse order: every tensor whose leading dimension is
    the batch's sample count is flipped along it (the same samples, summed the other way)."""
    return map_tensors(batch, lambda t: t.flip(0) if t.dim() and t.shape[0] == n else t)


def _fingerprint(batch: Batch, n: int, digest: Any) -> None:
    """Each sample's sum and position-weighted sum over every tensor that has a row per
    sample, sorted by sample: equal for the same samples in any order, different for another
    crop, flip or sample."""
    rows = []
    for t in tensor_leaves(batch):
        if not t.dim() or t.shape[0] != n or t.numel() == 0:
            continue
        flat = t.detach().reshape(n, -1).to(torch.float64)
        weights = torch.arange(1, flat.shape[1] + 1, dtype=torch.float64, device=flat.device)
        rows.append(torch.stack([flat.sum(1), (flat * weights).sum(1)], dim=1))
    if not rows:
        return
    table = torch.cat(rows, dim=1).cpu()
    keys = sorted(tuple(round(float(v), 6) for v in row) for row in table)
    digest.update(repr(keys).encode())


def _grad_norm(state: TrainState) -> float:
    """The global L2 norm of the gradients, fp16's loss scale taken out first (the scaler
    remembers the unscale, so its step does not divide twice)."""
    if state.scaler is not None:
        state.scaler.unscale_(state.optimizer)
    grads = [p.grad.detach() for p in (state.plain or state.model).parameters()
             if p.grad is not None]  # fmt: skip
    if not grads:
        return math.nan
    return float(torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads])))


__all__ = ["SEEDED", "LossTrace", "SeededSamples", "trace_losses"]
