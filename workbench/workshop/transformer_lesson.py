"""Lesson 12's helpers ("A transformer on a GPU"): its bursts as the frames the workshop's
checks read, the published run its tokens/s stand beside (llm.c's GPT-2 124M), what a rank
holds with activation checkpointing and with FSDP, float8 where the hardware has it, and the
checks of the exercises the workshop's own checkers do not cover.

The lesson runs ``gpt:124m`` (GPT-2 small at 1,024 tokens) on a GPU, at a batch (and, where
memory is short, a sequence) chosen from the device's free memory so that every burst fits a
1g.10gb MIG slice (``transformer_sizing``, :func:`here`), and the tiny ``gpt`` on a CPU
(``lesson_plans.lesson_plan("12")``). Three exercises are the core (bf16; compile and CUDA
graphs; what activation checkpointing frees on the learner's own device and model), the rest
optional; each section measures the baseline it compares with when an earlier section did not
(:func:`baseline`), so sections run in any order. MFU is read against the peak of the math
that ran (:func:`math_mfu`): at the default math a transformer's matmuls run IEEE fp32, so its
peak is the CUDA cores', not TF32's. Some of what it teaches cannot act on every machine,
and each such part says so with the workbench's own reason instead of a number made up:

- CUDA graphs (``compile="reduce-overhead"``) need CUDA: a CPU measures one compile at most
  (``compile="default"``, :data:`CPU_COMPILE`), since a cold compile of the tiny gpt costs
  tens of seconds on a small CPU and lesson 11 measures compile's break-even there already;
- FSDP shards over the ranks of a job: with one GPU there is nothing to shard across, so the
  comparison runs on this machine's CPU with two gloo ranks, labelled
  (:func:`memory_per_rank`); where two ranks run, the checkpointed and the one-rank bursts
  run there too, so the table compares one model on one device;
- float8 needs float8 tensor cores (compute capability 8.9+): elsewhere no burst runs and
  the refusal is the one a burst would report in ``no_effect`` (:func:`measure_fp8`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from workbench.analysis.sharding_compare import ShardingComparison, compare_sharding
from workbench.analysis.sweeps import bursts_frame
from workbench.core.knobs import Knobs
from workbench.distributed.dispatch import run_burst
from workbench.engine import hardware
from workbench.engine.fp8 import fp8_no_effect
from workbench.engine.workloads import resolve_workload
from workbench.engine.workloads.gpt import GPT_SIZES, TinyGPT
from workbench.engine.workloads.transformer_flops import train_flops_per_sample
from workbench.history.exercise_rules import Rule
from workbench.workshop import reference, transformer_sizing
from workbench.workshop.checks import (
    PREDICTION_TOL,
    Check,
    _judge_first,
    _never_raises,
    check_prediction,
    graded_by,
)
from workbench.workshop.lesson_plans import lesson_plan
from workbench.workshop.memory_lesson import held_mib, memory_table

if TYPE_CHECKING:
    from workbench.core.results import BurstResult

__all__ = ["CPU_COMPILE", "FP8", "LLMC", "LLMC_H100", "MEMORY", "TORCHTITAN_H100", "Anchor",
           "Fp8Run", "Here", "MemoryHere", "MemoryPerRank", "StepRun", "baseline",
           "beside_llmc", "check_fp8", "check_memory", "compile_modes", "fp8_published",
           "frame", "here", "llmc_anchor", "llmc_note", "math_mfu", "measure_fp8",
           "memory_here", "memory_per_rank", "packing_limit", "table", "torchtitan_published",
           "window"]  # fmt: skip

LESSON = "12"
MEMORY = "12-memory"
"""Exercise 3's name on the class board (and in ``commit_prediction``)."""


@dataclass(frozen=True)
class Here:
    """What the lesson runs on this device: its workload (a name, or ``gpt:124m`` at a
    shorter sequence), its starting knobs, and on a GPU how the batch was chosen."""

    workload: Any
    base: Knobs
    sizing: transformer_sizing.Sizing | None = None

    def __repr__(self) -> str:
        name = getattr(self.workload, "name", self.workload)
        if self.sizing is None:
            return (f"{name} at batch {self.base.batch_size} on this CPU: memory is not the "
                    "limit here, time is (a few steps a burst)")  # fmt: skip
        return f"{name}: {self.sizing.sentence()}"


