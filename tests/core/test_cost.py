"""The cost arithmetic, checked by hand: every expected number below is worked out in the
comment beside it, not computed by the code under test."""

import json
import os
import subprocess
import sys

import pytest

from workbench.core import cost
from workbench.core.errors import InputError
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult


def _result(**changes) -> BurstResult:
    fields = dict(status="ok", workload="cnn", device="cpu", knobs=Knobs(),
                  samples_per_s=100.0, data_wait_pct=25.0)  # fmt: skip
    return BurstResult(**{**fields, **changes})


def test_cpu_burst_cost_by_hand():
    c = cost.burst_cost(_result(), 2.0, epoch_samples=1_000_000)
    # $2/h over 100 samples/s: 360,000 samples an hour, so 1e6 samples cost 2 x 1e6/360,000
    assert c["per_million_samples"] == pytest.approx(5.5556, abs=1e-4)
    assert c["per_epoch"] == pytest.approx(5.5556, abs=1e-4)  # an epoch is 1e6 samples here
    assert c["idle_share_pct"] == 25.0 and c["idle_basis"] == "data_wait_pct"
    assert c["idle_per_million_samples"] == pytest.approx(1.3889, abs=1e-4)  # a quarter of it
    assert c["devices"] == 1 and c["price_per_hour"] == 2.0


def test_gpu_job_pays_every_gpu_and_idles_by_gpu_utilization():
    r = _result(device="cuda:0", knobs=Knobs(world_size=8), samples_per_s=2000.0,
                gpu_util_pct=80.0, tokens_per_s=512_000.0)  # fmt: skip
    c = cost.burst_cost(r, 3.0)
    # 8 GPUs x $3 = $24/h; 2000 samples/s = 7.2e6 samples/h: 1e6 samples cost 24/7.2 = 3.3333
    assert c["devices"] == 8
    assert c["per_million_samples"] == pytest.approx(3.3333, abs=1e-4)
    # 512,000 tokens/s = 1.8432e9 tokens/h: 1e6 tokens cost 24/1843.2 = 0.013021
    assert c["per_million_tokens"] == pytest.approx(0.013021, abs=1e-6)
    assert c["idle_share_pct"] == 20.0 and c["idle_basis"] == "100 - gpu_util_pct"
    assert c["idle_per_million_samples"] == pytest.approx(0.6667, abs=1e-4)
    assert c["per_epoch"] is None  # no dataset size given


def test_a_failed_burst_keeps_its_price_but_has_no_figures():
    c = cost.burst_cost(_result(status="oom", samples_per_s=None), 2.0)
    assert c["price_per_hour"] == 2.0 and c["per_million_samples"] is None
    assert cost.burst_cost(_result(), None) is None  # no price, no cost


def test_tune_saving_by_hand():
    s = cost.tune_saving(100.0, 125.0, 2.0, devices=1, epoch_samples=1_000_000, hours_per_month=100)
    # 125 vs 100 samples/s: the same work takes 100/125 = 0.8 of the time, 20% less money
    assert s["saving_pct"] == pytest.approx(20.0)
    # 100 h/month at $2 = $200; tuned 80 h = $160; saved $40
    assert s["per_month"] == pytest.approx({"start": 200.0, "tuned": 160.0, "saved": 40.0})
    # an epoch of 1e6 samples: 10,000 s = $5.5556 at the start, 8,000 s = $4.4444 tuned
    assert s["per_epoch"]["start"] == pytest.approx(5.5556, abs=1e-4)
    assert s["per_epoch"]["saved"] == pytest.approx(1.1111, abs=1e-4)
    assert "saves 20.0%" in cost.saving_line(s) and "40.00 per month" in cost.saving_line(s)
    default = cost.tune_saving(100.0, 125.0, 1.0)
    assert default["hours_per_month"] == 730.0 and default["per_month"]["saved"] == pytest.approx(
        146.0
    )


@pytest.mark.parametrize("bad", [-1, "-0.5", "abc", True, float("nan"), float("inf"), [2]])
def test_a_negative_or_non_numeric_price_is_refused(bad):
    with pytest.raises(InputError, match=r"price_per_hour=.* a number >= 0"):
        cost.check_price(bad)


def test_the_price_comes_from_the_argument_then_the_environment(monkeypatch):
    monkeypatch.delenv(cost.PRICE_ENV, raising=False)
    assert cost.resolve_price(None) is None  # none by default
    monkeypatch.setenv(cost.PRICE_ENV, "2.5")
    assert cost.resolve_price(None) == 2.5 and cost.resolve_price(4) == 4.0
    monkeypatch.setenv(cost.PRICE_ENV, "cheap")
    with pytest.raises(InputError, match="WORKBENCH_PRICE_PER_HOUR='cheap'"):
        cost.resolve_price(None)


def _cli(*args, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True,
                          text=True, timeout=300, env=env)  # fmt: skip


@pytest.mark.parametrize("command", ["burst", "sweep", "tune"])
def test_the_cli_refuses_a_bad_price_with_exit_2(command, tmp_path):
    extra = {"sweep": ["--knob", "batch_size", "--values", "8"],
             "tune": ["--out", str(tmp_path / "t.yaml")]}.get(command, [])  # fmt: skip
    p = _cli(command, *extra, "--price-per-hour", "-3", "--json")
    assert p.returncode == 2 and p.stdout == "" and "--price-per-hour" in p.stderr
    p = _cli(command, *extra, "--json", env_extra={cost.PRICE_ENV: "abc"})
    assert p.returncode == 2 and "WORKBENCH_PRICE_PER_HOUR='abc'" in p.stderr


def test_a_burst_with_a_price_has_cost_in_its_json(tiny_data, tmp_path):
    p = _cli("burst", "--workload", "cnn", "--data", str(tiny_data), "--seconds", "0.3",
             "--set", "batch_size=8", "--no-record", "--price-per-hour", "2",
             "--epoch-samples", "1000", "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    c = doc["cost"]
    assert {"price_per_hour", "per_million_samples", "idle_share_pct"} <= set(c)
    # the contract's arithmetic, on the burst's own throughput
    assert c["per_million_samples"] == pytest.approx(2.0 / 3600 / doc["samples_per_s"] * 1e6)
    assert c["per_epoch"] == pytest.approx(2.0 / 3600 * 1000 / doc["samples_per_s"])
    assert c["idle_share_pct"] == pytest.approx(doc["data_wait_pct"], abs=1e-3)


def test_a_saved_config_keeps_the_price_it_was_judged_at(tmp_path):
    from workbench.config import load_config, save_config

    r = _result(samples_per_s=250.0)
    r.cost = cost.burst_cost(r, 1.5, epoch_samples=50_000)
    cfg = load_config(save_config(r, tmp_path / "t.yaml"), check_machine=False)
    assert cfg.provenance["cost"]["price_per_hour"] == 1.5
    # $1.5/h over 250 samples/s = 900,000 samples/h: 1e6 samples cost 1.6667, an epoch 0.0833
    assert cfg.provenance["cost"]["per_million_samples"] == pytest.approx(1.667, abs=1e-3)
    assert cfg.provenance["cost"]["per_epoch"] == pytest.approx(0.083, abs=1e-3)
    again = save_config(cfg, tmp_path / "again.yaml")
    assert again.read_bytes() == (tmp_path / "t.yaml").read_bytes()
    plain = load_config(save_config(_result(), tmp_path / "p.yaml"), check_machine=False)
    assert "cost" not in plain.provenance  # no price, no cost section
