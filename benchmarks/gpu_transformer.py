"""The GPU session's ``transformer`` step: ``gpt:124m`` on one GPU, one burst a row.

    bash benchmarks/gpu_session.sh --steps transformer --budget-s 570   # a call of its own

GPT-2 small's shape at 1,024 tokens (``workbench.engine.workloads.gpt``), batch ``BATCH`` on
one device-resident batch (``loader=synthetic``: the compute, as llm.c's figure is, with no
data loading in it), each row a burst whose tokens/s and MFU the kept run holds whole:

- bf16 eager, bf16 ``compile=default``, bf16 ``compile=reduce-overhead`` (CUDA graphs): the
  goal's rows, first, so a step stopped by its timeout keeps them;
- the ``attention`` knob's values at bf16, eager: a backend that cannot run these shapes is
  refused in set-up with PyTorch's reasons (``workbench.engine.attention``), and the row keeps
  that refusal as its answer; ``auto`` there is a second reading of the first row.

The rows are one list (``ROWS``: a label and the knobs it changes over ``base``), so a knob
that lands later is one line. A row that does not fit what is left of the step's budget is
skipped and says so (a later call runs it). ``row_results`` reads a step's record back into
the rows (a pure function: the step's facts, ``publish_gpu.py``'s table and the tests use it);
``goal`` judges the issue's goal against llm.c's published per-GPU rate (``anchor``).

Estimates: no run has measured ``gpt:124m`` on a GPU yet, so a compile row's cold compile is
the kept run's own ``gpt:124m`` compile time where one has it, else ``COMPILE_FACTOR`` times
the tiny ``gpt``'s cold compile in the kept H200 run (``TINY_GPT_COMPILE``; entries
``wb-gpu-gpt-compile-default`` and ``-reduce-overhead``): twice the layers at twice the width
should take about twice as long to compile, and the factor doubles that again, generously.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gpu_record

from workbench.core.knobs import ATTENTIONS

WORKLOAD = "gpt:124m"
BATCH = 32
"""32 sequences of 1,024 tokens (32,768 tokens a step): enough work a step to keep an H200
busy, and every row fits an 80 GB card too, the ``math`` kernel's full score matrices
included. llm.c's micro-batch is 64 a GPU (``-b 64 -t 1024``); its MFU is near its plateau
from half that."""
EAGER = "eager"
COMPILED = ("compile-default", "compile-reduce-overhead")
"""The rows the goal reads: bf16 with compile, either mode."""


@dataclass(frozen=True)
class Row:
    """One burst of the step: ``change`` over the step's base knobs (bf16, batch ``BATCH``,
    one resident batch; a label names what it changes, the table's header the base)."""

    key: str  # the record's tag and the table's id
    label: str  # how the table names it
    change: Mapping[str, Any] = field(default_factory=dict)

    @property
    def compile(self) -> str:
        return str(self.change.get("compile", "off"))


ROWS: tuple[Row, ...] = (
    Row(EAGER, "eager"),
    Row("compile-default", "compile=default", {"compile": "default"}),
    Row("compile-reduce-overhead", "compile=reduce-overhead (CUDA graphs)",
        {"compile": "reduce-overhead"}),
    *(Row(f"attention-{a}", f"eager, attention={a}"
          + (" (the first row again)" if a == "auto" else ""), {"attention": a})
      for a in ATTENTIONS),
    # Documents padded one to a row against packed into full rows (``packing``): tokens/s
    # counts real tokens only, so the two compare useful work; the result's pad_share_pct.
    Row("packing-pad", "eager, packing=pad (a document a row)", {"packing": "pad"}),
    Row("packing-pack", "eager, packing=pack (documents packed, masked apart)",
        {"packing": "pack"}),
    # float8 is the ``fp8`` step's (gpu_fp8.py: compiled, bracketed by bf16, torchao installed
    # from the wheelhouse); FSDP's memory per rank needs two ranks, which one GPU cannot hold
    # (``wb.compare_sharding`` skips there): the CPU's two gloo ranks measure it
    # (docs/figures.md).
)  # fmt: skip


# -- the estimates -----------------------------------------------------------------------------