def here(gpu: bool, *, size: Callable[[Any], transformer_sizing.Sizing] | None = None) -> Here:
    """The lesson's plan on this device: on a CPU the plan as it stands (the tiny gpt); on a GPU
    ``gpt:124m`` at the batch and sequence ``transformer_sizing`` chose from the free memory
    (``size`` stands in for the measurement in tests)."""
    plan = lesson_plan(LESSON, gpu)
    if not gpu:
        return Here(plan.workload, plan.base)
    sizing = (size or transformer_sizing.size_here)(resolve_workload(plan.workload))
    workload = transformer_sizing.workload_at(plan.workload, sizing.seq)
    return Here(workload, plan.base.replace(batch_size=sizing.batch), sizing)


def baseline(runs: dict[str, BurstResult], name: str, workload: Any, knobs: Knobs, *,
             run: Callable[..., BurstResult] = run_burst, **burst: Any) -> BurstResult:  # fmt: skip
    """``runs[name]``, measured now (and kept there) when the section that measures it did not
    run: a section never stops on a missing row. Says so in one line when it measures."""
    if name not in runs:
        print(f"{name}: not measured yet (its section did not run here): measuring it now.")
        runs[name] = run(workload, knobs, **burst)
    return runs[name]


def window(gpu: bool) -> dict[str, Any]:
    """The lesson's burst window: 2 s on a GPU (several ``gpt:124m`` steps, even in the default
    math). On a CPU a few steps: the tiny gpt's step takes a fraction of a second on two quiet
    cores and seconds on loaded ones, and the lesson runs eight bursts and a two-rank
    job there; its checks judge what these bursts measured, noise included."""
    if gpu:
        return {"seconds": 2.0, "warmup_steps": 3, "min_steps": 5}
    return {"seconds": 0.3, "warmup_steps": 2, "min_steps": 2}


# -- the bursts as frames ------------------------------------------------------------------------

SHOWN = ("status", "tokens_per_s", "samples_per_s", "mfu_pct", "peak_math", "step_ms_p50",
         "peak_mem_mib", "compile_s", "attention_backend", "pad_share_pct",
         "no_effect")  # fmt: skip
"""The columns a learner reads beside the knob a table varies."""


def frame(results: Iterable[BurstResult], knob: str) -> pd.DataFrame:
    """Bursts that differ in ``knob`` as one frame, shaped like a sweep's (what the workshop's
    checks read: ``check_speedup``, ``check_best``). The lesson runs each burst once and uses
    it in every table it belongs to (the bf16 eager burst is the precision table's bf16 row,
    the compile table's ``off`` row and the attention table's ``auto`` row), so a slow
    ``gpt:124m`` burst is never measured twice. ``mfu_pct`` is read against the peak of the
    math that ran (:func:`math_mfu`), named in ``peak_math``."""
    results = list(results)
    out = bursts_frame(results, knob=knob)
    if len(out) == len(results):
        read = [math_mfu(r) for r in results]
        out["mfu_pct"] = [mfu for mfu, _ in read]
        out["peak_math"] = [math for _, math in read]
    return out


MATH = {"default": "fp32", "fp32-strict": "fp32", "fp32": "fp32", "tf32": "tf32",
        "bf16": "bf16", "fp16": "fp16"}  # fmt: skip
"""The datasheet column whose peak a transformer's matmuls ran at, per precision: at the
default math PyTorch runs matmuls in IEEE fp32 (``allow_tf32`` is off for matmuls), so the
CUDA cores' fp32 peak, not TF32's (which the engine's MFU uses for ``default``: a convnet's
convolutions run TF32 there)."""
MATH_WORDS = {"fp32": "IEEE fp32", "tf32": "TF32", "bf16": "bf16", "fp16": "fp16"}


