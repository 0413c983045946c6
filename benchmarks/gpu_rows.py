"""The GPU check's rows: what each one runs, what it costs on paper, and what must hold.

Every row has a risk rank (1 runs first: the likeliest to give a wrong number, so a run
killed early has measured it) and an estimated wall cost on one H200, start-up included.
The estimates are what the first GPU session measured (2026-12-04: one H200, torch
2.11.0+cu130, driver 580), with a window of ``SECONDS`` = 2 s per burst: a ``gpt`` burst
about 5 s, a ``resnet50`` synthetic burst about 6 s, a torchrun job ~15 s of start-up, a cold
``compile=default`` 14.5 s. ``compile=max-autotune`` runs last although it is the riskiest:
its Triton GEMM autotuning took from ~95 s (to an AssertionError inside Inductor) to more
than 140 s, so placed first it would spend the time of every other row.

Checks are pure functions of the results, so they are tested on CPU results; the rows reach
torch only through ``Tools``, so their logic is tested on CPU with recorded results too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from workbench import Knobs, run_burst
from workbench.analysis.parity import parity
from workbench.analysis.profiling import profile_burst
from workbench.core.results import BurstResult
from workbench.distributed.jobs import comm_bench
from workbench.engine import hardware

SECONDS = 2.0  # each burst's measured window
STEP_SUM_TOLERANCE = 0.05  # event-timed steps vs the host-clock window: 5% apart is a fault
OOM_PEAK_TOLERANCE = 0.10  # the burst after an OOM may use 10% more or less than a clean one
TF32_MIN_SPEEDUP = 1.15  # tf32 over fp32-strict (IEEE) on resnet50: H100/H200 tensor cores give ~2x
ORDER_TOLERANCE = 0.05  # cudnn A/B ratios this far apart in the two orders: order matters
FELL_BACK = "torch.compile fell back to eager"


@dataclass(frozen=True)
class Check:
    """One thing that must hold; ``detail`` says what was seen when it does not."""

    name: str
    ok: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass
class Tools:
    """What the rows run: the engine's functions, swapped for recorded fakes in tests."""

    burst: Callable[..., BurstResult] = run_burst
    profile: Callable[..., Any] = profile_burst
    comm: Callable[..., Any] = comm_bench
    device_count: Callable[[], int] = torch.cuda.device_count
    parity: Callable[..., Any] = parity


@dataclass
class RowRun:
    """What one row measured and checked, filled in as it runs."""

    data_dir: Path | None = None
    seconds: float = SECONDS
    tools: Tools = field(default_factory=Tools)
    device: str | None = None  # None: the engine's default (CUDA); "cpu" in a rehearsal
    bursts: list[tuple[str, BurstResult]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    text: list[str] = field(default_factory=list)  # printed under the table (the comm table)

    def expect(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, bool(ok), "" if ok else detail))
        return bool(ok)

    @property
    def problems(self) -> list[str]:
        return [f"{c.name}: {c.detail}" if c.detail else c.name for c in self.checks if not c.ok]

    def burst(self, label: str, workload: str, knobs: Knobs, *, expect: str = "ok",
              **kw: Any) -> BurstResult:  # fmt: skip
        """One burst, with the checks every burst gets (``burst_checks``)."""
        before = backend_state()
        kw.setdefault("seconds", self.seconds)
        if self.device is not None:
            kw.setdefault("device", self.device)
        r = self.tools.burst(workload, knobs, data_dir=self.data_dir, record=False, **kw)
        self.observe(label, r, before, expect)
        return r

    def observe(self, label: str, r: BurstResult, before: dict[str, Any], expect: str) -> None:
        self.bursts.append((label, r))
        for c in burst_checks(r, expect, before, backend_state()):
            self.checks.append(Check(f"{label}: {c.name}", c.ok, c.detail))


# -- checks every burst gets -------------------------------------------------------------------