SETUP_S = 15.0
"""The step's process: Python, torch, CUDA and NVML ~6 s; the sample data set and its token
file, which ``gpt:124m`` reads as byte pairs, ~6 s (the check's set-up row, measured)."""
EAGER_S = 12.0
"""An eager ``gpt:124m`` burst: build the model (124M parameters), its set-up forwards, 3
warm-up steps and a 2 s window. An estimate (no run has measured one), generous."""
COMPILE_FACTOR = 4.0
Where = tuple[tuple[str, str], ...]
"""(step, burst label) alternatives, as ``publish_gpu`` names them."""
TINY_GPT_COMPILE: dict[str, Where] = {
    "default": (("check", "compile default (tf32): compile=default"),
                ("compile", "compile default (tf32)")),
    "reduce-overhead": (("compile", "compile reduce-overhead (tf32)"),),
}  # fmt: skip
"""Where a kept run holds the tiny gpt's cold compile by mode (``publish_gpu`` tables them)."""
COMPILE_FALLBACK_S = 120.0
"""A cold compile's estimate where no kept run has measured the mode at all."""
MARGIN_S = 10.0
"""Kept from the step's budget for writing its record after the last row."""


@dataclass(frozen=True)
class Estimate:
    seconds: float
    why: str


def estimate(row: Row, runs: Sequence[tuple[Path, Mapping[str, Any]]]) -> Estimate:
    """A row's seconds on one GPU: an eager burst, plus a cold compile for a compiled row
    (module docstring), with where the number comes from."""
    if row.compile == "off":
        return Estimate(EAGER_S, f"~{EAGER_S:.0f} s")
    own = _newest_row(runs, row.key)
    if own is not None and own[1].get("compile_s"):
        compile_s = float(own[1]["compile_s"]) * 1.25
        why = f"1.25x its own in {own[0].name}, {own[1]['compile_s']:.1f} s"
    elif (tiny := _tiny_compile(runs, row.compile)) is not None:
        compile_s = COMPILE_FACTOR * tiny[1]
        why = f"{COMPILE_FACTOR:g}x the tiny gpt's in {tiny[0].name}, {tiny[1]:.1f} s"
    else:
        compile_s, why = COMPILE_FALLBACK_S, "no kept run compiled this mode"
    return Estimate(
        EAGER_S + compile_s, f"~{EAGER_S + compile_s:.0f} s: a burst and a cold compile ({why})"
    )


def _tiny_compile(
    runs: Sequence[tuple[Path, Mapping[str, Any]]], mode: str
) -> tuple[Path, float] | None:
    for path, run in runs:
        for step, label in TINY_GPT_COMPILE.get(mode, ()):
            try:
                burst = gpu_record.find_burst(run, step, label)
            except KeyError:
                continue
            if burst.get("compile_s"):
                return path, float(burst["compile_s"])
    return None


def plan(runs: Sequence[tuple[Path, Mapping[str, Any]]] | None = None) -> tuple[float, float, str]:
    """The step's (est_s, min_s, why) for ``gpu_session.PLAN``: every row, or at the least its
    set-up and first row (it skips by row what does not fit)."""
    runs = gpu_record.load_kept() if runs is None else runs
    est = {row.key: estimate(row, runs) for row in ROWS}
    total = SETUP_S + sum(e.seconds for e in est.values())
    parts = "; ".join(f"{row.label} {est[row.key].why}" for row in ROWS if row.compile != "off")
    eager = sum(1 for row in ROWS if row.compile == "off")
    why = (f"{WORKLOAD} at batch {BATCH} on one resident batch: start-up and data ~{SETUP_S:.0f} "
           f"s; {eager} eager bursts at ~{EAGER_S:.0f} s (an estimate: no run has measured "
           f"{WORKLOAD} yet; generous); {parts}; a call of its own (--steps transformer "
           "--budget-s 570): a row that does not fit is skipped and said")  # fmt: skip
    return total, SETUP_S + est[ROWS[0].key].seconds, why


# -- the step ----------------------------------------------------------------------------------