def math_mfu(r: BurstResult) -> tuple[float | None, str | None]:
    """``(mfu_pct, peak_math)``: the burst's MFU against the peak of the math its matmuls ran
    (:data:`MATH`), and that math in words; ``(None, None)`` where unknown (a CPU, a failed
    burst, a GPU without that peak)."""
    column = MATH.get(r.knobs.precision)
    if not r.ok or r.achieved_tflops is None or column is None or not r.device_name:
        return None, None
    sms = r.mig["sms"] if r.mig else None
    peak = hardware.peak_flops(r.device_name, column, sms=sms)
    if not peak:
        return None, None
    return 100.0 * r.achieved_tflops * 1e12 / peak, MATH_WORDS[column]


def table(df: pd.DataFrame) -> pd.DataFrame:
    """``df``'s varied knob (``attrs["knob"]``) and the columns a learner reads."""
    knob = df.attrs.get("knob")
    columns = [c for c in (knob, *SHOWN) if c and c in df.columns]
    return df[columns]


CPU_COMPILE = (
    "On a CPU this lesson measures one compile, compile=default: a cold compile of the tiny gpt "
    "takes tens of seconds on a small CPU, and lesson 11 measures compile's break-even there. "
    "compile=reduce-overhead adds CUDA graphs, which need CUDA (a CPU burst compiles without "
    "them and says so in no_effect), so what graphs save (the launch of every kernel, one by "
    "one, each step) cannot be shown here: on a GPU this cell measures both modes."
)


def compile_modes(gpu: bool) -> tuple[str, ...]:
    """The compile modes the lesson measures here: eager, and on a GPU both compiled modes;
    on a CPU one compile (:data:`CPU_COMPILE` says why)."""
    return ("off", "default", "reduce-overhead") if gpu else ("off", "default")


# -- llm.c's published run, and this device beside it ----------------------------------------

LLMC = ("llmc-gpt2-124m-tokens", "llmc-gpt2-124m-minutes", "llmc-gpt2-124m-mfu")
"""llm.c's GPT-2 (124M) reproduction as published (``notebooks/reference/transformer.json``)."""
SAME_MODEL = "the same model, one GPU"
FOR_SCALE = "for scale: another model or device"
DATASHEETS = {"a100": ("nvidia-a100-bf16-dense", "nvidia-a100-80gb-sxm-bandwidth"),
              "h100": ("nvidia-h100-bf16-dense", "nvidia-h100-sxm-bandwidth"),
              "h200": ("nvidia-h200-bf16-dense", "nvidia-h200-sxm-bandwidth")}  # fmt: skip
"""Per GPU: NVIDIA's dense bf16 peak and memory bandwidth entries (``datasheets.json``)."""
LLMC_H100 = ("llmc-gpt2-124m-h100-step-ms", "llmc-gpt2-124m-tokens-per-step")
"""llm.c's same run on 8x H100 (modded-nanogpt's llm.c record: its median step) and the launch
script's tokens a step: the H100's published per-GPU rate follows from the two."""


@dataclass(frozen=True, slots=True)
class StepRun:
    """A published run given as a median step of a known size: its per-GPU rate, computed."""

    step_ms: float
    tokens_per_step: float
    gpus: int
    hardware: str
    url: str
    published: str
    read_on: str
    cited: str

    @property
    def per_gpu(self) -> float:
        """Tokens a second a GPU: a step's tokens over its time, shared by the GPUs."""
        return self.tokens_per_step / (self.step_ms / 1000.0) / self.gpus


