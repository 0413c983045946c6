"""Does a burst measure what your own loop gets? A hand-written loop against wb.run_burst.

The promise of the workbench is that a burst's samples/s is what the user's own training loop
gets with the same knobs. This checks it from outside the harness: a plain PyTorch loop, written
here as a user would write it (its own model, its own Dataset, a torch DataLoader, on the main
thread, timed with time.perf_counter around a time-boxed run after a few warm-up steps),
against ``wb.run_burst`` on a Workload built from the same model, dataset, loss and optimizer
with the same knobs. Nothing of the workbench runs inside the plain loop.

The job is a :class:`Recipe` (model, dataset, loss, optimizer, knobs, device), run two ways:
:func:`hand_loop` on the calling thread, :func:`run_recipe` through ``wb.run_burst``. The GPU
session's ``fidelity`` step (``gpu_fidelity.py``) runs the same two on resnet50 and gpt:124m,
where a burst runs on a fresh thread and the user's loop on the main one.

Method: for each worker count, ``--pairs`` interleaved pairs, the order alternating from pair to
pair (plain first, then burst first), so a drift of the shared machine falls on both sides; one
unmeasured pair first (the first loop of a process reads low: page cache, oneDNN's kernels).
With ``--fresh-thread`` each pair also runs the burst as it ran before a CPU burst ran on the
caller's thread (a fresh thread of its own), for the before/after in one run. The figure is the
median of the per-pair ratios burst/plain, with their range, and again over
the quiet pairs (the rest of the machine kept fewer than ``--quiet-cores`` cores busy during
both sides, read from /proc/stat): on a 2-core machine another tenant's load changes how the
loop's OpenMP workers and its DataLoader workers share the cores.

    python benchmarks/fidelity.py --pairs 5 --seconds 3 --workers 0,1,2 --out fidelity.json

Prints one JSON document (and writes it to ``--out``): the command, the commit, the machine,
and per worker count the ratios, their median and range, and each side's samples/s.
``python benchmarks/fidelity.py --table benchmarks/results/fidelity-*.json`` prints the
published table from kept runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import workbench as wb

sys.path.insert(0, str(Path(__file__).resolve().parent))  # kept_runs, run as a script or loaded
from kept_runs import keep, markdown_table, pairs_parser, print_table_if_asked, spread

IMAGE_PX = 64
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class JpegFolder(Dataset):
    """An ImageFolder read by hand: class folders of JPEGs, decoded with PIL, augmented to
    ``px`` pixels (64 for the small convnet, 224 for ResNet-50)."""

    def __init__(self, root: Path, px: int = IMAGE_PX):
        from torchvision import transforms as T

        classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.items = [
            (path, label)
            for label, name in enumerate(classes)
            for path in sorted((root / name).glob("*.jpg"))
        ]
        self.classes = classes
        self.transform = T.Compose(
            [
                T.RandomResizedCrop(px, antialias=True),
                T.RandomHorizontalFlip(),
                T.ToTensor(),
                T.Normalize(MEAN, STD),
            ]
        )

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[i]
        with Image.open(path) as img:
            return self.transform(img.convert("RGB")), label


class Net(nn.Module):
    """A small convnet: four conv-BN-ReLU blocks, a pooled linear head."""

    def __init__(self, num_classes: int):
        super().__init__()
        chans, layers = [3, 16, 32, 64, 128], []
        for i in range(4):
            layers += [
                nn.Conv2d(chans[i], chans[i + 1], 3, stride=1 if i == 0 else 2, padding=1),
                nn.BatchNorm2d(chans[i + 1]),
                nn.ReLU(inplace=True),
            ]
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(chans[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def make_optimizer(params) -> torch.optim.Optimizer:
    """SGD with momentum, ``foreach=True`` as the knobs' default ``optimizer_impl`` says (and as
    ``cfg.optimizer(params)`` builds it in production). Left to itself, torch picks foreach on
    a GPU but the for-loop on a CPU: the same knobs mean the same implementation on both sides."""
    return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=True)


# -- the user's pieces, and the two ways to run them --------------------------------------------

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
HAND_KNOBS = frozenset({"batch_size", "num_workers", "prefetch_factor", "pin_memory",
                        "persistent_workers", "precision", "channels_last",
                        "cudnn_benchmark"})  # fmt: skip
"""The knobs the hand loop writes as a user would (DataLoader arguments, autocast, the layout,
cudnn.benchmark); a recipe that sets another is refused, so the two sides run the same job."""


@dataclass(frozen=True)
class Recipe:
    """A user's training job: their model, dataset, loss and optimizer, the knobs they chose
    and the device. The hand loop runs it as written by hand; the burst as ``wb.Workload``."""

    name: str
    model: Callable[[], nn.Module]
    dataset: Callable[[], Any]
    loss: Callable[[Any, Any], torch.Tensor]
    optimizer: Callable[[Any], torch.optim.Optimizer]
    knobs: wb.Knobs
    device: str = "cpu"
    about: dict[str, Any] = field(default_factory=dict)
    """What the workload may say of itself without changing the loop (``flops_per_sample``,
    ``tokens_per_sample``): passed to the Workload so the burst reports MFU and tokens/s."""

    def __post_init__(self) -> None:
        moved = sorted(set(self.knobs.changes()) - HAND_KNOBS)
        if moved:
            raise ValueError(f"recipe {self.name}: the hand loop cannot set {', '.join(moved)} "
                             f"(it writes {', '.join(sorted(HAND_KNOBS))})")  # fmt: skip

    def workload(self) -> Any:
        """The same pieces as a ``wb.Workload``: what the burst trains."""
        return wb.Workload(name=self.name, model=self.model, dataset=self.dataset,
                           loss=self.loss, optimizer=self.optimizer, **self.about)  # fmt: skip


def cnn_recipe(root: Path, workers: int, batch: int) -> Recipe:
    """The small convnet on 64 px JPEGs on the CPU: the CLI's job (and a GPU rehearsal's)."""
    classes = len(JpegFolder(root).classes)
    return Recipe(name="fidelity", model=lambda: Net(classes), dataset=lambda: JpegFolder(root),
                  loss=F.cross_entropy, optimizer=make_optimizer,
                  knobs=wb.Knobs(batch_size=batch, num_workers=workers))  # fmt: skip


def hand_loop(recipe: Recipe, seconds: float, warmup: int) -> float:
    """The user's loop, as one would write it, on the calling thread: samples/s over a
    time-boxed run after ``warmup`` steps. Nothing of the workbench runs in it: torch's
    DataLoader, ``.to(device)``, autocast and the optimizer, as a training script has them.

    On a GPU the clock is read after ``torch.cuda.synchronize()`` at both ends: kernels queued
    before the start belong to the warm-up, and those still queued at the end to the window."""
    k = recipe.knobs
    torch.manual_seed(0)
    device = torch.device(recipe.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = k.cudnn_benchmark
    layout = torch.channels_last if k.channels_last else torch.preserve_format
    model = recipe.model().to(device, memory_format=layout)
    optimizer = recipe.optimizer(model.parameters())
    pin = k.pin_memory and cuda
    more = ({"persistent_workers": k.persistent_workers, "prefetch_factor": k.prefetch_factor or 2}
            if k.num_workers else {})  # fmt: skip
    loader = DataLoader(recipe.dataset(), batch_size=k.batch_size, shuffle=True, drop_last=True,
                        num_workers=k.num_workers, pin_memory=pin, **more)  # fmt: skip
    dtype = AUTOCAST.get(k.precision)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    steps = samples = 0
    start = None
    while True:  # epochs
        for x, y in loader:
            fmt = layout if x.dim() == 4 else torch.preserve_format
            x = x.to(device, non_blocking=pin, memory_format=fmt)
            y = y.to(device, non_blocking=pin)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = recipe.loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            if steps == warmup:
                sync()
                start = time.perf_counter()
            elif start is not None:
                samples += y.shape[0]
                if time.perf_counter() - start >= seconds:
                    sync()
                    return samples / (time.perf_counter() - start)


def run_recipe(recipe: Recipe, seconds: float, warmup: int, min_steps: int = 5) -> Any:
    """The same recipe measured by the workbench: ``wb.run_burst``'s BurstResult."""
    return wb.run_burst(recipe.workload(), recipe.knobs, seconds=seconds, warmup_steps=warmup,
                        min_steps=min_steps, device=recipe.device, record=False)  # fmt: skip


