"""The Workload dataclass and the FLOP count that MFU is built on."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from workbench.engine.batches import (
    Batch,
    SampleRule,
    SamplesOf,
    flop_rows,
    sample_rule,
    split_batch,
)
from workbench.engine.workloads.checks import check_fields
from workbench.engine.workloads.lightning import lightning_workload  # imports no lightning

log = logging.getLogger("workbench")


def default_optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """SGD with momentum: a real optimizer step with small, fixed state."""
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def logits_of(output: Any) -> Any:
    """The logits of a model's raw output: ``output.logits`` for an output object (Hugging
    Face's ``ModelOutput`` and the like), the output itself otherwise."""
    logits = getattr(output, "logits", None)
    return output if logits is None else logits


def default_loss(output: Any, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the logits (``output.logits`` where the output has them)."""
    return F.cross_entropy(logits_of(output), target)


def call_model(model: nn.Module, inputs: Batch) -> Any:
    """The default forward: ``model(input)``."""
    return model(inputs)


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What a burst trains: ``loss(forward(model, input), target)`` over batches of ``dataset``
    (or ``step(model, batch)``, a whole step's loss, such as a LightningModule's).

    ``model`` and ``dataset`` are factories (called once per burst), so a burst always
    starts from a fresh model and the same data. The dataset yields ``(input, target)``, each a
    tensor or any nest of tuples, lists and dicts of tensors, or a dict, which is then both the
    input and the target (the forward hook and the loss each get the whole batch).
    """

    name: str
    model: Callable[[], nn.Module]
    dataset: Callable[[], Dataset]
    loss: Callable[[Any, Any], torch.Tensor] = default_loss
    """``loss(output, target)``: gets the model's raw output (an object with ``.logits``
    too); the default is cross-entropy of the logits."""
    optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] = default_optimizer
    collate_fn: Callable[[list[Any]], Any] | None = None
    """The DataLoader's ``collate_fn`` (dynamic padding, ...): used by every burst's loader and
    saved by name in a tuned config, so production runs the pipeline that was measured."""
    forward: Callable[[nn.Module, Any], Any] | None = None
    """How the model takes the input, when not ``model(input)``: e.g.
    ``lambda model, batch: model(**batch)`` for a dict of keyword arguments."""
    step: Callable[[nn.Module, Any], torch.Tensor] | None = None
    """The whole micro-step's loss from ``(model, batch)``, when a step is not
    ``loss(forward(model, input), target)``: e.g. a LightningModule's ``training_step``
    (:meth:`from_lightning`). It gets the burst's model as the burst runs it (under DDP and
    ``torch.compile``, inside autocast) and the whole batch, unsplit; it replaces ``forward``
    and ``loss``. Gradient accumulation, loss scaling and the optimizer step stay the burst's."""
    scheduler: Callable[[torch.optim.Optimizer], Any] | None = None
    """``scheduler(optimizer)``: a learning-rate schedule (anything with ``step()``, such as
    ``OneCycleLR(optimizer, max_lr=0.1, total_steps=10_000)``), stepped after every optimizer
    step, as a loop with a per-step schedule steps it; None: the learning rate stays fixed. A
    scheduler holds the optimizer it was built on, so a workload with one trains that
    optimizer as ``optimizer`` built it (the ``optimizer_impl`` knob then has no effect)."""
    flops_per_sample: float | None = None
    """Training FLOPs per sample (forward + backward). None: counted on the meta device."""
    tokens_per_sample: int | None = None
    """For token workloads: tokens in one sample, so results carry tokens_per_s."""
    samples_of: SamplesOf | None = None
    """How many samples a batch holds, when its tensors' leading dimensions do not say it
    alone: ``samples_of(batch) -> int``, called on every batch (the whole collated batch, as
    the DataLoader gives it). Without it every tensor's leading dimension is read on the first
    batch: all agreeing decide, else the target's; a batch nothing decides is refused. E.g.
    ``lambda batch: len(batch[0]["offsets"])`` for an EmbeddingBag's flattened bags. Read
    sizes, not values: a value read from a GPU tensor would wait for the device every step."""
    description: str = ""
    image_dir: Path | None = None
    """The ImageFolder the dataset reads, for loaders that read files themselves (DALI)."""
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(self)  # each field named, with what it expects (workloads.checks)

    @property
    def tokens(self) -> bool:
        return self.tokens_per_sample is not None

    def run_model(self, model: nn.Module, inputs: Batch) -> Any:
        """The model's raw output for ``inputs``, through the ``forward`` hook if there is one."""
        return (self.forward or call_model)(model, inputs)

    def step_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """One micro-batch's loss: the ``step`` hook's, or ``loss(forward(model, input),
        target)``. What a burst's step, its FLOP count and its memory probe all compute."""
        if self.step is not None:
            return self.step(model, batch)
        inputs, target = split_batch(batch)
        return self.loss(self.run_model(model, inputs), target)

    @classmethod
    def from_lightning(
        cls,
        module_factory: Callable[[], Any],
        datamodule_factory: Callable[[], Any],
        **fields: Any,
    ) -> Workload:
        """A Workload that trains a LightningModule on a LightningDataModule's training data,
        both unchanged: its ``training_step`` is the step, its ``configure_optimizers`` gives
        the optimizer and the learning-rate schedule, the DataModule's ``train_dataloader``
        gives the dataset and the collate function (the knobs give the batch size and the
        loader settings). Both arguments are factories (a class, or a function returning a
        fresh object). ``fields`` are other Workload fields (``name``, ``flops_per_sample``,
        ...). See ``workbench.engine.workloads.lightning`` for what runs and what does not;
        ``lightning`` itself is imported only then, so the engine works without it."""
        return lightning_workload(cls, module_factory, datamodule_factory, **fields)