@dataclass(frozen=True, slots=True)
class Anchor:
    """llm.c's published run and what follows from it, computed from the reference entries:
    the one copy the lesson and the GPU session's table (``benchmarks/gpu_transformer``) use."""

    tokens: float
    minutes: float
    gpus: int
    hardware: str
    mfu_said: float
    """llm.c's own MFU (its own FLOP count)."""
    url: str
    published: str
    read_on: str
    cited: str
    peaks: dict[str, float]
    """TFLOP/s, dense bf16, by "a100" / "h100" / "h200"."""
    bandwidth: dict[str, float]
    """GB/s, by the same keys."""
    flops_per_token: float
    """This workbench's count for gpt:124m (6N + attention)."""
    h100: StepRun | None = None
    """llm.c's same model on 8x H100 (``LLMC_H100``); None where the entries are absent."""

    @property
    def per_gpu(self) -> float:
        """Tokens a second a GPU: the run's tokens over its wall time, shared by its GPUs."""
        return self.tokens / (self.minutes * 60.0) / self.gpus

    def mfu_needed_pct(self, gpu: str) -> float:
        """The MFU at which one ``gpu`` ("a100", "h100", "h200") matches :attr:`per_gpu`."""
        return 100.0 * self.per_gpu * self.flops_per_token / (self.peaks[gpu] * 1e12)

    @property
    def mfu_pct(self) -> float:
        """That rate's MFU on the A100's dense bf16 peak, by this workbench's FLOP count."""
        return self.mfu_needed_pct("a100")

    @property
    def h100_mfu_pct(self) -> float | None:
        """llm.c's H100 rate as MFU of the H100 SXM's dense bf16 peak, by this workbench's
        count (its H100s are HBM3 parts: the SXM's)."""
        if self.h100 is None:
            return None
        return 100.0 * self.h100.per_gpu * self.flops_per_token / (self.peaks["h100"] * 1e12)

    def mfu_at(self, peak_flops: float | None, rate: float | None = None) -> float | None:
        """The MFU at which a GPU of ``peak_flops`` (FLOP/s, dense bf16: the measured device's
        own, ``hardware.peak_flops``) runs ``rate`` tokens/s (default :attr:`per_gpu`)."""
        if not peak_flops:
            return None
        return 100.0 * (self.per_gpu if rate is None else rate) * self.flops_per_token / peak_flops


def gpt_124m_flops_per_token() -> float:
    """Training FLOPs a token of ``gpt:124m`` (6N + attention), counted on the meta device."""
    s = GPT_SIZES["124m"]
    per_sample = train_flops_per_sample(lambda: TinyGPT(s), lambda m: m.head, s.layers, s.width,
                                        s.block)  # fmt: skip
    return per_sample / s.block


def llmc_anchor(refs: Iterable[reference.Reference] | None = None) -> Anchor:
    """llm.c's per-GPU rate and MFU (``LLMC``, the datasheets' peaks), computed, never typed."""
    refs = list(reference.load() if refs is None else refs)
    tokens, minutes, said = (reference.find(i, refs) for i in LLMC)
    return Anchor(
        tokens=tokens.value, minutes=minutes.value, gpus=tokens.gpus or 1,
        hardware=tokens.hardware, mfu_said=said.value, url=tokens.url,
        published=tokens.published, read_on=tokens.read_on, cited=tokens.cited(),
        peaks={k: reference.find(p, refs).value for k, (p, _) in DATASHEETS.items()},
        bandwidth={k: reference.find(b, refs).value for k, (_, b) in DATASHEETS.items()},
        flops_per_token=gpt_124m_flops_per_token(), h100=_h100_run(refs),
    )  # fmt: skip


def _h100_run(refs: list[reference.Reference]) -> StepRun | None:
    try:
        step, batch = (reference.find(i, refs) for i in LLMC_H100)
    except KeyError:
        return None
    return StepRun(step_ms=step.value, tokens_per_step=batch.value, gpus=step.gpus or 1,
                   hardware=step.hardware, url=step.url, published=step.published,
                   read_on=step.read_on, cited=step.cited())  # fmt: skip


def beside_llmc(
    results: Mapping[str, BurstResult], refs: Iterable[reference.Reference] | None = None
) -> pd.DataFrame:
    """The learner's bursts (tokens/s and MFU, per label) over llm.c's per-GPU rate: the same
    model on an A100 in a long run, computed from the entries. ``compares`` says how a row
    stands to it: ``gpt:124m`` on one GPU is the same model; anything else is for scale."""
    a = llmc_anchor(refs)
    rows = []
    for label, r in results.items():
        same = r.workload == "gpt:124m" and str(r.device).startswith("cuda")  # 1,024 tokens
        rows.append({"where": r.device_name or r.device, "run": label, "workload": r.workload,
                     "tokens_per_s": r.tokens_per_s if r.ok else None,
                     "mfu_pct": math_mfu(r)[0],
                     "compares": SAME_MODEL if same else FOR_SCALE,
                     "source": "your burst"})  # fmt: skip
    if a.h100 is not None:
        rows.append({"where": f"llm.c: {a.h100.hardware}, per GPU",
                     "run": "GPT-2 (124M), bf16, the same run", "workload": "gpt:124m",
                     "tokens_per_s": round(a.h100.per_gpu),
                     "mfu_pct": round(a.h100_mfu_pct, 1), "compares": "published, on an H100",
                     "source": a.h100.cited})  # fmt: skip
    rows.append({"where": f"llm.c: {a.hardware}, per GPU", "run": "GPT-2 (124M), bf16, 10B tokens",
                 "workload": "gpt:124m", "tokens_per_s": round(a.per_gpu),
                 "mfu_pct": round(a.mfu_pct, 1), "compares": "the published anchor",
                 "source": a.cited})  # fmt: skip
    return pd.DataFrame(rows)