def plain_loop(root: Path, workers: int, batch: int, seconds: float, warmup: int) -> float:
    """The CLI's hand loop: the small convnet on the CPU (:func:`hand_loop`)."""
    return hand_loop(cnn_recipe(root, workers, batch), seconds, warmup)


def burst(root: Path, workers: int, batch: int, seconds: float, warmup: int) -> float:
    """The same model, data, loss and optimizer, measured by the workbench."""
    r = run_recipe(cnn_recipe(root, workers, batch), seconds, warmup)
    if not r.ok:
        raise RuntimeError(f"burst failed: {r.error}")
    return r.samples_per_s


def _cpu_marks() -> tuple[float, float, float]:
    """(wall s, the machine's busy CPU s, this process's and its reaped children's CPU s)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    busy_s = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle, iowait
    t = os.times()
    return time.perf_counter(), busy_s, t.user + t.system + t.children_user + t.children_system


def _timed(run, *args) -> tuple[float, float]:
    """(samples/s, cores the rest of the machine kept busy meanwhile): a shared machine's
    other tenants are not always visible to ps, but their CPU time is in /proc/stat."""
    wall0, busy0, own0 = _cpu_marks()
    sps = run(*args)
    wall1, busy1, own1 = _cpu_marks()
    return sps, max(0.0, (busy1 - busy0) - (own1 - own0)) / (wall1 - wall0)


def burst_on_fresh_thread(root: Path, workers: int, batch: int, seconds: float,
                          warmup: int) -> float:  # fmt: skip
    """A burst as it ran before bursts measured where production runs: on a fresh thread of
    its own, whatever the device (the caller's OpenMP team kept)."""
    from workbench.engine import burst as burst_module
    from workbench.engine.burst_thread import on_fresh_thread

    where = burst_module.run_as_production
    burst_module.run_as_production = lambda run, stop, device_type: on_fresh_thread(run, stop)
    try:
        return burst(root, workers, batch, seconds, warmup)
    finally:
        burst_module.run_as_production = where


def one_pair(root: Path, workers: int, args: argparse.Namespace, burst_first: bool) -> dict:
    run = {"plain": plain_loop, "burst": burst, "fresh_thread": burst_on_fresh_thread}
    order = ("burst", "plain") if burst_first else ("plain", "burst")
    if args.fresh_thread:
        order = (*order, "fresh_thread") if burst_first else ("fresh_thread", *order)
    got, others = {}, {}
    for name in order:
        got[name], others[name] = _timed(run[name], root, workers, args.batch, args.seconds,
                                         args.warmup)  # fmt: skip
    if args.fresh_thread:
        got["ratio_fresh_thread"] = got["fresh_thread"] / got["plain"]
    return {**got, "ratio": got["burst"] / got["plain"], "order": list(order),
            "others_cores": max(others.values())}  # fmt: skip


def measure(root: Path, workers: int, args: argparse.Namespace) -> dict:
    one_pair(root, workers, args, burst_first=False)  # unmeasured: the first run reads low
    pairs = [one_pair(root, workers, args, burst_first=i % 2 == 1) for i in range(args.pairs)]
    ratios = [p["ratio"] for p in pairs]
    quiet = [p["ratio"] for p in pairs if p["others_cores"] < args.quiet_cores]
    row = {
        "workers": workers,
        **{f"ratio_{k}": v for k, v in spread(ratios).items()},
        "quiet_pairs": len(quiet),
        "quiet_ratio_median": round(statistics.median(quiet), 4) if quiet else None,
        "fresh_thread_ratio_median": _median_of(pairs, "ratio_fresh_thread"),
        "pairs": [
            {k: (round(v, 2) if isinstance(v, float) else v) for k, v in p.items()} for p in pairs
        ],
    }
    shown = ("workers", "ratio_median", "ratio_min", "ratio_max", "quiet_pairs",
             "quiet_ratio_median", "fresh_thread_ratio_median")  # fmt: skip
    print(json.dumps({k: row[k] for k in shown}), file=sys.stderr, flush=True)
    return row


def _median_of(pairs: list[dict], key: str) -> float | None:
    values = [p[key] for p in pairs if key in p]
    return round(statistics.median(values), 4) if values else None


def provenance() -> dict:
    here = Path(__file__).resolve().parent.parent

    def git(*a: str) -> str:
        out = subprocess.run(["git", *a], cwd=here, capture_output=True, text=True)
        return out.stdout.strip()

    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "load_avg": os.getloadavg(),
        },
    }


