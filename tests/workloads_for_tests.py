"""Small, fast workloads for tests: real models and real optimizer steps, tiny sizes."""

from __future__ import annotations

import os
import signal
import time
import typing

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from workbench import Workload


def tensor_workload(n: int = 256, features: int = 16, name: str = "tiny") -> Workload:
    """A linear classifier over an in-memory TensorDataset: milliseconds per step."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    y = (x[:, 0] > 0).long()
    return Workload(
        name=name,
        model=lambda: nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Linear(32, 2)),
        dataset=lambda: TensorDataset(x, y),
    )


class _Hungry(nn.Module):
    """Asks the allocator for 16 TiB when the batch is larger than ``limit``: a real OOM."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit
        self.fc = nn.Linear(16, 2)

    def forward(self, x):
        if x.shape[0] > self.limit:
            torch.empty(2**44, dtype=torch.uint8, device=x.device)
        return self.fc(x)


def hungry_workload(limit: int = 16) -> Workload:
    base = tensor_workload()
    return Workload(name="hungry", model=lambda: _Hungry(limit), dataset=base.dataset)


class _Crashing(Dataset):
    """A dataset whose worker process dies (SIGKILL) on the 5th sample it loads."""

    def __init__(self):
        self.x = torch.randn(64, 16)
        self.count = 0

    def __len__(self):
        return 64

    def __getitem__(self, i):
        self.count += 1
        if self.count == 5 and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.x[i], int(i % 2)


def crashing_workload() -> Workload:
    return Workload(
        name="crashing",
        model=lambda: nn.Linear(16, 2),
        dataset=_Crashing,
    )


class _Stuck(Dataset):
    """A dataset whose worker processes never return a sample: a hung worker."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if torch.utils.data.get_worker_info() is not None:
            time.sleep(3600)
        return torch.zeros(16), 0


def stuck_workload() -> Workload:
    return Workload(name="stuck", model=lambda: nn.Linear(16, 2), dataset=_Stuck)


class _Layout(nn.Module):
    """Records whether inputs arrive channels_last."""

    seen: typing.ClassVar[list[bool]] = []

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        _Layout.seen.append(x.is_contiguous(memory_format=torch.channels_last))
        return self.conv(x).mean(dim=(2, 3))


def layout_workload() -> Workload:
    x = torch.randn(64, 3, 8, 8)
    y = torch.randint(0, 4, (64,))
    return Workload(name="layout", model=_Layout, dataset=lambda: TensorDataset(x, y))


class _Sleepy(Dataset):
    """An in-memory dataset that sleeps per item: a loader slower than any model."""

    def __init__(self, delay_s: float):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(256, 16, generator=g)
        self.delay_s = delay_s

    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(self.delay_s)
        return self.x[i], int(self.x[i, 0] > 0)


def sleepy_workload(delay_s: float = 0.004) -> Workload:
    """Data-bound by construction: ~delay_s per sample to load, microseconds to train."""
    return Workload(
        name="sleepy",
        model=lambda: nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2)),
        dataset=lambda: _Sleepy(delay_s),
    )


def heavy_workload(width: int = 1024, depth: int = 4) -> Workload:
    """Compute-bound by construction: an in-memory TensorDataset feeding wide linear layers."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, width, generator=g)
    y = (x[:, 0] > 0).long()

    def model() -> nn.Module:
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(width, 2))

    return Workload(name="heavy", model=model, dataset=lambda: TensorDataset(x, y))


class _Fat(nn.Module):
    """Holds ``mib_per_sample`` MiB of touched memory per sample of its batch while it lives,
    so a burst's peak RSS grows with the batch size as activations would."""

    def __init__(self, mib_per_sample: int):
        super().__init__()
        self.mib = mib_per_sample
        self.fc = nn.Linear(16, 2)
        self.hold: torch.Tensor | None = None

    def forward(self, x):
        n = x.shape[0] * self.mib * 2**20 // 4
        if self.hold is None or self.hold.numel() != n:
            self.hold = torch.ones(n)  # ones, not empty: pages are touched, so RSS counts them
        return self.fc(x)


