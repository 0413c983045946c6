"""A user's own workload as production would rebuild it from a saved config: every function
(the factory, the collate_fn, the loss, the optimizer) at the top level of this module, so a
saved config names each as ``rebuild_for_tests:...``."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.utils.data import Dataset

from workbench import Workload


class Baskets(Dataset):
    """A user's items of varied length and a 0/1 label: only ``pad_items`` batches them."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict:
        return {"items": torch.arange(2 + i % 6) % 40, "label": float(i % 2)}


def pad_items(rows: list[dict]) -> tuple[dict, torch.Tensor]:
    """Pads the baskets to the longest of the batch, with a mask (the measured pipeline)."""
    items = nn.utils.rnn.pad_sequence([r["items"] for r in rows], batch_first=True)
    mask = nn.utils.rnn.pad_sequence([torch.ones(len(r["items"])) for r in rows], batch_first=True)
    return {"items": items, "mask": mask}, torch.tensor([r["label"] for r in rows])


class BasketNet(nn.Module):
    """One logit per basket: the masked mean of its items' embeddings, then a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(40, 8)
        self.fc = nn.Linear(8, 1)

    def forward(self, batch: dict) -> torch.Tensor:
        mask = batch["mask"].unsqueeze(-1)
        pooled = (self.emb(batch["items"]) * mask).sum(1) / mask.sum(1)
        return self.fc(pooled).squeeze(-1)


def bce(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy on ``[B]`` logits and float labels: not workbench's default."""
    return nn.functional.binary_cross_entropy_with_logits(output, target)


def adamw(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """The user's optimizer, with settings of its own that production must get back."""
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.05)


def make_baskets() -> Workload:
    """The factory a burst is given as ``"rebuild_for_tests:make_baskets"``."""
    return Workload(name="baskets", model=BasketNet, dataset=Baskets, collate_fn=pad_items,
                    loss=bce, optimizer=adamw)  # fmt: skip
