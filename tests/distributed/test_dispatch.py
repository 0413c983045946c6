"""distributed/dispatch: run_burst picks this process or a torchrun job from the knobs."""

import pytest
import torch
from workloads_for_tests import tensor_workload

from workbench.core.errors import InputError
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.distributed import jobs
from workbench.distributed.dispatch import run_burst
from workbench.engine.burst import run_in_process
from workbench.engine.window import BurstWindow

FAST = BurstWindow(seconds=0.1, min_steps=2, warmup_steps=1)


def test_one_process_knobs_run_here_with_the_window_given(monkeypatch):
    monkeypatch.setattr(jobs, "run_distributed_burst", pytest.fail)
    r = run_burst(tensor_workload(), Knobs(batch_size=8), window=FAST, seconds=0.2,
                  device="cpu", record=False)  # fmt: skip
    assert r.ok and r.seconds == 0.2 and r.steps >= 2  # seconds replaced the window's


def test_ranks_go_to_a_job_with_the_same_window(monkeypatch):
    calls = []
    job = BurstResult(workload="cnn", device="cpu", knobs=Knobs(world_size=2))
    monkeypatch.setattr(jobs, "run_distributed_burst", lambda *a, **k: calls.append(k) or job)
    assert run_burst("cnn", Knobs(world_size=2), window=FAST, device="cpu", record=False) is job
    assert calls[0]["window"] == FAST and calls[0]["device"] == torch.device("cpu")


def test_the_in_process_burst_refuses_what_needs_a_job():
    with pytest.raises(InputError, match="need a torchrun job"):
        run_in_process(tensor_workload(), Knobs(world_size=2), torch.device("cpu"), FAST)