def backend_state() -> dict[str, Any]:
    """The fp32 math mode and cudnn.benchmark as a user's code would read them, through both
    APIs: the legacy one (``get_float32_matmul_precision``, ``allow_tf32``) and, where torch has
    it, the per-backend ``fp32_precision``. Since torch 2.9 a legacy reader *raises* when the
    two were set apart (Inductor reads ``allow_tf32`` while compiling); such a reader is
    recorded as ``"raised: ..."``. Read here, not through the engine, so that the check does
    not trust the code it checks."""
    b = torch.backends
    readers: dict[str, Callable[[], Any]] = {
        "get_float32_matmul_precision()": torch.get_float32_matmul_precision,
        "cuda.matmul.allow_tf32": lambda: b.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": lambda: b.cudnn.allow_tf32,
        "cudnn.benchmark": lambda: b.cudnn.benchmark,
    }
    if hasattr(b.cuda.matmul, "fp32_precision"):
        readers["cuda.matmul.fp32_precision"] = lambda: b.cuda.matmul.fp32_precision
        readers["cudnn.conv.fp32_precision"] = lambda: b.cudnn.conv.fp32_precision
    state: dict[str, Any] = {}
    for name, read in readers.items():
        try:
            state[name] = read()
        except RuntimeError as exc:
            state[name] = "raised: " + str(exc).splitlines()[0][:100]
    return state


def burst_checks(
    r: BurstResult, expect: str, before: dict[str, Any], after: dict[str, Any]
) -> list[Check]:
    """What every burst must show: the expected status, no failed self-check (``suspect``,
    which includes event-timed steps adding up to the host-clock window), the same sum
    computed here, the TF32 and cudnn.benchmark state readable and as it was before, and NVML
    figures in range where there are any."""
    checks = [Check("status", r.status == expect, f"expected {expect}, got {r.status}: {r.error}")]
    checks.append(Check("not suspect", not r.suspect, "; ".join(r.suspect)))
    if r.status == "ok":
        gap = step_sum_gap(r)
        checks.append(Check("steps add up to the window", gap is None or gap <= STEP_SUM_TOLERANCE,
                            f"sum of step times is {gap:.1%} off the window"
                            if gap is not None else ""))  # fmt: skip
        checks += nvml_range_checks(r, required=False)
    checks.append(tf32_check(before, after))
    return [c if not c.ok else Check(c.name, True) for c in checks]


def step_sum_gap(r: BurstResult) -> float | None:
    """|sum of per-step times - window| / window: per-step times come from CUDA events on a
    GPU, the window from the host clock, so this compares the two clocks. None when a result
    has no per-step times."""
    if not r.step_ms or not r.measured_s:
        return None
    return abs(sum(r.step_ms) / 1e3 - r.measured_s) / r.measured_s


def tf32_check(before: dict[str, Any], after: dict[str, Any]) -> Check:
    raised = [name for name, v in after.items() if isinstance(v, str) and v.startswith("raised")]
    if raised:
        return Check(
            "TF32 state readable, as before", False, f"{', '.join(raised)} raised after the burst"
        )
    changed = [f"{n}: {before.get(n)!r} -> {v!r}" for n, v in after.items() if before.get(n) != v]
    return Check(
        "TF32 state readable, as before", not changed, "changed by the burst: " + "; ".join(changed)
    )


_RANGES: tuple[tuple[str, float, float], ...] = (
    ("gpu_util_pct", 0.0, 100.0),
    ("mem_busy_pct", 0.0, 100.0),
    ("temp_c", 0.0, 120.0),
)