def transformer(log: Any, budget_s: float) -> None:
    """Every row in order, each skipped when its estimate does not fit what is left of
    ``budget_s``; on a CPU rehearsal (``--dry``) a small gpt in fp32 and no compile rows."""
    runs = gpu_record.load_kept()
    wl, base = _target(log.ctx)
    log.facts.update(workload=getattr(wl, "name", wl), batch_size=base.batch_size,
                     precision=base.precision)  # fmt: skip
    for row in ROWS:
        if log.ctx.dry and row.compile != "off":
            log.skip(row.key, "no CUDA: a cold compile costs 20-35 s a row on the 2-core "
                     "test machine; the rehearsal runs the eager rows")  # fmt: skip
            continue
        need = estimate(row, runs).seconds
        left = budget_s - (time.monotonic() - log.ctx.started) - MARGIN_S
        if not log.ctx.dry and need > left:
            log.skip(row.key, f"would not fit (est {need:.0f} s, {max(left, 0):.0f} s of the "
                     f"step's {budget_s:.0f} s left): --steps transformer runs it")  # fmt: skip
            continue
        _run_row(log, row, wl, base.replace(**row.change))
    log.facts["rows"] = row_results(log.doc())
    log.write()


def _target(ctx: Any) -> tuple[Any, Any]:
    """``gpt:124m`` in bf16 on the GPU; a rehearsal's small gpt in the default precision
    (bf16 autocast is ~20x slower than fp32 on the 2-core test machine's AVX2 CPU)."""
    from workbench import Knobs

    if not ctx.dry:
        return WORKLOAD, Knobs(batch_size=BATCH, loader="synthetic", precision="bf16")
    from workbench.engine.workloads.gpt import GPTShape, gpt

    shape = GPTShape(layers=2, heads=2, width=64, block=64)
    return gpt(shape=shape, name="gpt (2 layers x 64, 64 tokens)"), \
        Knobs(batch_size=4, loader="synthetic")  # fmt: skip


def _run_row(log: Any, row: Row, wl: Any, knobs: Any) -> None:
    """One row's burst, kept with its ``row`` tag, and judged: it ran and its knobs acted,
    or a knob of the row was refused with the reason (an answer, not a failure)."""
    from workbench import run_burst

    r = run_burst(wl, knobs, record=False, seconds=log.ctx.seconds, device=log.ctx.device)
    tags: dict[str, Any] = {"row": row.key}
    not_here = {k: r.no_effect[k] for k in row.change if k in (r.no_effect or {})}
    if r.status == "error" and r.bad_knob in row.change:
        tags["refused"] = r.bad_knob_message
    elif not_here:
        tags["not_here"] = "; ".join(f"{k}: {why}" for k, why in not_here.items())
    log.add(row.label, r, must_pass=False, tags=tags)
    if "refused" in tags:
        log.expect(f"{row.label}: refused, with the reason", True)
        return
    if not log.expect(f"{row.label}: ok", r.ok, f"{r.status}: {r.error}"):
        return
    log.expect(f"{row.label}: tokens/s", bool(r.tokens_per_s), "no tokens_per_s")
    if not_here:  # a CPU has no efficient or cudnn kernel: said, and right there only
        log.expect(f"{row.label}: acted", log.ctx.dry, tags["not_here"])
        return
    asked = row.change.get("attention", "auto")
    if asked != "auto":
        log.expect(f"{row.label}: ran the {asked} kernel", r.attention_backend == asked,
                   f"attention_backend={r.attention_backend}")  # fmt: skip
    if row.compile != "off":
        log.expect(f"{row.label}: compiled", r.compile_s is not None, "no compile_s")


# -- reading the record ------------------------------------------------------------------------


