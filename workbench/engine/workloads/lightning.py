"""A LightningModule and a LightningDataModule as a Workload, both unchanged.

``Workload.from_lightning(module_factory, datamodule_factory)`` builds the workload from what
the Trainer itself would call, and nothing else. A burst of it in one process *is* Lightning's
own ``Trainer.fit`` of the module (``workbench.engine.lightning_fit``): for a Lightning user
that is the loop production runs, and its loop, hooks and ``self.log`` cost time every step
(a burst that left them out read 1.08-1.14x ``Trainer.fit`` on a small convnet). What this module
gives the burst:

- **The step hook** (``step=step_loss``): the module's ``training_step(batch, batch_idx)``,
  whose loss is the tensor it returns or the ``"loss"`` of the dict it returns. Set-up's
  first-batch check and the FLOP count run it, before any Trainer exists (``self.log`` then
  returns without logging, Lightning's own behaviour; its warning that no Trainer is
  registered is filtered). The burst's model is a thin ``nn.Module`` (:class:`TrainingStep`)
  whose ``forward`` calls ``training_step``; the Trainer fits the LightningModule inside it
  (``lightning_module``), fresh from the factory, with ``channels_last`` and
  ``activation_checkpointing`` applied to it as ``cfg`` tells production to.
- **A distributed burst** (a torchrun job: ``world_size > 1``, or NCCL variables or
  ``alloc_conf`` on a GPU) keeps the step inside the burst's own loop, where the workbench
  wraps *the TrainingStep* in DDP (and ``torch.compile``), so the DDP-wrapped model is what
  runs forward. DDP prepares its gradient all-reduce in its own ``forward``; a
  ``training_step`` called on the bare module (its ``self(x)`` goes straight to the module)
  would bypass DDP and its gradients would never be reduced. Lightning's DDP strategy wraps
  the module the same way. There, autocast, gradient accumulation, loss scaling and the
  optimizer step are the burst's, and hooks other than those below do not run.
- **The optimizer and its schedule** come from ``configure_optimizers()`` in every form
  Lightning accepts, read by Lightning's own parser. One optimizer only: several mean manual
  optimization, which a burst cannot drive. In the Trainer the Trainer steps them; in the
  burst's own loop a schedule with ``"interval": "step"`` is stepped every ``frequency``
  batches through the module's ``lr_scheduler_step`` hook, as the Trainer steps it, and an
  ``"epoch"`` schedule or ``ReduceLROnPlateau`` is never stepped (no epoch end, no logged
  metric; a learning rate changes no step time). The optimizer is trained as
  ``configure_optimizers`` built it (the ``optimizer_impl`` knob has no effect). Set-up calls
  ``configure_optimizers`` once without a Trainer (for the memory figures and the burst's own
  loop), so it must not read ``self.trainer``.
- **The data** is the DataModule's: ``prepare_data()``, ``setup("fit")`` and
  ``train_dataloader()`` run once, when the workload is made, and the burst takes that
  loader's dataset and ``collate_fn``. Its other settings (batch size, workers, ...) are kept
  as information in ``extras["lightning"]``: in a burst the knobs decide them, and the Trainer
  iterates the DataLoader the burst built from them.

``lightning`` is imported here only, when a workload is made; ``pytorch_lightning`` (the older
package name) is taken when ``lightning`` is not installed.
"""

from __future__ import annotations

import importlib
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, default_collate

from workbench.core.errors import InputError

_PACKAGES = ("lightning.pytorch", "pytorch_lightning")
_NO_TRAINER_LOG = r"You are trying to `self.log\(\)` but the `self.trainer` reference"


def lightning_workload(
    cls: type,
    module_factory: Callable[[], Any],
    datamodule_factory: Callable[[], Any],
    **fields: Any,
) -> Any:
    """``cls`` (Workload) built from a LightningModule factory and a DataModule factory."""
    pl = _lightning()
    _check_factory("module_factory", module_factory, pl.LightningModule)
    _check_factory("datamodule_factory", datamodule_factory, pl.LightningDataModule)
    data = _train_data(pl, datamodule_factory)
    modules = _Modules(pl, module_factory)
    name = fields.pop("name", None) or _name_of(module_factory)
    extras = {**fields.pop("extras", {}), "lightning": data.info}
    description = fields.pop("description", None) or (
        f"LightningModule {name}, training data of {data.info['datamodule']}"
    )
    warnings.filterwarnings("ignore", message=_NO_TRAINER_LOG)  # see the module docstring
    return cls(
        name=name,
        model=modules.build,
        dataset=data.same,
        collate_fn=data.collate_fn,
        step=step_loss,
        optimizer=modules.optimizer,
        scheduler=modules.schedule,
        description=description,
        extras=extras,
        **fields,
    )


