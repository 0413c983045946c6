"""``workbench parity``: does a faster config still train the same? The reference and the
candidate train from the same weights on the same batches; the loss of every step is compared
against the noise band the reference shows against itself (``workbench.analysis.parity``).

Exit 0: ``identical`` or ``within-noise`` with no defect; 1: ``drifting``, ``diverged`` or a
defect (a knob that must leave the math bit-identical moved the loss); 2: bad input."""

from __future__ import annotations

import argparse
import sys

from workbench.analysis.parity import DEFAULT_STEPS, parity
from workbench.cli.common import EXIT_FAILED, EXIT_OK, WORKLOAD_HELP, json_doc
from workbench.core.knobs import Knobs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", metavar="NAME|MODULE:FUNCTION", help=WORKLOAD_HELP)
    p.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="a knob of the reference config (repeatable; default: the defaults)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="a knob the candidate changes from the reference (repeatable)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        help=f"optimizer steps per config (default {DEFAULT_STEPS})",
    )
    p.add_argument(
        "--no-scaler",
        action="store_true",
        help="train an fp16 candidate without its GradScaler (what scaling prevents)",
    )
    p.add_argument("--seed", type=int, default=0, help="initial weights, order and draws")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available)")
    p.add_argument("--data", help="data folder (an ImageFolder, or a root with images/, tokens/)")
    p.add_argument("--json", action="store_true", help="print one JSON document")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    reference = Knobs().with_text(args.reference)
    candidate = reference.with_text(args.set)

    def said(stage: str) -> None:
        if not args.json:
            print(f"  training the {stage} ({args.steps} steps)", file=sys.stderr)

    result = parity(args.workload, reference, candidate, steps=args.steps, device=args.device,
                    data_dir=args.data, seed=args.seed, scaler=not args.no_scaler,
                    progress=said)  # fmt: skip
    print(json_doc(result.to_dict(), args) if args.json else _text(result))
    return EXIT_OK if result.ok else EXIT_FAILED


def _text(r) -> str:
    changed = ", ".join(f"{k} ({kind})" for k, kind in r.changed.items()) or "nothing"
    lines = [
        f"{r.workload} on {r.device}: {changed} changed; {r.steps} steps, compared per "
        f"{r.compared_on}",
        r.summary(),
        f"band: {r.band_from}",
    ]
    return "\n".join(lines)
