"""``workbench show FILE.yaml``: a saved config checked, and what to paste from it: its
environment, DataLoader kwargs, the model's set-up (``cfg.prepare_model``) and torchrun lines."""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from workbench.cli.common import EXIT_OK
from workbench.config.saved import load_config
from workbench.core.nccl import flags as nccl_flags


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a config written by save_config (the panel, workbench tune)")
    p.add_argument("--script", default="train.py", help="training script in the torchrun lines")
    p.add_argument(
        "--nccl-suggestions", action="store_true",
        help="put the NCCL variables NCCL documents for debugging only (saved as suggestions) "
        "in the exports and launch lines; left out by default",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    """Validate a saved config and print what to paste; warnings go to stderr, one per line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(args.file)
    notes = [str(w.message) for w in caught]
    for note in notes:
        print(f"workbench show: warning: {note}", file=sys.stderr)
    asked = args.nccl_suggestions
    if not args.json:
        print(cfg.describe(args.script, nccl_suggestions=asked))
        return EXIT_OK
    changes = cfg.fresh_process_changes(nccl_suggestions=asked)
    doc = {
        "file": args.file,
        "env": cfg.env(nccl_suggestions=asked),
        "changes": [c.to_dict() for c in changes],
        "model": [c.to_dict() for c in cfg.model_changes()],  # what cfg.prepare_model sets
        "nccl_suggestions": {name: dict(s) for name, s in cfg.nccl_suggestions.items()},
        "dataloader": cfg.dataloader_kwargs("cuda"),
        "collate_fn": cfg.collate_fn,
        "training": dict(cfg.training) if cfg.training is not None else None,
        "torchrun": cfg.launch_lines(args.script, nccl_suggestions=asked),
        "knobs": cfg.knobs.to_dict(),
        "provenance": dict(cfg.provenance),
        "nccl_flags": nccl_flags(cfg.knobs.nccl),
        "comm": dict(cfg.comm) if cfg.comm else None,
        "warnings": notes,
    }
    print(json.dumps(doc))
    return EXIT_OK
