"""Workload.from_lightning with the real lightning package: a LightningModule and DataModule,
unchanged, trained by real bursts on the CPU (Lightning's own Trainer.fit, timed as a burst)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from workbench import Knobs, Workload, run_burst
from workbench.core.errors import InputError
from workbench.engine.training import build_train_state, micro_step, optimizer_step
from workbench.engine.workloads.lightning import TrainingStep

FAST = {"seconds": 0.3, "warmup_steps": 2, "record": False, "device": "cpu"}
EXACT = {**FAST, "seconds": 0.001, "min_steps": 40}
"""A window that closes at its 40th step: 2 + 40 optimizer steps in all (each step of these
small models takes far more than 0.001 s / 40)."""
BUILT: list[LitNet] = []
"""Every LitNet built, so a test can read the module a burst trained."""


class Points(Dataset):
    """Dict samples ({"x", "y"}), so the batch is not (input, target): the step takes it whole."""

    def __init__(self, n: int = 256) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 16, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "y": (self.x[i, 0] > 0).long()}


def collate_points(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {"x": torch.stack([r["x"] for r in rows]), "y": torch.stack([r["y"] for r in rows])}


class LitNet(L.LightningModule):
    """A small classifier whose configure_optimizers returns what ``form`` says."""

    def __init__(self, form: str = "dict", optimizers: int = 1, returns: str = "dict") -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
        self.form, self.optimizers_n, self.returns = form, optimizers, returns
        self.optimizer_steps = 0
        self.sched: torch.optim.lr_scheduler.LRScheduler | None = None
        BUILT.append(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int):
        loss = F.cross_entropy(self(batch["x"]), batch["y"])
        self.log("train_loss", loss)  # no Trainer: must neither crash nor warn
        return {"loss": loss} if self.returns == "dict" else loss

    def configure_optimizers(self):
        opts = [torch.optim.SGD(self.parameters(), lr=0.1) for _ in range(self.optimizers_n)]
        opt = opts[0]
        opt.register_step_post_hook(lambda *_: setattr(self, "optimizer_steps",
                                                       self.optimizer_steps + 1))  # fmt: skip
        self.sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=1000)
        if self.form == "dict":
            return {"optimizer": opt, "lr_scheduler": {"scheduler": self.sched, "interval": "step"}}
        if self.form == "dict-bare":  # a bare scheduler: Lightning's interval is then "epoch"
            return {"optimizer": opt, "lr_scheduler": self.sched}
        if self.form == "lists":  # ([opts], [scheds]): "epoch" too
            return opts, [self.sched]
        self.sched = None
        if self.form == "optimizer":
            return opt if self.optimizers_n == 1 else opts
        if self.form == "list":
            return opts
        raise AssertionError(self.form)


class PointsData(L.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.prepared = False

    def prepare_data(self) -> None:
        self.prepared = True

    def setup(self, stage: str) -> None:
        assert stage == "fit"
        self.train_set = Points()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=24, shuffle=True, collate_fn=collate_points)


def _last() -> LitNet:
    """The module the last burst trained (the FLOP count builds one on the meta device)."""
    return next(m for m in reversed(BUILT) if next(m.parameters()).device.type != "meta")


def test_a_burst_trains_the_module_and_steps_its_one_cycle_schedule():
    wl = Workload.from_lightning(LitNet, PointsData)
    assert wl.collate_fn is collate_points and wl.extras["lightning"]["batch_size"] == 24
    with warnings.catch_warnings(record=True) as seen:  # the filters as they are
        r = run_burst(wl, Knobs(batch_size=16), **FAST)
    assert r.status == "ok", r.error
    # the first-batch check calls training_step without a Trainer: self.log is a quiet no-op
    assert not [w for w in seen if "self.log" in str(w.message)]
    module = _last()
    assert module.optimizer_steps >= r.steps + 2  # warm-up steps, then the window's
    assert module.sched.last_epoch == module.optimizer_steps  # one schedule step per step
    assert module.sched.get_last_lr()[0] > 1.0 / 25  # OneCycle climbed from max_lr / 25
    # training_step's FLOPs: forward 2*(16*32 + 32*2), backward the same less the first
    # layer's input gradient (the input needs none): 1152 + 1280
    assert r.samples_per_s > 0 and r.flops_per_sample == 2432
    assert "optimizer_impl" in r.no_effect  # the Trainer ran configure_optimizers' own


def test_gradient_accumulation_steps_the_schedule_per_optimizer_step():
    wl = Workload.from_lightning(LitNet, PointsData)
    r = run_burst(wl, Knobs(batch_size=8, grad_accum=3), **FAST)
    assert r.status == "ok", r.error
    module = _last()
    assert module.sched.last_epoch == module.optimizer_steps >= 2


@pytest.mark.parametrize("form", ["optimizer", "list", "lists", "dict-bare"])
def test_each_configure_optimizers_form_trains(form):
    """Every form; a training_step that returns the loss tensor itself too. The epoch
    schedules are built on the optimizer the Trainer steps, and stepped at each epoch's end
    (EXACT: 42 steps of 16 batches an epoch are two whole epochs)."""
    wl = Workload.from_lightning(lambda: LitNet(form=form, returns="tensor"), PointsData)
    r = run_burst(wl, Knobs(batch_size=16), **EXACT)
    assert r.status == "ok", r.error
    module = _last()
    assert module.optimizer_steps == r.steps + 2 == 42
    if module.sched is not None:
        assert module.sched.optimizer.param_groups[0]["params"][0] is module.net[0].weight
        assert module.sched.last_epoch == 2 == r.loader_epochs


def test_several_optimizers_are_refused_naming_manual_optimization():
    wl = Workload.from_lightning(lambda: LitNet(form="list", optimizers=2), PointsData)
    r = run_burst(wl, Knobs(batch_size=16), **FAST)
    assert r.status == "error"
    assert "configure_optimizers()='2 optimizers' is not allowed" in r.error
    assert "manual optimization" in r.error


def test_instances_instead_of_factories_are_refused_by_name():
    with pytest.raises(InputError, match=r"module_factory= got a LitNet instance.*LitNet\(") as e:
        Workload.from_lightning(LitNet(), PointsData)
    assert e.value.name == "module_factory"
    with pytest.raises(InputError, match="datamodule_factory= got a PointsData instance"):
        Workload.from_lightning(LitNet, PointsData())


def test_the_datamodule_is_prepared_and_set_up_once_for_fit():
    made: list[PointsData] = []

    def data() -> PointsData:
        made.append(PointsData())
        return made[-1]

    wl = Workload.from_lightning(LitNet, data)
    assert len(made) == 1 and made[0].prepared
    assert wl.dataset() is made[0].train_set and len(made) == 1


def test_a_training_step_that_returns_none_fails_in_set_up_with_the_reason():
    class Skips(LitNet):
        def training_step(self, batch, batch_idx):
            return None

    r = run_burst(Workload.from_lightning(Skips, PointsData), Knobs(batch_size=16), **FAST)
    assert r.status == "error" and "training_step returned None" in r.error


def test_under_ddp_the_wrapped_model_runs_training_step(tmp_path):
    """One gloo rank: DDP wraps the step module, and its forward is training_step (a step
    called on the bare module would skip DDP's reducer: its backward would then fail)."""
    from torch import distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        wl = Workload.from_lightning(LitNet, PointsData)
        state = build_train_state(wl, Knobs(), torch.device("cpu"), wrap=DistributedDataParallel)
        assert isinstance(state.model, DistributedDataParallel)
        assert isinstance(state.model.module, TrainingStep) and state.wrapped
        batch = collate_points([wl.dataset()[i] for i in range(8)])
        for _ in range(2):
            micro_step(state, batch)
            optimizer_step(state)
        assert state.model.module.batch_idx == 2 and _last().sched.last_epoch == 2
    finally:
        dist.destroy_process_group()


def test_the_step_hook_replaces_forward_and_loss_and_says_so():
    with pytest.raises(TypeError, match="step= computes the whole loss"):
        Workload(name="x", model=nn.Identity, dataset=Points, step=lambda m, b: m(b),
                 forward=lambda m, b: m(b))  # fmt: skip


@pytest.mark.slow
def test_a_compiled_training_step_compiles_once_not_at_every_batch_idx():
    """The training_step path (a distributed Lightning burst's): batch_idx reaches
    training_step as an argument; read from a module attribute inside the compiled forward,
    each new value recompiled until torch's limit (8), then ran eagerly."""
    import torch._dynamo

    from workbench.engine import compiler

    wl = Workload.from_lightning(LitNet, PointsData)
    batch = collate_points([wl.dataset()[i] for i in range(16)])
    torch._dynamo.reset()
    try:
        state = build_train_state(wl, Knobs(compile="default"), torch.device("cpu"))
        start = warm = compiler.read_counts()
        for i in range(12):  # past the limit of 8
            micro_step(state, batch)
            optimizer_step(state)
            if i == 3:
                warm = compiler.read_counts()
        done = compiler.report(start, warm, compiler.read_counts())
    finally:
        torch._dynamo.reset()
    assert done.graphs and done.fallback is None and done.window_graphs == 0
    assert _last().sched.last_epoch == _last().optimizer_steps == 12


def test_without_lightning_installed_the_error_says_what_to_install(monkeypatch):
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: ImportError
    with pytest.raises(InputError, match="needs the lightning package: pip install lightning"):
        Workload.from_lightning(LitNet, PointsData)


# -- a burst is Lightning's own Trainer.fit -----------------------------------------------
class Hooked(LitNet):
    """LitNet counting the Trainer's batch hooks; it sets ``cancel`` in batch ``cancel_at``'s
    own hook, after the burst's callback has seen that batch end."""

    def __init__(self, cancel: threading.Event | None = None, cancel_at: int = 0) -> None:
        super().__init__()
        self.batch_ends = 0
        self.cancel, self.cancel_at = cancel, cancel_at
        self.loader: DataLoader | None = None

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        self.batch_ends += 1
        self.loader = self.trainer.train_dataloader
        if self.cancel is not None and self.batch_ends == self.cancel_at:
            self.cancel.set()


def test_a_burst_is_lightnings_own_trainer_fit():
    """The module trains inside Trainer.fit: its hooks run, self.log reaches the Trainer's
    metrics, the Trainer steps the optimizer and the schedule once a step; the window is the
    40 steps after the 2 of the warm-up."""
    r = run_burst(Workload.from_lightning(Hooked, PointsData), Knobs(batch_size=16), **EXACT)
    assert r.status == "ok", r.error
    module = _last()
    assert isinstance(module.trainer, L.Trainer)
    assert module.trainer.global_step == module.optimizer_steps == module.batch_ends == 42
    assert module.sched.last_epoch == 42
    assert r.steps == 40 == len(r.step_ms) and r.samples == 40 * 16
    assert r.samples_per_s == pytest.approx(r.samples / r.measured_s)
    logged = module.trainer.callback_metrics["train_loss"]  # self.log with a real Trainer
    assert float(logged) == pytest.approx(r.final_loss)  # the last step's loss, both ways


def test_under_gradient_accumulation_a_step_spans_its_batches():
    r = run_burst(Workload.from_lightning(Hooked, PointsData),
                  Knobs(batch_size=8, grad_accum=3), **{**EXACT, "min_steps": 5})  # fmt: skip
    assert r.status == "ok", r.error
    module = _last()
    # 2 + 5 optimizer steps of 3 batches: 21 batches, inside the first epoch's 32
    assert module.batch_ends == 21
    assert module.optimizer_steps == module.sched.last_epoch == 7
    assert r.steps == 5 and r.samples == 5 * 3 * 8


def test_without_warm_up_the_window_opens_when_the_trainer_starts_training():
    wl = Workload.from_lightning(Hooked, PointsData)
    r = run_burst(wl, Knobs(batch_size=16), **{**EXACT, "warmup_steps": 0, "min_steps": 5})
    assert r.status == "ok", r.error
    assert _last().batch_ends == 5 == r.steps and r.samples == 5 * 16


def test_cancel_stops_the_trainer_at_the_next_step_boundary():
    cancel = threading.Event()
    wl = Workload.from_lightning(lambda: Hooked(cancel, cancel_at=6), PointsData)
    r = run_burst(wl, Knobs(batch_size=16), **{**FAST, "seconds": 60.0}, cancel=cancel)
    assert r.status == "cancelled"
    # set in batch 6's own hook, seen at batch 7's end: 2 warm-up steps, 5 in the window
    assert _last().batch_ends == 7 and r.steps == 5


def test_the_trainer_iterates_the_bursts_own_loader_and_its_workers_end_with_it():
    import psutil

    knobs = Knobs(batch_size=16, num_workers=1, prefetch_factor=3)
    r = run_burst(Workload.from_lightning(Hooked, PointsData), knobs, **FAST)
    assert r.status == "ok", r.error
    loader = _last().loader
    assert (loader.batch_size, loader.num_workers, loader.prefetch_factor) == (16, 1, 3)
    assert loader.collate_fn is collate_points  # the DataModule's, with the knobs' settings
    alive = [p for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []


def test_the_compute_only_ceiling_is_the_trainer_too_over_one_resident_batch():
    """loader="synthetic" (a diagnosis's compute-only ceiling) reaches the Trainer as an
    endless iterable of the one batch: the ceiling and the full pipeline are both Trainer.fit."""
    knobs = Knobs(batch_size=16, loader="synthetic")
    r = run_burst(Workload.from_lightning(Hooked, PointsData), knobs, **EXACT)
    assert r.status == "ok", r.error
    assert _last().batch_ends == 42 and r.samples == 40 * 16 and r.loader_epochs == 0


def test_knobs_the_trainer_cannot_honour_are_named_in_no_effect():
    knobs = Knobs(batch_size=16, compile="default", precision="fp16", optimizer_impl="fused")
    r = run_burst(Workload.from_lightning(LitNet, PointsData), knobs, **FAST)
    assert r.status == "ok", r.error
    assert "eagerly" in r.no_effect["compile"] and r.compile_graphs is None
    assert "bf16-mixed" in r.no_effect["precision"]  # Lightning's own choice on a CPU
    assert "configure_optimizers" in r.no_effect["optimizer_impl"]


@pytest.mark.parametrize(
    "knobs",
    [Knobs(), Knobs(precision="bf16", grad_accum=4), Knobs(precision="fp16", cudnn_benchmark=True),
     Knobs(precision="tf32")],
)  # fmt: skip
def test_the_trainer_is_built_as_the_saved_config_tells_production(knobs):
    from workbench.config.tuned_config import TunedConfig
    from workbench.engine.lightning_fit import trainer_kwargs

    production = TunedConfig(knobs).lightning_trainer_kwargs()
    gpu = trainer_kwargs(knobs, torch.device("cuda", 1))
    for name in ("precision", "accumulate_grad_batches", "benchmark"):
        assert gpu[name] == production[name], name
    assert gpu["accelerator"] == "cuda" and gpu["devices"] == [1]
    cpu = trainer_kwargs(knobs, torch.device("cpu"))
    assert cpu["accelerator"] == "cpu" and cpu["benchmark"] is None  # the flag left alone


def test_lightnings_messages_stay_off_stdout_and_its_loggers_are_restored(capfd, caplog):
    import logging

    before = logging.getLogger("lightning.pytorch").level
    with caplog.at_level(logging.INFO):
        r = run_burst(Workload.from_lightning(LitNet, PointsData), Knobs(batch_size=16), **FAST)
    assert r.status == "ok", r.error
    out, err = capfd.readouterr()
    assert out == "" and "GPU available" not in err
    assert not [rec.getMessage() for rec in caplog.records if rec.name.startswith("lightning")]
    assert logging.getLogger("lightning.pytorch").level == before


def test_the_cli_prints_one_json_document_for_a_lightning_burst(tmp_path):
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "WORKBENCH_HOME": str(tmp_path), "PYTHONPATH": str(root)}
    p = subprocess.run(
        [sys.executable, "-m", "workbench", "burst", "--workload",
         "examples.lightning_example:workload", "--set", "batch_size=16", "--seconds", "0.3",
         "--no-record", "--json"],
        cwd=root, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # the whole of stdout is the one document
    assert doc["status"] == "ok" and doc["samples_per_s"] > 0
    assert "GPU available" not in p.stderr


@pytest.mark.slow
def test_ctrl_c_stops_a_lightning_burst_at_a_step_without_a_traceback(tmp_path):
    """A terminal's Ctrl-C (SIGINT to the whole process group, loader workers included)
    while the Trainer fits: the burst stops at a step boundary, exits 130, leaves no worker."""
    import signal
    import time

    import psutil

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "WORKBENCH_HOME": str(tmp_path), "PYTHONPATH": str(root)}
    cmd = [sys.executable, "-m", "workbench", "burst", "--workload",
           "examples.lightning_example:workload", "--set", "batch_size=16", "--set",
           "num_workers=1", "--seconds", "60", "--no-record", "--json"]  # fmt: skip
    p = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while not psutil.Process(p.pid).children() and time.monotonic() < deadline:
        assert p.poll() is None, p.stderr.read()
        time.sleep(0.1)
    time.sleep(3.0)  # set-up done: the Trainer is fitting (its own worker by now)
    children = psutil.Process(p.pid).children(recursive=True)
    os.killpg(p.pid, signal.SIGINT)
    _out, err = p.communicate(timeout=60)
    time.sleep(0.5)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE] == []


