from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.workshop import checks as workshop
from workbench.workshop import memory_lesson as lesson
from workbench.workshop.predictions import BOOK


def _r(activations, sps=100.0, device="cpu", peak=None, **knobs):
    parts = {"params_mib": 1.0, "grads_mib": 1.0, "optimizer_mib": 2.0,
             "activations_mib": activations}  # fmt: skip
    return BurstResult(status="ok", device=device, knobs=Knobs(**knobs), samples_per_s=sps,
                       memory_breakdown=parts, peak_mem_mib=peak)  # fmt: skip


RUNS = {
    "baseline": _r(16.0),
    "activation_checkpointing": _r(2.0, sps=70.0, activation_checkpointing=True),
    "grad_accum": _r(8.0, sps=90.0, batch_size=16, grad_accum=2),
    "optimizer_impl": _r(16.0, optimizer_impl="for-loop"),
}


def test_the_table_ranks_what_each_change_freed():
    table = lesson.memory_table(RUNS)
    assert table["change"].tolist()[0] == "activation_checkpointing"
    freed = dict(zip(table["change"], table["freed_mib"], strict=True))
    # baseline holds 1 + 1 + 2 + 16 = 20 MiB; checkpointing 6, accumulation 12
    assert freed == {"activation_checkpointing": 14.0, "grad_accum": 8.0,
                     "baseline": 0.0, "optimizer_impl": 0.0}  # fmt: skip


def test_on_a_gpu_the_peak_allocated_is_what_counts():
    assert lesson.held_mib(_r(16.0, device="cuda:0", peak=900.0)) == 900.0
    assert lesson.held_mib(_r(16.0)) == 20.0


def _predicted(prediction, table, **kwargs):
    """The check of ``prediction`` committed before the measurement, in a fresh book."""
    BOOK.clear()
    # None: the burst ran without a prediction (skipped: with None alone it would not start)
    workshop.commit_prediction(workshop.SKIP if prediction is None else prediction,
                               exercise=lesson.FREES_MOST)  # fmt: skip
    return lesson.check_frees_most(prediction, table, **kwargs)


def test_check_frees_most():
    table = lesson.memory_table(RUNS)
    assert not _predicted(None, table)
    ok = _predicted("activation_checkpointing", table)
    assert ok and "freed 14.0 MiB of 20.0" in ok.message and ok.exercise == "10-frees-most"
    wrong = _predicted("grad_accum", table)
    assert not wrong and "activation_checkpointing freed 14.0" in wrong.message
    assert not _predicted("bigger_gpu", table)
    tie = dict(RUNS, grad_accum=_r(2.5, batch_size=16, grad_accum=2))  # 0.5 MiB of 20: 2.5%
    assert _predicted("grad_accum", lesson.memory_table(tie))


def test_check_monthly_saving_by_hand():
    start, tuned = _r(16.0, sps=100.0), _r(16.0, sps=125.0)
    # 200 h at $2.5 = $500 with the start; the tuned config needs 160 h = $400: it saves $100
    assert lesson.check_monthly_saving(100.0, start, tuned, 2.5, 200)
    assert lesson.check_monthly_saving(101.0, start, tuned, 2.5, 200)  # within 2%
    off = lesson.check_monthly_saving(125.0, start, tuned, 2.5, 200)
    assert not off and "it saves 100.00" in off.message
    assert not lesson.check_monthly_saving(None, start, tuned, 2.5, 200)
    assert not lesson.check_monthly_saving("100", start, tuned, 2.5, 200)
    failed = lesson.check_monthly_saving(1.0, BurstResult(status="oom"), tuned, 2.5, 200)
    assert not failed and "measured throughput" in failed.message  # a verdict, not a traceback
