"""A burst of a Lightning workload is Lightning's own ``Trainer.fit``, timed as a burst's loop.

Why: for a Lightning user the loop production runs *is* ``Trainer.fit``. Its loop, its hooks,
``self.log``'s result collection, its optimizer closure and its scheduler stepping all cost
time every step (on the 2-core CPU about 0.35 ms for the loop and 0.35 ms per ``self.log``
call: a burst that called ``training_step`` in its own loop read 1.08-1.14x what
``Trainer.fit`` got for a small convnet; as ``Trainer.fit`` it reads 0.98-1.00x,
``benchmarks/lightning_fidelity.py``). So the burst measures the Trainer itself, with the
workbench's measurement method around it.

What runs: set-up is the burst's (the loader built from the knobs, the first-batch check and the
FLOP count through the ``training_step`` hook). Then, where the burst's warm-up and window
would run, a ``Trainer`` built from the knobs (``trainer_kwargs``) fits the module the factory
built (the burst's ``state.plain.module``: fresh, with ``channels_last`` and
``activation_checkpointing`` applied to it as ``cfg`` tells production to) on the burst's own
DataLoader (its workers, prefetch and pinning are the knobs'). The Trainer calls
``configure_optimizers`` itself; ``self.log``, the hooks, gradient accumulation, the precision
plugin and the schedules run as in production. No logger, checkpoint, progress bar, model
summary or validation: those are the user's choices, not knobs, and not training throughput.
The peak memory counters restart where the burst's set-up ends, just before ``fit`` is called
(``burst._restart_peak``): the Trainer's own start-up is in the training peak, as its time is
in warm-up.

How it is timed (:class:`FitClock`, a Callback; the same rules as ``burst._warm_up`` and
``burst._window``): ``warmup_steps`` optimizer steps unmeasured (``warmup_s`` runs from the
``fit`` call: the Trainer's own start-up and the workers' is warm-up too); then the device is
synchronized and the clock starts at a step boundary. A step boundary is the end of the batch
at which the Trainer's ``global_step`` moved, so under gradient accumulation one step spans its
``grad_accum`` batches (and an epoch's short last group, as the Trainer steps it). Step times
run boundary to boundary; data wait is the time from one batch's end to the next batch's start
(the Trainer's fetch, its copy to the device and its loop between them). The window closes at
the first step boundary where ``seconds`` passed and ``min_steps`` were measured: the device is
synchronized, the clock stopped and ``trainer.should_stop`` set. Samples are counted by the
``SampleRule`` the burst decided on the first batch, on the batches inside the window. The
burst's cancel event is read at every step boundary.

Not honoured here (``trainer_no_effect``): ``compile`` (the module runs eagerly; production's
``torch.compile(module)`` before ``fit`` is not measured), ``optimizer_impl`` (the optimizer is
trained as ``configure_optimizers`` builds it) and fp16 on a CPU (Lightning trains it as
bf16-mixed). A distributed burst (a torchrun job: ``world_size > 1``, or NCCL variables or
``alloc_conf`` on a GPU) keeps the ``training_step`` path inside the burst's own loop, where the
workbench's DDP wrapping and window agreement run (``workbench.engine.workloads.lightning``).
DALI and synthetic loaders reach the Trainer as an endless iterable of their batches.

Quiet: Lightning's INFO messages ("GPU available ...") and its PossibleUserWarnings (few
workers, a logging interval longer than an epoch: the knobs decide those) are silenced during
the fit and restored after. A Ctrl-C inside ``fit`` on the main thread (the second one, which
must interrupt at once) is raised as a KeyboardInterrupt, not Lightning's ``exit(1)``.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
from torch import nn

from workbench.core.knobs import Knobs
from workbench.engine.batches import SampleRule
from workbench.engine.loaders import BatchStream, drop_before_window
from workbench.engine.loaders.torch_loader import TorchStream
from workbench.engine.loop import LoopControl
from workbench.engine.timing import StepSamples, StepTimer, synchronize
from workbench.engine.workloads.lightning import lightning_module, lightning_package

Report = Callable[[str, float, int], None]

LIGHTNING_PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed"}
"""Lightning's precision for each ``precision`` knob (every fp32 mode, default, fp32-strict
and tf32, is "32-true": the math mode is the burst's ``backend_flags``): the same
mapping as ``TunedConfig.lightning_trainer_kwargs``, so a burst runs what the saved config
tells production to run."""

_FP16_ON_CPU = r".*AMP with fp16 is not supported on CPU"
_LOGGERS = ("lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric")


def trainer_kwargs(knobs: Knobs, device: torch.device) -> dict[str, Any]:
    """``Trainer(...)`` arguments for one burst on ``device`` (module docstring)."""
    cuda = device.type == "cuda"
    index = device.index if device.index is not None else 0
    return {
        "precision": LIGHTNING_PRECISION.get(knobs.precision, "32-true"),
        "accumulate_grad_batches": knobs.grad_accum,
        "benchmark": knobs.cudnn_benchmark if cuda else None,  # None: the flag left as it is
        "accelerator": "cuda" if cuda else "cpu",
        "devices": [index] if cuda else 1,
        "max_epochs": -1,  # no limit: the FitClock stops it
        "max_steps": -1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "limit_val_batches": 0,
    }


def trainer_no_effect(knobs: Knobs, device: torch.device) -> dict[str, str]:
    """Knobs the Trainer path cannot honour, each with the reason (module docstring)."""
    reasons = {
        "optimizer_impl": "Lightning's Trainer steps the optimizer configure_optimizers() "
        "builds, as it is",
    }
    if knobs.compile != "off":
        reasons["compile"] = (
            "a Lightning burst runs Trainer.fit on the module eagerly; production's "
            "torch.compile(module) before fit is not measured"
        )
    if knobs.precision == "fp16" and device.type != "cuda":
        reasons["precision"] = (
            "Lightning has no fp16 autocast on a CPU: Trainer(precision='16-mixed') trained "
            "bf16-mixed there"
        )
    return reasons


@dataclass
class FitWindow:
    """What ``fit_with_trainer`` measured: the pieces of a burst's ``_Measured``."""

    warmup_s: float = 0.0
    measured_s: float = 0.0
    wall_window: tuple[float, float] = (0.0, 0.0)
    steps: int = 0
    samples: int = 0
    timing: StepSamples = field(default_factory=StepSamples)
    final_loss: float | None = None
    epochs: int = 0
    cancelled: bool = False
    ran_on: str | None = None
    optimizer: torch.optim.Optimizer | None = None