def count_train_flops(
    workload: Workload, batch: Batch, *more: Any, rule: SampleRule | None = None
) -> float | None:
    """Model FLOPs of one training sample (forward + backward), or None if they cannot be counted.

    ``batch`` is a whole batch (``count_train_flops(wl, (x, y))`` or a dict); the older form
    ``count_train_flops(wl, x, y)`` still works. Counted with
    ``torch.utils.flop_counter.FlopCounterMode`` on the ``meta`` device: shapes only, no memory,
    no compute, so it is cheap even for resnet50. It counts matmuls, convolutions and attention,
    the convention MFU uses (elementwise ops are not "model FLOPs").

    Per sample means per sample as the burst counts them (``rule``, decided on this batch with
    the workload's ``samples_of`` when not given): two samples where every tensor shares the
    batch dimension, else the whole batch over its count (``flop_rows``).
    """
    if workload.flops_per_sample is not None:
        return workload.flops_per_sample
    if more:
        batch = (batch, *more)
    try:
        rule = rule or sample_rule(batch, workload.samples_of)
        sample, samples = flop_rows(batch, rule, meta=True)
        return _count_on_meta(workload, sample) / samples
    except Exception as exc:  # a user's model may not build on meta: MFU is then unknown
        log.info("could not count FLOPs for workload %s: %s", workload.name, exc)
        return None


def _count_on_meta(workload: Workload, sample: Batch) -> float:
    # FlopCounterMode loads triton (~0.2 s): imported only when FLOPs are counted
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = workload.model()
    with FlopCounterMode(display=False) as counter:
        workload.step_loss(model, sample).backward()
    total = float(counter.get_total_flops())
    if total <= 0:
        raise ValueError("no matmul/convolution FLOPs found")
    return total


def say_progress(message: str) -> None:
    """Progress of a one-time dataset build: stderr, so ``--json`` stdout stays clean. A count
    on its way ("images: 80/800") is rewritten in place by the next message (a carriage
    return, which terminals and Jupyter's output both honour), so a notebook shows one line
    that counts up rather than ten. Where nothing rewrites a line (a CI log, a nohup file:
    stderr is no terminal and no notebook), each message is a line of its own: a carriage
    return there would run the counts together ("images: 80/800workbench: images: 160/800")."""
    if not _rewrites_in_place(sys.stderr):
        print(f"workbench: {message}", file=sys.stderr, flush=True)
        return
    count = message.rpartition(": ")[2].split("/")
    partial = len(count) == 2 and all(c.isdigit() for c in count) and count[0] != count[1]
    print(f"\rworkbench: {message}", end="" if partial else "\n", file=sys.stderr, flush=True)


def _rewrites_in_place(stream: Any) -> bool:
    """A terminal, or a Jupyter kernel's output stream (its front end honours a carriage
    return); not a pipe or a file."""
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    return type(stream).__module__.split(".")[0] == "ipykernel"
