"""A Workload's fields checked when it is made; the default loss's silent misfits."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from workbench.core.errors import InputError
from workbench.engine.workloads import Workload
from workbench.engine.workloads.checks import WorkloadFieldError, default_loss_misfit

DATA = TensorDataset(torch.zeros(8, 4), torch.zeros(8, dtype=torch.long))


def _make(**fields):
    return Workload(**{"name": "w", "model": lambda: nn.Linear(4, 2), "dataset": lambda: DATA,
                       **fields})  # fmt: skip


class _DataModule:
    """What a LightningDataModule looks like to a duck: Lightning is never imported."""

    def setup(self, stage=None):
        pass

    def train_dataloader(self):
        return DataLoader(DATA)


class _LitModule(nn.Module):
    def training_step(self, batch, i):
        return None

    def configure_optimizers(self):
        return None


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"model": nn.Linear(4, 2)},
         "model=<Linear instance> is not allowed: a factory that returns a fresh nn.Module, "
         "e.g. model=lambda: Linear(...)"),
        ({"model": _LitModule()}, "Workload.from_lightning(module_factory, datamodule_factory)"),
        ({"dataset": DATA}, "dataset=<TensorDataset instance> is not allowed: a factory that "
                            "returns the Dataset, e.g. dataset=lambda: ds"),
        ({"dataset": DataLoader(DATA)}, "dataset=lambda: loader.dataset"),
        ({"dataset": _DataModule()}, "a LightningDataModule is not a dataset: "
                                     "Workload.from_lightning(module_factory, datamodule_factory)"),
        ({"dataset": _DataModule}, "a LightningDataModule is not a dataset"),
        ({"dataset": nn.Linear}, "this is a model"),
        ({"optimizer": torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)},
         "optimizer=<SGD instance> is not allowed: a factory params -> Optimizer"),
        ({"optimizer": {"optimizer": None, "lr_scheduler": None}},
         "optimizer=<dict of 2> is not allowed: a factory params -> Optimizer, e.g. "
         "optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3); configure_optimizers()'s "
         "dict or list is Lightning's"),
        ({"optimizer": ([None], [None])}, "configure_optimizers()'s dict or list"),
        ({"loss": nn.CrossEntropyLoss},
         "loss=<class CrossEntropyLoss> is not allowed: a loss function or an instance, e.g. "
         "loss=CrossEntropyLoss()"),
        ({"forward": nn.Linear}, "forward=<class Linear> is not allowed: a function"),
        ({"collate_fn": DataLoader}, "collate_fn=<class DataLoader> is not allowed"),
        ({"collate_fn": 3}, "collate_fn=3 is not allowed: a function or None"),
        ({"model": None}, "model=None is not allowed: a function"),
    ],
)  # fmt: skip
def test_a_field_given_what_the_burst_cannot_use_is_refused_naming_it(fields, words):
    with pytest.raises(WorkloadFieldError) as caught:
        _make(**fields)
    assert words in str(caught.value)
    assert caught.value.name == next(iter(fields))
    # one kind: an InputError (the CLI's one line, exit 2) that is also the TypeError it was
    assert isinstance(caught.value, InputError) and isinstance(caught.value, TypeError)


@pytest.mark.parametrize(
    "fields",
    [
        {"model": nn.Identity},  # a class is a factory of fresh modules
        {"dataset": list},
        {"loss": nn.CrossEntropyLoss()},  # an instance is a callable loss
        {"loss": F.cross_entropy},
        {"optimizer": torch.optim.AdamW},  # AdamW(params): a factory
        {"collate_fn": list},  # a builtin container keeps the samples as they are
        {"forward": lambda model, batch: model(batch)},
    ],
)
def test_factories_and_callables_that_fit_are_taken(fields):
    assert _make(**fields).name == "w"


def test_a_module_is_shown_by_its_type_not_its_layers():
    big = nn.Sequential(*[nn.Linear(4, 4) for _ in range(20)])
    with pytest.raises(WorkloadFieldError) as caught:
        _make(model=big)
    assert "<Sequential instance>" in str(caught.value) and "Linear(in_features" not in str(
        caught.value
    )


@pytest.mark.parametrize(
    ("logits", "target", "words"),
    [
        (torch.randn(8), torch.rand(8).round(), "1-D logits [8] and float targets"),
        (torch.randn(8, 1), torch.rand(8, 1).round(), "logits [8, 1] (one column)"),
        (torch.randn(8, 3), torch.tensor([[1.0, 1.0, 0.0]] * 8), "float targets [8, 3] that are"),
    ],
)
def test_the_default_loss_names_the_misfits_it_would_train_on_silently(logits, target, words):
    F.cross_entropy(logits, target)  # no error: that is why the burst must say it
    why = default_loss_misfit(logits, target)
    assert why is not None and words in why
    assert "loss=torch.nn.functional.binary_cross_entropy_with_logits" in why


@pytest.mark.parametrize(
    ("logits", "target"),
    [
        (torch.randn(8, 3), torch.randint(0, 3, (8,))),  # class indices
        (torch.randn(8, 3), torch.softmax(torch.randn(8, 3), dim=1)),  # soft labels (mixup)
        (torch.randn(8, 3), {"labels": torch.zeros(8)}),  # not a tensor: not for this check
    ],
)
def test_the_default_loss_takes_what_cross_entropy_is_for(logits, target):
    assert default_loss_misfit(logits, target) is None


def test_real_lightning_classes_are_told_apart_by_their_hooks():
    L = pytest.importorskip("lightning")  # the duck typing, checked on the real package

    class Data(L.LightningDataModule):
        def train_dataloader(self):
            return DataLoader(DATA)

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def training_step(self, batch, i):
            return self.fc(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    for given in (Data(), Data):
        with pytest.raises(WorkloadFieldError, match="a LightningDataModule is not a dataset"):
            _make(dataset=given)
    with pytest.raises(WorkloadFieldError, match=r"model=lambda: Lit\(...\).*from_lightning"):
        _make(model=Lit())
    assert _make(model=Lit).name == "w"  # the class is a factory of fresh modules