def llmc_note(refs: Iterable[reference.Reference] | None = None) -> str:
    """llm.c's rate in a sentence, and the MFU an H100 or an H200 needs to match it per GPU:
    every figure computed from the entries."""
    a = llmc_anchor(refs)
    peak = {gpu.upper(): tflops for gpu, tflops in a.peaks.items()}
    return (f"llm.c trained GPT-2 (124M) on {a.tokens:,.0f} tokens in about "
            f"{a.minutes:.0f} minutes on {a.hardware}: {a.per_gpu:,.0f} tokens/s per GPU "
            f"({LLMC[0]}, {LLMC[1]}). At {a.flops_per_token / 1e6:,.0f} MFLOP a token (this "
            f"workbench's count for gpt:124m: 6N + attention) that is {a.mfu_pct:.0f}% MFU of "
            f"the A100's {peak['A100']:,.0f} TFLOP/s dense bf16 peak (llm.c said about "
            f"{a.mfu_said:.0f}% by its own count). An H100 SXM and an H200 have the same dense "
            f"bf16 peak, {peak['H200']:,.1f} TFLOP/s ({peak['H200'] / peak['A100']:.1f}x the "
            f"A100's; the H200's memory is the faster): one of them matches llm.c's per-GPU "
            f"rate at {a.mfu_needed_pct('h200'):.0f}% MFU. Read your mfu_pct against "
            f"that.{_h100_sentence(a)}")  # fmt: skip


def _h100_sentence(a: Anchor) -> str:
    if a.h100 is None:
        return ""
    h = a.h100
    return (f" On {h.hardware} the same run took a median {h.step_ms:.0f} ms a step of "
            f"{h.tokens_per_step:,.0f} tokens ({LLMC_H100[0]}, {LLMC_H100[1]}): "
            f"{h.per_gpu:,.0f} tokens/s per GPU, {a.h100_mfu_pct:.0f}% MFU of the H100 SXM's "
            "peak.")  # fmt: skip


# -- memory per rank: activation checkpointing and FSDP ----------------------------------------

ONE_RANK = "baseline"
"""The one-rank burst's row: what a DDP rank holds too (each holds a whole replica)."""


@dataclass
class MemoryPerRank:
    """What a rank holds with the lesson's knobs, with activation checkpointing, and with
    FSDP on two ranks: one model on one device (``where``)."""

    where: str
    baseline: BurstResult
    checkpointed: BurstResult
    sharded: ShardingComparison
    not_here: str | None = None
    """Why the comparison did not run on the lesson's own device (one GPU), or None."""
    on_this_gpu: dict[str, BurstResult] = field(default_factory=dict)
    """Where it ran elsewhere: the lesson's own model with and without checkpointing on this
    GPU (not judged: another model than the table's)."""

    def heading(self) -> str:
        """Where the table was measured, and why there when it is not the lesson's device."""
        if self.not_here:
            return (f"Not on this GPU: {self.not_here}. Measured instead on {self.where}; "
                    "the lesson's own model is checkpointed on this GPU below "
                    "(gpu_table).")  # fmt: skip
        return f"Measured on {self.where}."

    def table(self) -> pd.DataFrame:
        """``memory_lesson.memory_table`` of the three (most freed first), with ``where``:
        per rank, parameters + gradients + optimizer state + activations (exact tensor bytes
        on a CPU; the peak allocated on CUDA)."""
        runs = {ONE_RANK: self.baseline, "activation_checkpointing": self.checkpointed}
        runs.update(self.sharded.results)
        out = memory_table(runs, baseline=ONE_RANK)
        out.insert(1, "where", self.where)
        return out

    def gpu_table(self) -> pd.DataFrame | None:
        """The lesson's model on this GPU with and without checkpointing, or None."""
        return memory_table(self.on_this_gpu) if self.on_this_gpu else None