def fat_workload(mib_per_sample: int = 8) -> Workload:
    base = tensor_workload()
    return Workload(name="fat", model=lambda: _Fat(mib_per_sample), dataset=base.dataset)


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def rank1_crashes() -> Workload:
    """Rank 1 of a torchrun job fails while building its model (for failure handling)."""
    base = tensor_workload()

    def model():
        if _rank() == 1:
            raise RuntimeError("rank 1 was told to fail")
        return base.model()

    return Workload(name="rank1-crashes", model=model, dataset=base.dataset)


def rank1_hangs() -> Workload:
    """Rank 1 of a torchrun job never finishes building its model (for timeouts)."""
    base = tensor_workload()

    def model():
        while _rank() == 1:
            time.sleep(1.0)
        return base.model()

    return Workload(name="rank1-hangs", model=model, dataset=base.dataset)


class _Hoarder(nn.Module):
    """Holds ``mib`` MiB of touched memory (as activations would) in every forward; the first
    model built by its workload then asks for 16 TiB *while holding it*: an OOM that fails
    with real memory in use, which the burst must give back. Later models train normally at
    the same batch size ("full size")."""

    def __init__(self, mib: int, fail: bool):
        super().__init__()
        self.mib, self.fail = mib, fail
        self.fc = nn.Linear(16, 2)

    def forward(self, x):
        held = torch.ones(self.mib * 2**20 // 4)  # ones, not empty: RSS counts touched pages
        if self.fail:
            torch.empty(2**44, dtype=torch.uint8)
        return self.fc(x) + held[:1] * 0


def hoarding_workload(mib: int = 512) -> Workload:
    built: list[int] = []

    def model() -> nn.Module:
        built.append(1)
        return _Hoarder(mib, fail=len(built) == 1)

    return Workload(name="hoarder", model=model, dataset=tensor_workload().dataset)


class _NotCompilable(nn.Module):
    """A model Dynamo is told to leave alone: torch.compile captures no graph and runs it
    eagerly, the silent fallback a burst must report."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 2)

    @torch._dynamo.disable
    def forward(self, x):
        return self.fc(x)


def eager_only_workload() -> Workload:
    return Workload(name="eager-only", model=_NotCompilable, dataset=tensor_workload().dataset)


# --- batches of other shapes (issue 14): dict inputs, dict items, outputs with .logits ---


class _DictInputs(Dataset):
    """Items ``({"x": features, "scale": 0-d tensor}, label)``: a dict input whose first leaf
    has a batch dimension and whose last is per sample too."""

    def __init__(self, n: int = 64):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 16, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "scale": torch.tensor(1.0)}, int(self.x[i, 0] > 0)


class KeywordNet(nn.Module):
    """Takes keyword arguments, as Hugging Face models do: ``model(x=..., scale=...)``."""

    calls: typing.ClassVar[list[tuple[int, ...]]] = []

    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))

    def forward(self, x, scale):
        KeywordNet.calls.append(tuple(x.shape))
        return self.fc(x) * scale[:, None]


def dict_input_workload(forward: typing.Any = None) -> Workload:
    return Workload(name="dict-input", model=KeywordNet, dataset=_DictInputs, forward=forward)


class Output:
    """A model output object with ``.logits``, as transformers' ModelOutput has."""

    def __init__(self, logits: torch.Tensor):
        self.logits = logits


class _Sequences(Dataset):
    """Dict items of varied length (``tokens``, ``label``): only a padding collate batches them."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return {"tokens": torch.arange(3 + i % 5) % 50, "label": i % 2}


def pad_tokens(items: list[dict]) -> dict:
    """Dynamic padding to the longest item of the batch (a module-level, importable collate)."""
    tokens = nn.utils.rnn.pad_sequence([it["tokens"] for it in items], batch_first=True)
    return {"tokens": tokens, "label": torch.tensor([it["label"] for it in items])}


class BagNet(nn.Module):
    """Token ids in, an ``Output`` with ``.logits`` out; records the padded lengths it saw."""

    lengths: typing.ClassVar[list[int]] = []

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.fc = nn.Linear(16, 2)

    def forward(self, tokens):
        BagNet.lengths.append(tokens.shape[1])
        return Output(self.fc(self.emb(tokens).mean(1)))


def dict_items_workload(**changes: typing.Any) -> Workload:
    """Dict items padded by ``pad_tokens``; the forward hook and the loss get the whole batch."""
    spec: dict[str, typing.Any] = {
        "name": "dict-items",
        "model": BagNet,
        "dataset": _Sequences,
        "collate_fn": pad_tokens,
        "forward": lambda model, batch: model(batch["tokens"]),
        "loss": lambda out, batch: nn.functional.cross_entropy(out.logits, batch["label"]),
    }
    return Workload(**{**spec, **changes})


# --- a recommender (issue 25): variable-length bags flattened for an EmbeddingBag ---


class Ratings(Dataset):
    """Items ``(user, bag of item ids, rating)``; a bag holds 0 to 52 ids (about 26), so a
    collated batch of 256 flattens about 6,700 ids beside 256 offsets."""

    def __init__(self, n: int = 1024, users: int = 64, items: int = 1000):
        g = torch.Generator().manual_seed(0)
        self.users = torch.randint(0, users, (n,), generator=g)
        lengths = torch.randint(0, 53, (n,), generator=g)
        self.bags = [torch.randint(0, items, (int(k),), generator=g) for k in lengths]
        self.ratings = torch.rand(n, generator=g) * 5

    def __len__(self):
        return len(self.users)

    def __getitem__(self, i):
        return int(self.users[i]), self.bags[i], float(self.ratings[i])


def bag_collate(items: list[tuple]) -> tuple[dict, torch.Tensor]:
    """The EmbeddingBag collate: the bags flattened into one id tensor, with where each one
    starts (``offsets``): ``({"items": int64[~6700], "offsets": int64[B], "users": int64[B]},
    float32[B])``."""
    users, bags, ratings = zip(*items, strict=True)
    lengths = torch.tensor([len(b) for b in bags])
    offsets = torch.cumsum(lengths, 0) - lengths
    inputs = {"items": torch.cat(bags), "offsets": offsets, "users": torch.tensor(users)}
    return inputs, torch.tensor(ratings, dtype=torch.float32)


def bag_collate_skip_empty(items: list[tuple]) -> tuple[dict, torch.Tensor]:
    """``bag_collate`` without the users whose bag is empty: batches of varying size."""
    return bag_collate([it for it in items if len(it[1])])


class RecNet(nn.Module):
    """A user's embedding beside the mean of its item bag's (``nn.EmbeddingBag``), then an
    MLP: a rating. Records the batch size of every training-mode forward (``seen``)."""

    seen: typing.ClassVar[list[int]] = []

    def __init__(self, users: int = 64, items: int = 1000, dim: int = 32):
        super().__init__()
        self.user = nn.Embedding(users, dim)
        self.bag = nn.EmbeddingBag(items, dim, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, items, offsets, users):
        if self.training:
            RecNet.seen.append(users.shape[0])
        x = torch.cat([self.user(users), self.bag(items, offsets)], dim=1)
        return self.mlp(x).squeeze(1)


def rec_forward(model: nn.Module, inputs: dict) -> torch.Tensor:
    return model(**inputs)


def rec_loss(out: torch.Tensor, rating: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(out, rating)


def count_users(batch: tuple[dict, torch.Tensor]) -> int:
    """A ``samples_of`` hook: one sample per user."""
    return len(batch[0]["users"])


def recommender_workload(**changes: typing.Any) -> Workload:
    """A recommender over variable-length item bags (module-level parts: importable by name)."""
    spec: dict[str, typing.Any] = {
        "name": "rec",
        "model": RecNet,
        "dataset": Ratings,
        "collate_fn": bag_collate,
        "forward": rec_forward,
        "loss": rec_loss,
    }
    return Workload(**{**spec, **changes})


def counted_recommender() -> Workload:
    """The recommender with a ``samples_of`` hook (for torchrun ranks, which build it by name)."""
    return recommender_workload(name="rec-counted", samples_of=count_users)


def tiny_gpt(data_dir: typing.Any = None) -> Workload:
    """``gpt``'s model and data at a test's size (2 blocks of 64, 2 heads, 32 byte tokens):
    the built-in workload's code, blocks and all, a few ms a step."""
    from workbench.engine.workloads.gpt import GPTShape, gpt

    return gpt(data_dir, GPTShape(block=32, layers=2, heads=2, width=64), name="tiny-gpt")
