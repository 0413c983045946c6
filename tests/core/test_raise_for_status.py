"""A failed burst is a result until a script asks for an exception: ``raise_for_status`` and
``run_burst(..., check=True)`` raise its error; a misspelt knob is refused by its real name."""

import dataclasses
import pickle

import pytest
from torch import nn
from workloads_for_tests import tensor_workload

import workbench as wb
from workbench.core.results import BurstFailed, BurstResult

FAST = {"seconds": 0.05, "warmup_steps": 1, "min_steps": 2, "record": False, "device": "cpu"}


def test_an_ok_result_returns_itself():
    r = BurstResult(workload="tiny", samples_per_s=10.0)
    assert r.raise_for_status() is r


@pytest.mark.parametrize("status", ["oom", "error", "cancelled"])
def test_a_failed_result_raises_its_error_with_the_result_and_its_traceback(status):
    r = BurstResult(status=status, error="RuntimeError: boom", workload="tiny",
                    knobs=wb.Knobs(batch_size=8),
                    traceback="Traceback ...\nRuntimeError: boom")  # fmt: skip
    said = rf"tiny burst {status} \(knobs: Knobs\(batch_size=8\)\): RuntimeError: boom"
    with pytest.raises(BurstFailed, match=said) as caught:
        r.raise_for_status()
    assert caught.value.result is r and "Traceback ..." in str(caught.value)
    assert pickle.loads(pickle.dumps(caught.value)).status == status  # crosses processes


def test_check_raises_a_real_failed_burst_and_leaves_a_good_one_alone():
    # 16 features into a layer that takes 3: fails at its first step
    wrong = dataclasses.replace(tensor_workload(), model=lambda: nn.Linear(3, 2))
    with pytest.raises(BurstFailed, match=r"tiny burst error: .*3") as caught:
        wb.run_burst(wrong, check=True, **FAST)
    assert caught.value.result.status == "error"
    assert wb.run_burst(wrong, **FAST).status == "error"  # still a result without check
    assert wb.run_burst(tensor_workload(), check=True, **FAST).ok


def test_a_misspelt_knob_gets_its_real_name_in_knobs_and_in_run_burst():
    with pytest.raises(TypeError, match=r"batchsize=64 .*did you mean batch_size\?"):
        wb.Knobs(batchsize=64)
    with pytest.raises(wb.KnobError, match=r"did you mean batch_size\?.*Knobs\(batch_size=64\)"):
        wb.run_burst("cnn", batchsize=64)
    with pytest.raises(TypeError, match=r"secs=.*did you mean seconds\?"):
        wb.run_burst("cnn", secs=3)
    with pytest.raises(wb.KnobError, match=r"did you mean batch_size\?.*base=wb.Knobs\(batch"):
        wb.sweep("cnn", "num_workers", [0, 1], batchsize=64)  # before any burst runs
    with pytest.raises(wb.KnobError, match=r"tune takes no knob by keyword.*base=wb.Knobs"):
        wb.tune("cnn", {"num_workers": [0, 1]}, batch_size=64)
    with pytest.raises(wb.KnobError, match=r"Knobs\(nccl=\{'NCCL_ALGO': 'Ring'\}\)"):
        wb.Knobs(NCCL_ALGO="Ring")
