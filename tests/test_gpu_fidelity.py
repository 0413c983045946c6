"""benchmarks/gpu_fidelity.py: the GPU session's burst-against-a-hand-loop step. Its arithmetic
and its order are tested on made-up sides, its budget on a GPU context whose sides are faked,
and its CPU rehearsal runs for real (the shared hand loop of benchmarks/fidelity.py against
run_burst, on the small stand-ins)."""

import json

import pytest
from benchmark_modules import load_benchmark

from workbench.core.results import BurstResult


@pytest.fixture(scope="module")
def steps():
    return load_benchmark("gpu_steps")  # puts benchmarks/ on the path, where gpu_fidelity is


@pytest.fixture(scope="module")
def gf(steps):
    return load_benchmark("gpu_fidelity")


def _pair(n: int, burst: float, hand: float, first: str = "burst") -> dict:
    order = ["burst", "hand"] if first == "burst" else ["hand", "burst"]
    return {"pair": n, "order": order, "burst": burst, "hand": hand,
            "ratio": round(burst / hand, 4), "burst_wall_s": 6.0, "hand_wall_s": 5.0}  # fmt: skip


def test_the_summary_is_the_median_ratio_its_range_and_each_orders_median(gf):
    pairs = [_pair(1, 1000.0, 1000.0), _pair(2, 990.0, 1000.0, "hand"),
             _pair(3, 1020.0, 1000.0), _pair(4, 1000.0, 1010.0, "hand")]  # fmt: skip
    s = gf.summary(pairs)
    assert s["pairs_measured"] == 4 and s["ratio_median"] == pytest.approx(0.995, abs=1e-4)
    assert (s["ratio_min"], s["ratio_max"]) == (0.99, 1.02)
    assert s["spread_pct"] == pytest.approx(100 * 0.03 / 0.995, abs=0.1)
    assert s["burst_first_median"] == 1.01
    assert s["hand_first_median"] == pytest.approx((0.99 + 0.9901) / 2, abs=1e-4)
    assert s["order_gap"] == pytest.approx(1.01 / 0.99, abs=1e-3)
    assert s["burst_median"] == 1000.0 and s["hand_median"] == 1000.0 and s["in_goal"] is True
    off = gf.summary([_pair(i, 950.0, 1000.0) for i in (1, 2, 3)])
    assert off["ratio_median"] == 0.95 and off["in_goal"] is False
    assert gf.summary(pairs[:2])["in_goal"] is None  # two pairs: too few to say
    assert gf.summary([{"pair": 1, "order": ["burst", "hand"], "burst": 5.0}])["ratio_median"] \
        is None  # fmt: skip


def test_the_plan_reads_a_kept_runs_own_side_times_else_says_what_it_guesses(gf, tmp_path):
    est, first, why = gf.plan([])
    images, tokens = gf.side_estimate("images", []), gf.side_estimate("tokens", [])
    assert est == pytest.approx(gf.SETUP_S + 2 * gf.PAIRS * (images.seconds + tokens.seconds))
    assert first == pytest.approx(gf.SETUP_S + 2 * gf.MIN_PAIRS * images.seconds)
    assert "5 s measured on an H200" in why and "a guess (no run has measured gpt:124m" in why
    kept = {"images": {"pairs_measured": 4, "pairs": [_pair(1, 1.0, 1.0), _pair(2, 1.0, 1.0)]}}
    run = {"steps": [{"name": "fidelity", "facts": {"fidelity": {"rows": kept}}}]}
    own = gf.side_estimate("images", [(tmp_path / "gpu-x.json", run)])
    assert own.seconds == pytest.approx(1.25 * 5.5) and "its own in gpu-x.json" in own.why
    assert gf.side_estimate("tokens", [(tmp_path / "gpu-x.json", run)]).why.startswith("~13 s")


class _Sides:
    """Both sides faked: every hand loop reads ``hand``, every burst ``burst`` samples/s."""

    def __init__(self, burst: float = 990.0, hand: float = 1000.0, fail_hand_at: int = 0):
        self.burst, self.hand, self.fail_hand_at, self.ran = burst, hand, fail_hand_at, []

    def run_recipe(self, recipe, seconds, warmup, min_steps=5):
        self.ran.append(("burst", recipe.name))
        return BurstResult(status="ok", workload=recipe.name, device="cuda:0",
                           device_name="NVIDIA H100 80GB HBM3", knobs=recipe.knobs,
                           samples_per_s=self.burst, steps=10, measured_s=seconds)  # fmt: skip

    def hand_loop(self, recipe, seconds, warmup):
        self.ran.append(("hand", recipe.name))
        if self.fail_hand_at and len([s for s in self.ran if s[0] == "hand"]) == self.fail_hand_at:
            raise RuntimeError("CUDA out of memory")
        return self.hand


def _gpu_log(steps, tmp_path, budget_left: float | None = None):
    ctx = steps.Context(dry=False, seconds=2.0, out=tmp_path / "fidelity.json", workdir=tmp_path)
    if budget_left is not None:
        import time

        ctx.started = time.monotonic() - budget_left
    return steps.StepLog("fidelity", ctx)


