"""Every exercise check counts the first prediction committed before its burst, and nothing else.

For each checker of the lessons (checks.py, memory_lesson.py for lesson 10,
compute_lesson.py for lesson 11, transformer_lesson.py for lesson 12), on measurements whose
right answer is known:

- no prediction (None, the notebooks' default), or one handed to the check but never committed
  before the burst: "make a prediction first", not correct (with None the burst does not even
  start: ``commit_prediction`` stops the cell);
- a right prediction committed after a burst had run without one (skipped on purpose,
  ``workshop.SKIP``, then copied from the table): late, judged, not correct;
- a wrong first prediction changed to the right one after the burst: shown as an edit, the
  first counts, not correct;
- the right value copied from the table into ``answer``: a sentence of its own, never the
  verdict;
- a right prediction committed before the burst: correct (the bands still accept it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.distributed.allreduce import CommResult
from workbench.workshop import checks as workshop
from workbench.workshop import compute_lesson, memory_lesson, transformer_lesson


def _sweep(knob, rows):
    return pd.DataFrame([{knob: v, "samples_per_s": sps, "status": "ok"} for v, sps in rows])


WORKERS = _sweep("num_workers", [(0, 100.0), (1, 180.0), (2, 200.0), (2, 196.0)])
PRECISION = _sweep("precision", [("default", 40.0), ("bf16", 10.0)])  # bf16 / default = 0.25
BATCHES = _sweep("batch_size", [(8, 50.0), (16, 80.0), (32, 95.0), (64, 100.0)])  # knee: 32
DATA_BOUND = SimpleNamespace(verdict="data-bound", reason="", loader_sps=50.0, compute_sps=300.0)
FORMATS = pd.DataFrame([
    {"data_format": f, "cache": c, "mode": m, "samples_per_s": rate, "status": "ok"}
    for f, rate in (("files", 100.0), ("lmdb", 140.0), ("predecoded", 120.0))
    for c in ("warm", "cold") for m in ("loader", "full")
])  # fmt: skip
COMM = CommResult(world_size=2, rows=[
    {"size_bytes": size, "count": size // 4, "dtype": "float32", "calls": 10, "time_us": 1.0,
     "algbw_gbps": bw, "busbw_gbps": bw, "correct": True}
    for size, bw in [(8192, 0.1), (65536, 0.9), (524288, 2.0), (4194304, 1.5)]
])  # fmt: skip

# The operator table of a real CPU profile of cnn (batch 16, num_workers=0), as
# ``wb.profile_burst`` keeps it: its 15 top operators by self time.
PROFILE_OPS = [
    ("aten::convolution_backward", 124.1), ("aten::mkldnn_convolution", 69.2),
    ("aten::copy_", 37.6), ("aten::native_batch_norm", 30.7),
    ("aten::native_batch_norm_backward", 27.4),
    ("autograd::engine::evaluate_function: ReluBackward0", 19.9), ("aten::empty", 17.2),
    ("aten::threshold_backward", 10.2), ("aten::log", 3.9), ("aten::div", 3.4),
    ("aten::clamp_min_", 2.9), ("aten::_to_copy", 2.6), ("aten::uniform_", 2.4),
    ("aten::lt", 2.4), ("aten::select", 2.2),
]  # fmt: skip


def _profile(rows=PROFILE_OPS):
    ops = pd.DataFrame(rows, columns=["operator", "self_ms"])
    ops.attrs["sort_by"] = "self_ms"
    return SimpleNamespace(operators=ops, status="ok", error=None)


def _burst(sps, launch_s=3.0):
    return BurstResult(status="ok", samples_per_s=sps, launch_s=launch_s)


def _mem(activations, **knobs):
    parts = {"params_mib": 1.0, "grads_mib": 1.0, "optimizer_mib": 2.0,
             "activations_mib": activations}  # fmt: skip
    return BurstResult(status="ok", device="cpu", knobs=Knobs(**knobs), samples_per_s=100.0,
                       memory_breakdown=parts)  # fmt: skip


MEMORY = memory_lesson.memory_table({
    "baseline": _mem(16.0), "activation_checkpointing": _mem(2.0, activation_checkpointing=True),
    "grad_accum": _mem(8.0, batch_size=16, grad_accum=2),
    "optimizer_impl": _mem(16.0, optimizer_impl="for-loop"),
})  # fmt: skip


def _step(step_ms, iqr=1.0, **extra):
    return BurstResult(knobs=Knobs(batch_size=32), device="cpu", step_ms_p50=step_ms,
                       step_ms_iqr=iqr, samples_per_s=32 / step_ms * 1e3, **extra)  # fmt: skip


def _rank(params, activations, **knobs):
    """One rank's memory: AdamW's two moments beside the parameters and their gradients."""
    parts = {"params_mib": params, "grads_mib": params, "optimizer_mib": 2 * params,
             "activations_mib": activations}  # fmt: skip
    return BurstResult(status="ok", device="cpu", knobs=Knobs(**knobs), samples_per_s=10.0,
                       memory_breakdown=parts)  # fmt: skip


# lesson 12 on the learner's own model: checkpointing frees 28 of 110 MiB held (25.5%)
MEMORY_HERE = transformer_lesson.MemoryHere(
    _rank(20.0, 30.0), _rank(20.0, 2.0, activation_checkpointing=True)
)
FP8_RUN = transformer_lesson.Fp8Run(
    _burst(0.0), BurstResult(status="ok", tokens_per_s=1300.0, fp8_linears=48,
                             knobs=Knobs(precision="bf16", fp8="tensorwise")))  # fmt: skip
FP8_RUN.against.tokens_per_s = 1000.0

BREAK_EVEN = compute_lesson.break_even(_step(100.0, 4.0), _step(60.0, 2.0, compile_s=12.0))
SHARE = _step(100.0, achieved_tflops=0.002, cpu_util_pct=150.0)  # 5% of a 40 GFLOP/s ceiling


@dataclass(frozen=True)
class Case:
    """One checker on a measurement whose right answer is known."""

    exercise: str
    check: Callable[..., workshop.Check]
    """``check(prediction, answer)``; checkers without an ``answer`` ignore it."""
    right: Any
    wrong: Any
    reads_answers: bool = True
    read: Any = None
    """The right answer read off the table, where it differs from a right prediction (an
    exact operator name; a ratio within the answer's tighter band)."""

    @property
    def copied(self) -> Any:
        return self.right if self.read is None else self.read


CASES = [
    Case("02-workers", lambda p, a: workshop.check_best(
        a, WORKERS, "num_workers", prediction=p, exercise="02-workers"), 2, 0),
    Case("03-precision", lambda p, a: workshop.check_speedup(
        a, PRECISION, "precision", "bf16", "default", prediction=p, exercise="03-precision"),
        0.3, 2.0, read=0.25),
    Case("04-knee", lambda p, a: workshop.check_knee(
        a, BATCHES, prediction=p, exercise="04-knee"), 32, 64),
    Case("05-verdict", lambda p, a: workshop.check_verdict(
        a, DATA_BOUND, prediction=p, exercise="05-verdict"), "data-bound", "compute-bound"),
    Case("06-comm-peak", lambda p, a: workshop.check_comm_peak(
        a, COMM, prediction=p, exercise="06-comm-peak"), 524288, 8192),
    Case("06-scale-out", lambda p, a: workshop.check_scale_out(
        p, _burst(100.0), _burst(100.0, 5.5), exercise="06-scale-out"), "same", "faster",
        reads_answers=False),
    Case("07-top-operator", lambda p, a: workshop.check_top_operator(
        a, _profile(), prediction=p, exercise="07-top-operator"), "convolution", "batch_norm",
        read="aten::convolution_backward"),
    Case("08-reproduce", lambda p, a: workshop.check_prediction(
        p, 0.97, what="re-measured / saved samples/s", rel_tol=0.2, exercise="08-reproduce"),
        1.0, 2.0, reads_answers=False),
    Case("01-data-wait", lambda p, a: workshop.check_prediction(
        p, 62.0, what="data_wait_pct", abs_tol=15, exercise="01-data-wait"), 50, 5,
        reads_answers=False),
    Case("09-format", lambda p, a: workshop.check_format(
        a, FORMATS, prediction=p, exercise="09-format"), "lmdb", "files"),
    Case("10-frees-most", lambda p, a: memory_lesson.check_frees_most(
        p, MEMORY, answer=a), "activation_checkpointing", "optimizer_impl"),
    Case("11-compile-break-even", lambda p, a: compute_lesson.check_break_even(
        p, BREAK_EVEN), 300, 5000, reads_answers=False),
    Case("11-channels-last", lambda p, a: compute_lesson.check_layout(
        p, _step(100.0), _step(80.0)), "faster", "same", reads_answers=False),
    Case("11-share-of-peak", lambda p, a: compute_lesson.check_share_of_peak(
        p, SHARE, 40e9), 5, 60, reads_answers=False),
    Case("12-memory", lambda p, a: transformer_lesson.check_memory(p, MEMORY_HERE), 25, 60,
         reads_answers=False),
    Case("12-fp8", lambda p, a: transformer_lesson.check_fp8(p, FP8_RUN), 1.3, 3.0,
         reads_answers=False),
]  # fmt: skip
ANSWERING = [c for c in CASES if c.reads_answers]


def commit(case: Case, value: Any) -> None:
    workshop.commit_prediction(value, exercise=case.exercise)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.exercise)