def nvml_range_checks(r: BurstResult, *, required: bool) -> list[Check]:
    """Utilization and memory-busy are percentages, power is positive, a working GPU is
    0-120 C. ``required``: a missing figure fails too (the NVML row); otherwise only a
    figure that is there must be in range."""
    checks = []
    for name, low, high in _RANGES:
        value = getattr(r, name)
        ok = (value is None and not required) or (value is not None and low <= value <= high)
        checks.append(Check(f"{name} in {low:g}..{high:g}", ok, f"{name}={value}"))
    ok = (r.power_w is None and not required) or (r.power_w is not None and r.power_w > 0)
    checks.append(Check("power_w > 0", ok, f"power_w={r.power_w}"))
    return checks


def fell_back(r: BurstResult) -> bool:
    return r.no_effect.get("compile", "").startswith(FELL_BACK)


# -- the rows ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    risk: int  # 1 = riskiest; rows run in this order
    est_s: float  # wall seconds on one H200, start-up included
    why: str  # how est_s was reached (docs/development.md's table)
    run: Callable[[RowRun], None]


def _gpt(**kw: Any) -> Knobs:
    return Knobs(**{"batch_size": 32, "num_workers": 2, "precision": "bf16", **kw})


def _r50_synthetic(**kw: Any) -> Knobs:
    """resnet50 on one device-resident batch: compute only, so an A/B is not the loader's."""
    return Knobs(**{"batch_size": 128, "loader": "synthetic", "channels_last": True,
                    "precision": "bf16", **kw})  # fmt: skip


def compile_burst(mode: str) -> Callable[[RowRun], None]:
    """A compile burst in TF32: Inductor reads the TF32 state while it compiles (a mixed
    legacy/new state raises there). ``default`` runs first, ``max-autotune`` last in the same
    process: the second compile of the same code must compile again, not fall back to eager."""

    def row(run: RowRun) -> None:
        r = run.burst(f"compile={mode}", "gpt", _gpt(precision="tf32", compile=mode))
        run.expect(f"compile={mode}: compile_s > 0", (r.compile_s or 0) > 0,
                   f"compile_s={r.compile_s}")  # fmt: skip
        run.expect(f"compile={mode}: compiled", not fell_back(r), r.no_effect.get("compile", ""))

    return row


def precisions(run: RowRun) -> None:
    """Every precision; TF32 must beat fp32-strict (IEEE everywhere), or the TF32 switch did
    not reach cuDNN. ``default`` is PyTorch's own math (cuDNN TF32 allowed, matmuls IEEE)."""
    speed = {}
    for precision in ("default", "fp32-strict", "tf32", "bf16", "fp16"):
        r = run.burst(precision, "resnet50", _r50_synthetic(precision=precision))
        speed[precision] = r.samples_per_s
        run.expect(f"{precision}: acted", "precision" not in r.no_effect,
                   r.no_effect.get("precision", ""))  # fmt: skip
    run.facts["samples_per_s"] = speed
    if speed["fp32-strict"] and speed["tf32"]:
        ratio = speed["tf32"] / speed["fp32-strict"]
        run.facts["tf32_over_fp32_strict"] = round(ratio, 3)
        run.expect(f"tf32 >= {TF32_MIN_SPEEDUP}x fp32-strict", ratio >= TF32_MIN_SPEEDUP,
                   f"tf32/fp32-strict = {ratio:.2f}: TF32 did not act")  # fmt: skip


def oom_then_full_size(run: RowRun) -> None:
    """A deliberate OOM (several hundred GiB of fp32 activations, yet fewer samples than the
    token file holds), then the same burst as a clean one before it: ok, and its peak memory
    that of the clean one (a leak from the failed burst would add to it)."""
    clean = run.burst("clean", "gpt", _gpt())
    run.burst("OOM on purpose", "gpt", Knobs(batch_size=8192, precision="fp32-strict"),
              expect="oom")  # fmt: skip
    after = run.burst("after the OOM", "gpt", _gpt())
    if clean.peak_mem_mib and after.peak_mem_mib:
        ratio = after.peak_mem_mib / clean.peak_mem_mib
        run.facts["peak_after_over_clean"] = round(ratio, 3)
        run.expect(
            "peak memory as a clean burst's",
            abs(ratio - 1) <= OOM_PEAK_TOLERANCE,
            f"{after.peak_mem_mib:.0f} MiB after vs {clean.peak_mem_mib:.0f} clean",
        )
    else:
        run.expect("peak memory as a clean burst's", False, "peak_mem_mib missing")