def test_an_interrupt_inside_fit_on_the_main_thread_stays_a_keyboard_interrupt(monkeypatch):
    """Where a CPU burst runs on the caller's thread, a Ctrl-C that must stop at once lands
    inside Trainer.fit, which answers it with SIG_IGN and sys.exit(1): the burst raises a
    KeyboardInterrupt instead, and SIGINT's handler is the caller's again."""
    import signal

    from workbench.engine import openmp

    class Interrupted(LitNet):
        def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
            if batch_idx == 3:
                raise KeyboardInterrupt

    monkeypatch.setattr(openmp, "release_pool", lambda: False)  # the burst on this thread
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt) as caught:
        run_burst(Workload.from_lightning(Interrupted, PointsData), Knobs(batch_size=16), **FAST)
    assert type(caught.value) is KeyboardInterrupt  # not SystemExit
    assert signal.getsignal(signal.SIGINT) is handler


def test_a_saved_config_names_no_loss_or_optimizer_the_module_did_not_use(tmp_path, capsys):
    """Its training_step and configure_optimizers trained: the file and `workbench show` give
    the Trainer line with the precision, and no warning about an optimizer it never saved."""
    from workbench.cli import main
    from workbench.config.saved import ConfigError, load_config, save_config

    path = tmp_path / "lit.yaml"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wl = Workload.from_lightning(LitNet, PointsData)
        save_config(Knobs(precision="bf16", grad_accum=2), path, workload=wl)
    said = " ".join(str(w.message) for w in caught)
    assert "optimizer" not in said and "wrap it in a function" not in said
    assert "no other process can rebuild" in said  # a Workload object: the CLI cannot rerun it
    text = path.read_text()
    assert "default_loss" not in text and "\ntraining:" not in text and "cfg.loss()" not in text
    assert "lightning.Trainer(**cfg.lightning_trainer_kwargs())" in text.split("\n\n")[0]
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "trainer = lightning.Trainer(**cfg.lightning_trainer_kwargs())" in out
    assert "precision='bf16-mixed'" in out and "accumulate_grad_batches=2" in out
    assert "cfg.loss()" not in out and "no other process can rebuild it" in out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_config(path)
    with pytest.raises(ConfigError, match="its module's own training_step and configure_opt"):
        cfg.loss()


def test_a_warning_the_fit_repeats_every_burst_is_shown_once():
    """Lightning warns of a deprecation at every Trainer.fit, and a sweep fits once a burst."""
    text = f"a deprecation said at every fit ({id(object())})"  # no other test's

    class Warns(LitNet):
        def on_train_start(self) -> None:
            warnings.warn(text, UserWarning, stacklevel=1)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            r = run_burst(Workload.from_lightning(Warns, PointsData), Knobs(batch_size=16), **FAST)
            assert r.ok, r.error
    assert [str(w.message) for w in caught].count(text) == 1
