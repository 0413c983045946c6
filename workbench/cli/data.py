"""``workbench data``: the sample datasets (sized by class, in all, or for a batch size), or
with ``--format`` an ImageFolder converted to shards, LMDB or predecoded arrays."""

from __future__ import annotations

import argparse
import json

from workbench.cli.common import EXIT_OK
from workbench.core.errors import InputError
from workbench.core.results import SHORT_EPOCH_BATCHES
from workbench.engine.convert import convert_dataset
from workbench.engine.datasets import data_root, ensure_datasets, images_for_batch
from workbench.engine.workloads.base import say_progress


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help="data root (default: $WORKBENCH_DATA, ./data, $WORKBENCH_HOME)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--images-per-class", type=int, help="images in each class (default 80)")
    size.add_argument(
        "--images",
        type=int,
        metavar="N",
        help="at least N images in all, spread over the classes (default 800)",
    )
    size.add_argument(
        "--for-batch",
        type=int,
        metavar="B",
        help=f"images enough for {SHORT_EPOCH_BATCHES} batches of B an epoch, so a burst "
        f"measures the loader rather than epoch restarts: --for-batch 256 is 12,800 images "
        f"(the same as --images 12800; 1.4 GB, 297 s on a busy 2-core machine, 195 s of CPU)",
    )
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--token-mb", type=float, default=4.0)
    p.add_argument(
        "--format",
        choices=["shards", "lmdb", "predecoded"],
        help="convert an ImageFolder to this format instead of building samples",
    )
    p.add_argument(
        "--from",
        dest="source",
        metavar="DIR",
        help="the ImageFolder to convert (default: the sample images)",
    )
    p.add_argument("--to", metavar="DIR", help="folder the copy goes under (default: beside it)")
    p.add_argument(
        "--resolution",
        type=int,
        metavar="PX",
        help="predecoded: stored side in pixels (default 73, for cnn; 256 for resnet50)",
    )
    p.add_argument("--workers", type=int, help="parallel readers (default: by CPU count)")
    p.add_argument("--json", action="store_true", help="print the dataset paths as JSON")


def run(args: argparse.Namespace) -> int:
    if args.format:
        for option in ("images_per_class", "images", "for_batch"):
            if getattr(args, option) is not None:
                name = "--" + option.replace("_", "-")
                raise InputError(f"{name} is not allowed with --format: it sizes a sample build")
        return _convert(args)
    for option in ("source", "to", "resolution", "workers"):
        if getattr(args, option) is not None:
            name = "--from" if option == "source" else f"--{option}"
            raise InputError(f"{name} is not allowed without --format: it names the conversion")

    if args.classes < 1:
        raise InputError.not_allowed("--classes", args.classes, "an integer >= 1")
    paths = ensure_datasets(
        data_root(args.out),
        images_per_class=_images_per_class(args),
        classes=args.classes,
        token_mb=args.token_mb,
        progress=say_progress,
    )
    doc = {"root": str(paths.root), "images": str(paths.images), "tokens": str(paths.tokens)}
    print(json.dumps(doc) if args.json else "\n".join(f"{k:<7} {v}" for k, v in doc.items()))
    return EXIT_OK


def _images_per_class(args: argparse.Namespace) -> int:
    """Images in each class from ``--images-per-class``, ``--images`` or ``--for-batch``."""
    if args.for_batch is not None:
        if args.for_batch < 1:
            raise InputError.not_allowed("--for-batch", args.for_batch, "a batch size >= 1")
        return images_for_batch(args.for_batch, args.classes)
    if args.images is not None:
        if args.images < args.classes:
            raise InputError.not_allowed(
                "--images", args.images, f"an integer >= --classes ({args.classes}): one "
                f"image in each class at least"
            )  # fmt: skip
        return -(-args.images // args.classes)
    per_class = 80 if args.images_per_class is None else args.images_per_class
    if per_class < 1:
        raise InputError.not_allowed("--images-per-class", per_class, "an integer >= 1")
    return per_class


def _convert(args: argparse.Namespace) -> int:
    if args.workers is not None and args.workers < 1:
        raise InputError.not_allowed("workers", args.workers, "an integer >= 1")
    result = convert_dataset(args.format, args.source, args.to, resolution=args.resolution,
                             workers=args.workers, progress=say_progress)  # fmt: skip
    print(json.dumps(result.to_dict()) if args.json else result.summary())
    return EXIT_OK