def is_lightning(workload: Any) -> bool:
    """Whether ``workload`` came from :func:`lightning_workload` (its step is ``step_loss``)."""
    return getattr(workload, "step", None) is step_loss


def lightning_module(model: nn.Module) -> Any:
    """The LightningModule inside a burst's model (its TrainingStep, under any wrapper)."""
    return next(m for m in model.modules() if isinstance(m, TrainingStep)).module


def lightning_package() -> ModuleType:
    """``lightning.pytorch``, or ``pytorch_lightning`` where only the older package is
    installed; an InputError that says what to install without either."""
    return _lightning()


def _lightning() -> ModuleType:
    for package in _PACKAGES:
        try:
            return importlib.import_module(package)
        except ImportError:
            continue
    raise InputError("Workload.from_lightning needs the lightning package: pip install lightning")


def _name_of(factory: Callable[[], Any]) -> str:
    name = getattr(factory, "__name__", "")
    return name if name.isidentifier() else "lightning"  # a lambda is "<lambda>"


def _check_factory(name: str, value: Any, kind: type) -> None:
    """A factory, not an instance: a burst trains a fresh module from the same data each
    time, and a LightningModule instance is callable (its forward) and would fail later."""
    if isinstance(value, kind) or not callable(value):
        what = f"a {type(value).__name__} instance" if isinstance(value, kind) else repr(value)
        cls_name = type(value).__name__
        raise InputError(
            f"{name}= got {what}: pass a factory that returns a fresh {kind.__name__}, such as "
            f"the class itself ({cls_name}) or lambda: {cls_name}(...)",
            name=name,
            value=what,
            allowed=f"a class or function returning a {kind.__name__}",
        )


