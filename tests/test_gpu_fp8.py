"""benchmarks/gpu_fp8.py: the GPU session's bf16 against float8 rows on gpt:124m. Its arithmetic
is tested on made-up records, and its CPU rehearsal runs for real: the float8 bursts say they
cannot act on a CPU, which the rehearsal checks."""

import pytest
from benchmark_modules import load_benchmark


@pytest.fixture(scope="module")
def steps():
    return load_benchmark("gpu_steps")  # puts benchmarks/ on the path, where gpu_fp8 is


def _burst(fp8: str, tokens_per_s: float | None, status: str = "ok", **more) -> dict:
    return {"label": fp8, "status": status, "workload": "gpt:124m", "tokens_per_s": tokens_per_s,
            "knobs": {"fp8": fp8, "batch_size": 16}, "mfu_pct": 40.0, "peak_mem_mib": 9000.0,
            "no_effect": {}, **more}  # fmt: skip


def test_each_recipe_is_read_against_the_mean_of_the_bf16_bursts_around_it(steps):
    import gpu_fp8

    bursts = [_burst("off", 1000.0), _burst("tensorwise", 1260.0, fp8_linears=48),
              _burst("rowwise", None, status="error"),
              _burst("off", 1100.0, mfu_pct=44.0)]  # fmt: skip
    facts = gpu_fp8.fp8_facts(bursts)
    assert facts["bf16_tokens_per_s"] == 1050.0 and facts["bf16_spread_pct"] == 9.5
    assert facts["bf16_mfu_pct"] == 42.0 and facts["batch_size"] == 16
    assert facts["recipes"] == {"tensorwise": {
        "tokens_per_s": 1260.0, "vs_bf16": 1.2, "mfu_pct": 40.0, "peak_mem_mib": 9000.0,
        "fp8_linears": 48, "compile_s": None, "no_effect": None}}  # fmt: skip
    alone = gpu_fp8.fp8_facts([_burst("off", 1000.0)])
    assert alone["bf16_spread_pct"] is None and alone["recipes"] == {}


def test_the_rehearsal_runs_bf16_around_the_recipes_and_each_says_it_cannot_act(
    steps, tiny_data, tmp_path
):
    import gpu_fp8

    from workbench.engine.workloads.gpt import GPTShape, gpt

    ctx = steps.Context(dry=True, seconds=0.2, out=tmp_path / "fp8.json", workdir=tmp_path)
    log = steps.StepLog("fp8", ctx)
    small = gpt(tiny_data, shape=GPTShape(block=32, layers=1, heads=2, width=32))
    gpu_fp8.fp8_vs_bf16(log, small)
    assert [b["label"] for b in log.bursts] == ["bf16 (fp8 off), before", "fp8 tensorwise",
                                                "fp8 rowwise", "bf16 (fp8 off), after"]  # fmt: skip
    assert all(c["ok"] for c in log.checks), log.checks
    assert [c["name"] for c in log.checks if "cannot act" in c["name"]] == [
        "fp8 tensorwise: says it cannot act on a CPU",
        "fp8 rowwise: says it cannot act on a CPU",
    ]
    facts = log.facts["fp8"]
    assert set(facts["recipes"]) == {"tensorwise", "rowwise"}
    assert all("this is a CPU" in row["no_effect"] for row in facts["recipes"].values())
    assert "fp8" in steps.STEPS
