"""What a Workload's fields must be, checked when it is made; and what the default loss can take.

A Workload holds *factories*: ``model`` and ``dataset`` are called once per burst, ``optimizer``
with the model's parameters, ``loss`` with ``(output, target)``. The tempting mistakes are
things that are callable too, so without a check they fail far from the cause, inside the
burst: an ``nn.Module`` instance as ``model=`` is called with no input (``forward() missing 1
required positional argument``), the class ``nn.CrossEntropyLoss`` as ``loss=`` is called with
the output and target as its constructor's arguments. Others are not callable and deserve more
than "a function": a Dataset or DataLoader instance, a LightningDataModule, an optimizer
instance or ``configure_optimizers()``'s dict. Each is refused here, naming the field, what was
given and what to pass instead.

The default loss is cross-entropy, which never fails on a binary or multi-label model's output:
it reads 1-D logits as *one* sample whose classes are the batch, a single logit column as one
class (a loss of 0 for every batch), and multi-hot float targets as class probabilities. A burst
still measures the right speed, but the user's model would not learn: ``default_loss_misfit``
says so, once, when a burst's first batch is checked.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from workbench.core.errors import InputError

_FIELDS = ("model", "dataset", "loss", "optimizer", "collate_fn", "forward", "samples_of", "step",
           "scheduler")  # fmt: skip
_OPTIONAL = ("collate_fn", "forward", "samples_of", "step", "scheduler")
_NO_CLASS = ("loss", "forward", "collate_fn")
"""Fields whose class, called as the burst calls them, would build an object, not a loss,
an output or a batch (``loss=nn.CrossEntropyLoss`` rather than ``nn.CrossEntropyLoss()``)."""
_FROM_LIGHTNING = "Workload.from_lightning(module_factory, datamodule_factory)"
_BCE = "loss=torch.nn.functional.binary_cross_entropy_with_logits"


class WorkloadFieldError(InputError, TypeError):
    """A Workload field given something it cannot use. An InputError (the CLI's exit code 2,
    one line) and a TypeError, as a wrong kind of argument is in Python (and as these
    refusals were before they said what to pass)."""


class WorkloadWarning(UserWarning):
    """A workload a burst can measure, but whose training would not do what its user means
    (the default cross-entropy given a binary model's output)."""


def check_fields(workload: Any) -> None:
    """Refuse, naming the field, a value the burst would call wrongly; see the module's doc."""
    for name in _FIELDS:
        value = getattr(workload, name, None)
        allowed = _misfit(name, value)
        if allowed is not None:
            raise _refused(name, value, allowed)
    for name in _OPTIONAL:
        if name in workload.extras:  # extras are not read by the burst: it would be ignored
            raise WorkloadFieldError(
                f"Workload extras[{name!r}] is never used: pass {name}= itself", name=name
            )
    if workload.step is not None and (workload.forward is not None or not _default_loss(workload)):
        raise WorkloadFieldError(
            "Workload step= computes the whole loss: it replaces forward= and loss=, so pass "
            "step= alone or forward=/loss= without it",
            name="step",
        )


def _default_loss(workload: Any) -> bool:
    """Whether ``loss`` was left at the Workload's default (read from the dataclass itself:
    base.py, which defines the default, imports this module)."""
    default = {f.name: f.default for f in dataclasses.fields(workload)}.get("loss")
    return workload.loss is default


def _refused(name: str, value: Any, allowed: str) -> WorkloadFieldError:
    shown = Shown(_short(value))
    message = f"Workload {name}={shown!r} is not allowed: {allowed}"
    return WorkloadFieldError(message, name=name, value=shown, allowed=allowed)


def _misfit(name: str, value: Any) -> str | None:
    """What ``name`` expects, when ``value`` is not that; None when it fits."""
    if value is None:
        return None if name in _OPTIONAL else f"a function ({_EXPECTED[name]})"
    if name == "model" and isinstance(value, nn.Module):
        return _model_instance(value)
    if name == "dataset":
        return _dataset_misfit(value)
    if name == "optimizer":
        return _optimizer_misfit(value)
    if name in _NO_CLASS and inspect.isclass(value) and not _builtin_container(name, value):
        return _class_misfit(name, value)
    if not callable(value):
        return f"a function{' or None' if name in _OPTIONAL else ''} ({_EXPECTED[name]})"
    return None


_EXPECTED = {
    "model": "model=lambda: MyNet(), called once per burst for a fresh nn.Module",
    "dataset": "dataset=lambda: MyDataset(), called once per burst for the Dataset",
    "loss": "loss(output, target) -> a scalar tensor",
    "optimizer": "optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3)",
    "collate_fn": "the DataLoader's collate_fn: a list of samples -> a batch",
    "forward": "forward=lambda model, batch: model(**batch)",
    "samples_of": "samples_of(batch) -> the number of samples in a batch",
    "step": "step(model, batch) -> the micro-batch's loss, a scalar tensor",
    "scheduler": "scheduler=lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, ...)",
}


def _model_instance(model: nn.Module) -> str:
    kind = type(model).__name__
    text = (
        f"a factory that returns a fresh nn.Module, e.g. model=lambda: {kind}(...) (each "
        "burst starts from a new model; an instance would be called as the model)"
    )
    if _is_lightning_module(model):
        text += f"; for a LightningModule and its DataModule, {_FROM_LIGHTNING}"
    return text


def _dataset_misfit(value: Any) -> str | None:
    if _is_datamodule(value):
        return (
            "a LightningDataModule is not a dataset: "
            f"{_FROM_LIGHTNING} builds the workload from it and its train_dataloader()"
        )
    if isinstance(value, DataLoader):
        return (
            "a factory that returns the Dataset, e.g. dataset=lambda: loader.dataset with "
            "collate_fn=loader.collate_fn: each burst builds its DataLoader from the knobs"
        )
    if isinstance(value, nn.Module) or (inspect.isclass(value) and issubclass(value, nn.Module)):
        return f"a factory that returns the Dataset ({_EXPECTED['dataset']}); this is a model"
    if isinstance(value, Dataset) or not callable(value):
        return "a factory that returns the Dataset, e.g. dataset=lambda: ds (called once per burst)"
    return None


def _optimizer_misfit(value: Any) -> str | None:
    expected = f"a factory params -> Optimizer, e.g. {_EXPECTED['optimizer']}"
    if isinstance(value, torch.optim.Optimizer):
        return f"{expected} (an instance holds another model's parameters)"
    if isinstance(value, (dict, list, tuple)):
        return (
            f"{expected}; configure_optimizers()'s dict or list is Lightning's: "
            f"{_FROM_LIGHTNING} reads it, schedulers included"
        )
    return None if callable(value) else expected


def _class_misfit(name: str, cls: type) -> str:
    made = f"{cls.__name__}(...)"
    if name == "loss":
        return (
            f"a loss function or an instance, e.g. loss={cls.__name__}(): the class itself "
            "would be called with (output, target) as its constructor's arguments"
        )
    if name == "collate_fn":
        return f"a function or an instance, e.g. collate_fn={made}: the class builds no batch"
    return f"a function, e.g. {_EXPECTED['forward']}: the class would be built, not run"


def _builtin_container(name: str, cls: type) -> bool:
    """``collate_fn=list`` or ``tuple`` returns the samples as they are: a real batching."""
    return name == "collate_fn" and cls.__module__ == "builtins"


def _is_datamodule(value: Any) -> bool:
    """A LightningDataModule (class or instance), by the hooks it has: Lightning is never
    imported here. A LightningModule has the same two hooks, but also ``training_step``."""
    hooks = hasattr(value, "train_dataloader") and hasattr(value, "setup")
    return hooks and not hasattr(value, "training_step")


def _is_lightning_module(value: Any) -> bool:
    return hasattr(value, "training_step") and hasattr(value, "configure_optimizers")


def _short(value: Any) -> str:
    """How an error shows a value: a module's repr lists every layer, an address says
    nothing; a class, a function or an instance is named by its type."""
    if inspect.isclass(value):
        return f"<class {value.__qualname__}>"
    if inspect.isfunction(value) or inspect.ismethod(value) or inspect.isbuiltin(value):
        return f"<function {getattr(value, '__qualname__', value)}>"
    if isinstance(value, (dict, list, tuple)):
        return f"<{type(value).__name__} of {len(value)}>"
    if value is None or isinstance(value, (str, int, float, bool)):
        return repr(value)
    return f"<{type(value).__name__} instance>"


class Shown:
    """A value as an error message shows it (its ``repr`` is the short form, no address:
    ``<function make_model>``, ``<LitNet instance>``); the workload errors all use it."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def default_loss_misfit(logits: Any, target: Any) -> str | None:
    """Why the default cross-entropy does not fit this output and target, or None.

    Cross-entropy raises on most misfits; these three it takes without a word: 1-D logits
    (read as one sample whose classes are the batch), a single logit column (softmax over one
    class: the loss is 0 whatever the model does) and float targets of the logits' shape that
    are not distributions (multi-hot labels, read as class probabilities). One look at the
    first batch, at set-up: a host sync there costs nothing a step pays.
    """
    if not isinstance(logits, torch.Tensor) or not isinstance(target, torch.Tensor):
        return None
    if logits.dim() == 1:
        seen = f"1-D logits {list(logits.shape)}"
        why = "it reads them as ONE sample whose classes are the batch"
    elif logits.dim() >= 2 and logits.shape[1] == 1:
        seen = f"logits {list(logits.shape)} (one column)"
        why = "softmax over one class gives a loss of 0 whatever the model does"
    elif (
        target.is_floating_point() and target.shape == logits.shape and not _rows_sum_to_one(target)
    ):
        seen = f"float targets {list(target.shape)} that are not class probabilities"
        why = "it reads multi-hot labels as probabilities"
    else:
        return None
    floats = " and float targets" if target.is_floating_point() and "float" not in seen else ""
    return (
        f"the default loss (cross-entropy) got {seen}{floats}: {why}, so this model would not "
        f"learn. For a binary or multi-label model pass {_BCE} (the throughput measured is "
        "right either way)"
    )


def loss_broadcast_misfit(output: Any, target: Any, said: list[str]) -> str | None:
    """Why the loss compared an output and a target of different shapes by broadcasting
    (``mse_loss`` of ``[B, 1]`` against ``[B]`` compares every output with every target: a
    ``[B, B]`` loss that trains the wrong thing without an error), or None.

    Read from torch's own warning about it (``said``: the messages the loss call warned) or,
    for a loss that warns nothing, from a float target whose shape broadcasts with the
    output's to a third shape (integer targets are class indices: cross-entropy's ``[B, C]``
    against ``[B]`` is right)."""
    if not isinstance(output, torch.Tensor) or not isinstance(target, torch.Tensor):
        return None
    if output.shape == target.shape:
        return None
    torch_said = any("broadcast" in text for text in said)
    try:
        both = torch.broadcast_shapes(output.shape, target.shape)
    except RuntimeError:
        return None
    if not torch_said and (not target.is_floating_point() or both in (output.shape, target.shape)):
        return None
    return (
        f"the loss compared the output {list(output.shape)} with the target "
        f"{list(target.shape)} by broadcasting them to {list(both)}: every output is compared "
        "with targets of other samples, so this model would not learn what you mean. Make the "
        "shapes agree in the loss or the model (e.g. output.squeeze(-1), or "
        "target.unsqueeze(-1)); the throughput measured is right either way"
    )


def _rows_sum_to_one(target: torch.Tensor) -> bool:
    sums = target.detach().float().sum(dim=1)
    return bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-3))


__all__ = [
    "WorkloadFieldError",
    "WorkloadWarning",
    "check_fields",
    "default_loss_misfit",
    "loss_broadcast_misfit",
]
