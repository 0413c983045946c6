import json

import pytest
import torch
from workloads_for_tests import heavy_workload, sleepy_workload, tensor_workload

from workbench import Knobs, diagnose
from workbench.advice import advise
from workbench.diagnosis import classify
from workbench.knobs import KnobError
from workbench.loader_bench import run_loader_burst
from workbench.store import open_store

FAST = {"seconds": 0.3, "warmup_steps": 1, "min_steps": 3}
CPU = torch.device("cpu")


def test_a_loader_that_sleeps_per_item_is_data_bound(store_path):
    stages: list[str] = []
    d = diagnose(sleepy_workload(delay_s=0.01), Knobs(batch_size=8), store=store_path,
                 progress=lambda stage, r: stages.append(stage), **FAST)  # fmt: skip
    assert stages == ["full", "loader", "compute"]
    assert d.verdict == "data-bound"
    assert d.loader_sps < d.compute_sps and d.full_sps > 0
    knobs = [s.knob for s in d.suggestions]
    assert knobs[0] == "num_workers"
    assert "batch_size" not in knobs and "precision" not in knobs
    assert "pin_memory" not in knobs  # cannot act on a CPU: never suggested here
    text = d.summary()
    assert text.startswith("data-bound:") and "loader alone" in text
    assert "raise the batch" not in text.lower() and "batch_size=" not in text
    # the two training bursts are recorded (compute-only as loader=synthetic), the loader run not
    rows = open_store(store_path).records()
    assert [r["knobs"]["loader"] for r in rows] == ["torch", "synthetic"]


def test_a_heavy_model_on_in_memory_tensors_is_compute_bound():
    d = diagnose(heavy_workload(), Knobs(batch_size=16), record=False, **FAST)
    assert d.verdict == "compute-bound"
    assert d.compute_sps < d.loader_sps
    knobs = [s.knob for s in d.suggestions]
    assert {"precision", "batch_size", "compile"} <= set(knobs)
    assert "num_workers" not in knobs  # loading is a rounding error here
    assert "compute-bound" in d.summary()
    doc = json.loads(json.dumps(d.to_dict()))
    assert doc["verdict"] == "compute-bound" and doc["compute"]["knobs"]["loader"] == "synthetic"


@pytest.mark.parametrize(
    ("loader", "compute", "verdict"),
    [(100, 400, "data-bound"), (400, 100, "compute-bound"), (100, 110, "balanced"),
     (110, 100, "balanced"), (None, 100, "unknown"), (100, 0.0, "unknown")],
)  # fmt: skip
def test_classify_by_the_slower_ceiling(loader, compute, verdict):
    assert classify(loader, compute) == verdict


@pytest.mark.parametrize("nw", [0, 1, 4])
@pytest.mark.parametrize("verdict", ["data-bound", "balanced"])
def test_no_batch_size_advice_unless_compute_bound(verdict, nw):
    knobs = Knobs(num_workers=nw)
    got = advise(verdict, knobs, CPU, tensor_workload(), 100.0, 100.0)
    assert got and all(s.knob != "batch_size" for s in got)


def test_compute_bound_with_serial_loading_also_suggests_workers():
    got = advise("compute-bound", Knobs(), CPU, tensor_workload(), 200.0, 100.0)
    assert got[-1].knob == "num_workers"  # loading is a third of each step: overlap it


def test_the_loader_alone_is_measured_and_not_recorded(store_path):
    r = run_loader_burst(tensor_workload(), Knobs(batch_size=16), seconds=0.2, min_batches=3)
    assert r.status == "ok" and r.samples_per_s > 0 and r.batches >= 3
    assert r.samples == r.batches * 16 and r.batch_ms_p50 > 0
    assert len(open_store(store_path)) == 0


def test_a_failing_full_burst_gives_an_unknown_verdict_with_the_reason():
    from workloads_for_tests import hungry_workload

    d = diagnose(hungry_workload(limit=4), Knobs(batch_size=8), record=False, **FAST)
    assert d.verdict == "unknown" and "oom" in d.reason
    assert [s.knob for s in d.suggestions] == ["batch_size"]


def test_the_synthetic_loader_cannot_be_diagnosed():
    with pytest.raises(KnobError, match="loader='synthetic' is not allowed"):
        diagnose(tensor_workload(), Knobs(loader="synthetic"), record=False)


def test_workers_advice_says_when_the_model_already_fills_every_core():
    busy = advise("data-bound", Knobs(), CPU, tensor_workload(), 100.0, 300.0, 1e6)
    idle = advise("data-bound", Knobs(), CPU, tensor_workload(), 100.0, 300.0, 10.0)
    assert busy[0].knob == idle[0].knob == "num_workers"
    assert "take cores from it" in busy[0].why and "take cores" not in idle[0].why
