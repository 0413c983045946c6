"""Lesson 12's helpers: its frames (MFU against the peak of the math that ran), llm.c's run
computed from the entries (and the same as the GPU session's anchor), its batch sized to the
device's free memory so every burst fits a 1g.10gb slice, a section measuring the baseline an
earlier one did not, what checkpointing frees on the learner's own model (exercise 3), memory per
rank where two ranks run and where they cannot (one GPU), float8 refused without bursts where it
cannot act, and packing's limit."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from workbench.analysis.sharding_compare import ShardingComparison
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.workshop import checks as workshop
from workbench.workshop import reference
from workbench.workshop import transformer_lesson as lesson

_ROOT = Path(__file__).resolve().parents[2]


def _burst(tokens=1000.0, workload="gpt", device="cpu", **knobs):
    return BurstResult(status="ok", workload=workload, device=device, knobs=Knobs(**knobs),
                       tokens_per_s=tokens, samples_per_s=tokens / 256)  # fmt: skip


def _held(activations, params=40.0, knobs=None):
    parts = {"params_mib": params, "grads_mib": params, "optimizer_mib": 2 * params,
             "activations_mib": activations}  # fmt: skip
    return BurstResult(status="ok", device="cpu", knobs=knobs or Knobs(), samples_per_s=1.0,
                       memory_breakdown=parts)  # fmt: skip


@pytest.fixture(scope="module")
def gpu_transformer():
    """benchmarks/gpu_transformer.py, which the GPU session's anchor comes from (imported as
    publish_gpu.py imports it: the benchmarks folder on the path)."""
    bench = str(_ROOT / "benchmarks")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    return importlib.import_module("gpu_transformer")


def test_the_frame_is_what_the_workshops_checks_read():
    runs = [_burst(100.0, precision="default"), _burst(250.0, precision="bf16")]
    df = lesson.frame(runs, "precision")
    assert df.attrs["knob"] == "precision" and df["precision"].tolist() == ["default", "bf16"]
    assert list(lesson.table(df).columns[:3]) == ["precision", "status", "tokens_per_s"]
    workshop.commit_prediction(2.5, exercise="12-bf16")
    verdict = workshop.check_speedup(None, df, "precision", "bf16", "default",
                                     metric="tokens_per_s", prediction=2.5,
                                     exercise="12-bf16")  # fmt: skip
    assert verdict and verdict.measured == 2.5


def test_a_cpu_measures_one_compile_a_gpu_both_modes():
    assert lesson.compile_modes(gpu=False) == ("off", "default")
    assert lesson.compile_modes(gpu=True) == ("off", "default", "reduce-overhead")
    assert "CUDA graphs" in lesson.CPU_COMPILE and "lesson 11" in lesson.CPU_COMPILE


def test_llmc_is_computed_from_the_entries_and_the_gpu_session_reads_the_same(gpu_transformer):
    a = lesson.llmc_anchor()
    tokens, minutes = (reference.find(i) for i in lesson.LLMC[:2])
    assert a.per_gpu == pytest.approx(tokens.value / (minutes.value * 60) / tokens.gpus)
    a100_flops = a.peaks["a100"] * 1e12
    assert a.mfu_pct == pytest.approx(100 * a.per_gpu * a.flops_per_token / a100_flops)
    assert a.mfu_needed_pct("h200") < a.mfu_pct  # a faster peak needs a smaller share of it
    assert gpu_transformer.anchor() == a  # one computation: the session's table and the lesson
    note = lesson.llmc_note()
    assert f"{a.per_gpu:,.0f} tokens/s per GPU" in note
    assert f"at {a.mfu_needed_pct('h200'):.0f}% MFU" in note and "llmc-gpt2-124m-tokens" in note
    for ref_id in lesson.LLMC:
        assert "12" in reference.find(ref_id).lessons


def test_beside_llmc_names_what_compares_and_what_is_for_scale():
    on_gpu = _burst(300_000.0, workload="gpt:124m", device="cuda:0", precision="bf16")
    table = lesson.beside_llmc({"bf16": on_gpu, "cpu": _burst(500.0)})
    assert table["compares"].tolist() == [lesson.SAME_MODEL, lesson.FOR_SCALE,
                                          "published, on an H100",
                                          "the published anchor"]  # fmt: skip
    h100 = lesson.llmc_anchor().h100
    assert table["tokens_per_s"].iloc[-2] == round(h100.per_gpu)
    assert "H100" in table["where"].iloc[-2]
    assert table["tokens_per_s"].iloc[-1] == round(lesson.llmc_anchor().per_gpu)
    assert "discussions/481" in table["source"].iloc[-1]


class _Calls:
    """Stands in for run_burst and compare_sharding: records each call, returns a burst."""

    def __init__(self, ranks_skip: str | None = None):
        self.runs: list[tuple[str, Knobs, dict]] = []
        self.compares: list[tuple[str, Knobs, dict]] = []
        self.skip = ranks_skip

    def run(self, workload, knobs, **opts):
        self.runs.append((workload, knobs, opts))
        return _held(2.0 if knobs.activation_checkpointing else 30.0, knobs=knobs)

    def compare(self, workload, knobs, **opts):
        self.compares.append((workload, knobs, opts))
        out = ShardingComparison(workload=workload, world_size=opts["world_size"])
        if self.skip:
            out.skipped = self.skip
        else:
            out.results["fsdp"] = _held(30.0, params=20.0, knobs=knobs.replace(sharding="fsdp"))
        return out


def test_on_a_cpu_two_gloo_ranks_run_with_the_lessons_own_burst_as_the_one_rank():
    calls = _Calls()
    base = Knobs(batch_size=2, loader="synthetic")
    one = _held(30.0, knobs=base)
    memory = lesson.memory_per_rank("gpt", base, one, gpu=False, run=calls.run,
                                    compare=calls.compare, seconds=0.3)  # fmt: skip
    assert [k.activation_checkpointing for _, k, _ in calls.runs] == [True]  # one burst more
    ((workload, knobs, opts),) = calls.compares
    assert (workload, knobs, opts["world_size"], opts["cases"], opts["device"]) == (
        "gpt", base, 2, ["fsdp"], "cpu")  # fmt: skip
    table = memory.table()
    freed = dict(zip(table["change"], table["freed_mib"], strict=True))
    # one rank: 40 + 40 + 80 + 30 = 190; fsdp halves the states (80 freed), checkpointing 28
    assert freed == {"fsdp": 80.0, "activation_checkpointing": 28.0, "baseline": 0.0}
    assert set(table["where"]) == {"this CPU, gpt, two gloo ranks"}
    assert memory.heading() == "Measured on this CPU, gpt, two gloo ranks."
    assert memory.gpu_table() is None
    kept = _held(2.0, knobs=base.replace(activation_checkpointing=True))  # section 3's burst
    again = lesson.memory_per_rank("gpt", base, one, gpu=False, run=calls.run,
                                   compare=calls.compare, checkpointed=kept)  # fmt: skip
    assert len(calls.runs) == 1 and again.checkpointed is kept  # not measured twice


def test_with_one_gpu_the_comparison_runs_on_the_cpu_labelled_and_the_gpu_checkpoints():
    calls = _Calls(ranks_skip="fsdp shards over the ranks of a job: one GPU here")
    gpu_base = Knobs(batch_size=16, loader="synthetic", precision="bf16")
    eager = _held(900.0, params=500.0, knobs=gpu_base)
    memory = lesson.memory_per_rank("gpt:124m", gpu_base, eager, gpu=True, ranks_here=1,
                                    run=calls.run, compare=calls.compare,
                                    seconds=2.0)  # fmt: skip
    gpu_try, cpu_job = calls.compares
    assert gpu_try[0] == "gpt:124m" and gpu_try[2]["world_size"] == 1
    cpu = workshop.lesson_plan("12", gpu=False)
    assert (cpu_job[0], cpu_job[1], cpu_job[2]["device"]) == (cpu.workload, cpu.base, "cpu")
    assert cpu_job[2]["seconds"] == lesson.window(False)["seconds"]  # the CPU's window
    ran = [(w, k.activation_checkpointing, o.get("device")) for w, k, o in calls.runs]
    assert ran == [("gpt:124m", True, None), ("gpt", False, "cpu"), ("gpt", True, "cpu")]
    assert memory.not_here.startswith("fsdp shards") and "Not on this GPU" in memory.heading()
    assert "CPU" in memory.where and set(memory.table()["where"]) == {memory.where}
    assert memory.gpu_table()["change"].tolist()[0] == "activation_checkpointing"


def test_on_two_gpus_everything_runs_there():
    calls = _Calls()
    base = Knobs(batch_size=16, loader="synthetic", precision="bf16")
    memory = lesson.memory_per_rank("gpt:124m", base, _held(900.0), gpu=True, ranks_here=4,
                                    run=calls.run, compare=calls.compare)  # fmt: skip
    assert [c[2]["world_size"] for c in calls.compares] == [2]
    assert [(w, o.get("device")) for w, _, o in calls.runs] == [("gpt:124m", None)]
    assert memory.not_here is None and memory.gpu_table() is None


def test_fp8_runs_no_burst_where_it_cannot_act_and_says_why():
    ran = []
    against = _burst(1000.0, compile="default")  # the CPU's compiled burst (default math)
    result = lesson.measure_fp8("gpt", against, run=lambda *a, **k: ran.append(a))
    assert not ran and "float8 tensor cores" in result.refused and "CPU" in result.refused
    assert result.ratio is None and result.summary().startswith("fp8 did not run here")
    verdict = lesson.check_fp8(1.2, result)
    assert not verdict and not verdict.answered and "cannot act on this machine" in str(verdict)


def test_fp8_against_the_compiled_bf16_burst(monkeypatch):
    monkeypatch.setattr(lesson, "fp8_no_effect", lambda knobs, dev: {})
    against = _burst(1000.0, device="cuda:0", precision="bf16", compile="default")
    seen = []

    def run(workload, knobs, **opts):
        seen.append(knobs)
        return BurstResult(
            status="ok",
            workload=workload,
            device="cuda:0",
            knobs=knobs,
            tokens_per_s=1300.0,
            fp8_linears=48,
        )

    result = lesson.measure_fp8("gpt:124m", against, run=run, seconds=2.0)
    assert seen == [against.knobs.replace(fp8="tensorwise")]
    assert result.ratio == pytest.approx(1.3) and "1.30x" in result.summary()
    failed = lesson.Fp8Run(BurstResult(status="oom", error="out of memory"), result.fp8)
    assert failed.ratio is None and "ended oom" in failed.summary()
    assert "cannot be checked" in str(lesson.check_fp8(1.3, failed))
    with pytest.raises(ValueError, match="precision=default"):
        lesson.measure_fp8("gpt:124m", _burst(1000.0, device="cuda:0"), run=run)


def test_a_model_without_an_eligible_layer_is_a_refusal(monkeypatch):
    monkeypatch.setattr(lesson, "fp8_no_effect", lambda knobs, dev: {})
    r = _burst(1000.0, device="cuda:0", precision="bf16", fp8="tensorwise")
    r.no_effect = {"fp8": "no Linear layer of x can train in float8"}
    result = lesson.measure_fp8("x", _burst(900.0, device="cuda:0", precision="bf16"),
                                run=lambda *a, **k: r)  # fmt: skip
    assert result.refused == "no Linear layer of x can train in float8"


def test_torchaos_published_ratios_are_computed_from_the_entries():
    table = lesson.fp8_published()
    ratios = dict(zip(table["id"], table["x torchao-llama3-8b-bf16"], strict=True))
    values = {i: reference.find(i).value for i in lesson.FP8_PUBLISHED}
    bf16 = values["torchao-llama3-8b-bf16"]
    assert ratios == {i: round(v / bf16, 2) for i, v in values.items()}
    assert ratios["torchao-llama3-8b-fp8-tensorwise"] > ratios["torchao-llama3-8b-fp8-rowwise"]
    assert all("docs.pytorch.org/ao" in s for s in table["source"])


# -- the lesson in its 20 minutes: sized to the device, sections in any order, MFU of the math


def test_on_a_cpu_the_lesson_runs_the_tiny_gpt_and_says_time_is_the_limit():
    here = lesson.here(False)
    assert here.workload == "gpt" and here.sizing is None
    assert "memory is not the limit here" in repr(here)


def test_on_a_gpu_the_batch_comes_from_the_measured_memory_and_fits_a_1g_10gb_slice():
    """The issue's count (16 x 1,024 tokens keep 19.5 GiB in the default math: 1,248 MiB a
    sequence) with GPT-2 small's states (124,475,904 parameters at 18 bytes) and the loss's
    transient: a 1g.10gb slice and a whole 80 GB GPU get the same batch, under the slice."""
    from workbench.workshop import transformer_sizing as sizing
    from workbench.workshop.slices import MEMORY_MARGIN, profile_memory_mib

    per, states, loss = 19.5 * 1024 / 16, 124_475_904 * 18 / 2**20, 50_304 * 1024 * 8 / 2**20
    slice_mib = profile_memory_mib("1g.10gb")
    small, whole = (sizing.size_for(per, states, loss, free) for free in (slice_mib, 80e3))
    # (9,537 MiB x 0.9 - 2,137 of states) / (1,248 + 393 a sequence): 3 fit, so batch 2
    assert (small.batch, small.seq) == (whole.batch, whole.seq) == (2, 1024)
    assert small.fits and small.need_mib <= slice_mib * (1 - MEMORY_MARGIN)
    short = sizing.size_for(per, states, loss, 3050.0)  # 608 MiB beside the states
    assert (short.batch, short.seq) == (1, 256) and short.fits  # a shorter context, not an OOM
    tight = sizing.size_for(per, states, loss, states)
    assert not tight.fits and "expect status='oom'" in tight.sentence()
    made = lesson.here(True, size=lambda workload: sizing.size_for(per, states, loss, 80e3))
    assert made.workload == "gpt:124m" and made.base.batch_size == 2
    assert "Batch 2 x 1,024 tokens" in repr(made) and "1g.10gb" in repr(made)
    assert sizing.workload_at("gpt:124m", 512).name == "gpt:124m@512"


def test_what_one_sequence_keeps_is_measured_by_the_bursts_own_probe():
    from workbench.engine.workloads import resolve_workload
    from workbench.workshop import transformer_sizing as sizing

    tiny = sizing.per_sequence_mib(resolve_workload("gpt"), "cpu")
    assert 10 < tiny < 200  # the tiny gpt's 256 tokens: tens of MiB with math's scores


def test_a_section_measures_the_baseline_an_earlier_section_did_not(capsys):
    ran = []

    def run(workload, knobs, **burst):
        ran.append((workload, knobs.precision, burst))
        return _burst(workload=workload, precision=knobs.precision)

    runs = {}
    first = lesson.baseline(runs, "bf16", "gpt", Knobs(precision="bf16"), run=run, seconds=0.3)
    assert "bf16: not measured yet" in capsys.readouterr().out
    assert runs == {"bf16": first} and ran == [("gpt", "bf16", {"seconds": 0.3})]
    assert lesson.baseline(runs, "bf16", "gpt", Knobs(), run=run) is first and len(ran) == 1


def test_mfu_reads_the_peak_of_the_math_that_ran():
    """gpt:124m at the default math runs its matmuls IEEE fp32: its MFU is a share of the CUDA
    cores' fp32 peak, not of TF32's (what the engine reads for a convnet's default)."""
    from workbench.engine import hardware

    name = "NVIDIA H100 80GB HBM3"
    default = BurstResult(status="ok", workload="gpt:124m", device="cuda:0", device_name=name,
                          knobs=Knobs(), achieved_tflops=20.0, tokens_per_s=1.0)  # fmt: skip
    fp32, tf32 = hardware.peak_flops(name, "fp32"), hardware.peak_flops(name, "tf32")
    mfu, math = lesson.math_mfu(default)
    assert math == "IEEE fp32" and mfu == pytest.approx(100 * 20e12 / fp32)
    assert mfu > 100 * 20e12 / tf32 * 2  # the TF32 peak would read it several times low
    bf16 = BurstResult(
        status="ok",
        workload="gpt:124m",
        device="cuda:0",
        device_name=name,
        knobs=Knobs(precision="bf16"),
        achieved_tflops=20.0,
        tokens_per_s=1.0,
    )
    frame = lesson.frame([default, bf16], "precision")
    assert list(frame["peak_math"]) == ["IEEE fp32", "bf16"]
    assert frame["mfu_pct"].iloc[1] == pytest.approx(
        100 * 20e12 / hardware.peak_flops(name, "bf16")
    )
    assert lesson.math_mfu(_burst()) == (None, None)  # a CPU: no peak, never a made-up one


def test_the_memory_exercise_grades_the_learners_own_model_and_device():
    base, ckpt = _held(60.0), _held(4.0, knobs=Knobs(activation_checkpointing=True))
    memory = lesson.MemoryHere(base, ckpt)
    assert memory.freed_pct == pytest.approx(100 * 56 / 220)
    table = memory.table()
    assert (
        table.loc[0, "change"] == "activation_checkpointing" and table.loc[0, "freed_pct"] == 25.5
    )
    workshop.commit_prediction(25, exercise=lesson.MEMORY)
    assert lesson.check_memory(25, memory)
    failed = lesson.MemoryHere(base, BurstResult(status="oom", error="out of memory"))
    workshop.BOOK.clear()
    workshop.commit_prediction(25, exercise=lesson.MEMORY)
    said = lesson.check_memory(25, failed)
    assert not said and "oom" in said.message


def test_packing_cannot_win_more_than_its_padding():
    frame = lesson.frame([_burst(100.0, packing="pad"), _burst(300.0, packing="pack")], "packing")
    frame["pad_share_pct"] = [75.0, 0.0]
    assert lesson.packing_limit(frame) == pytest.approx(4.0)
    frame["pad_share_pct"] = [None, None]
    assert lesson.packing_limit(frame) is None
