"""The GPU session's float8 rows: gpt:124m in bf16 against float8 training (issue 32).

    python benchmarks/gpu_steps.py fp8 --json FILE [--dry]     # the step that calls it
    gpu_fp8.fp8_vs_bf16(log)                                   # from any gpu_steps step

Four compiled bursts of gpt:124m at batch ``BATCH`` (1,024 tokens a sample) on one GPU, bf16
autocast throughout, in the order bf16, ``tensorwise``, ``rowwise``, bf16: the bf16 pair
brackets the float8 bursts, each float8 burst is read against the pair's mean (a drift linear
in time cancels there) and the pair's own spread is kept beside it. Compiled, because
torchao's casts and scales are fast only fused (``workbench/engine/fp8.py``); each burst
compiles afresh, outside its window (``compile_s``).

What the step keeps in ``facts["fp8"]`` (:func:`fp8_facts`): the bf16 pair's tokens/s, spread,
MFU and peak memory, and per recipe its tokens/s, its ratio to bf16, MFU (against the bf16
peak, as every fp8 burst's: the model's FLOPs are the same), peak memory and the Linear layers
converted. Its checks: every burst ran, each float8 burst converted gpt:124m's 48 block Linear
layers and nothing said it could not act. Where float8 cannot act (a GPU below compute
capability 8.9; torchao neither on the box nor in the wheelhouse) the float8 rows are skipped
with the reason and the bf16 pair still runs.

torchao on the box: the wheelhouse (``make wheelhouse``, carried as ``.wheelhouse``) holds its
wheel; where the box's python lacks it, it is installed offline into the step's work folder.

``--dry`` (a CPU): the ``gpt`` workload (or the one given), eager, short windows: the float8
bursts run unconverted there and must say so in ``no_effect``, which the rehearsal checks.
"""

from __future__ import annotations

import importlib
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WHEELHOUSE = HERE.parent / ".wheelhouse"
BATCH = 16
"""Samples a step on the GPU: 16,384 tokens, well inside an H100's memory in bf16 (the logits
alone are 16 x 1,024 x 50,304); ``batch_size`` sets another, the same for every row."""
DRY_BATCH = 2
RECIPES = ("tensorwise", "rowwise")
"""The recipes measured: the fastest and the accurate one (``rowwise_with_gw_hp`` is an
accuracy choice, left out of the session's minutes)."""
BLOCK_LINEARS = 48
"""gpt:124m's Linear layers that float8 converts: 4 a block (qkv, proj, two MLP), 12 blocks."""


def fp8_vs_bf16(log: Any, workload: Any = None, *, batch_size: int | None = None,
                wheelhouse: Path = WHEELHOUSE) -> None:  # fmt: skip
    """bf16, the float8 recipes, bf16 again (module docstring), kept in ``log`` (a
    ``gpu_steps.StepLog``) as they run; ``facts["fp8"]`` at the end."""
    from workbench import Knobs

    dry = log.ctx.dry
    if workload is None:
        workload = _rehearsal_gpt() if dry else "gpt:124m"
    base = Knobs(batch_size=batch_size or (DRY_BATCH if dry else BATCH), precision="bf16",
                 compile="off" if dry else "default")  # fmt: skip
    why_not = None if dry else _float8_refusal(log, wheelhouse)
    log.burst("bf16 (fp8 off), before", workload, base)
    for recipe in RECIPES:
        if why_not is not None:
            log.skip(f"fp8 {recipe}", why_not)
            continue
        r = log.burst(f"fp8 {recipe}", workload, base.replace(fp8=recipe))
        _expect_acted(log, r, recipe, dry)
    log.burst("bf16 (fp8 off), after", workload, base)
    log.facts["fp8"] = fp8_facts(log.bursts)
    log.write()