def torchrun_nccl(run: RowRun) -> None:
    """A one-rank torchrun job on cuda:0 with an NCCL variable: the NCCL path end to end."""
    knobs = _gpt(nccl={"NCCL_ALGO": "Ring"})
    r = run.burst("torchrun NCCL_ALGO=Ring", "gpt", knobs, device="cuda:0", timeout_s=120)
    run.expect("backend nccl", r.backend == "nccl", f"backend={r.backend}")
    run.expect("device cuda:0", r.device == "cuda:0", f"device={r.device}")
    run.expect("one rank", len(r.ranks) == 1, f"{len(r.ranks)} ranks")
    seen = r.ranks[0].get("nccl_env", {}) if r.ranks else {}
    run.expect("the rank saw NCCL_ALGO=Ring", seen.get("NCCL_ALGO") == "Ring", f"saw {seen}")
    run.expect("nccl acted", "nccl" not in r.no_effect, r.no_effect.get("nccl", ""))


def profiled(run: RowRun) -> None:
    """A profiled burst counts in its trace the steps its burst measured."""
    before = backend_state()
    p = run.tools.profile("gpt", _gpt(), seconds=1.0, data_dir=run.data_dir)
    run.observe("profiled", p.burst, before, "ok")
    run.expect("profile ok", p.ok, f"{p.status}: {p.error}")
    steps = p.shares.steps if p.shares is not None else None
    run.facts.update(profiled_steps=steps, burst_steps=p.burst.steps)
    run.expect("profiled steps = burst steps", steps == p.burst.steps,
               f"trace has {steps} steps, the burst {p.burst.steps}")  # fmt: skip


def cudnn_both_orders(run: RowRun) -> None:
    """cudnn.benchmark off-on, then on-off: the on/off ratio must not depend on which ran
    first. When it does, the bursts drifted (a first burst that pays for warming the GPU, a
    clock that falls as the board heats) by more than the knob's effect, and the row fails:
    the first GPU session computed a 7.7% gap here, printed ORDER-DEPENDENT and passed."""
    speed = []
    for label, on in (("off 1", False), ("on 1", True), ("on 2", True), ("off 2", False)):
        r = run.burst(f"cudnn_benchmark {label}", "resnet50", _r50_synthetic(cudnn_benchmark=on))
        speed.append(r.samples_per_s)
    if not all(speed):
        run.expect("order-independent", False, "a burst has no samples/s")
        return
    off_first, on_first = speed[1] / speed[0], speed[2] / speed[3]
    gap = abs(off_first - on_first) / ((off_first + on_first) / 2)
    dependent = gap > ORDER_TOLERANCE
    run.facts.update(on_over_off_when_off_first=round(off_first, 3),
                     on_over_off_when_on_first=round(on_first, 3),
                     order_gap_pct=round(100 * gap, 2), order_dependent=dependent)  # fmt: skip
    said = f"{off_first:.3f} when off ran first, {on_first:.3f} when on ran first"
    run.text.append(f"cudnn_benchmark on/off: {said}: "
                    f"{'ORDER-DEPENDENT' if dependent else 'order-independent'}"
                    f" ({gap:.1%} apart, tolerance {ORDER_TOLERANCE:.0%})")  # fmt: skip
    run.expect("order-independent", not dependent,
               f"on/off {said}: {gap:.1%} apart (tolerance {ORDER_TOLERANCE:.0%}): drift "
               "between bursts exceeds the knob's effect")  # fmt: skip


