"""``workbench burst``: one measured training burst, printed as a BurstResult (``--json``) or
as text: every figure of a finished burst, what is known of a failed one."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workbench.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    add_launch_args,
    add_money,
    add_run_args,
    fmt,
    json_doc,
)
from workbench.core.knobs import Knobs
from workbench.core.results import short_epochs_line
from workbench.distributed.dispatch import run_burst


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_args(p, seconds=3.0, set_help="set a knob (repeatable), e.g. --set batch_size=64")
    p.add_argument("--min-steps", type=int, default=5, help="minimum steps in the window")
    p.add_argument("--warmup-steps", type=int, default=3, help="steps before the window")
    p.add_argument("--timeout", type=float, help="stop a distributed job after S seconds")
    add_launch_args(p)
    add_money(p)


def run(args: argparse.Namespace) -> int:
    knobs = Knobs().with_text(args.set)
    result = run_burst(
        args.workload,
        knobs,
        seconds=args.seconds,
        min_steps=args.min_steps,
        warmup_steps=args.warmup_steps,
        device=args.device,
        data_dir=args.data,
        record=not args.no_record,
        store=args.store,
        progress=None if args.json else _progress_to_stderr,
        timeout_s=args.timeout,
        price_per_hour=args.price_per_hour,
        epoch_samples=args.epoch_samples,
        launcher=args.launcher,
        hosts=args.hosts,
    )
    if result.bad_knob:  # a knob that does not suit this workload's data: as for --set
        print(f"workbench burst: error: {result.bad_knob_message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    doc = result.to_dict()
    print(json_doc(doc, args) if args.json else _format_result(doc, debug=args.debug))
    return EXIT_FAILED if result.status == "error" else EXIT_OK


def _progress_to_stderr(p: Any) -> None:
    if p.phase in ("setup", "warmup") or p.phase == "done":
        print(f"  {p.phase:<9} {p.elapsed_s:6.1f} s  steps {p.steps}", file=sys.stderr)


_SHOWN = [
    ("status", ""), ("error", ""), ("workload", ""), ("device", ""), ("device_name", ""),
    ("samples_per_s", "samples/s"), ("tokens_per_s", "tokens/s"), ("pad_share_pct", "%"),
    ("step_ms_p50", "ms"),
    ("step_ms_iqr", "ms"), ("step_ms_mean", "ms"), ("noisy", ""), ("steps", ""),
    ("samples_from", ""),
    ("measured_s", "s"), ("warmup_s", "s"),
    ("compile_s", "s"), ("compile_graphs", ""), ("data_wait_pct", "%"), ("peak_mem_mib", "MiB"),
    ("peak_reserved_mib", "MiB"), ("setup_peak_mem_mib", "MiB"),
    ("loader_device_mem_mib", "MiB"), ("decode", ""),
    ("attention_backend", ""), ("fp8_linears", ""), ("h2d_bytes_per_sample", "B"),
    ("gpu_util_pct", "%"),
    ("power_w", "W"), ("temp_c", "C"),
    ("achieved_tflops", "TFLOP/s"), ("mfu_pct", "%"), ("fragmentation_pct", "%"),
    ("telemetry", ""),
]  # fmt: skip


def _held_per_rank_lines(d: dict[str, Any]) -> list[str]:
    """A job's memory at rest on its fullest rank (``param_mib_per_rank`` and the others):
    the whole model with ddp, the rank's shards with sharding=fsdp. None for one process,
    whose breakdown already says it."""
    held = [d.get(f"{part}_mib_per_rank") for part in ("param", "grad", "optimizer_state")]
    if len(d.get("ranks") or []) < 2 or None in held:
        return []
    knobs = d.get("knobs") or {}
    how = "shards" if knobs.get("sharding") == "fsdp" else "whole replica"
    text = ", ".join(f"{name} {fmt(v)}" for name, v in zip(("params", "grads", "optimizer"),
                                                            held, strict=True))  # fmt: skip
    return [f"{'held per rank':<18} {text} MiB ({how}, {len(d['ranks'])} ranks)"]


def _format_result(d: dict[str, Any], debug: bool = False) -> str:
    """A burst as text: every figure of a finished burst (``n/a`` where unknown); of a
    failed one only what is known, the error first, and its traceback with ``--debug``."""
    failed = d.get("status") != "ok"
    shown = [(n, u) for n, u in _SHOWN if not failed or d.get(n) is not None]
    lines = [f"{name:<18} {fmt(d.get(name))} {unit}".rstrip() for name, unit in shown]
    changed = {k: v for k, v in d["knobs"].items() if v not in (None, {}, False)}
    lines.append(f"{'knobs':<18} {changed}")
    for name, value in (d.get("memory_breakdown") or {}).items():
        if failed and value is None:
            continue
        lines.append(f"{'memory ' + name[:-4]:<18} {fmt(value)} MiB")
    lines += _held_per_rank_lines(d)
    for name, value in (d.get("cost") or {}).items():
        if name in _COST_SHOWN and value is not None:
            lines.append(f"{'cost ' + name:<18} {fmt(value)}")
    if d.get("oom_report"):
        lines.append(d["oom_report"]["summary"])
    for knob, why in (d.get("no_effect") or {}).items():
        lines.append(f"{'no effect':<18} {knob}: {why}")
    for problem in d.get("suspect") or []:
        lines.append(f"{'SUSPECT':<18} {problem}")
    for note in d.get("notes") or []:
        lines.append(f"{'NOTE':<18} {note}")
    lines += _short_epoch_lines(d)
    for name, why in (d.get("nccl_flags") or {}).items():
        lines.append(f"{'note':<18} {name}: {why}")
    for note in d.get("ambient_notes") or []:
        lines.append(f"{'ENVIRONMENT':<18} {note}")
    for row in d.get("ranks") or []:
        lines.append(
            f"{'rank ' + str(row['rank']):<18} step {fmt(row['step_ms_p50'])} ms, data wait "
            f"{fmt(row['data_wait_pct'])}%, peak mem {fmt(row['peak_mem_mib'])} MiB"
            + (f", node {row['node']}" if d.get("nodes") and row.get("node") else "")
        )
    return "\n".join(lines + _node_table(d.get("nodes") or []) + _traceback_lines(d, debug))


def _short_epoch_lines(d: dict[str, Any]) -> list[str]:
    """A short epoch (``short_epochs``): how it was run, and for restarts the window measured,
    the summary's line (median against mean step, what to do)."""
    short = d.get("short_epochs")
    if not short:
        return []
    n = short["restarts_in_window"]
    lines = [f"{'short epochs':<18} {short['handling']}: {short['batches_per_epoch']} batches an "
             f"epoch, {n} restart{'' if n == 1 else 's'} in the window"]  # fmt: skip
    warning = short_epochs_line(short, d["knobs"])
    return lines + ([warning] if warning else [])


