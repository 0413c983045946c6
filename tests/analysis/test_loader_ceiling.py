"""The loader-only ceiling: iterate the loader, no model."""

from __future__ import annotations

from workloads_for_tests import dict_items_workload, tensor_workload

from workbench import Knobs
from workbench.analysis.loader_ceiling import run_loader_burst

FAST = {"seconds": 0.2, "min_batches": 3, "warmup_batches": 1}


def test_tensor_batches_are_counted_by_their_batch_dimension():
    r = run_loader_burst(tensor_workload(), Knobs(batch_size=16), **FAST)
    assert r.status == "ok", r.error
    assert r.samples == r.batches * 16


def test_dict_batches_padded_by_a_collate_are_delivered_and_counted():
    # diagnose's loader-only run on a text pipeline: a dict batch, not (x, y)
    r = run_loader_burst(dict_items_workload(), Knobs(batch_size=8), **FAST)
    assert r.status == "ok", r.error
    assert r.samples == r.batches * 8
