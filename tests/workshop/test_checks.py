"""The workshop's exercise checks: right answers pass, wrong ones fail, and they say why."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from workbench.config.saved import load_config, save_config
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.history.store import HistoryStore
from workbench.workshop import checks as workshop
from workbench.workshop import classroom, memory_lesson


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


def test_a_sweeps_extra_runs_for_drift_count_for_nothing():
    """The first value's re-measurements (``reference``) read the drift, not the value: a
    slowed machine's last run must not pull the first value's median down."""
    frame = _sweep("num_workers", [(0, 200.0, "ok"), (1, 170.0, "ok"), (0, 120.0, "ok")])
    assert workshop._medians(frame, "num_workers", "samples_per_s")[0] == 160.0  # counted
    frame["reference"] = [False, False, True]
    assert workshop._medians(frame, "num_workers", "samples_per_s") == {0: 200.0, 1: 170.0}
    # and a drift that large (200 -> 120 for the same knobs) is this seat's noise: 0 against
    # 1 (18% apart) cannot be ranked, so nothing is graded (tests/workshop/test_noise.py)
    busy = workshop.check_best(0, frame, "num_workers")
    assert not busy and not busy.answered and "too busy to tell" in busy.message


def test_check_best_says_why_it_cannot_read_a_frame_instead_of_raising():
    wrong = workshop.check_best(2, WORKERS, "batch_size", exercise="04-knee")
    assert not wrong and "'batch_size' is not a column" in wrong.message
    assert wrong.exercise == "04-knee"
    failed = _sweep("num_workers", [(0, None, "oom")])
    empty = workshop.check_best(0, failed, "num_workers", prediction=2)
    assert not empty and "no successful burst" in empty.message and empty.prediction == 2
    nothing = workshop.check_best(0, pd.DataFrame(), "num_workers")
    assert not nothing and "cannot be checked" in nothing.message


def test_check_speedup_compares_with_the_measured_ratio():
    frame = _sweep("precision", [("default", 40.0, "ok"), ("bf16", 10.0, "ok")])
    assert workshop.check_speedup(0.25, frame, "precision", "bf16", "default")
    assert workshop.check_speedup(0.26, frame, "precision", "bf16", "default")
    assert not workshop.check_speedup(4.0, frame, "precision", "bf16", "default")  # upside down
    assert not workshop.check_speedup(1.0, frame, "precision", "bf16", "default")
    assert not workshop.check_speedup("fast", frame, "precision", "bf16", "default")
    missing = workshop.check_speedup(1.0, frame, "precision", "fp16", "default")
    assert not missing and "precision='fp16' has no successful burst" in missing.message


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
    assert not workshop.check_verdict(3, d)  # a wrong type is a verdict, not a traceback
    unknown = SimpleNamespace(verdict="unknown", reason="stopped", loader_sps=None,
                              compute_sps=None)  # fmt: skip
    stopped = workshop.check_verdict("balanced", unknown)
    assert not stopped and "run it again" in stopped.message


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
    one = workshop.check_comm_peak(8192, CommResult(world_size=1, rows=rows), prediction=8192)
    assert not one and "one rank sends nothing" in one.message and one.prediction == 8192
    failed = workshop.check_comm_peak(8192, CommResult(world_size=2, status="error",
                                                       error="gloo timed out"))  # fmt: skip
    assert not failed and "gloo timed out" in failed.message


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
    from workbench.workshop import (  # imported as `lesson`
        compute_lesson,
        memory_lesson,
        transformer_lesson,
    )

    own = {"10": memory_lesson, "11": compute_lesson, "12": transformer_lesson}.get(
        path.name[:2], memory_lesson
    )
    names = [n for t in code for n in re.findall(r"lesson\.(\w+)\(", t)]
    assert all(hasattr(own, n) for n in names), names


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
    hot = workshop.check_format("lmdb", frame, cache="hot")
    assert not hot and "cache='hot' was not measured" in hot.message


def test_a_check_carries_its_exercise_prediction_and_measurement():
    plain = workshop.Check(True, "right")
    assert plain and str(plain) == "Correct: right" and plain.exercise == ""
    assert plain.prediction is None and plain.measured is None
    full = workshop.Check(False, "off", exercise="03-precision", prediction=2.0, measured=0.5)
    assert not full and str(full) == "Not yet: off" and repr(full) == str(full)
    assert (full.exercise, full.prediction, full.measured) == ("03-precision", 2.0, 0.5)


def test_a_prediction_is_judged_when_there_is_no_answer_and_reported_beside_one():
    workshop.commit_prediction(0, exercise="02")
    guessed = workshop.check_best(None, WORKERS, "num_workers", prediction=0, exercise="02")
    assert not guessed and guessed.prediction == 0 and guessed.measured == 2
    assert "You predicted 0; the measurement says 2" in guessed.message
    both = workshop.check_best(2, WORKERS, "num_workers", prediction=0)
    assert both and "You predicted 0; the measurement says 2" in both.message
    right = workshop.check_best(None, WORKERS, "num_workers", prediction="2")
    assert right and right.measured == 2
    none = workshop.check_best(None, WORKERS, "num_workers")
    assert not none and "`prediction`" in none.message


def test_a_predicted_ratio_gets_a_wider_band_and_says_how_far_it_was():
    frame = _sweep("precision", [("default", 40.0, "ok"), ("bf16", 10.0, "ok")])
    near = workshop.check_speedup(None, frame, "precision", "bf16", "default", prediction=0.3)
    assert near and "20% above the measured 0.25" in near.message and near.measured == 0.25
    upside = workshop.check_speedup(None, frame, "precision", "bf16", "default", prediction=2.0)
    assert not upside and "700% above" in upside.message
    typed = workshop.check_speedup(None, frame, "precision", "bf16", "default", prediction="2x")
    assert not typed and "a ratio" in typed.message


def test_check_prediction_compares_a_number_or_a_choice():
    workshop.commit_prediction(40, exercise="01")
    ok = workshop.check_prediction(40, 50.0, what="data wait %", abs_tol=15, exercise="01")
    assert ok and ok.measured == 50.0 and "20% below the measured 50" in ok.message
    far = workshop.check_prediction(5, 50.0, what="data wait %", abs_tol=15)
    assert not far and "outside the band" in far.message
    assert workshop.check_prediction(2, 0.5, abs_tol=2)  # near zero: the absolute band decides
    assert not workshop.check_prediction("lots", 50.0)
    assert not workshop.check_prediction(None, 50.0)
    assert not workshop.check_prediction(3, None)
    assert workshop.check_prediction("Data-bound", "data-bound")


def test_the_verdict_at_the_edge_of_the_balance_band_accepts_both_sides():
    edge = SimpleNamespace(verdict="data-bound", reason="", loader_sps=84.0, compute_sps=100.0)
    assert workshop.check_verdict("data-bound", edge)  # 16% apart: the rule says data-bound
    tie = workshop.check_verdict("balanced", edge)
    assert tie and "edge of the 15% band" in tie.message
    assert not workshop.check_verdict("compute-bound", edge)
    clear = SimpleNamespace(verdict="data-bound", reason="", loader_sps=50.0, compute_sps=100.0)
    assert not workshop.check_verdict("balanced", clear)
    assert workshop.verdicts_at_edge(50.0, 100.0) == {"data-bound"}
    workshop.commit_prediction("compute-bound", exercise="05")
    guess = workshop.check_verdict(None, clear, prediction="compute-bound", exercise="05")
    assert not guess and guess.measured == "data-bound" and guess.prediction == "compute-bound"


def test_a_predicted_operator_may_name_a_family():
    ops = pd.DataFrame({"operator": ["aten::convolution_backward", "aten::add_"],
                        "self_ms": [100.0, 10.0]})  # fmt: skip
    ops.attrs["sort_by"] = "self_ms"
    p = SimpleNamespace(operators=ops, status="ok", error=None)
    family = workshop.check_top_operator(None, p, prediction="convolution")
    assert family and family.measured == "aten::convolution_backward"
    assert not workshop.check_top_operator(None, p, prediction="add")
    empty = SimpleNamespace(operators=pd.DataFrame(), status="error", error="no kineto")
    assert not workshop.check_top_operator("aten::add_", empty)


def _scaled(samples_per_s, launch_s=3.0, status="ok"):
    return BurstResult(status=status, samples_per_s=samples_per_s, launch_s=launch_s,
                       error=None if status == "ok" else "rank 1 on local-1 exited")  # fmt: skip


@pytest.mark.parametrize(
    ("ratio", "right", "wrong"),
    [(1.0, "same", "faster"), (1.3, "faster", "same"), (0.7, "slower", "same")],
)
def test_check_scale_out_reads_the_ratio_of_two_nodes_to_one(ratio, right, wrong):
    one, two = _scaled(100.0, 3.0), _scaled(100.0 * ratio, 5.5)
    workshop.commit_prediction(right, exercise="06-scale-out")
    ok = workshop.check_scale_out(right, one, two, exercise="06-scale-out")
    assert ok and ok.measured == right and ok.exercise == "06-scale-out"
    assert "5.5 s against 3.0 s" in ok.message
    assert not workshop.check_scale_out(wrong, one, two)


def test_check_scale_out_accepts_both_answers_at_the_edge():
    one, two = _scaled(100.0), _scaled(111.0)  # 1.11x: just past "same"
    assert workshop.check_scale_out("faster", one, two)
    assert workshop.check_scale_out("same", one, two)
    assert not workshop.check_scale_out("slower", one, two)


def test_check_scale_out_never_raises_on_a_failed_burst_or_no_prediction():
    failed = workshop.check_scale_out("same", _scaled(100.0), _scaled(None, status="error"))
    assert not failed and "two nodes burst measured nothing" in failed.message
    assert "rank 1 on local-1" in failed.message
    none = workshop.check_scale_out(None, _scaled(100.0), _scaled(100.0))
    assert not none and "prediction" in none.message


# -- class mode: verdicts go to the class board ------------------------------------------------


CLASS_URL = "postgresql://board:s3cret@127.0.0.1:1/class"  # port 1: nothing listens


@pytest.fixture
def class_store(monkeypatch, tmp_path):
    """Class mode (WORKBENCH_STORE set) with the answers going to a real SQLite store: the
    class store's PostgreSQL is tested in tests/history; here, what the checks send."""
    sqlite = HistoryStore(tmp_path / "class.sqlite")
    real = classroom.record_answer

    def to_sqlite(answer, *, store=None):
        return real(answer, store=store or sqlite)

    monkeypatch.setattr(classroom, "record_answer", to_sqlite)
    monkeypatch.setattr(workshop, "_down_until", [0.0])  # no pause left by another test
    monkeypatch.setenv("WORKBENCH_STORE", CLASS_URL)
    monkeypatch.setenv("WORKBENCH_LEARNER", "ann")
    return sqlite


