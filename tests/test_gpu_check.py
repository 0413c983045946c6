"""benchmarks/gpu_check.py runs only where CUDA is (a lent GPU, minutes at a time): its table
and its checks are tested here on CPU results, so a typo cannot waste that time."""

import importlib.util
from pathlib import Path

import pytest
import torch
from workloads_for_tests import tensor_workload

from workbench import Knobs, run_burst
from workbench.results import BurstResult

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # builds every row's Knobs: a bad combination fails here
    return module


def test_rows_cover_what_the_check_promises(gpu_check):
    rows = [(workload, label) for workload, label, _ in gpu_check.ROWS]
    assert len(set(rows)) == len(rows)
    assert {label for _, label in rows} >= gpu_check.QUICK
    precisions = {k.precision for w, _, k in gpu_check.ROWS if w == "resnet50"}
    assert precisions == {"fp32", "tf32", "bf16", "fp16"}
    knobs = [k for _, _, k in gpu_check.ROWS]
    assert any(k.pin_memory for k in knobs) and any(k.channels_last for k in knobs)
    assert any(k.compile != "off" for k in knobs) and any(k.loader == "synthetic" for k in knobs)
    assert len({k.num_workers for w, _, k in gpu_check.ROWS if w == "resnet50"}) >= 3


def test_a_cpu_result_fails_the_gpu_checks_with_reasons(gpu_check):
    r = run_burst(tensor_workload(), Knobs(batch_size=8), seconds=0.2, device="cpu",
                  record=False)  # fmt: skip
    assert r.ok
    problems = gpu_check.check("bf16", r)
    assert "NVML telemetry missing" in problems and "CUDA memory missing" in problems
    row = gpu_check._row("tiny", "bf16", r, problems)
    assert row.startswith("| tiny ") and "NVML telemetry missing" in row
    assert row.count("|") == 13  # the header's 12 columns, then the check


def test_the_oom_row_passes_only_on_an_oom(gpu_check):
    oom = BurstResult(status="oom", error="CUDA out of memory", workload="gpt", knobs=Knobs())
    ran = BurstResult(status="ok", workload="gpt", knobs=Knobs())
    assert gpu_check.check("OOM on purpose", oom) == []
    assert gpu_check.check("OOM on purpose", ran) == ["expected oom, got ok"]
    assert gpu_check.check("bf16", oom) == ["oom: CUDA out of memory"]
    assert "| oom " in gpu_check._row("gpt", "OOM on purpose", oom, [])


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA main() runs the whole check")
def test_without_cuda_it_says_so_and_fails(gpu_check, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["gpu_check.py", "--quick"])
    assert gpu_check.main() == 1
    assert "no CUDA device here" in capsys.readouterr().err
