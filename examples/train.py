"""Train with a tuned config: a plain PyTorch script, the production side of workbench.

    python examples/train.py --config tuned.yaml                     # a dataset made here
    python examples/train.py --config tuned.yaml --data data/images  # an ImageFolder
    torchrun --standalone --nproc_per_node=2 examples/train.py --config tuned.yaml

What the tuning session chose comes from the config: DataLoader arguments, precision (autocast
and, for fp16, a GradScaler), backend flags (TF32, cudnn.benchmark), the model as the bursts
set it up (``cfg.prepare_model(model)``, which prints what it changed: channels_last,
activation checkpointing of the blocks ``SmallNet.checkpoint_blocks()`` names, how the ranks
hold the model (``cfg.wrap_model``: DDP with its settings from ``cfg.ddp_kwargs()``, or with
``sharding=fsdp`` FSDP2's ``fully_shard`` on each block and then the root) and
torch.compile), gradient accumulation, the optimizer's implementation
(``cfg.optimizer_kwargs()``) and the NCCL/allocator environment
(``alloc_conf`` becomes PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF in ``cfg.env()``), all set
by ``cfg.apply()``, which prints what it changed and,
with ``--data``, the folder read in the tuned ``data_format`` (``cfg.dataset(DIR, transform)``).
Where the images are decoded comes from the config too: with ``decode=gpu`` the loader's workers
read the stored bytes and ``cfg.device_batches(loader, device)`` decodes (nvJPEG) and augments
each batch on the GPU, one batch ahead, as the tuning bursts measured (it needs ``--data``: the
made-up images have no files to read; without CUDA the workers decode, with a warning). With
``decode=cpu`` the same call copies the workers' batches to the device.
Everything else is ordinary PyTorch: replace the model and the dataset with yours.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from workbench.config import load_config


def main() -> None:
    args = _parse_args()
    cfg = load_config(args.config)
    # First thing: NCCL reads its variables when the process group starts, PyTorch's CUDA
    # allocator when CUDA is initialized. apply() sets them, the math switches (TF32) and
    # cudnn.benchmark as measured, and prints what it changed (rank 0); debug-only NCCL
    # variables stay suggestions unless --nccl-suggestions.
    cfg.apply(nccl_suggestions=args.nccl_suggestions)
    rank, world, device = _start_distributed(args.device)
    if rank == 0 and world != cfg.knobs.world_size:
        print(f"note: tuned for world_size={cfg.knobs.world_size}, running {world} process(es)")
    _train(args, cfg, rank, world, device)
    if world > 1:
        # Every rank done before any tears down, and the DDP model (freed when _train returned;
        # gc for its reference cycles) gone while the group is up. Without both, gloo aborted
        # the process at exit ("terminate called without an active exception") in 3 of 8 runs
        # of two gloo ranks here; with both, 0 of 20.
        gc.collect()
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def _train(args: argparse.Namespace, cfg: Any, rank: int, world: int, device: torch.device):
    """Build the data, the model and the optimizer as tuned; time ``args.steps`` steps."""
    knobs = cfg.knobs
    dataset, classes = _dataset(args, cfg, rank, world)
    # Shards (data_format=shards) shuffle per epoch and split by rank and worker themselves.
    iterable = isinstance(dataset, torch.utils.data.IterableDataset)
    sampler = None
    if world > 1 and not iterable:
        sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=True)
    shuffle = sampler is None and not iterable
    # --autotune: workers and prefetch tuned on the first steps, the answer cached per machine.
    # decode=gpu: the workers read stored bytes for the device to decode (see _batches).
    loader = cfg.dataloader(dataset, shuffle=shuffle, sampler=sampler, drop_last=True,
                            autotune=args.autotune, device=device)  # fmt: skip

    model = SmallNet(classes).to(device)
    model = cfg.convert_fp8(model, device.type)  # float8 Linear layers (torchao), if tuned so
    # As the bursts set it up, and printed: channels_last, activation checkpointing on the
    # blocks, DDP or FSDP2's shards on several ranks (before the optimizer, whose parameters
    # FSDP replaces), then torch.compile.
    model = cfg.prepare_model(model, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **cfg.optimizer_kwargs())
    scaler = cfg.grad_scaler(device.type)  # None unless fp16

    batches = _batches(cfg.device_batches(loader, device), sampler)
    step = _step_function(cfg, model, optimizer, scaler, device, world)
    for _ in range(args.warmup):  # compile, cuDNN autotuning, worker start-up: not timed
        step(batches)
    _sync(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step(batches)
    _sync(device)  # kernels run asynchronously: wait for them before reading the clock
    elapsed = time.perf_counter() - start
    samples = args.steps * knobs.grad_accum * knobs.batch_size * world
    if rank == 0:
        print(
            f"train: {samples / elapsed:.1f} samples/s ({world} process(es) on {device.type}, "
            f"batch {knobs.batch_size} x accum {knobs.grad_accum}, {knobs.precision}, "
            f"{knobs.num_workers} workers), loss {loss.item():.3f}"
        )


def _step_function(cfg, model, optimizer, scaler, device, world):
    """One optimizer step: grad_accum micro-batches, each under the tuned autocast."""
    accum = cfg.knobs.grad_accum
    # DDP all-reduces gradients on every backward; no_sync skips that until the last
    # micro-batch. Not with static_graph: PyTorch's DDP fails an internal assert on a first
    # backward under no_sync with a static graph (pytorch/pytorch#143580). FSDP reduce-scatters
    # every micro-batch, which keeps its gradients sharded (as the bursts measured it).
    ddp = world > 1 and cfg.knobs.sharding == "ddp"
    skip_sync = ddp and not cfg.ddp_kwargs()["static_graph"]

    def step(batches) -> torch.Tensor:
        for i in range(accum):
            x, y = next(batches)  # on the device already, NHWC with channels_last
            last = i == accum - 1
            sync = model.no_sync() if skip_sync and not last else contextlib.nullcontext()
            with sync:
                with cfg.autocast(device.type):
                    loss = F.cross_entropy(model(x), y) / accum
                (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach() * accum

    return step


def _batches(on_device, sampler):
    """Device batches forever, epoch after epoch (the sampler reshuffles per epoch under DDP);
    ``on_device`` is ``cfg.device_batches(loader, device)``, iterated once per epoch."""
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        yield from on_device
        epoch += 1


class SmallNet(nn.Module):
    """Four conv-BN-ReLU blocks and a linear head: small enough for a CPU."""

    def __init__(self, classes: int, width: int = 16):
        super().__init__()
        chans = [3, width, width * 2, width * 4, width * 8]
        blocks = [
            nn.Sequential(
                nn.Conv2d(chans[i], chans[i + 1], 3, stride=1 if i == 0 else 2, padding=1),
                nn.BatchNorm2d(chans[i + 1]),
                nn.ReLU(inplace=True),
            )
            for i in range(4)
        ]
        self.features = nn.Sequential(*blocks)
        self.head = nn.Linear(chans[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))

    def checkpoint_blocks(self) -> list[nn.Module]:
        """How a model opts in to activation checkpointing: the blocks to recompute."""
        return list(self.features)


class MadeUpImages(Dataset):
    """Random images with a class-dependent tint, made per sample (no files, no download)."""

    def __init__(self, n: int, size: int, classes: int = 10):
        self.n, self.size, self.classes = n, size, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(i)
        label = i % self.classes
        x = torch.rand(3, self.size, self.size, generator=g) + label / self.classes
        return (x - x.mean()) / x.std(), label


def _dataset(args: argparse.Namespace, cfg: Any, rank: int, world: int) -> tuple[Dataset, int]:
    if args.data is None:
        return MadeUpImages(args.samples, args.size), 10
    from torchvision import transforms as T

    transform = T.Compose(
        [
            T.RandomResizedCrop(args.size, antialias=True),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ]
    )
    # The folder read as the tuned bursts read it (data_format: the JPEG files, or the shards,
    # LMDB or predecoded copy `workbench data --format F --from DIR` made beside it).
    dataset = cfg.dataset(args.data, transform, image_size=args.size, rank=rank, world_size=world)
    classes = [p for p in Path(args.data).iterdir() if p.is_dir()]  # ImageFolder's classes
    return dataset, len(classes)


def _start_distributed(choice: str) -> tuple[int, int, torch.device]:
    """Rank, world size and device; a process group only when torchrun started several."""
    cuda = torch.cuda.is_available() and choice != "cpu"
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world == 1:
        return 0, 1, device
    torch.distributed.init_process_group("nccl" if cuda else "gloo")
    return torch.distributed.get_rank(), world, device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="tuned.yaml", help="a config saved by workbench")
    p.add_argument("--data", help="an ImageFolder (default: images made up on the fly)")
    p.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed optimizer steps first")
    p.add_argument("--size", type=int, default=64, help="image size in pixels")
    p.add_argument("--samples", type=int, default=1024, help="made-up dataset size")
    p.add_argument("--device", choices=["auto", "cpu"], default="auto")
    p.add_argument(
        "--nccl-suggestions", action="store_true",
        help="also set the NCCL variables NCCL documents for debugging only (saved as "
        "suggestions, not applied by default)",
    )  # fmt: skip
    p.add_argument(
        "--autotune", action="store_true",
        help="tune num_workers and prefetch_factor on the first steps (cfg.dataloader(..., "
        "autotune=True)); the answer is cached under $WORKBENCH_HOME for the next run",
    )  # fmt: skip
    args = p.parse_args()
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    return args


if __name__ == "__main__":
    main()