def fit_with_trainer(
    model: nn.Module,
    stream: BatchStream,
    knobs: Knobs,
    device: torch.device,
    loop: LoopControl,
    rule: SampleRule,
    report: Report,
) -> FitWindow:
    """``Trainer.fit`` of the LightningModule inside ``model`` (the burst's TrainingStep) on
    the stream's data, warmed up and measured by a :class:`FitClock`."""
    pl = lightning_package()
    module = lightning_module(model)
    data = _train_data(stream)
    clock = FitClock(device, loop, rule, report, before_window=lambda: drop_before_window(stream))
    with _quiet(pl):
        trainer = pl.Trainer(**trainer_kwargs(knobs, device), callbacks=[clock.callback(pl)])
        _fit(trainer, module, data)
    window = clock.result(trainer)
    if isinstance(data, _Endless):  # one endless epoch for the Trainer: the stream's count
        window.epochs = stream.epochs
    window.optimizer = trainer.optimizers[0] if trainer.optimizers else None
    return window


def _fit(trainer: Any, module: Any, data: Any) -> None:
    """``trainer.fit``; a KeyboardInterrupt stays one. Lightning answers a Ctrl-C in ``fit``
    (on the main thread) with ``sys.exit(1)`` after ignoring SIGINT; the burst's own handler
    (``engine.signals``) is put back by its caller, and the interrupt goes on as an interrupt."""
    try:
        trainer.fit(module, train_dataloaders=data)
    except SystemExit as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise


def _train_data(stream: BatchStream) -> Any:
    """What ``fit`` iterates: the torch stream's own DataLoader (its workers stopped: the
    Trainer starts them, as production's first epoch does), else the stream's batches."""
    if isinstance(stream, TorchStream):
        return stream.hand_over()
    return _Endless(stream)


class _Endless:
    """A DALI or synthetic stream as the endless iterable ``fit`` takes."""

    def __init__(self, stream: BatchStream) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return next(self._stream)


_SHOWN: set[tuple[type[Warning], str]] = set()
"""The fit's warnings already shown in this process (category, text)."""


@contextlib.contextmanager
def _quiet(pl: ModuleType) -> Iterator[None]:
    """Lightning's INFO lines, its PossibleUserWarnings and its fp16-on-CPU warning (said in
    ``no_effect``) off during the fit, restored after. Any other warning of the fit (a
    deprecation Lightning warns of at every ``fit``) is shown once per process, after the
    fit: a sweep or a tune fits once per burst, and Python's own once-per-place rule is
    reset every time warning filters change, as each burst's do."""
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    levels = [log.level for log in loggers]
    hint = importlib.import_module(f"{pl.__name__}.utilities.warnings").PossibleUserWarning
    said: list[warnings.WarningMessage] = []
    try:
        for log in loggers:
            log.setLevel(logging.WARNING)
        with warnings.catch_warnings(record=True) as said:
            warnings.filterwarnings("ignore", category=hint)
            warnings.filterwarnings("ignore", message=_FP16_ON_CPU)  # no_effect says it
            yield
    finally:
        for log, level in zip(loggers, levels, strict=True):
            log.setLevel(level)
        _show_once(said)


def _show_once(said: list[warnings.WarningMessage]) -> None:
    for w in said:
        key = (w.category, str(w.message))
        if key not in _SHOWN:
            _SHOWN.add(key)
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


