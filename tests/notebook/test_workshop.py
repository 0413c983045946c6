"""The workshop's exercise checks: right answers pass, wrong ones fail, and they say why."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from workbench.config.saved import load_config, save_config
from workbench.core.knobs import Knobs
from workbench.notebook import workshop


def _sweep(knob, rows):
    """A sweep-shaped frame: (value, samples_per_s, status) per burst."""
    return pd.DataFrame([{knob: v, "samples_per_s": sps, "status": st} for v, sps, st in rows])


WORKERS = _sweep(
    "num_workers",
    [(0, 100.0, "ok"), (1, 180.0, "ok"), (2, 200.0, "ok"), (2, 196.0, "ok"), (3, None, "error")],
)


def test_check_best_accepts_the_best_and_noise_ties_only():
    assert workshop.check_best(2, WORKERS, "num_workers")
    tie = workshop.check_best(1, _sweep("num_workers", [(1, 195.0, "ok"), (2, 200.0, "ok")]),
                              "num_workers")  # fmt: skip
    assert tie and "cannot tell them apart" in tie.message
    wrong = workshop.check_best(0, WORKERS, "num_workers")
    assert not wrong and "num_workers=2" in wrong.message and str(wrong).startswith("Not yet")
    assert not workshop.check_best(1, WORKERS, "num_workers")  # 180 vs 198: 10% off
    missing = workshop.check_best(7, WORKERS, "num_workers")
    assert not missing and "was not measured" in missing.message
    assert not workshop.check_best(3, WORKERS, "num_workers")  # failed bursts count for nothing
    assert not workshop.check_best(None, WORKERS, "num_workers")


def test_check_best_refuses_a_frame_it_cannot_read():
    with pytest.raises(ValueError, match="'batch_size' is not a column"):
        workshop.check_best(2, WORKERS, "batch_size")
    failed = _sweep("num_workers", [(0, None, "oom")])
    with pytest.raises(ValueError, match="no successful burst"):
        workshop.check_best(0, failed, "num_workers")


def test_check_speedup_compares_with_the_measured_ratio():
    frame = _sweep("precision", [("fp32", 40.0, "ok"), ("bf16", 10.0, "ok")])
    assert workshop.check_speedup(0.25, frame, "precision", "bf16", "fp32")
    assert workshop.check_speedup(0.26, frame, "precision", "bf16", "fp32")
    assert not workshop.check_speedup(4.0, frame, "precision", "bf16", "fp32")  # upside down
    assert not workshop.check_speedup(1.0, frame, "precision", "bf16", "fp32")
    assert not workshop.check_speedup("fast", frame, "precision", "bf16", "fp32")
    with pytest.raises(ValueError, match="fp16"):
        workshop.check_speedup(1.0, frame, "precision", "fp16", "fp32")


def test_check_knee_wants_the_smallest_value_that_reaches_the_bar():
    frame = _sweep("batch_size", [(8, 50.0, "ok"), (16, 80.0, "ok"), (32, 95.0, "ok"),
                                  (64, 100.0, "ok")])  # fmt: skip
    assert not workshop.check_knee(16, frame)  # 80 < 90
    assert workshop.check_knee(32, frame)
    late = workshop.check_knee(64, frame)
    assert not late and "batch_size=32 already reached" in late.message
    near = _sweep("batch_size", [(8, 50.0, "ok"), (16, 88.0, "ok"), (32, 100.0, "ok")])
    assert workshop.check_knee(16, near) and workshop.check_knee(32, near)  # 88 vs a bar of 90


def test_check_verdict():
    d = SimpleNamespace(verdict="data-bound", reason="", loader_sps=50.0, compute_sps=300.0)
    assert workshop.check_verdict("data-bound", d)
    assert workshop.check_verdict("Data bound", d)
    assert not workshop.check_verdict("compute-bound", d)
    assert not workshop.check_verdict("slow", d)
    with pytest.raises(ValueError, match="run it again"):
        workshop.check_verdict("balanced", SimpleNamespace(verdict="unknown", reason="stopped"))


def test_check_top_operator():
    ops = pd.DataFrame({"operator": ["aten::convolution_backward", "aten::mkldnn_convolution",
                                     "aten::add_"], "self_ms": [100.0, 95.0, 10.0]})  # fmt: skip
    ops.attrs["sort_by"] = "self_ms"
    p = SimpleNamespace(operators=ops, status="ok", error=None)
    assert workshop.check_top_operator("aten::convolution_backward", p)
    assert workshop.check_top_operator("convolution_backward", p)
    assert workshop.check_top_operator("aten::mkldnn_convolution", p)  # within 10%: noise
    wrong = workshop.check_top_operator("aten::add_", p)
    assert not wrong and "aten::convolution_backward" in wrong.message
    assert not workshop.check_top_operator("aten::softmax", p)


def test_check_loader_compares_with_the_saved_config(tmp_path):
    path = save_config(Knobs(batch_size=8, num_workers=1, prefetch_factor=4), tmp_path / "t.yaml")
    cfg = load_config(path)
    data = TensorDataset(torch.zeros(32, 3), torch.zeros(32))
    assert workshop.check_loader(cfg.dataloader(data, shuffle=True), cfg)
    assert workshop.check_loader(cfg.dataloader(data), str(path))
    by_hand = workshop.check_loader(DataLoader(data, batch_size=8), cfg)
    assert not by_hand and "num_workers=0 (tuned: 1)" in by_hand.message
    assert not workshop.check_loader([1, 2], cfg) and not workshop.check_loader(None, cfg)


def test_example_script_is_the_production_example():
    assert workshop.example_script().name == "train.py"


def test_check_comm_peak_reads_the_bus_bandwidth():
    from workbench.distributed.allreduce import CommResult

    rows = [
        {"size_bytes": size, "count": size // 4, "dtype": "float32", "calls": 10,
         "time_us": 1.0, "algbw_gbps": bw, "busbw_gbps": bw, "correct": True}
        for size, bw in [(8192, 0.1), (65536, 0.9), (524288, 2.0), (4194304, 1.97)]
    ]  # fmt: skip
    res = CommResult(world_size=2, rows=rows)
    assert workshop.check_comm_peak(524288, res)
    assert workshop.check_comm_peak("4194304", res)  # within 5% of the peak: a tie
    wrong = workshop.check_comm_peak(8192, res)
    assert not wrong and "size_bytes=524288" in wrong.message
    assert not workshop.check_comm_peak(None, res)
    with pytest.raises(ValueError, match="2 ranks"):
        workshop.check_comm_peak(8192, CommResult(world_size=1, rows=rows))


LESSONS = sorted(
    p
    for p in (Path(__file__).parents[2] / "notebooks").glob("*.ipynb")
    if re.match(r"(0[2-9]|1\d)_", p.name)
)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_every_lesson_has_goals_an_exercise_with_a_check_and_a_summary(path):
    cells = json.loads(path.read_text())["cells"]
    text = ["".join(c["source"]) for c in cells]
    markdown = "\n".join(
        t for t, c in zip(text, cells, strict=True) if c["cell_type"] == "markdown"
    )
    assert "Learning goals" in markdown and "## Exercise" in markdown
    assert "## What you saw" in markdown
    code = [t for t, c in zip(text, cells, strict=True) if c["cell_type"] == "code"]
    assert any(re.search(r"(workshop|lesson)\.check_", t) for t in code), "no check"
    assert any("wb." in t for t in code), "no live cell calls the library"
    names = [n for t in code for n in re.findall(r"workshop\.(\w+)\(", t)]
    assert all(hasattr(workshop, n) for n in names), names
    from workbench.notebook import workshop_memory  # lesson 10's own checks, imported as `lesson`

    names = [n for t in code for n in re.findall(r"lesson\.(\w+)\(", t)]
    assert all(hasattr(workshop_memory, n) for n in names), names


def test_the_fastest_format_is_checked_per_mode_and_cache():
    rows = [
        {"data_format": f, "cache": c, "mode": m, "samples_per_s": rate, "status": "ok"}
        for f, rate in (("files", 100.0), ("lmdb", 140.0), ("predecoded", 137.0))
        for c in ("warm", "cold")
        for m in ("loader", "full")
    ]
    frame = pd.DataFrame(rows)
    assert workshop.check_format("lmdb", frame)
    assert workshop.check_format("predecoded", frame)  # within 5%: a tie
    wrong = workshop.check_format("files", frame, mode="full")
    assert not wrong and "data_format=lmdb" in wrong.message
    with pytest.raises(ValueError, match="cache='hot' was not measured"):
        workshop.check_format("lmdb", frame, cache="hot")


def test_a_check_carries_its_exercise_prediction_and_measurement():
    plain = workshop.Check(True, "right")
    assert plain and str(plain) == "Correct: right" and plain.exercise == ""
    assert plain.prediction is None and plain.measured is None
    full = workshop.Check(False, "off", exercise="03-precision", prediction=2.0, measured=0.5)
    assert not full and str(full) == "Not yet: off" and repr(full) == str(full)
    assert (full.exercise, full.prediction, full.measured) == ("03-precision", 2.0, 0.5)
