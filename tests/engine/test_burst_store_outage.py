"""A store that fails after a burst measured costs a warning, never the measurement
(engine/burst.py records through history.store.record_result)."""

from __future__ import annotations

from pathlib import Path

import pytest
from flaky_store import FlakyStore
from workloads_for_tests import tensor_workload

import workbench as wb
from workbench.history.store import StoreWarning, pending_results


def test_a_burst_whose_record_fails_returns_its_result_and_is_stored_later(tmp_path: Path):
    store = FlakyStore(tmp_path / "h.sqlite")
    store.down = True  # the network mount went away
    with pytest.warns(StoreWarning, match="could not record this burst.*disk I/O error"):
        r = wb.run_burst(tensor_workload(), wb.Knobs(batch_size=8), seconds=0.2,
                         warmup_steps=1, device="cpu", store=store)  # fmt: skip
    assert r.status == "ok" and r.samples_per_s > 0 and r.id is None
    (kept,) = pending_results(store)
    assert kept["record"]["samples_per_s"] == r.samples_per_s

    store.down = False
    assert wb.retry_pending(store) == 1
    (row,) = store.records()
    assert row["samples_per_s"] == r.samples_per_s and row["created_at"] == r.created_at
    assert wb.retry_pending(store) == 0 and len(store) == 1  # stored exactly once