def test_a_right_prediction_committed_before_the_burst_is_correct(case):
    commit(case, case.right)
    verdict = case.check(case.right, None)
    assert verdict.ok, verdict
    assert verdict.exercise == case.exercise and verdict.prediction == case.right
    assert verdict.late is False and verdict.changed_to is None
    commit(case, case.wrong)  # a later burst with another value: an edit, the first counts
    assert case.check(case.right, None).ok


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.exercise)
def test_no_prediction_is_not_correct_and_says_make_a_prediction_first(case):
    for verdict in (case.check(None, None), case.check(case.right, None)):  # never committed
        assert not verdict.ok and "make a prediction first" in verdict.message
        assert verdict.answered and verdict.exercise == case.exercise
    with pytest.raises(workshop.PredictionNeeded):  # the notebook's default: no burst starts
        commit(case, None)
    commit(case, workshop.SKIP)  # the burst ran without a prediction, on purpose
    after = case.check(case.right, None)
    assert not after.ok and "ran with no prediction committed" in after.message


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.exercise)
def test_a_right_prediction_committed_after_the_burst_is_late_and_not_correct(case):
    commit(case, workshop.SKIP)  # the burst ran; the learner copies the right value from its table
    commit(case, case.right)
    verdict = case.check(case.right, None)
    assert not verdict.ok and verdict.late is True
    assert "does not count as correct" in verdict.message
    assert "your prediction, against the measurement" in verdict.message  # judged all the same


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.exercise)
def test_a_prediction_changed_after_the_burst_shows_as_an_edit_and_the_first_counts(case):
    commit(case, case.wrong)
    verdict = case.check(case.right, None)  # changed in the check cell, after the table
    assert not verdict.ok and verdict.prediction == case.wrong
    assert verdict.changed_to == case.right and "the first counts" in verdict.message
    assert "You changed it after the burst" in verdict.message
    commit(case, case.right)  # or changed and the burst run again
    again = case.check(None, None)
    assert not again.ok and again.changed_to == case.right