def _stored(store):
    return [{k: a[k] for k in ("learner", "exercise", "ok", "message", "prediction", "measured")}
            for a in store.answers()]  # fmt: skip


def test_a_named_verdict_is_recorded_once_in_class_mode(class_store):
    workshop.commit_prediction(1, exercise="02-workers")  # the commit's own row, at once
    verdict = workshop.check_best(2, WORKERS, "num_workers", prediction=1, exercise="02-workers")
    assert not verdict and _stored(class_store)[1:] == [
        {"learner": "ann", "exercise": "02-workers", "ok": False, "message": verdict.message,
         "prediction": 1, "measured": 2}]  # fmt: skip
    assert [a["kind"] for a in class_store.answers()] == ["prediction", "check"]
    formats = pd.DataFrame([
        {"mode": "loader", "cache": "cold", "data_format": f, "samples_per_s": s, "status": "ok"}
        for f, s in (("files", 10.0), ("shards", 30.0))])  # fmt: skip
    workshop.check_format("shards", formats, exercise="09-format")  # calls check_best inside
    assert [a["exercise"] for a in _stored(class_store)] == ["02-workers"] * 2 + ["09-format"]


def test_a_check_with_no_prediction_is_recorded_as_not_correct(class_store):
    """A learner who never predicts is in the room's share, as not correct."""
    workshop.check_best(None, WORKERS, "num_workers", exercise="02-workers")
    (row,) = class_store.answers()
    assert row["ok"] is False and row["prediction"] is None and row["kind"] == "check"
    assert "make a prediction first" in row["message"]