def _rehearsal_gpt() -> Any:
    """A CPU rehearsal's gpt: two small layers, so bf16 autocast (about 20x slower than fp32 on
    the 2-core test machine's AVX2 CPU) still costs seconds, not a minute."""
    from workbench.engine.workloads.gpt import GPTShape, gpt

    return gpt(shape=GPTShape(layers=2, heads=2, width=64, block=64),
               name="gpt (2 layers x 64, 64 tokens)")  # fmt: skip


def _expect_acted(log: Any, r: Any, recipe: str, dry: bool) -> None:
    said = r.no_effect.get("fp8", "")
    if dry:  # a CPU: the knob must say it could not act, and nothing converted
        log.expect(f"fp8 {recipe}: says it cannot act on a CPU",
                   "this is a CPU" in said and r.fp8_linears is None, said)  # fmt: skip
        return
    log.expect(f"fp8 {recipe}: acted", not said, said)
    log.expect(f"fp8 {recipe}: {BLOCK_LINEARS} Linear layers in float8",
               r.fp8_linears == BLOCK_LINEARS, f"fp8_linears={r.fp8_linears}")  # fmt: skip


def _float8_refusal(log: Any, wheelhouse: Path) -> str | None:
    """Why float8 cannot run on this GPU (None where it can), torchao installed from the
    wheelhouse first where the box lacks it."""
    import torch

    from workbench.engine import fp8

    why = fp8.device_refusal(torch.device("cuda"))
    if why is None and fp8.torchao_missing() is not None:
        _install_torchao(log, wheelhouse)
    why = why or fp8.torchao_missing()
    if why is None:
        import torchao

        log.facts["torchao"] = torchao.__version__
    return why


def _install_torchao(log: Any, wheelhouse: Path) -> None:
    """torchao's wheel from the wheelhouse, offline, into the step's work folder, put first on
    this process's path; nothing when the wheelhouse has none."""
    wheels = sorted(wheelhouse.glob("torchao-*.whl"))
    if not wheels:
        return
    site = log.ctx.workdir / "fp8-site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
               "--no-cache-dir", "--target", str(site), str(wheels[-1])]  # fmt: skip
    p = subprocess.run(install, capture_output=True, text=True, timeout=120)
    if log.expect("torchao installed offline from the wheelhouse", p.returncode == 0,
                  p.stderr[-1500:]):  # fmt: skip
        sys.path.insert(0, str(site))
        importlib.invalidate_caches()


def fp8_facts(bursts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The float8 rows read against the bf16 bursts around them (each a kept burst record:
    ``gpu_record.burst_record``); None where a figure is unknown."""
    ok = [b for b in bursts if b.get("status") == "ok"]
    bf16 = [b for b in ok if b["knobs"].get("fp8") == "off" and b.get("tokens_per_s")]
    rates = [b["tokens_per_s"] for b in bf16]
    ref = statistics.fmean(rates) if rates else None
    spread = 100.0 * (max(rates) - min(rates)) / ref if ref and len(rates) > 1 else None
    recipes = {}
    for b in ok:
        recipe = b["knobs"].get("fp8", "off")
        if recipe == "off":
            continue
        rate = b.get("tokens_per_s")
        recipes[recipe] = {
            "tokens_per_s": rate,
            "vs_bf16": round(rate / ref, 3) if rate and ref else None,
            "mfu_pct": b.get("mfu_pct"),
            "peak_mem_mib": b.get("peak_mem_mib"),
            "fp8_linears": b.get("fp8_linears"),
            "compile_s": b.get("compile_s"),
            "no_effect": (b.get("no_effect") or {}).get("fp8"),
        }
    return {
        "workload": bf16[0]["workload"] if bf16 else None,
        "batch_size": bf16[0]["knobs"]["batch_size"] if bf16 else None,
        "bf16_tokens_per_s": ref,
        "bf16_spread_pct": round(spread, 1) if spread is not None else None,
        "bf16_mfu_pct": _mean(b.get("mfu_pct") for b in bf16),
        "bf16_peak_mem_mib": _mean(b.get("peak_mem_mib") for b in bf16),
        "recipes": recipes,
    }


def _mean(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None
