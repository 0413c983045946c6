"""benchmarks/cpu_path_unchanged.py: its arithmetic and its checks, on made-up bursts (the
benchmark itself runs minutes of bursts in two trees; its kept runs are its figures)."""

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("cpu_path_unchanged",
                                                  _BENCH / "cpu_path_unchanged.py")  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    sys.modules["cpu_path_unchanged"] = module
    spec.loader.exec_module(module)
    return module


def _b(side, sps, status="ok"):
    return {"side": side, "result": {"status": status, "samples_per_s": sps}}


def test_a_round_reads_b_over_a_so_that_a_linear_drift_cancels(bench):
    """Throughput falls 5% a burst and B is truly as fast as A: neighbours read the drift,
    the A-B-B-A round reads 1."""
    speeds = [100.0 * (1 - 0.05 * i) for i in range(8)]
    bursts = [_b(side, s) for side, s in zip(bench.ORDER * 2, speeds, strict=True)]
    s = bench.summarize(bursts)
    assert s["round_ratio"]["n"] == 2 and s["rounds_failed"] == 0
    assert s["round_ratio"]["median"] == pytest.approx(1.0, abs=1e-9)
    assert (
        s["pair_ratio"]["n"] == 4 and s["pair_ratio"]["min"] < 0.96 < 1.04 < s["pair_ratio"]["max"]
    )


def test_a_round_with_a_failed_burst_is_left_out_and_counted(bench):
    bursts = [_b("A", 100.0), _b("B", 90.0), _b("B", None, "error"), _b("A", 100.0),
              _b("A", 100.0), _b("B", 95.0), _b("B", 97.0), _b("A", 100.0)]  # fmt: skip
    s = bench.summarize(bursts)
    assert s["rounds_failed"] == 1 and s["round_ratio"]["values"] == [0.96]
    assert s["pair_ratio"]["values"] == [0.95, 0.97]
    assert bench.summarize([])["round_ratio"] == {"n": 0, "median": None, "min": None,
                                                  "max": None, "values": []}  # fmt: skip


def test_a_burst_of_the_wrong_tree_or_path_is_named(bench, tmp_path):
    rec = {"side": "B", "workbench": "/elsewhere/workbench/__init__.py",
           "result": {"decode": "gpu"}}  # fmt: skip
    wrong = f"B imported /elsewhere/workbench/__init__.py, not {tmp_path}"
    assert bench.checked(rec, tmp_path) == [wrong, "B decoded on gpu"]
    ok = {"side": "A", "workbench": f"{tmp_path}/workbench/__init__.py", "result": {}}
    assert bench.checked(ok, tmp_path) == []
    args = argparse.Namespace(batch=32, workers=2)
    assert bench.knobs_for("B", args) == {**bench.knobs_for("A", args), "decode": "cpu"}
    assert "decode" not in bench.knobs_for("A", args)  # the commit before the knob has none