def _traceback_lines(d: dict[str, Any], debug: bool) -> list[str]:
    trace = d.get("traceback")
    if not trace:
        return []
    if not debug:
        return [f"{'traceback':<18} kept: --debug prints it (Python: result.traceback)"]
    return ["traceback:", trace.rstrip()]


def _node_table(nodes: list[dict[str, Any]]) -> list[str]:
    """A multi-node burst's row per node: a slow node shows beside the others."""
    if not nodes:
        return []
    head = f"{'node':<18} {'ranks':<8} {'samples/s':>10} {'step p50 ms':>12} {'data wait %':>12} "
    lines = [head + f"{'peak MiB':>10}"]
    for n in nodes:
        ranks = ",".join(str(r) for r in n.get("ranks", []))
        lines.append(
            f"{n.get('node')!s:<18} {ranks:<8} {fmt(n.get('samples_per_s')):>10} "
            f"{fmt(n.get('step_ms_p50')):>12} {fmt(n.get('data_wait_pct')):>12} "
            f"{fmt(n.get('peak_mem_mib')):>10}"
        )
    return lines


_COST_SHOWN = ("price_per_hour", "per_million_samples", "per_million_tokens", "per_epoch",
               "idle_share_pct", "idle_per_million_samples")  # fmt: skip