def test_no_name_or_no_class_mode_records_nothing(class_store, monkeypatch):
    workshop.check_best(2, WORKERS, "num_workers")  # no exercise name
    workshop.check_best(None, WORKERS, "num_workers")  # and no answer: nothing to record
    monkeypatch.delenv("WORKBENCH_STORE")
    assert not workshop.class_mode()
    workshop.commit_prediction(2, exercise="02-workers")
    workshop.check_best(2, WORKERS, "num_workers", exercise="02-workers")
    assert class_store.answers() == []


def test_a_failed_measurement_is_recorded_with_its_exercise(class_store):
    verdict = workshop.check_best(2, pd.DataFrame(), "num_workers", exercise="02-workers")
    assert not verdict and "cannot be checked" in verdict.message
    assert [(a["exercise"], a["ok"]) for a in _stored(class_store)] == [("02-workers", False)]


def test_lesson_ten_checks_carry_their_exercise_names(class_store):
    verdict = memory_lesson.check_monthly_saving("lots", None, None, 2.0, 100)
    assert verdict.exercise == "10-monthly-saving" and not verdict
    assert _stored(class_store)[-1]["exercise"] == "10-monthly-saving"


def test_a_store_that_is_down_costs_one_warning_never_the_verdict(monkeypatch):
    """The real path: WORKBENCH_STORE names a PostgreSQL server where none listens (or whose
    driver is not installed): the verdict shows, with one warning that hides the password, and
    the next checks do not try (and wait for) the store again for a while."""
    monkeypatch.setenv("WORKBENCH_STORE", CLASS_URL)
    monkeypatch.setattr(workshop, "_down_until", [0.0])
    workshop.BOOK.commit("02-workers", 2)  # committed (outside class mode's sending)
    with pytest.warns(workshop.ClassBoardWarning, match="02-workers was not sent") as said:
        verdict = workshop.check_best(None, WORKERS, "num_workers", exercise="02-workers")
        again = workshop.check_best(None, WORKERS, "num_workers", exercise="02-workers")
    assert verdict and "the most in this sweep" in verdict.message and again
    assert len(said) == 1 and "s3cret" not in str(said[0].message)
    assert "not sent for the next 60 s" in str(said[0].message)
    with pytest.warns(workshop.ClassBoardWarning):  # a store passed in is always tried
        assert workshop.record(verdict, store=object()) is None


def test_the_class_store_is_tried_again_after_the_pause(class_store, monkeypatch):
    monkeypatch.setattr(workshop, "_down_until", [time.monotonic() + 60])
    workshop.check_best(2, WORKERS, "num_workers", exercise="02-workers")
    assert class_store.answers() == []  # within the pause: not tried
    monkeypatch.setattr(workshop, "_down_until", [time.monotonic() - 1])
    workshop.check_best(2, WORKERS, "num_workers", exercise="02-workers")
    assert [a["exercise"] for a in class_store.answers()] == ["02-workers"]


def test_a_store_named_by_a_file_is_class_mode_too(tmp_path, monkeypatch):
    url_file = tmp_path / "store-url"
    url_file.write_text("postgresql://ada:Pw-Ws-5@127.0.0.1:1/class\n")
    url_file.chmod(0o600)
    monkeypatch.setenv("WORKBENCH_STORE_FILE", str(url_file))
    assert workshop.class_mode()
    assert workshop.scrubbed("login failed for Pw-Ws-5") == "login failed for ***"
