"""A room whose class store is down: each burst says so in one short line, is kept for later,
and the store is tried once a minute, not once a burst (each try may wait for a connect
timeout)."""

from __future__ import annotations

from typing import Any

import pytest

from workbench.history import store as store_mod
from workbench.history.store import StoreError, StoreWarning, pending_results, record_result


class Result:
    def __init__(self, sps: float) -> None:
        self.samples_per_s, self.id = sps, None

    def to_dict(self) -> dict[str, Any]:
        return {"status": "ok", "workload": "cnn", "samples_per_s": self.samples_per_s}


def test_a_down_class_store_is_tried_once_a_minute_and_each_burst_says_so_briefly(monkeypatch):
    url = "postgresql://ada:Pw-9f1@127.0.0.1:1/class"
    monkeypatch.setenv("WORKBENCH_STORE", url)
    monkeypatch.setattr(store_mod, "_class_down_until", [0.0])
    now = [1000.0]
    monkeypatch.setattr(store_mod.time, "monotonic", lambda: now[0])
    tries = []

    def down(store=None):
        tries.append(store)
        raise StoreError("connection to server at 127.0.0.1, port 1 failed: Connection refused "
                         "Is the server running on that host and accepting TCP/IP connections? "
                         f"{url}")  # fmt: skip

    monkeypatch.setattr(store_mod, "open_store", down)
    with pytest.warns(StoreWarning) as said:
        for sps in (1.0, 2.0, 3.0):
            record_result(Result(sps), True, None)
    assert len(tries) == 1  # the later bursts did not wait on the store
    lines = [str(w.message) for w in said]
    assert len(lines) == 3 and all("\n" not in line and len(line) < 200 for line in lines)
    assert lines[0].startswith("class store down (connection to server") and "..." in lines[0]
    assert lines[1] == "class store down: burst kept, stored when it answers (next try in 60 s)"
    assert not any("Pw-9f1" in line for line in lines)
    assert [e["record"]["samples_per_s"] for e in pending_results(url)] == [1.0, 2.0, 3.0]
    now[0] += store_mod.CLASS_RETRY_S + 1  # a minute on: tried again
    with pytest.warns(StoreWarning):
        record_result(Result(4.0), True, None)
    assert len(tries) == 2


def test_a_store_named_by_the_caller_is_tried_every_time(monkeypatch, tmp_path):
    """Only the environment's class store pauses: a store a caller passes (a script's own, the
    tests') is tried at each burst, as before."""
    monkeypatch.setattr(store_mod, "_class_down_until", [0.0])
    url = "postgresql://ada@127.0.0.1:1/class"
    with pytest.warns(StoreWarning, match="could not record this burst"):
        record_result(Result(1.0), True, url)
    assert store_mod._class_down_until == [0.0]
