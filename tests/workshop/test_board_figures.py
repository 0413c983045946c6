"""The class board's figures, on hand-built answers and bursts whose right numbers are known."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.history.store import records_frame
from workbench.workshop.board import figures as board


def _answer(i, learner, exercise, ok, prediction=None, measured=None, host="gpu1", verified=True):
    """A row as the class store returns it; ``verified``: the server computed ``ok``."""
    return {"id": i, "created_at": f"2026-12-04T10:{i:02d}:00+00:00", "learner": learner,
            "host": host, "exercise": exercise, "ok": ok, "message": f"verdict {i}",
            "prediction": prediction, "measured": measured,
            "verified": verified if ok is not None else None}  # fmt: skip


ANSWERS = board.answers_frame(
    [
        # 03-precision: a ratio; ann retries (first wrong, then right), bob wrong, cy right
        _answer(1, "ann", "03-precision", False, prediction=2.0, measured=1.6),
        _answer(2, "bob", "03-precision", False, prediction=0.5, measured=2.4, host="gpu2"),
        _answer(3, "ann", "03-precision", True, prediction=2.0, measured=1.6),
        _answer(4, "cy", "03-precision", True, measured=2.0, host="gpu3"),
        # 05-verdict: a choice
        _answer(5, "ann", "05-verdict", True, prediction="data-bound", measured="data-bound"),
        _answer(6, "bob", "05-verdict", True, prediction="balanced", measured="data-bound"),
        _answer(7, "cy", "05-verdict", False, prediction="Data-bound", measured="compute-bound"),
    ]
)


def test_latest_answers_keep_one_verdict_per_learner_and_exercise():
    latest = board.latest_answers(ANSWERS)
    assert len(latest) == 6
    ann = latest[(latest["learner"] == "ann") & (latest["exercise"] == "03-precision")]
    assert ann["id"].tolist() == [3] and ann["ok"].tolist() == [True]


def test_exercise_summary_counts_the_room_and_reads_its_measurements():
    summary = board.exercise_summary(ANSWERS).set_index("exercise")
    assert list(summary.index) == ["03-precision", "05-verdict"]
    p = summary.loc["03-precision"]
    assert (p["answers"], p["learners"], p["correct"]) == (4, 3, 2)
    assert p["correct_pct"] == pytest.approx(66.7)
    assert p["measured"] == pytest.approx(2.0)  # median of 1.6, 2.4, 2.0
    assert (p["measured_min"], p["measured_max"]) == (1.6, 2.4)
    assert p["spread_pct"] == pytest.approx(40.0)  # (2.4 - 1.6) / 2.0
    # ann 2.0 vs 1.6 is 25% over: at the band's edge, close; bob 0.5 vs 2.4 is not; cy none
    assert p["predicted"] == 2 and p["prediction"] == pytest.approx(1.25)
    assert p["close_pct"] == pytest.approx(50.0)
    v = summary.loc["05-verdict"]
    assert (v["learners"], v["correct"], v["measured"]) == (3, 2, "data-bound")
    assert pd.isna(v["measured_min"]) and pd.isna(v["spread_pct"])
    # ann matches; bob said balanced; cy's "Data-bound" is not what cy measured
    assert v["predicted"] == 3 and v["close_pct"] == pytest.approx(33.3)
    assert v["prediction"] == "data-bound"


def test_exercise_answers_list_each_learner_with_how_far_the_prediction_was():
    rows = board.exercise_answers(ANSWERS, "03-precision")
    assert rows["learner"].tolist() == ["ann", "bob", "cy"]
    assert rows["off_pct"].tolist()[:2] == [25.0, pytest.approx(-79.2)]
    assert rows["off_pct"].isna().tolist()[2]
    assert rows["close"].tolist() == [True, False, None]
    assert rows["host"].tolist() == ["gpu1", "gpu2", "gpu3"]


def test_an_empty_room_gives_empty_tables_with_their_columns():
    empty = board.answers_frame([])
    assert list(empty.columns) == list(board.ANSWER_COLUMNS)
    assert board.exercise_summary(empty).empty
    assert list(board.exercise_answers(empty, "03-precision").columns)[:2] == ["learner", "host"]
    bursts = records_frame([])
    assert board.best_configs(bursts).empty
    effects = board.knob_effect(bursts, "precision", "bf16", "default")
    assert effects.empty and board.effect_spread(effects).machines == 0
    assert "nothing to compare" in board.effect_spread(effects).sentence(
        "precision", "bf16", "default"
    )


def _row(i, learner, kind, ok=None, prediction=None, measured=None, late=None, changed_to=None):
    return {**_answer(i, learner, "03-precision", ok, prediction, measured), "kind": kind,
            "late": late, "changed_to": changed_to}  # fmt: skip


# 03-precision with commits (kind "prediction": written as the burst started) and checks
ROOM = board.answers_frame(
    [
        # ann: 2.0 before the burst, then changed to 1.6 (the measurement) in the check cell
        _row(1, "ann", "prediction", prediction=2.0, late=False),
        # bob: a burst with no prediction, then 1.7 copied from its table: late
        _row(2, "bob", "prediction"),
        _row(3, "bob", "prediction", prediction=1.7, late=True),
        # eve: 2.5 in one kernel; after a restart, 1.9 is that kernel's "first"
        _row(4, "eve", "prediction", prediction=2.5, late=False),
        # fay: a burst without a prediction; after a restart, 2.2 looks in time to that kernel
        _row(5, "fay", "prediction"),
        _row(6, "fay", "prediction", prediction=2.2, late=False),
        # dee committed 1.0 and never ran the check
        _row(7, "dee", "prediction", prediction=1.0, late=False),
        _row(8, "ann", "check", ok=False, prediction=2.0, measured=1.6, late=False,
             changed_to=1.6),
        _row(9, "bob", "check", ok=False, prediction=1.7, measured=1.7, late=True),
        _row(10, "eve", "prediction", prediction=1.9, late=False),
        _row(11, "eve", "check", ok=True, prediction=1.9, measured=2.4, late=False),
        _row(12, "fay", "check", ok=True, prediction=2.2, measured=2.1, late=False),
        # cy: a check from before the kinds (kind, late, changed_to unknown)
        _answer(13, "cy", "03-precision", True, prediction=3.0, measured=2.0),
    ]
)  # fmt: skip


def test_first_predictions_are_the_earliest_across_kernels_with_late_and_edits_marked():
    firsts = board.first_predictions(ROOM).set_index("learner")
    assert firsts["prediction"].to_dict() == {"ann": 2.0, "bob": 1.7, "eve": 2.5, "fay": 2.2,
                                              "dee": 1.0, "cy": 3.0}  # fmt: skip
    assert firsts["late"].to_dict() == {"ann": False, "bob": True, "eve": False, "fay": True,
                                        "dee": False, "cy": False}  # fmt: skip
    assert firsts["edited"].to_dict() == {"ann": True, "bob": False, "eve": True, "fay": False,
                                          "dee": False, "cy": False}  # fmt: skip
    assert (firsts.loc["ann", "changed_to"], firsts.loc["eve", "changed_to"]) == (1.6, 1.9)


def test_the_summary_counts_first_predictions_and_only_those_in_time_as_close():
    (row,) = board.exercise_summary(ROOM).to_dict("records")
    # checks: ann (wrong), bob (late: wrong), eve, fay, cy; commits are not verdicts
    assert (row["answers"], row["learners"], row["correct"]) == (5, 5, 3)
    assert (row["predicted"], row["late"], row["edited"]) == (6, 2, 2)
    # in time: ann 2.0, eve 2.5, dee 1.0, cy 3.0 (median 2.25); bob and fay are late
    assert row["prediction"] == pytest.approx(2.25)
    # against each one's own measurement: ann 2.0 vs 1.6 (25%: close), eve 2.5 vs 2.4 (close),
    # cy 3.0 vs 2.0 (not); dee has no measurement yet. A late 1.7 vs 1.7 counts for nothing.
    assert row["close_pct"] == pytest.approx(66.7)


def test_each_learner_shows_the_first_prediction_and_its_marks():
    rows = board.exercise_answers(ROOM, "03-precision").set_index("learner")
    assert list(rows.index) == ["ann", "bob", "cy", "dee", "eve", "fay"]
    assert rows.loc["ann", "prediction"] == 2.0 and rows.loc["ann", "off_pct"] == 25.0
    assert rows.loc["ann", "edited"] and rows.loc["ann", "changed_to"] == 1.6
    assert rows.loc["bob", "late"] and not rows.loc["bob", "ok"]
    assert rows.loc["dee", "ok"] is None and pd.isna(rows.loc["dee", "measured"])
    assert rows.loc["dee", "close"] is None and rows.loc["dee", "message"] == "verdict 7"
    assert rows.loc["eve", "prediction"] == 2.5 and rows.loc["eve", "ok"]


def test_commit_rows_are_not_verdicts():
    latest = board.latest_answers(ROOM)
    assert set(latest["kind"]) == {"check"} and len(latest) == 5
    only_commits = ROOM[ROOM["kind"] == "prediction"]
    (row,) = board.exercise_summary(only_commits).to_dict("records")
    assert (row["learners"], row["correct_pct"], row["predicted"]) == (0, None, 5)


def _burst(i, learner, host, sps, status="ok", workload="cnn", **knobs):
    return {"id": i, "created_at": f"2026-12-04T10:{i:02d}:00+00:00", "workload": workload,
            "device": "cuda:0", "device_name": f"GPU of {host}", "status": status,
            "samples_per_s": sps, "peak_mem_mib": 100.0 + i, "learner": learner, "host": host,
            "knobs": {"batch_size": 32, "precision": "default", "nccl": {}, **knobs}}  # fmt: skip


BURSTS = records_frame(
    [
        _burst(1, "ann", "gpu1", 100.0),
        _burst(2, "ann", "gpu1", 250.0, precision="bf16"),
        _burst(3, "ann", "gpu1", 230.0, precision="bf16"),
        _burst(4, "ann", "gpu1", 300.0, batch_size=64),
        _burst(5, "ann", "gpu1", None, status="oom", batch_size=512),
        _burst(6, "bob", "gpu2", 200.0),
        _burst(7, "bob", "gpu2", 180.0, precision="bf16"),
        _burst(8, "bob", "gpu2", 90.0, precision="bf16", batch_size=64),  # no default at 64
        _burst(9, "bob", "gpu2", 50.0, workload="gpt"),
        _burst(10, "cy", "gpu3", 400.0, precision="bf16", status="error"),
    ]
)


def test_best_configs_pick_each_learners_fastest_ok_burst_with_its_knobs():
    best = board.best_configs(BURSTS)
    assert best[["learner", "workload"]].values.tolist() == [
        ["ann", "cnn"], ["bob", "cnn"], ["bob", "gpt"]]  # fmt: skip
    ann = best.iloc[0]
    assert (ann["samples_per_s"], ann["id"], ann["knobs"]) == (300.0, 4, "batch_size=64")
    assert ann["bursts"] == 4 and ann["device_name"] == "GPU of gpu1"
    assert best.iloc[1]["knobs"] == "defaults" and best.iloc[1]["samples_per_s"] == 200.0
    assert "cy" not in set(best["learner"])  # cy's only burst failed


def test_knob_effect_pairs_bursts_on_one_machine_with_the_other_knobs_held():
    effects = board.knob_effect(BURSTS, "precision", "bf16", "default")
    assert effects[["learner", "host"]].values.tolist() == [["ann", "gpu1"], ["bob", "gpu2"]]
    ann = effects.iloc[0]
    assert (ann["new_per_s"], ann["old_per_s"]) == (240.0, 100.0)  # median of 250 and 230
    assert ann["ratio"] == pytest.approx(2.4) and ann["bursts_new"] == 2
    assert ann["held"] == "defaults"
    assert effects.iloc[1]["ratio"] == pytest.approx(0.9)
    spread = board.effect_spread(effects)
    assert (spread.machines, spread.faster) == (2, 1)
    assert spread.ratio_median == pytest.approx(1.65)
    assert (spread.ratio_min, spread.ratio_max) == (pytest.approx(0.9), pytest.approx(2.4))
    assert "median 1.65x, from 0.90x to 2.40x; faster on 1 of 2" in spread.sentence(
        "precision", "bf16", "default"
    )


def test_knob_effect_names_a_knob_that_does_not_exist():
    with pytest.raises(ValueError, match="'precison' is not a knob"):
        board.knob_effect(BURSTS, "precison", "bf16", "default")


def test_bursts_from_before_class_mode_have_no_learner_and_still_count():
    old = records_frame([{k: v for k, v in _burst(1, "x", "y", 10.0).items()
                          if k not in ("learner", "host")}])  # fmt: skip
    best = board.best_configs(old)
    assert best["learner"].tolist() == [""] and best["samples_per_s"].tolist() == [10.0]


def test_knob_columns_without_a_knobs_dict_are_read_too():
    flat = pd.DataFrame([
        {"id": 1, "workload": "cnn", "status": "ok", "samples_per_s": 10.0, "learner": "a",
         "host": "h", "precision": "default", "batch_size": 8},
        {"id": 2, "workload": "cnn", "status": "ok", "samples_per_s": 30.0, "learner": "a",
         "host": "h", "precision": "bf16", "batch_size": 8},
    ])  # fmt: skip
    effects = board.knob_effect(flat, "precision", "bf16", "default")
    assert effects["ratio"].tolist() == [3.0] and effects["held"].tolist() == ["batch_size=8"]


def test_a_reset_starts_the_learners_exercise_over_on_the_board():
    """gus skipped a burst, guessed late, then reset (``workshop.reset_exercise``) and guessed
    again: only what came after the reset counts, marked as a reset."""
    rows = board.answers_frame([
        _row(1, "gus", "prediction"),
        _row(2, "gus", "prediction", prediction=1.7, late=True),
        _row(3, "gus", "reset"),
        _row(4, "gus", "prediction", prediction=1.2, late=False),
        _row(5, "hal", "prediction", prediction=2.0, late=False),
    ])  # fmt: skip
    firsts = board.first_predictions(rows).set_index("learner")
    assert firsts.loc["gus", "prediction"] == 1.2 and not firsts.loc["gus", "late"]
    assert firsts.loc["gus", "reset"] and not firsts.loc["hal", "reset"]
    just_reset = board.first_predictions(rows[rows["id"] <= 3]).set_index("learner")
    assert just_reset.loc["gus", "prediction"] is None and just_reset.loc["gus", "reset"]


def test_the_summary_groups_seats_by_device_so_a_cpu_never_joins_a_gpus_median():
    bursts = records_frame([
        _burst(1, "ann", "gpu1", 900.0), _burst(2, "bob", "gpu2", 880.0),
        {**_burst(3, "cy", "laptop", 20.0), "device": "cpu", "device_name": "a laptop CPU"},
    ])  # fmt: skip
    devices = board.seat_devices(bursts)
    assert devices == {"ann": "GPU of gpu1", "bob": "GPU of gpu2", "cy": "a laptop CPU"}
    answers = board.answers_frame([
        _answer(1, "ann", "03-precision", True, measured=2.0),
        _answer(2, "bob", "03-precision", True, measured=2.2, host="gpu2"),
        _answer(3, "cy", "03-precision", True, measured=0.4, host="laptop"),
        _answer(4, "dee", "03-precision", True, measured=0.5, host="nowhere"),
    ])  # fmt: skip
    mixed = board.exercise_summary(answers)
    assert len(mixed) == 1 and mixed["device"].tolist() == [None]
    same = {**devices, "bob": "GPU of gpu1"}
    grouped = board.exercise_summary(answers, same).set_index("device")
    assert grouped.loc["GPU of gpu1", "measured"] == pytest.approx(2.1)
    assert grouped.loc["a laptop CPU", "measured"] == pytest.approx(0.4)
    assert grouped.loc[board.UNKNOWN_DEVICE, "learners"] == 1
    assert grouped["learners"].sum() == 4


def test_only_the_servers_verdicts_count_as_correct_and_a_claim_shows_as_unverified():
    claims = board.answers_frame([
        _answer(1, "ann", "12-bf16", True, prediction=2.0, measured=1.9),  # the server's
        # a hand-written ok=true (or a kernel's verdict on an exercise the server cannot judge)
        _answer(2, "bob", "12-bf16", True, prediction=9.0, measured=1.8, verified=False),
        _answer(3, "cy", "12-bf16", True, prediction=2.0, measured=2.1, verified=None),
        _answer(4, "dee", "12-bf16", False, prediction=5.0, measured=2.0),
    ])  # fmt: skip
    (row,) = board.exercise_summary(claims).to_dict("records")
    assert (row["learners"], row["correct"], row["unverified"]) == (4, 1, 2)
    assert row["correct_pct"] == 25.0
    rows = board.exercise_answers(claims, "12-bf16").set_index("learner")
    assert rows["verified"].to_dict() == {"ann": True, "bob": False, "cy": False, "dee": True}
    assert rows.loc["bob", "ok"]  # the claim is shown as made, beside verified=False