class FitClock:
    """Times ``Trainer.fit`` as the burst times its own loop (module docstring). Its
    ``callback(pl)`` is the Lightning Callback that forwards the Trainer's hooks here."""

    def __init__(
        self,
        device: torch.device,
        loop: LoopControl,
        rule: SampleRule,
        report: Report,
        before_window: Callable[[], None] = lambda: None,
    ) -> None:
        self._device, self._loop, self._rule, self._report = device, loop, rule, report
        self._before_window = before_window
        self._timer = StepTimer(device, loop.clock)
        self._fit_start = loop.clock()
        self._wall_fit_start = time.perf_counter()
        self._stepped = 0  # the Trainer's global_step at the last step boundary
        self._warm = 0
        self._start: float | None = None  # the window's clock start, once open
        self._wall_start = self._warmup_s = 0.0
        self._batch_end: float | None = None  # perf_counter at the last batch's end
        self._loss: Any = None
        self._window: FitWindow | None = None  # once closed
        self._ran_on: str | None = None
        self.steps = self.samples = 0

    # -- the Trainer's hooks --------------------------------------------------------------
    def train_start(self, trainer: Any, module: nn.Module) -> None:
        self._ran_on = _where(module)
        if self._loop.stop.is_set():
            trainer.should_stop = True
        elif self._loop.window.warmup_steps == 0:
            self._open(trainer)

    def batch_start(self, batch: Any) -> None:
        if self._start is None or self._window is not None:
            return
        if self._batch_end is not None:
            self._timer.add_wait(time.perf_counter() - self._batch_end)
        self.samples += self._rule.count(batch)

    def batch_end(self, trainer: Any, outputs: Any) -> None:
        self._loss = outputs
        if trainer.global_step != self._stepped:  # an optimizer step ended with this batch
            self._stepped = trainer.global_step
            self._step_boundary(trainer)
        self._batch_end = time.perf_counter()

    # -- the window -----------------------------------------------------------------------
    def _step_boundary(self, trainer: Any) -> None:
        window = self._loop.window
        if self._start is None:
            self._warm += 1
            self._report("warmup", self._loop.clock() - self._fit_start, self._warm)
            if self._warm >= window.warmup_steps and not self._loop.stop.is_set():
                self._open(trainer)
        elif self._window is None:
            self._timer.step_end()
            self.steps += 1
            elapsed = self._loop.clock() - self._start
            self._report("measuring", elapsed, self.steps)
            if elapsed >= window.seconds and self.steps >= window.min_steps:
                self._close(trainer)
            elif not self._loop.stop.is_set():
                self._timer.step_start()
        if self._loop.stop.is_set():
            if self._start is not None and self._window is None:
                self._close(trainer)
            trainer.should_stop = True

    def _open(self, trainer: Any) -> None:
        self._before_window()  # cache=cold: drop the dataset's pages again
        synchronize(self._device)
        self._ran_on = _where(trainer.lightning_module) or self._ran_on
        self._start, self._wall_start = self._loop.clock(), time.perf_counter()
        self._warmup_s = self._start - self._fit_start
        self._timer.step_start()
        self._batch_end = time.perf_counter()

    def _close(self, trainer: Any) -> None:
        timing = self._timer.finish()  # the closing mark, and a synchronize
        assert self._start is not None
        measured_s = self._loop.clock() - self._start
        self._window = FitWindow(
            warmup_s=self._warmup_s,
            measured_s=measured_s,
            wall_window=(self._wall_start, time.perf_counter()),
            steps=self.steps,
            samples=self.samples,
            timing=timing,
            final_loss=_loss_of(self._loss, trainer.accumulate_grad_batches),
            epochs=trainer.current_epoch,  # the epochs the loader restarted, as a stream counts
        )
        self._report("done", measured_s, self.steps)
        trainer.should_stop = True

    def result(self, trainer: Any) -> FitWindow:
        """The window, once ``fit`` returned. A fit that ended before the window closed (not
        cancelled) is measured up to its end; one that never opened it is an error."""
        if self._window is None and self._start is not None:
            self._close(trainer)
        cancelled = self._loop.stop.is_set()
        if self._window is None:
            if not cancelled:
                raise RuntimeError(
                    f"Trainer.fit ended after {self._stepped} optimizer steps, before the "
                    f"measured window opened (warm-up: {self._loop.window.warmup_steps} steps)"
                )
            warmup_s = self._loop.clock() - self._fit_start
            wall = (self._wall_fit_start, time.perf_counter())
            self._window = FitWindow(warmup_s=warmup_s, wall_window=wall)
        self._window.cancelled = cancelled
        self._window.ran_on = self._ran_on
        return self._window

    def callback(self, pl: ModuleType) -> Any:
        """The Lightning Callback that forwards the Trainer's hooks to this clock."""
        clock = self

        class BurstClock(pl.Callback):  # type: ignore[name-defined,misc]
            def on_train_start(self, trainer: Any, pl_module: Any) -> None:
                clock.train_start(trainer, pl_module)

            def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                                     batch_idx: int) -> None:  # fmt: skip
                clock.batch_start(batch)

            def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any,
                                   batch: Any, batch_idx: int) -> None:  # fmt: skip
                clock.batch_end(trainer, outputs)

        return BurstClock()


def _loss_of(outputs: Any, grad_accum: int) -> float | None:
    """The last micro-batch's loss as ``training_step`` returned it (the Trainer hands it on
    divided by the accumulation), read once, after the window's closing synchronize."""
    loss = outputs.get("loss") if isinstance(outputs, dict) else None
    return float(loss) * grad_accum if isinstance(loss, torch.Tensor) else None


def _where(module: nn.Module) -> str | None:
    """Where the module's parameters are, named as results name devices ("cuda:1")."""
    param = next(module.parameters(), None)
    if param is None:
        return None
    where = param.device
    return f"cuda:{where.index}" if where.type == "cuda" else str(where)


__all__ = ["FitClock", "FitWindow", "fit_with_trainer", "trainer_kwargs", "trainer_no_effect"]