# -- the step -----------------------------------------------------------------------------
class TrainingStep(nn.Module):
    """The burst's model: ``forward(batch, batch_idx)`` is the LightningModule's
    ``training_step``, so DDP and ``torch.compile`` wrap the whole step. ``batch_idx`` counts
    the batches this module has taken (as the Trainer's does within an epoch). It is an
    argument, not read from an attribute inside ``forward``: torch.compile specializes a
    module's int attributes and would recompile at every step (then give up at its limit),
    where an argument that changes is made dynamic after one recompile. ``to()`` goes through
    the LightningModule's own, which keeps its ``self.device`` right."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.batch_idx = 0

    def forward(self, batch: Any, batch_idx: int) -> Any:
        return self.module.training_step(batch, batch_idx)

    def to(self, *args: Any, **kwargs: Any) -> TrainingStep:
        self.module.to(*args, **kwargs)
        return self


def step_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    """The loss of ``training_step`` (run through the burst's model, DDP-wrapped or compiled):
    the tensor it returns, or its dict's ``"loss"``."""
    step = next(m for m in model.modules() if isinstance(m, TrainingStep))  # under the wrappers
    out = model(batch, step.batch_idx)
    step.batch_idx += 1
    loss = out.get("loss") if isinstance(out, dict) else out
    if not isinstance(loss, torch.Tensor):
        got = "None" if out is None else f"a {type(out).__name__}"
        if isinstance(out, dict):
            got = f"a dict without 'loss' (keys {sorted(out)})"
        raise InputError(f"training_step returned {got}: a burst needs the loss, a tensor or "
                         "a dict with 'loss' (None, Lightning's 'skip this batch', has no "
                         "step to measure)")  # fmt: skip
    return loss


# -- optimizer and schedule ---------------------------------------------------------------
@dataclass
class _Schedule:
    """The "step"-interval schedules of one optimizer, stepped as the Trainer steps them:
    after an optimizer step, when the batches taken so far are a multiple of ``frequency``,
    through the module's ``lr_scheduler_step`` hook."""

    model: TrainingStep
    configs: list[Any] = field(default_factory=list)

    def step(self) -> None:
        for config in self.configs:
            if self.model.batch_idx % config.frequency == 0:
                self.model.module.lr_scheduler_step(config.scheduler, None)


class _Modules:
    """The model factory and the optimizer and schedule factories of the modules it built.

    A Workload's ``optimizer(params)`` gets parameters, but ``configure_optimizers`` is a
    method of the module: the module is found by its parameters among the ones built here
    (weakly held: a burst's model is freed with the burst)."""

    def __init__(self, pl: ModuleType, factory: Callable[[], Any]) -> None:
        self._pl, self._factory = pl, factory
        self._built: weakref.WeakSet[TrainingStep] = weakref.WeakSet()
        self._schedules: weakref.WeakKeyDictionary[Any, _Schedule] = weakref.WeakKeyDictionary()

    def build(self) -> TrainingStep:
        module = self._factory()
        if not isinstance(module, self._pl.LightningModule):
            raise InputError.not_allowed(
                "module_factory()", type(module).__name__, "it must return a LightningModule"
            )
        if not module.automatic_optimization:
            raise InputError(f"{type(module).__name__} sets automatic_optimization = False: a "
                             "burst steps one optimizer itself (manual optimization is the "
                             "module's own loop)")  # fmt: skip
        model = TrainingStep(module)
        self._built.add(model)
        return model

    def optimizer(self, params: Any) -> torch.optim.Optimizer:
        model = self._owner(list(params))
        optimizer, configs = _configure(self._pl, model.module)
        self._schedules[optimizer] = _Schedule(model, [c for c in configs if _per_step(c)])
        return optimizer

    def schedule(self, optimizer: torch.optim.Optimizer) -> _Schedule | None:
        schedule = self._schedules.get(optimizer)
        return schedule if schedule is not None and schedule.configs else None

    def _owner(self, params: list[nn.Parameter]) -> TrainingStep:
        for model in list(self._built):
            own = list(model.parameters())
            if len(own) == len(params) and all(a is b for a, b in zip(own, params, strict=True)):
                return model
        raise InputError("the optimizer of a from_lightning workload is built by its module's "
                         "configure_optimizers(): give it the parameters of a module its "
                         "model factory built")  # fmt: skip


def _configure(pl: ModuleType, module: Any) -> tuple[torch.optim.Optimizer, list[Any]]:
    """``configure_optimizers()`` read by Lightning's own parser: (the one optimizer, its
    schedule configs)."""
    # Lightning's parser is not public API; the same module in both package names
    parser = importlib.import_module(f"{pl.__name__}.core.optimizer")
    try:
        conf = module.configure_optimizers()
    except RuntimeError as exc:
        if "not attached to a `Trainer`" not in str(exc):
            raise
        raise InputError(f"{type(module).__name__}.configure_optimizers() reads self.trainer "
                         "(e.g. estimated_stepping_batches), and a burst has no Trainer: "
                         "give the schedule its length in steps itself") from exc  # fmt: skip
    if conf is None:
        raise InputError(f"{type(module).__name__}.configure_optimizers() returned None: a "
                         "burst needs an optimizer to step")  # fmt: skip
    optimizers, schedulers, monitor = parser._configure_optimizers(conf)
    if len(optimizers) != 1:
        raise InputError.not_allowed(
            "configure_optimizers()",
            f"{len(optimizers)} optimizers",
            "one optimizer: several mean manual optimization (automatic_optimization = False), "
            "whose loop is the module's own and cannot be measured as a burst",
        )
    return optimizers[0], parser._configure_schedulers_automatic_opt(schedulers, monitor)


def _per_step(config: Any) -> bool:
    return config.interval == "step" and not config.reduce_on_plateau


# -- data ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _TrainData:
    dataset: Any
    collate_fn: Callable[[list[Any]], Any] | None
    info: dict[str, Any]

    def same(self) -> Any:
        """The dataset factory: the DataModule's training set, set up once."""
        return self.dataset


def _train_data(pl: ModuleType, factory: Callable[[], Any]) -> _TrainData:
    """``prepare_data()``, ``setup("fit")``, ``train_dataloader()``: its dataset and collate
    function, and its settings as information."""
    dm = factory()
    if not isinstance(dm, pl.LightningDataModule):
        raise InputError.not_allowed(
            "datamodule_factory()", type(dm).__name__, "it must return a LightningDataModule"
        )
    dm.prepare_data()
    dm.setup("fit")
    loader = dm.train_dataloader()
    if not isinstance(loader, DataLoader):
        raise InputError.not_allowed(
            f"{type(dm).__name__}.train_dataloader()",
            type(loader).__name__,
            "one torch DataLoader (several loaders, or a CombinedLoader, are not one stream)",
        )
    collate = loader.collate_fn
    info = {
        "datamodule": type(dm).__name__,
        "batch_size": loader.batch_size,
        "num_workers": loader.num_workers,
        "note": "the DataModule's loader settings: a burst's batch size and loader come from "
        "its knobs",
    }
    return _TrainData(loader.dataset, None if collate is default_collate else collate, info)


__all__ = [
    "TrainingStep",
    "is_lightning",
    "lightning_module",
    "lightning_package",
    "lightning_workload",
    "step_loss",
]