@pytest.mark.parametrize("case", ANSWERING, ids=lambda c: c.exercise)
def test_a_value_copied_from_the_table_never_makes_the_verdict(case):
    copied = case.check(None, case.copied)  # no prediction, the right answer read off the table
    assert not copied.ok and "make a prediction first" in copied.message
    assert "Your answer read from the table" in copied.message and "is right" in copied.message
    commit(case, case.wrong)
    wrong_first = case.check(case.wrong, case.copied)
    assert not wrong_first.ok and "is right" in wrong_first.message


@pytest.mark.parametrize("case", ANSWERING, ids=lambda c: c.exercise)
def test_a_wrong_reading_beside_a_right_prediction_is_said_and_the_verdict_stands(case):
    commit(case, case.right)
    verdict = case.check(case.right, case.wrong)
    assert verdict.ok and "is not right" in verdict.message


def test_a_check_used_as_a_plain_function_judges_what_it_is_given():
    """Without an exercise name (never in a lesson: nothing goes to a board), there is no burst
    to have committed anything: the answer is judged, else the prediction handed in."""
    assert workshop.check_best(2, WORKERS, "num_workers")
    assert workshop.check_best(None, WORKERS, "num_workers", prediction=2)
    none = workshop.check_best(None, WORKERS, "num_workers")
    assert not none and not none.answered and "`prediction`" in none.message


