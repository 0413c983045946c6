"""The GPU session's loss-parity rows (issue 40), tested on a CPU: their plan is a later call
of its own, their estimates add up where the session states them, and a row keeps each
verdict and judges it (fake parity results), then runs for real in its CPU rehearsal."""

import sys
import types

from benchmark_modules import benchmark_fixture

from workbench import Knobs

check = benchmark_fixture("gpu_check")
session = benchmark_fixture("gpu_session")


def test_the_parity_rows_are_a_call_of_their_own_never_the_first(check, session):
    rows = sys.modules["gpu_rows"]
    step = next(s for s in session.PLAN if s.name == "parity")
    assert step.call != 1 and session.CALLS[step.call] == ("parity",)
    assert rows.SETUP_EST_S + sum(r.est_s for r in rows.PARITY) == session.PARITY_EST_S
    assert rows.SETUP_EST_S + rows.PARITY[0].est_s == session.PARITY_FIRST_S
    assert step.est_s <= session.DEFAULT_BUDGET_S - session.STEP_MARGIN_S
    labels = " ".join(r.label for r in rows.PARITY)
    for what in ("resnet50", "gpt:124m", "bf16", "fp16", "fp8", "compile"):
        assert what in labels
    assert rows.ROWS[-1].label == "compile max-autotune (tf32)"  # the check's own rows as they were


def _result(verdict, defects=()):
    return types.SimpleNamespace(
        verdict=verdict, reason=f"{verdict}: 1e-3 against 4e-3", defects=list(defects),
        candidate=Knobs(precision="bf16"), grad_norm_max_rel_dev=1e-3, band_from="twice",
        reference_losses=[2.0], reference2_losses=[2.0], candidate_losses=[2.01], seconds=1.0,
        device="cuda:0", evidence=lambda: {"steps": 1, "verdict": verdict},
    )  # fmt: skip


def test_a_parity_row_keeps_every_verdict_and_judges_those_it_must(check):
    rows = sys.modules["gpu_rows"]
    calls = []

    def fake(workload, reference, candidates, **kw):
        calls.append((workload, reference, candidates, kw["scaler"]))
        return [_result("within-noise"), _result("drifting"), _result("within-noise", ["d"])]

    run = rows.RowRun(tools=rows.Tools(parity=fake))
    cands = {"bf16": (Knobs(precision="bf16"), True), "fp16, no scaler": (Knobs(), False),
             "fp8": (Knobs(), True)}  # fmt: skip
    rows.parity_row("gpt", Knobs(), cands, 3, {"bf16": rows.WITHIN, "fp8": rows.WITHIN})(run)
    assert calls[0][3] == [True, False, True] and calls[0][0] == "gpt"
    assert set(run.facts["parity"]) == {"gpt: bf16", "gpt: fp16, no scaler", "gpt: fp8"}
    assert run.facts["parity"]["gpt: fp16, no scaler"]["verdict"] == "drifting"  # kept, not judged
    assert run.problems == ["gpt fp8: parity identical or within-noise: within-noise: 1e-3 "
                            "against 4e-3; d"]  # fmt: skip


def test_the_rehearsal_row_runs_a_real_parity_on_the_cpu(check, tiny_data):
    rows = sys.modules["gpu_rows"]
    run = rows.RowRun(data_dir=tiny_data, device="cpu")
    rows.REHEARSAL_PARITY[0].run(run)
    assert run.problems == [], run.problems
    kept = run.facts["parity"]
    assert kept["cnn: num_workers=1"]["verdict"] == "identical"
    assert kept["cnn: bf16"]["verdict"] == "within-noise"
    assert len(kept["cnn: bf16"]["candidate_losses"]) == 3
