"""Tests for workbench.history.pending and record_result's side of it: a store that fails
after a burst measured costs a warning, never the result, and the result is stored exactly
once when the store answers again."""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from flaky_store import FlakyStore

from workbench.history import pending
from workbench.history.store import (
    StoreError,
    StoreWarning,
    pending_results,
    record_result,
    retry_pending,
)


@dataclass
class Result:
    """What record_result needs of a BurstResult."""

    samples_per_s: float
    id: int | None = None
    created_at: str = field(default_factory=lambda: "2026-12-05T10:00:00+00:00")

    def to_dict(self) -> dict[str, Any]:
        return {"status": "ok", "workload": "cnn", "device": "cpu",
                "samples_per_s": self.samples_per_s, "created_at": self.created_at}  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> FlakyStore:
    return FlakyStore(tmp_path / "h.sqlite")


def test_a_failed_record_warns_keeps_the_result_and_a_later_one_stores_it_once(
    store: FlakyStore,
) -> None:
    store.down = True
    first = Result(101.0, created_at="2026-12-05T09:00:00+00:00")
    with pytest.warns(StoreWarning, match=r"could not record this burst \(.*disk I/O error\)"):
        record_result(first, True, store)
    assert first.id is None and len(store) == 0
    kept = pending_results(store)
    assert [e["record"]["samples_per_s"] for e in kept] == [101.0]
    assert "disk I/O error" in kept[0]["error"]

    store.down = False
    second = Result(202.0)
    record_result(second, True, store)  # reaches the store, then stores the kept one
    rows = store.records()
    assert [r["samples_per_s"] for r in rows] == [202.0, 101.0]
    assert rows[1]["created_at"] == "2026-12-05T09:00:00+00:00"  # dated when it was measured
    assert pending_results(store) == []
    record_result(Result(303.0), True, store)
    assert sorted(r["samples_per_s"] for r in store.records()) == [101.0, 202.0, 303.0]


def test_retry_pending_stores_only_this_stores_bursts(store: FlakyStore, tmp_path: Path) -> None:
    other = FlakyStore(tmp_path / "other.sqlite")
    store.down = other.down = True
    with pytest.warns(StoreWarning):
        record_result(Result(1.0), True, store)
        record_result(Result(2.0), True, other)
        record_result(Result(3.0), True, store)
    store.down = False
    assert retry_pending(store) == 2
    assert [r["samples_per_s"] for r in store.records()] == [1.0, 3.0]
    assert [e["record"]["samples_per_s"] for e in pending_results(other)] == [2.0]
    assert retry_pending(store) == 0  # nothing stored twice
    assert len(store) == 2


def test_a_retry_that_fails_half_way_keeps_the_rest(store: FlakyStore) -> None:
    store.down = True
    with pytest.warns(StoreWarning):
        for sps in (1.0, 2.0, 3.0):
            record_result(Result(sps), True, store)
    store.down = False
    calls = []

    def append_twice(record: dict[str, Any]) -> int:
        if len(calls) == 2:
            raise StoreError("gone again")
        calls.append(record)
        return store.append(record)

    with pytest.raises(StoreError, match="gone again"):
        pending.retry(pending.store_key(store.where()), append_twice)
    assert [e["record"]["samples_per_s"] for e in pending_results(store)] == [3.0]
    assert retry_pending(store) == 1
    assert [r["samples_per_s"] for r in store.records()] == [1.0, 2.0, 3.0]


def test_the_pending_file_is_private_and_names_no_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A class store that cannot be reached: the kept line names it with its password
    masked, in a 0600 file in a 0700 WORKBENCH_HOME."""
    url = "postgresql://ada:Pw-Kept-7c2@127.0.0.1:1/class"  # nothing listens on port 1
    with pytest.warns(StoreWarning, match=r"ada:\*\*\*@127.0.0.1:1/class") as caught:
        record_result(Result(5.0), True, url)
    path = pending.pending_path()
    assert path == tmp_path / "wbhome" / "pending.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_text()
    assert "Pw-Kept-7c2" not in text and "Pw-Kept-7c2" not in str(caught[0].message)
    (entry,) = [json.loads(line) for line in text.splitlines()]
    assert entry["store"] == "postgresql://ada:***@127.0.0.1:1/class"
    assert entry["record"]["samples_per_s"] == 5.0
    assert len(pending_results(url)) == 1
    assert pending_results(tmp_path / "h.sqlite") == []  # never retried into another store


def test_a_torn_line_is_kept_and_skipped(store: FlakyStore) -> None:
    pending.pending_path().parent.mkdir(parents=True, exist_ok=True)
    pending.pending_path().write_text('{"store": "x", "rec\n')
    store.down = True
    with pytest.warns(StoreWarning):
        record_result(Result(7.0), True, store)
    store.down = False
    assert retry_pending(store) == 1
    assert pending.pending_path().read_text() == '{"store": "x", "rec\n'


def test_record_false_keeps_nothing(store: FlakyStore) -> None:
    store.down = True
    record_result(Result(1.0), False, store)
    assert not pending.pending_path().exists()


def test_history_frame_says_when_bursts_wait_to_be_stored(store: FlakyStore) -> None:
    import workbench as wb

    store.down = True
    with pytest.warns(StoreWarning):
        record_result(Result(1.0), True, store)
    with pytest.warns(StoreWarning, match=r"1 burst\(s\) measured while .*retry_pending\(\)"):
        frame = wb.history(store)
    assert frame.empty