def row_results(step: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per row key, what a step's record says (a pure function): ``status`` (ok, refused,
    failed, skipped, not measured), the burst's tokens/s, MFU, step p50, peak memory, compile
    time and the attention kernel that ran, ``over_eager`` (tokens/s over the eager row's
    in the same step) and ``note`` (the refusal, the skip's or failure's reason)."""
    bursts = {b["row"]: b for b in step.get("bursts", []) if b.get("row")}
    skipped = {s["what"]: s["reason"] for s in step.get("skipped", [])}
    eager = bursts.get(EAGER, {})
    base = eager.get("tokens_per_s") if eager.get("status") == "ok" else None
    return {row.key: _row_result(bursts.get(row.key), skipped.get(row.key), base)
            for row in ROWS}  # fmt: skip


NOT_MEASURED = "not measured: the step ended before it"


def _row_result(b: Mapping[str, Any] | None, skipped: str | None,
                base: float | None) -> dict[str, Any]:  # fmt: skip
    if b is None:
        return {"status": "skipped" if skipped else "not measured",
                "note": skipped or NOT_MEASURED}  # fmt: skip
    ok = b.get("status") == "ok"
    status = "ok" if ok else "refused" if b.get("refused") else "failed"
    tps = b.get("tokens_per_s") if ok else None
    note = (
        b.get("refused")
        or b.get("not_here")
        or (None if ok else f"{b.get('status')}: {b.get('error')}")
    )
    return {"status": status, "note": note, "tokens_per_s": tps,
            "mfu_pct": b.get("mfu_pct") if ok else None,
            "step_ms_p50": b.get("step_ms_p50") if ok else None,
            "peak_mem_mib": b.get("peak_mem_mib") if ok else None,
            "compile_s": b.get("compile_s") if ok else None,
            "attention_backend": b.get("attention_backend") if ok else None,
            "pad_share_pct": b.get("pad_share_pct") if ok else None,
            "precision": (b.get("knobs") or {}).get("precision"),
            "over_eager": tps / base if tps and base else None}  # fmt: skip


def step_of(run: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A kept run's transformer step, where it has one with a row's burst."""
    for step in reversed(run.get("steps") or []):
        if step.get("name") == "transformer" and any(b.get("row") for b in step.get("bursts", [])):
            return step
    return None


def _newest_row(runs: Sequence[tuple[Path, Mapping[str, Any]]],
                key: str) -> tuple[Path, dict[str, Any]] | None:  # fmt: skip
    """The newest kept run's result for row ``key``, where it ran (ok or refused)."""
    for path, run in runs:
        step = step_of(run)
        if step is None:
            continue
        res = row_results(step)[key]
        if res["status"] in ("ok", "refused"):
            return path, res
    return None


# -- the published anchor and the goal ---------------------------------------------------------

REFERENCE = gpu_record.ROOT / "notebooks" / "reference"
GOAL_DEVICE = re.compile(r"\bH[12]00\b")
"""The goal's GPUs: an H100 or an H200 (the same dense bf16 peak in their SXM forms; a PCIe or
NVL part's lower peak is read from its own name where a verdict gives an MFU)."""
GOAL_GPUS = "H100 or H200"


def anchor(folder: Path = REFERENCE) -> Any:
    """llm.c's run from the reference files in ``folder`` (each figure with its url), and
    ``gpt:124m``'s FLOPs a token counted on the meta device: lesson 12's own ``Anchor``
    (``workbench.workshop.transformer_lesson``), so the lesson and the table agree."""
    from workbench.workshop import reference
    from workbench.workshop.transformer_lesson import llmc_anchor

    return llmc_anchor(reference.load(folder))


@dataclass(frozen=True)
class Goal:
    """``met``, ``not met`` or ``waiting``, with the row that decided and its run."""

    verdict: str
    key: str | None = None
    tokens_per_s: float | None = None
    over_anchor: float | None = None
    run: Path | None = None
    device: str | None = None
    note: str = ""


def goal(runs: Sequence[tuple[Path, Mapping[str, Any]]], rate: float) -> Goal:
    """The issue's goal: ``gpt:124m`` on one H100 or H200 at or above ``rate`` tokens/s (llm.c's
    per GPU) in bf16 with compile, either mode. Read from the newest kept run on either whose
    transformer step has its rows (a pure function of the records); ``waiting`` until one has.
    The verdict names the device it was measured on."""
    for path, run in runs:
        step = step_of(run)
        if step is None or not GOAL_DEVICE.search(str(run.get("device", ""))):
            continue
        rows = row_results(step)
        ran = {k: rows[k] for k in COMPILED
               if rows[k]["status"] == "ok" and rows[k]["precision"] == "bf16"}  # fmt: skip
        if not ran:
            why = "; ".join(f"{k}: {rows[k]['note']}" for k in COMPILED)
            return Goal("not met", run=path, device=run["device"],
                        note=f"no compiled bf16 row ran ({why})")  # fmt: skip
        key = max(ran, key=lambda k: ran[k]["tokens_per_s"])
        tps = ran[key]["tokens_per_s"]
        return Goal("met" if tps >= rate else "not met", key, tps, tps / rate, path,
                    run["device"])  # fmt: skip
    return Goal("waiting")