def test_the_pairs_run_abba_and_every_run_is_kept_as_it_ends(gf, steps, tiny_data, tmp_path,
                                                             monkeypatch):  # fmt: skip
    sides = _Sides()
    monkeypatch.setattr(gf.fid, "run_recipe", sides.run_recipe)
    monkeypatch.setattr(gf.fid, "hand_loop", sides.hand_loop)
    log = _gpu_log(steps, tmp_path)
    gf.fidelity(log, 600.0, data=tiny_data)
    assert [s for s, _ in sides.ran[:8]] == ["burst", "hand", "hand", "burst"] * 2  # B H H B ...
    rows = log.facts["fidelity"]["rows"]
    assert set(rows) == {"images", "tokens"}
    images = rows["images"]
    assert images["label"].startswith("resnet50, bf16, channels_last, batch 128, JPEGs, ")
    assert images["knobs"]["precision"] == "bf16" and images["knobs"]["channels_last"]
    assert images["knobs"]["pin_memory"] and images["knobs"]["persistent_workers"]
    assert rows["tokens"]["label"].startswith("gpt:124m, bf16, batch 16 x 1,024 tokens")
    assert images["pairs_measured"] == gf.PAIRS and images["ratio_median"] == 0.99
    assert images["in_goal"] is True and images["status"] == "measured"
    assert [b["label"] for b in log.bursts[:2]] == ["images pair 1: burst", "images pair 2: burst"]
    assert log.bursts[1]["first"] == "hand" and log.bursts[1]["fidelity"] == "images"
    on_disk = json.loads(log.ctx.out.read_text())
    assert on_disk["facts"]["fidelity"]["rows"]["tokens"]["pairs_measured"] == gf.PAIRS
    assert all(c["ok"] for c in log.checks), log.checks


def test_a_median_outside_the_goal_fails_the_step_and_a_failed_side_ends_its_row(
    gf, steps, tiny_data, tmp_path, monkeypatch
):
    sides = _Sides(burst=900.0, fail_hand_at=6)  # the tokens row's second pair, hand first
    monkeypatch.setattr(gf.fid, "run_recipe", sides.run_recipe)
    monkeypatch.setattr(gf.fid, "hand_loop", sides.hand_loop)
    log = _gpu_log(steps, tmp_path)
    gf.fidelity(log, 600.0, data=tiny_data)
    rows = log.facts["fidelity"]["rows"]
    assert rows["images"]["in_goal"] is False
    failed = {c["name"]: c["detail"] for c in log.checks if not c["ok"]}
    assert failed["images: burst/hand in 0.97-1.03"] == "median 0.9, range 0.9-0.9"
    tokens = rows["tokens"]
    assert tokens["status"] == "failed" and "CUDA out of memory" in tokens["note"]
    assert tokens["pairs_measured"] == 1 and "tokens: 3+ pairs measured" in failed


def test_a_row_that_does_not_fit_is_skipped_and_said(gf, steps, tiny_data, tmp_path,
                                                    monkeypatch):  # fmt: skip
    sides = _Sides()
    monkeypatch.setattr(gf.fid, "run_recipe", sides.run_recipe)
    monkeypatch.setattr(gf.fid, "hand_loop", sides.hand_loop)
    log = _gpu_log(steps, tmp_path, budget_left=100.0)  # 100 s of 150 already spent
    gf.fidelity(log, 150.0, data=tiny_data)
    assert sides.ran == []
    assert [s["what"] for s in log.skipped] == ["images", "tokens"]
    assert log.skipped[0]["reason"].startswith("would not fit: 3 pairs need ~")
    assert log.facts["fidelity"]["rows"]["images"]["status"] == "skipped"
    assert all(c["ok"] for c in log.checks)


def test_the_rehearsal_runs_the_hand_loop_and_the_burst_on_the_small_stand_ins(
    gf, steps, tiny_data, tmp_path
):
    ctx = steps.Context(dry=True, seconds=0.2, out=tmp_path / "fidelity.json", workdir=tmp_path)
    log = steps.StepLog("fidelity", ctx)
    gf.fidelity(log, 60.0, data=tiny_data)
    rows = log.facts["fidelity"]["rows"]
    assert rows["images"]["label"].startswith("cnn (64 px JPEGs)")
    assert rows["tokens"]["label"].startswith("gpt (2 layers x 64, 64 tokens)")
    for row in rows.values():
        assert row["pairs_measured"] == gf.MIN_PAIRS and row["ratio_median"] > 0
        assert [p["order"][0] for p in row["pairs"]] == ["burst", "hand", "burst"]
        assert all(p["hand"] > 0 and p["burst"] > 0 for p in row["pairs"])
        assert row["in_goal"] is not None  # measured, and said; not judged on a CPU
    assert len(log.bursts) == 2 * gf.MIN_PAIRS and all(b["status"] == "ok" for b in log.bursts)
    assert all(c["ok"] for c in log.checks), log.checks


def test_the_step_reuses_the_loader_steps_set(gf, steps):
    assert (gf.BIG_SET, gf.BIG_SET_BATCH) == ("big", steps.BIG_SET_BATCH)