def memory_per_rank(
    workload: str,
    knobs: Knobs,
    baseline: BurstResult,
    *,
    gpu: bool,
    ranks_here: int | None = None,
    cpu_window: Mapping[str, Any] | None = None,
    run: Callable[..., BurstResult] = run_burst,
    compare: Callable[..., ShardingComparison] = compare_sharding,
    checkpointed: BurstResult | None = None,
    **burst: Any,
) -> MemoryPerRank:
    """Activation checkpointing on one rank and FSDP on two, against ``baseline`` (a burst of
    ``workload`` with ``knobs`` on one rank, already measured); ``checkpointed``: the same
    with activation checkpointing, where section 3 measured it already (not measured again).

    Where two ranks run here (a CPU's gloo processes, two GPUs or more), everything runs with
    the lesson's workload on this device. With one GPU ``compare_sharding`` skips with its
    reason; the three then run on this machine's CPU with the lesson's CPU plan (the tiny
    gpt, ``cpu_window``: :func:`window` by default), labelled, and the lesson's own model is
    checkpointed on the GPU beside them (``on_this_gpu``). ``burst``: the bursts' window and
    options; ``run`` and ``compare`` stand in for the bursts in tests."""
    ranks = (torch.cuda.device_count() if gpu else 2) if ranks_here is None else ranks_here
    cpu_window = window(False) if cpu_window is None else cpu_window

    def here_ckpt() -> BurstResult:
        return checkpointed or run(workload, knobs.replace(activation_checkpointing=True), **burst)

    if gpu:
        tried = compare(workload, knobs, world_size=min(ranks, 2), cases=["fsdp"], **burst)
        if tried.skipped is None:
            ckpt = here_ckpt()
            return MemoryPerRank(f"this GPU and another, {workload}", baseline, ckpt, tried)
        gpu_ckpt = here_ckpt()
        cpu = lesson_plan(LESSON, gpu=False)
        opts = dict(cpu_window, device="cpu")
        out = _on(cpu.workload, cpu.base, run(cpu.workload, cpu.base, **opts), run, compare,
                  opts, f"this machine's CPU, {cpu.workload}, two gloo ranks (one GPU cannot "
                        "shard)")  # fmt: skip
        out.not_here = tried.skipped
        out.on_this_gpu = {ONE_RANK: baseline, "activation_checkpointing": gpu_ckpt}
        return out
    return _on(workload, knobs, baseline, run, compare, dict(burst, device="cpu"),
               f"this CPU, {workload}, two gloo ranks", checkpointed)  # fmt: skip


def _on(workload: str, knobs: Knobs, baseline: BurstResult, run: Callable[..., BurstResult],
        compare: Callable[..., ShardingComparison], opts: Mapping[str, Any],
        where: str, checkpointed: BurstResult | None = None) -> MemoryPerRank:  # fmt: skip
    ckpt = checkpointed or run(workload, knobs.replace(activation_checkpointing=True), **opts)
    sharded = compare(workload, knobs, world_size=2, cases=["fsdp"], **opts)
    return MemoryPerRank(where, baseline, ckpt, sharded)


@dataclass(frozen=True)
class MemoryHere:
    """The lesson's own model on the learner's own device, with and without activation
    checkpointing: what Exercise 3 judges."""

    baseline: BurstResult
    checkpointed: BurstResult

    @property
    def freed_pct(self) -> float | None:
        """The share of the baseline's memory (``memory_lesson.held_mib``: peak allocated on
        CUDA, the training tensors' bytes elsewhere) that checkpointing freed, in percent."""
        base, held = held_mib(self.baseline), held_mib(self.checkpointed)
        if base is None or held is None or base <= 0 or not self.checkpointed.ok:
            return None
        return 100.0 * (base - held) / base

    def table(self) -> pd.DataFrame:
        """``memory_lesson.memory_table`` of the two, with the share freed."""
        runs = {ONE_RANK: self.baseline, "activation_checkpointing": self.checkpointed}
        out = memory_table(runs, baseline=ONE_RANK)
        held = held_mib(self.baseline)
        out["freed_pct"] = [None if f is None or not held else round(100 * f / held, 1)
                            for f in out["freed_mib"]]  # fmt: skip
        return out