def grad_accum_fp16(run: RowRun) -> None:
    """fp16 (GradScaler) with 4 micro-batches per step: every sample counted, a finite loss."""
    r = run.burst("grad_accum=4 fp16", "gpt", _gpt(precision="fp16", grad_accum=4))
    run.expect("samples = steps x 32 x 4", r.samples == r.steps * 32 * 4,
               f"{r.samples} samples in {r.steps} steps")  # fmt: skip
    loss = r.final_loss
    run.expect("finite loss", loss is not None and math.isfinite(loss), f"final_loss={loss}")


def nvml_real_data(run: RowRun) -> None:
    """The production pipeline (JPEGs, 8 workers, pinned memory): NVML figures there and in
    range, CUDA memory and MFU filled in, the copy timed."""
    knobs = Knobs(batch_size=128, num_workers=8, persistent_workers=True, pin_memory=True,
                  channels_last=True, precision="bf16")  # fmt: skip
    r = run.burst("real data, 8 workers", "resnet50", knobs)
    run.expect("telemetry nvml", r.telemetry == "nvml", f"telemetry={r.telemetry}")
    for c in nvml_range_checks(r, required=True):
        run.expect(c.name, c.ok, c.detail)
    run.expect("CUDA memory", r.peak_mem_mib is not None and r.peak_reserved_mib is not None)
    peak = hardware.peak_flops(r.device_name or "", r.knobs.precision)
    run.expect("MFU where the peak is known", r.mfu_pct is not None or not peak)
    run.expect("copy timed", r.h2d_ms_p50 is not None)


def comm(run: RowRun) -> None:
    """The all-reduce benchmark on every GPU: every sum correct."""
    res = run.tools.comm(run.tools.device_count(), timeout_s=90)
    run.facts["comm"] = res.to_dict()
    run.text.append(res.table())
    run.expect("comm ok", res.ok, f"{res.status}: {res.error}")
    run.expect("rows", bool(res.rows), "no message sizes measured")
    wrong = [r["size_bytes"] for r in res.rows if not r["correct"]]
    run.expect("every sum correct", not wrong, f"wrong sums at {wrong} bytes")


ROWS: tuple[Row, ...] = (
    Row("compile default (tf32)", 1, 22,
        "1 gpt burst of 5 s; cold compile 14.5 s measured (H200, torch 2.11)",
        compile_burst("default")),
    Row("precisions default/fp32-strict/tf32/bf16/fp16", 2, 35,
        "5 resnet50 synthetic bursts; 28 s measured for the first 4", precisions),
    Row("OOM, then full size", 3, 12,
        "2 gpt bursts and an OOM at its first forward; 11 s measured", oom_then_full_size),
    Row("torchrun 1 rank, NCCL_ALGO, cuda:0", 4, 21,
        "torchrun and NCCL start-up ~15 s, a gpt burst 5 s; 21 s measured", torchrun_nccl),
    Row("profiled burst", 5, 14,
        "a gpt burst with a 1 s window, profiler and trace export; 14 s measured", profiled),
    Row("cudnn_benchmark off-on, on-off", 6, 22,
        "4 resnet50 synthetic bursts; 20 s measured", cudnn_both_orders),
    Row("grad_accum=4, fp16", 7, 6,
        "1 gpt burst, 4 micro-batches a step; 5 s measured", grad_accum_fp16),
    Row("NVML, real data", 8, 7,
        "1 resnet50 burst on JPEGs with 8 workers; 5 s measured", nvml_real_data),
    Row("comm benchmark", 9, 12,
        "torchrun and NCCL start-up, 8 KiB-256 MiB all-reduces; 10 s measured", comm),
    Row("compile max-autotune (tf32)", 10, 85,
        "the rest of the budget: on torch 2.11 it failed (AssertionError) after ~95 s, and a "
        "full autotune of the gpt's matmuls ran past 140 s; last, so a timeout here keeps "
        "every other row", compile_burst("max-autotune")),
)  # fmt: skip