def table(paths: list[Path]) -> str:
    """The published table (README, docs/figures.md) from kept runs: one row per run and
    worker count, every figure read from the JSON, none typed."""
    columns = [("run (commit, date)", "---"), ("workers", "---:"),
               ("burst / plain, median", "---:"), ("range", "---:"), ("quiet pairs", "---:"),
               ("before: a fresh thread / plain", "---:")]  # fmt: skip
    return markdown_table(paths, columns, _run_name, _cells)


def _run_name(path: Path, doc: dict) -> str:
    return f"`{path.name}` ({doc['commit'][:7]}, {doc['date'][:10]})"


def _cells(row: dict) -> list[str]:
    before = row.get("fresh_thread_ratio_median")
    return [str(row["workers"]), f"{row['ratio_median']:.3f}",
            f"{row['ratio_min']:.3f}-{row['ratio_max']:.3f}",
            f"{row['quiet_pairs']}/{len(row['pairs'])}",
            f"{before:.3f}" if before is not None else "-"]  # fmt: skip


def main() -> None:
    if print_table_if_asked(table):
        return
    ap = pairs_parser(__doc__, pairs=6, seconds=3.0)
    ap.add_argument("--workers", default="0,1,2", help="DataLoader worker counts, comma-separated")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--quiet-cores",
        type=float,
        default=0.25,
        help="a pair is quiet when others kept fewer cores busy on both sides",
    )
    ap.add_argument(
        "--fresh-thread",
        action="store_true",
        help="also run each burst as before: on a fresh thread of its own",
    )
    args = ap.parse_args()
    source = provenance()  # the commit whose code this process loaded: read before measuring
    root = args.data or wb.ensure_datasets().images
    rows = [measure(root, int(w), args) for w in args.workers.split(",")]
    doc = {**source, "batch": args.batch, "seconds": args.seconds, "rows": rows}
    keep(doc, args.out)


if __name__ == "__main__":
    main()
