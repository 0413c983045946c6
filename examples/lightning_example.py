"""Tune a Lightning model as it is: a LightningModule and a LightningDataModule, unchanged.

``wb.Workload.from_lightning(LitClassifier, ShapesData)`` trains the module's own
``training_step`` with its own ``configure_optimizers`` (AdamW and a per-step OneCycle
schedule here) on the DataModule's own dataset, and a burst of it is Lightning's own
``Trainer.fit``, timed; the knobs decide the batch size, the loader and the precision. The
tuned config then goes back into Lightning: ``Trainer(**cfg.lightning_trainer_kwargs())``
(precision, gradient accumulation, devices) and the DataModule's loader built with
``cfg.dataloader_kwargs()``. Nothing is downloaded: the data are random 32x32 images made in
memory.

From the repository root::

    python examples/lightning_example.py --seconds 1 --steps 20 --out tuned.yaml
    workbench burst --workload examples.lightning_example:workload --set batch_size=64
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import workbench as wb

STEPS_PER_CYCLE = 10_000  # the schedule's length, given itself: set-up calls configure_optimizers
# before any Trainer exists (self.trainer.estimated_stepping_batches would fail there)


class LitClassifier(L.LightningModule):
    """A small convnet, written as any Lightning user writes one."""

    def __init__(self, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(32, 10),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=self.hparams.lr, total_steps=STEPS_PER_CYCLE
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class ShapesData(L.LightningDataModule):
    """Random images and labels; ``loader_kwargs`` are the DataLoader's settings (production
    passes the tuned ones: ``cfg.dataloader_kwargs()``)."""

    def __init__(self, n: int = 2048, loader_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.n, self.loader_kwargs = n, loader_kwargs or {"batch_size": 32}

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        images = torch.randn(self.n, 3, 32, 32, generator=g)
        self.train_set = TensorDataset(images, torch.randint(0, 10, (self.n,), generator=g))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, shuffle=True, drop_last=True, **self.loader_kwargs)


def workload() -> wb.Workload:
    """The workload by name (``examples.lightning_example:workload``), for the CLI and ranks."""
    return wb.Workload.from_lightning(LitClassifier, ShapesData)


def fit_samples_per_s(cfg: Any, steps: int) -> float:
    """Production: the tuned knobs into Lightning, and Trainer.fit's samples/s over its steps."""
    cfg.apply_backend_flags()  # fp32-strict/tf32 as the bursts ran; default leaves torch as is
    data = ShapesData(loader_kwargs=cfg.dataloader_kwargs("cpu"))
    trainer = L.Trainer(
        **cfg.lightning_trainer_kwargs(), max_steps=steps, accelerator="cpu", logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    start = time.perf_counter()
    trainer.fit(LitClassifier(), datamodule=data)
    batch = cfg.knobs.batch_size * cfg.knobs.grad_accum
    return steps * batch / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="each burst's window")
    parser.add_argument("--steps", type=int, default=20, help="Trainer.fit's steps")
    parser.add_argument("--out", default="tuned.yaml")
    args = parser.parse_args()

    wl = workload()
    runs = [wb.run_burst(wl, wb.Knobs(batch_size=b), seconds=args.seconds) for b in (32, 64)]
    for r in runs:
        if r.status != "ok":
            raise SystemExit(f"burst failed: {r.error}")
    best = max(runs, key=lambda r: r.samples_per_s)
    path = wb.save_config(best, args.out)
    cfg = wb.load_config(path)
    print(f"lightning: trainer kwargs {cfg.lightning_trainer_kwargs()}")
    fit = fit_samples_per_s(cfg, args.steps)
    print(f"lightning: burst {best.samples_per_s:.0f} samples/s at batch "
          f"{best.knobs.batch_size}; Trainer.fit {fit:.0f} samples/s over {args.steps} steps "
          "(with its start-up)")  # fmt: skip


if __name__ == "__main__":
    main()