def memory_here(
    workload: Any, knobs: Knobs, base: BurstResult, *,
    run: Callable[..., BurstResult] = run_burst, **burst: Any,
) -> MemoryHere:  # fmt: skip
    """``base`` (the lesson's eager burst) and the same knobs with activation checkpointing,
    on the same device: the learner's own model, not a stand-in."""
    return MemoryHere(base, run(workload, knobs.replace(activation_checkpointing=True), **burst))


@_never_raises(exercise=MEMORY)
def check_memory(prediction: float | None, memory: MemoryHere) -> Check:
    """Exercise 3: the predicted share of memory (percent) checkpointing frees on this device
    and model, against the measured one: within 25% of it or 10 points, its rule in
    ``exercise_rules.RULES`` (a prediction is made blind; the share moves with the batch, as
    the lesson says)."""
    freed = memory.freed_pct
    if freed is None:
        r = memory.checkpointed
        raise ValueError(f"the memory was not measured (checkpointed burst: {r.status} "
                         f"{r.error or ''})".strip())  # fmt: skip
    what = "the share of memory checkpointing frees (%)"
    return check_prediction(prediction, round(freed, 1), exercise=MEMORY, what=what)


def packing_limit(df: pd.DataFrame) -> float | None:
    """The most ``packing="pack"`` can give over ``"pad"`` here: every padded token turned into
    a real one, 1 / (1 - the pad rows' padding share); None where it was not measured."""
    rows = df[(df["packing"] == "pad") & (df["status"] == "ok")] if "packing" in df else df[:0]
    shares = [float(v) for v in rows.get("pad_share_pct", []) if v is not None and v == v]
    if not shares or max(shares) >= 100:
        return None
    return 1.0 / (1.0 - max(shares) / 100.0)


# -- float8 ------------------------------------------------------------------------------------

FP8 = "12-fp8"
"""The fp8 exercise's name on the class board (and in ``commit_prediction``)."""


@dataclass(frozen=True, slots=True)
class Fp8Run:
    """float8 against the compiled bf16 burst it is compared with: its burst, or the reason it
    cannot act here (``refused``: what a burst would report in ``no_effect``)."""

    against: BurstResult
    fp8: BurstResult | None = None
    refused: str | None = None

    @property
    def ratio(self) -> float | None:
        """fp8 tokens/s over bf16 tokens/s, where both ran."""
        if self.fp8 is None or not self.fp8.ok or not self.against.ok:
            return None
        if not self.fp8.tokens_per_s or not self.against.tokens_per_s:
            return None
        return self.fp8.tokens_per_s / self.against.tokens_per_s

    def summary(self) -> str:
        """One line: the ratio and what it compares, or why there is none."""
        if self.refused or self.fp8 is None:
            return f"fp8 did not run here: {self.refused or 'no burst'}."
        if not self.fp8.ok:
            return f"the fp8 burst ended {self.fp8.status}: {self.fp8.error}"
        if self.ratio is None:
            return (f"the compiled bf16 burst fp8 is compared with ended "
                    f"{self.against.status}: {self.against.error}")  # fmt: skip
        return (f"fp8={self.fp8.knobs.fp8} ({self.fp8.fp8_linears} Linear layers in float8): "
                f"{self.fp8.tokens_per_s:,.0f} tokens/s against bf16's "
                f"{self.against.tokens_per_s:,.0f}, both compile={self.against.knobs.compile}: "
                f"{self.ratio:.2f}x")  # fmt: skip