FIRST_CALL = tuple(r for r in ROWS if r.label != "compile max-autotune (tf32)")
"""The check in the session's first call: every row but max-autotune, which is a call of its
own (its autotuning alone took 95 s to past 140 s on one H200)."""
MAX_AUTOTUNE = tuple(r for r in ROWS if r.label == "compile max-autotune (tf32)")


def _cnn(label: str, **kw: Any) -> Callable[[RowRun], None]:
    def run(run: RowRun) -> None:
        run.burst(label, "cnn", Knobs(**{"batch_size": 8, **kw}))

    return run


REHEARSAL: tuple[Row, ...] = (
    Row("rehearsal: cnn, resident batch", 1, 5, "a CPU rehearsal's row: one small burst",
        _cnn("resident batch", loader="synthetic")),
    Row("rehearsal: cnn, JPEGs, 1 worker", 2, 5, "a CPU rehearsal's row: one small burst",
        _cnn("JPEGs, 1 worker", num_workers=1)),
    Row("rehearsal: cnn, resident batch again", 3, 5, "a CPU rehearsal's row: one small burst",
        _cnn("resident batch again", loader="synthetic")),
)  # fmt: skip
"""What ``gpu_check.py --rehearse`` runs on a CPU: the GPU rows need CUDA, and the rehearsal
proves the plumbing (rows written as they end, the budget, a crash's resume), not the GPU."""

# -- loss parity (issue 40): does the faster config still train the same? ---------------------

WITHIN = ("identical", "within-noise")
NOT_DIVERGED = ("identical", "within-noise", "drifting")


Candidates = dict[str, tuple[Knobs, bool]]
"""A parity row's candidates: label -> (knobs, GradScaler on)."""


def parity_row(workload: str, reference: Knobs, candidates: Candidates, steps: int,
               must: dict[str, tuple[str, ...]]) -> Callable[[RowRun], None]:  # fmt: skip
    """One ``wb.parity`` of ``candidates`` (label: knobs, GradScaler on) against ``reference``
    on ``workload``, sharing the reference's two runs. Each candidate's verdict, numbers and
    loss curves go into the row's facts (``parity``: the kept run's figures); a label in
    ``must`` must reach one of its verdicts, with no defect."""

    def row(run: RowRun) -> None:
        labels = list(candidates)
        results = run.tools.parity(
            workload, reference, [candidates[n][0] for n in labels], steps=steps,
            device=run.device, data_dir=run.data_dir, scaler=[candidates[n][1] for n in labels],
        )  # fmt: skip
        kept = run.facts.setdefault("parity", {})
        for label, r in zip(labels, results, strict=True):
            kept[f"{workload}: {label}"] = parity_facts(r)
            allowed = must.get(label)
            if allowed is not None:
                run.expect(f"{workload} {label}: parity {' or '.join(allowed)}",
                           r.verdict in allowed and not r.defects,
                           "; ".join([r.reason, *r.defects]))  # fmt: skip

    return row


def parity_facts(r: Any) -> dict[str, Any]:
    """What the kept run holds of one parity result: the evidence a saved config keeps, the
    reason, defects, both runs of the reference and the candidate's losses, the time."""
    return {
        **r.evidence(), "candidate": r.candidate.changes(), "reason": r.reason,
        "defects": list(r.defects), "grad_norm_max_rel_dev": r.grad_norm_max_rel_dev,
        "band_from": r.band_from, "reference_losses": r.reference_losses,
        "reference2_losses": r.reference2_losses, "candidate_losses": r.candidate_losses,
        "seconds": round(r.seconds, 1), "device": r.device,
    }  # fmt: skip


def compile_parity(run: RowRun) -> None:
    """compile=default against eager, in bf16, on resnet50 then gpt:124m."""
    for workload, knobs, steps in (("resnet50", Knobs(**_R50, precision="bf16"), 30),
                                   ("gpt:124m", Knobs(**_124M, precision="bf16"), 20)):  # fmt: skip
        compiled = {"compile=default": (knobs.replace(compile="default"), True)}
        parity_row(workload, knobs, compiled, steps, {"compile=default": WITHIN})(run)


