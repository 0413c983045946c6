"""A store that fails after a burst measured costs a warning, never the measurement
(engine/burst.py records through history.store.record_result)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from workloads_for_tests import tensor_workload

import workbench as wb
from workbench.history.store import HistoryStore, StoreError, StoreWarning, pending_results


class LostMount(HistoryStore):
    """A real history whose writes fail while ``down``, as on a network mount that went away."""

    down = True

    def append(self, record: Any) -> int:
        if self.down:
            raise StoreError(f"history store {self.path} cannot be used (disk I/O error)")
        return super().append(record)


def test_a_burst_whose_record_fails_returns_its_result_and_is_stored_later(tmp_path: Path):
    store = LostMount(tmp_path / "h.sqlite")
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