# -- the ways past a check that are not a prediction --------------------------------------------


@pytest.mark.parametrize(
    "name", ["", "aten", "aten::", "a", "::", "_", "ten", "e", "aTen ", "backward"]
)
def test_a_family_that_names_everything_or_nothing_is_not_a_prediction(name):
    """ "aten" is a part of every operator's name and "backward" of four of the fifteen: a
    family must be specific (at most a quarter of the table, 3 letters or more)."""
    workshop.commit_prediction(name, exercise="07-top-operator")
    verdict = workshop.check_top_operator(None, _profile(), prediction=name,
                                          exercise="07-top-operator")  # fmt: skip
    assert not verdict.ok
    assert "names no operator family" in verdict.message or "too broad" in verdict.message


def test_a_specific_family_or_an_exact_name_is_judged_by_its_time():
    found = workshop.operator_family("convolution", [op for op, _ in PROFILE_OPS])
    assert found == ["aten::convolution_backward", "aten::mkldnn_convolution"]
    assert workshop.operator_family("BATCH_NORM", [op for op, _ in PROFILE_OPS]) == [
        "aten::native_batch_norm", "aten::native_batch_norm_backward"]  # fmt: skip
    broad = workshop.operator_family("backward", [op for op, _ in PROFILE_OPS])
    assert "matches 4 of the 15 operators" in broad and "at most 3" in broad
    for name, right in (("aten::convolution_backward", True), ("mkldnn_convolution", False),
                        ("convolution_backward", True), ("batch_norm", False),
                        ("copy_", False)):  # fmt: skip
        workshop.BOOK.clear()
        workshop.commit_prediction(name, exercise="07")
        assert workshop.check_top_operator(None, _profile(), prediction=name,
                                           exercise="07").ok is right, name  # fmt: skip


def test_an_answer_must_be_an_exact_operator_name_not_a_family():
    workshop.commit_prediction("convolution", exercise="07")
    verdict = workshop.check_top_operator("convolution", _profile(), prediction="convolution",
                                          exercise="07")  # fmt: skip
    assert verdict.ok and "'convolution' is not in the table" in verdict.message


def test_lesson_tens_saving_is_not_any_figure_printed_beside_it():
    """200 h at 2.5/h with 100 -> 125 samples/s: 500 with the start, 400 tuned, 100 saved. The
    bills, the hours and the price are all on screen; only the saving is right."""
    start, tuned = _mem(16.0), BurstResult(status="ok", device="cpu", samples_per_s=125.0)
    check = memory_lesson.check_monthly_saving
    assert check(100.0, start, tuned, 2.5, 200)
    for copied in (500.0, 400.0, 200, 2.5, 125.0, 0.2 * 500, 0.25 * 500, 0):
        if copied == 100.0:
            continue
        assert not check(copied, start, tuned, 2.5, 200), copied
    assert not check(None, start, tuned, 2.5, 200).answered


def test_a_loader_with_the_defaults_is_not_the_tuned_one(tmp_path):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from workbench.config.saved import load_config, save_config

    # lesson 8's config: batch 16, two workers kept alive
    path = save_config(Knobs(batch_size=16, num_workers=2, persistent_workers=True),
                       tmp_path / "tuned.yaml")  # fmt: skip
    cfg = load_config(path)
    data = TensorDataset(torch.zeros(64, 3), torch.zeros(64))
    assert not workshop.check_loader(None, cfg, exercise="08-loader").answered
    for loader in (DataLoader(data), DataLoader(data, batch_size=16),
                   DataLoader(data, batch_size=16, num_workers=2)):  # fmt: skip
        assert not workshop.check_loader(loader, cfg, exercise="08-loader")
    assert workshop.check_loader(cfg.dataloader(data), cfg, exercise="08-loader")