def measure_fp8(
    workload: str,
    against: BurstResult,
    recipe: str = "tensorwise",
    *,
    device: str | torch.device | None = None,
    run: Callable[..., BurstResult] = run_burst,
    **burst: Any,
) -> Fp8Run:
    """``against``'s knobs with ``fp8=recipe`` in bf16 (what float8 is measured against: the
    same compiled bf16 step), where the device has float8 tensor cores; elsewhere no burst runs
    and ``refused`` is the reason a burst would give (``engine.fp8.fp8_no_effect``)."""
    knobs = against.knobs.replace(precision="bf16", fp8=recipe)
    dev = torch.device(device or against.device or "cpu")
    why = fp8_no_effect(knobs, dev).get("fp8")
    if why:
        return Fp8Run(against, refused=why)
    if against.knobs.precision != "bf16":
        raise ValueError(f"fp8 is compared with a bf16 burst; this one ran precision="
                         f"{against.knobs.precision}")  # fmt: skip
    r = run(workload, knobs, device=dev, **burst)
    if "fp8" in r.no_effect:  # a model without an eligible Linear layer, found in set-up
        return Fp8Run(against, r, refused=r.no_effect["fp8"])
    return Fp8Run(against, r)


@_never_raises(exercise=FP8)
def check_fp8(prediction: float | None, result: Fp8Run) -> Check:
    """Is the predicted fp8 / bf16 tokens/s ratio within 25% of the one measured here
    (``PREDICTION_TOL``: it is made blind)? Where fp8 could not run there is nothing to judge
    the prediction against: the verdict says so, and no answer goes to the class board."""
    if result.refused:
        return Check(False, f"fp8 cannot act on this machine ({result.refused}), so nothing was "
                            "measured to judge your prediction against: keep it for a GPU with "
                            "float8 tensor cores (Ada, Hopper, Blackwell), where this cell "
                            "measures it", exercise=FP8, answered=False)  # fmt: skip
    ratio = result.ratio
    if ratio is None:
        raise ValueError(result.summary())

    shown = round(ratio, 3)  # what the row carries: the server judges against this value
    rule = graded_by(FP8, Rule(rel_tol=PREDICTION_TOL))

    def judge(guess: Any) -> Check:
        if isinstance(guess, bool) or not isinstance(guess, (int, float)) or guess <= 0:
            return Check(False, f"the prediction is a ratio (a number > 0), not {guess!r}",
                         measured=shown)  # fmt: skip
        close = rule.accepts(guess, shown)
        return Check(close, f"{result.summary()} ({'within' if close else 'outside'} "
                            f"{rule.rel_tol:.0%} of your {guess:g})",
                     measured=shown)  # fmt: skip

    what = "fp8 tokens/s over bf16 tokens/s (both compiled), e.g. 1.2"
    return _judge_first(judge, prediction, exercise=FP8, what=what)


FP8_PUBLISHED = ("torchao-llama3-8b-bf16", "torchao-llama3-8b-fp8-tensorwise",
                 "torchao-llama3-8b-fp8-rowwise")  # fmt: skip
"""torchao's published float8 training run on 8 H100s (Llama 3 8B): bf16, then two recipes."""


TORCHTITAN_H100 = ("torchtitan-llama31-8b-h100-bf16", "torchtitan-llama31-8b-h100-compile",
                   "torchtitan-llama31-8b-h100-compile-fp8")  # fmt: skip
"""torchtitan's Llama 3.1 8B on 8 H100s (FSDP): bf16 eager, compiled, compiled with float8."""


def torchtitan_published(refs: Iterable[reference.Reference] | None = None) -> pd.DataFrame:
    """torchtitan's published H100 rows with each one's ratio over its bf16 eager row."""
    return _published_over_first(TORCHTITAN_H100, refs)


def fp8_published(refs: Iterable[reference.Reference] | None = None) -> pd.DataFrame:
    """torchao's published float8 rows with each one's ratio over its bf16 row, computed."""
    return _published_over_first(FP8_PUBLISHED, refs)


def _published_over_first(ids: Sequence[str],
                          refs: Iterable[reference.Reference] | None) -> pd.DataFrame:  # fmt: skip
    """Published rows ``ids``, each with its ratio over the first, its hardware and source."""
    refs = list(reference.load() if refs is None else refs)
    out = reference.ratios(ids, over=ids[:1], refs=refs)
    out["hardware"] = [reference.find(i, refs).hardware for i in ids]
    out["source"] = [reference.find(i, refs).cited() for i in ids]
    return out
