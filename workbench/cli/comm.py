"""``workbench comm``: the all-reduce benchmark over message sizes (time, algbw, busbw), or with
``--sweep`` one benchmark per value of an NCCL variable and the winner per size range."""

from __future__ import annotations

import argparse
import json
from typing import Any

from workbench.analysis.comm_sweep import comm_sweep
from workbench.cli.common import EXIT_FAILED, EXIT_OK, add_launch_args
from workbench.config.saved import save_config
from workbench.core.errors import InputError
from workbench.core.knobs import Knobs
from workbench.distributed.allreduce import parse_sizes
from workbench.distributed.jobs import comm_bench


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--world-size", type=int, help="ranks (default: every GPU; 2 on a CPU)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NCCL_X=VALUE",
        help="an NCCL variable for the ranks (repeatable), e.g. NCCL_ALGO=Ring",
    )
    p.add_argument(
        "--sizes",
        metavar="S1,S2,...",
        help="message sizes, e.g. 8K,1M,256M (default: 8K-256M on GPU, 8K-8M on CPU)",
    )
    p.add_argument("--device", help="cpu or cuda (default: cuda if available)")
    p.add_argument("--timeout", type=float, default=300.0, help="stop the job after S seconds")
    p.add_argument("--nodes", type=_count, default=1,
                   help="nodes (world size divides by it): rows within, across nodes")  # fmt: skip
    add_launch_args(p)
    p.add_argument("--plot", metavar="FILE", help="save the busbw chart (.html, .png, .svg)")
    p.add_argument("--json", action="store_true", help="print one JSON document")  # fmt: skip
    p.add_argument(
        "--sweep",
        metavar="NCCL_X=V1,V2,...",
        help="one benchmark per value: the winner per size range and bucket_cap_mb past the knee",
    )
    p.add_argument(
        "--save", metavar="FILE.yaml", help="with --sweep: save a config (knobs from --set) "
        "with the sweep's suggestions in its comm section",
    )  # fmt: skip


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: a whole number, 1 or more")
    return value


def run(args: argparse.Namespace) -> int:
    not_nccl = [item for item in args.set if not item.strip().startswith("NCCL_")]
    if not_nccl:
        raise InputError.not_allowed("--set", not_nccl[0], "comm takes NCCL_* variables")
    knobs = Knobs().with_text(args.set)
    sizes = parse_sizes(args.sizes) if args.sizes else None
    if args.sweep or args.save:
        return _comm_sweep(args, knobs, sizes)
    res = comm_bench(args.world_size, sizes=sizes, knobs=knobs, device=args.device,
                     timeout_s=args.timeout, nodes=args.nodes, launcher=args.launcher,
                     hosts=args.hosts)  # fmt: skip
    if args.plot and res.ok:
        from workbench.notebook import plots  # Altair: only when a chart file is asked for

        plots.save(plots.comm(res.frame()), args.plot)
    print(json.dumps(res.to_dict()) if args.json else res.table())
    return EXIT_OK if res.ok and not res.suspect else EXIT_FAILED  # a wrong sum is a failure


def _comm_sweep(args: argparse.Namespace, knobs: Any, sizes: list[int] | None) -> int:
    variable, eq, values = (args.sweep or "").partition("=")
    if not eq or not variable.strip().startswith("NCCL_") or not values.strip():
        raise InputError.not_allowed(
            "--sweep", args.sweep, "NCCL_X=V1,V2,... (e.g. NCCL_ALGO=Ring,Tree)"
        )
    sweep = comm_sweep(variable.strip(), values.split(","), knobs=knobs, world_size=args.world_size,
                       sizes=sizes, device=args.device, timeout_s=args.timeout,
                       nodes=args.nodes, launcher=args.launcher, hosts=args.hosts)  # fmt: skip
    if args.save:
        save_config(knobs, args.save, comm=sweep.suggestions())
    if args.json:
        results = {v: r.to_dict() for v, r in sweep.results.items()}
        print(json.dumps({"suggestions": sweep.suggestions(), "results": results}))
    else:
        print(sweep.table())
    ok = all(r.ok and not r.suspect for r in sweep.results.values())
    return EXIT_OK if ok else EXIT_FAILED