_R50 = {"batch_size": 64, "num_workers": 8}  # JPEGs, each sample's augmentation seeded
_124M = {"batch_size": 8}


def half_precisions(base: dict[str, Any]) -> Candidates:
    """bf16, fp16 with its GradScaler and fp16 without it, at ``base``'s other knobs."""
    return {"bf16": (Knobs(**base, precision="bf16"), True),
            "fp16": (Knobs(**base, precision="fp16"), True),
            "fp16, no scaler": (Knobs(**base, precision="fp16"), False)}  # fmt: skip


PARITY: tuple[Row, ...] = (
    Row("parity resnet50: bf16, fp16 with and without its scaler", 1, 80,
        "resnet50 on JPEGs at batch 64, 30 steps: the default twice and 3 candidates, 5 "
        "traces of ~10 s (a burst's ~7 s and set-up; not yet timed on a GPU)",
        parity_row("resnet50", Knobs(**_R50), half_precisions(_R50), 30,
                   {"bf16": WITHIN, "fp16": WITHIN})),
    Row("parity gpt:124m: bf16, fp16 with and without its scaler, fp8", 2, 150,
        "gpt:124m at batch 8 (8,192 tokens a step), 20 steps: the default (fp32) twice and 4 "
        "candidates, 6 traces of ~20 s; fp8 eager (its casts unfused: slow, the numbers the "
        "same); a guess, not yet timed",
        parity_row("gpt:124m", Knobs(**_124M), {
            **half_precisions(_124M),
            "fp8 tensorwise": (Knobs(**_124M, precision="bf16", fp8="tensorwise"), True),
        }, 20, {"bf16": WITHIN, "fp16": WITHIN, "fp8 tensorwise": NOT_DIVERGED})),
    Row("parity compile=default: resnet50 and gpt:124m, in bf16", 3, 200,
        "each model's bf16 eager twice and compiled once: a cold compile of resnet50 and of "
        "gpt:124m (~60 s each, a guess from the tiny gpt's 14.5 s) and 4 eager traces",
        lambda run: compile_parity(run)),
)  # fmt: skip
"""The loss-parity rows (issue 40), a call of their own (``gpu_session.py``'s ``parity``
step): bf16, fp16 (with and without its GradScaler), fp8 and compile against each model's
reference, from the same weights on the same batches (``workbench.analysis.parity``)."""

REHEARSAL_PARITY: tuple[Row, ...] = (
    Row("rehearsal: cnn parity, bf16 and num_workers=1", 1, 20,
        "a CPU rehearsal's row: the default twice, bf16 and one loader worker, 3 steps each",
        parity_row("cnn", Knobs(batch_size=8), {
            "bf16": (Knobs(batch_size=8, precision="bf16"), True),
            "num_workers=1": (Knobs(batch_size=8, num_workers=1), True),
        }, 3, {"bf16": WITHIN, "num_workers=1": ("identical",)})),
)  # fmt: skip
"""What ``gpu_check.py --rows parity --rehearse`` runs on a CPU: the parity rows' plumbing."""

ROW_SETS: dict[str, tuple[Row, ...]] = {"all": ROWS, "first": FIRST_CALL,
                                        "max-autotune": MAX_AUTOTUNE, "parity": PARITY}  # fmt: skip
REHEARSALS: dict[str, tuple[Row, ...]] = {"parity": REHEARSAL_PARITY}
"""A row set's own CPU rehearsal; the others rehearse with ``REHEARSAL``."""

SETUP_EST_S = 8.0
SETUP_WHY = ("Python, torch, CUDA and NVML start, the default data set (800 JPEGs on 16 worker "
             "processes) and the token file: 6 s measured")  # fmt: skip
