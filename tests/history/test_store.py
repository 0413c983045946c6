"""Tests for workbench.history.store: round trips, filters, concurrency, schema versions,
crash safety."""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from workbench.core.results import BurstResult
from workbench.history import store as store_mod
from workbench.history.store import HistoryStore, StoreError, default_store_path, open_store

STORE_FILE = Path(store_mod.__file__)

# Child processes load store.py by file path: it needs only the stdlib, and this keeps the
# subprocess tests fast and independent of what `import workbench` pulls in (torch, ...).
WRITER = r"""
import importlib.util, pathlib, sys, time
spec = importlib.util.spec_from_file_location("wb_store", sys.argv[1])
store = importlib.util.module_from_spec(spec)
spec.loader.exec_module(store)
db, tag, count, go = sys.argv[2], sys.argv[3], int(sys.argv[4]), pathlib.Path(sys.argv[5])
while not go.exists():
    time.sleep(0.001)
history = store.HistoryStore(db)
i = 0
while count < 0 or i < count:
    history.append({"workload": "cnn", "status": "ok", "writer": tag, "i": i, "pad": "x" * 4096})
    i += 1
"""


def burst(**fields: Any) -> dict[str, Any]:
    """A BurstResult-shaped record."""
    record: dict[str, Any] = {
        "status": "ok",
        "error": None,
        "workload": "cnn",
        "device": "cpu",
        "knobs": {"batch_size": 64, "num_workers": 2, "nccl": {}},
        "samples_per_s": 1234.5,
        "peak_mem_mib": 512.0,
        "versions": {"torch": "2.5.0", "python": "3.11"},
    }
    record.update(fields)
    return record


def sql(path: Path, *statements: str) -> list[Any]:
    """Run statements on a plain connection, outside the store; return the last one's rows."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        rows: list[Any] = []
        for statement in statements:
            rows = conn.execute(statement).fetchall()
        return rows
    finally:
        conn.close()


def start_writer(db: Path, tag: str, count: int, go: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-c", WRITER, str(STORE_FILE), str(db), tag, str(count), str(go)]
    return subprocess.Popen(args, stderr=subprocess.PIPE)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "history.sqlite"


@pytest.fixture
def history(db: Path) -> HistoryStore:
    return HistoryStore(db)


# -- round trip, filters, frame ------------------------------------------------------------


def test_append_records_round_trip(history: HistoryStore) -> None:
    record = burst(
        knobs={"batch_size": 32, "nccl": {"NCCL_ALGO": "Ring"}},
        step_ms_iqr=float("nan"),
        mfu_pct=None,
        extra={"nested": {"deep": [1, 2.5, float("inf"), None, (3, 4)]}},
    )
    burst_id = history.append(record)

    (got,) = history.records()
    expected = {**record, "step_ms_iqr": None}
    expected["extra"] = {"nested": {"deep": [1, 2.5, None, None, [3, 4]]}}
    row_fields = ("id", "created_at", "learner", "host")
    assert {k: v for k, v in got.items() if k not in row_fields} == expected
    assert got["id"] == burst_id
    assert history.get(burst_id) == got
    assert len(history) == 1
    assert math.isnan(record["step_ms_iqr"])  # the caller's dict is not modified


def test_created_at_is_utc_iso(history: HistoryStore) -> None:
    history.append(burst())
    created = datetime.fromisoformat(history.records()[0]["created_at"])
    assert created.tzinfo is not None
    assert created.utcoffset() == timezone.utc.utcoffset(None)


def test_indexed_columns_filled(history: HistoryStore, db: Path) -> None:
    history.append(burst(samples_per_s=float("nan"), peak_mem_mib=99.0, device="cuda:0"))
    rows = sql(db, "SELECT workload, device, status, samples_per_s, peak_mem_mib FROM bursts")
    assert rows == [("cnn", "cuda:0", "ok", None, 99.0)]


@pytest.mark.parametrize("missing", ["workload", "status"])
def test_append_refuses_missing_key(history: HistoryStore, missing: str) -> None:
    record = burst()
    del record[missing]
    with pytest.raises(ValueError, match=repr(missing)):
        history.append(record)
    assert len(history) == 0


def test_append_refuses_unserializable_value_naming_it(history: HistoryStore) -> None:
    with pytest.raises(TypeError, match=r"record\['knobs'\]\['when'\] is a object"):
        history.append(burst(knobs={"when": object()}))
    assert len(history) == 0


def test_get_missing_id(history: HistoryStore) -> None:
    with pytest.raises(KeyError, match="no burst with id 7"):
        history.get(7)


def test_filters_and_limit(history: HistoryStore) -> None:
    specs = [("cnn", "ok"), ("gpt", "ok"), ("cnn", "oom"), ("cnn", "ok"), ("gpt", "error")]
    ids = [history.append(burst(workload=w, status=s, n=i)) for i, (w, s) in enumerate(specs)]

    assert [r["id"] for r in history.records()] == ids
    assert [r["n"] for r in history.records(workload="cnn")] == [0, 2, 3]
    assert [r["n"] for r in history.records(status="ok")] == [0, 1, 3]
    assert [r["n"] for r in history.records(workload="cnn", status="ok")] == [0, 3]
    assert [r["n"] for r in history.records(limit=2)] == [3, 4]  # newest two, oldest first
    assert [r["n"] for r in history.records(workload="cnn", limit=2)] == [2, 3]
    assert [r["n"] for r in history.records(device="cpu", limit=10)] == [0, 1, 2, 3, 4]
    assert history.records(limit=0) == []
    assert history.records(workload="resnet50") == []
    with pytest.raises(ValueError, match="limit"):
        history.records(limit=-1)


def test_frame_has_knob_columns(history: HistoryStore) -> None:
    import pandas as pd

    history.append(burst(knobs={"batch_size": 64, "num_workers": 2, "nccl": {}}))
    history.append(
        burst(knobs={"batch_size": 128, "num_workers": 4, "nccl": {"NCCL_ALGO": "Ring"}})
    )
    history.append(burst(workload="gpt", knobs={"batch_size": 8, "num_workers": 0}))

    frame = history.frame()
    assert list(frame.columns[:5]) == ["id", "created_at", "workload", "device", "status"]
    assert frame["batch_size"].tolist() == [64, 128, 8]
    assert frame["num_workers"].tolist() == [2, 4, 0]
    assert frame["NCCL_ALGO"].tolist()[1] == "Ring"
    assert pd.isna(frame["NCCL_ALGO"].tolist()[0])
    assert {"samples_per_s", "peak_mem_mib", "knobs"} <= set(frame.columns)
    assert isinstance(frame["created_at"].dtype, pd.DatetimeTZDtype)
    assert history.frame(workload="gpt")["batch_size"].tolist() == [8]


def test_frame_prefixes_knob_that_shadows_a_result_field(history: HistoryStore) -> None:
    history.append(burst(knobs={"device": "cuda:1", "batch_size": 4}))
    frame = history.frame()
    assert frame["device"].tolist() == ["cpu"]
    assert frame["knob_device"].tolist() == ["cuda:1"]


def test_frame_of_empty_store(history: HistoryStore) -> None:
    frame = history.frame()
    assert frame.empty
    assert list(frame.columns[:5]) == ["id", "created_at", "workload", "device", "status"]
    # the same columns a full frame has: code that reads a column never meets a KeyError
    assert {f.name for f in dataclasses.fields(BurstResult)} <= set(frame.columns)


def test_old_rows_read_renamed_fields_under_their_new_names(
    history: HistoryStore, db: Path
) -> None:
    """A row written before `mem_bw_util_pct` became `mem_busy_pct` (NVML's share of time the
    memory was busy, not of bandwidth) is left as stored and reads back under the new name."""
    old_row = burst(mem_bw_util_pct=37.5, gpu_util_pct=88.0)
    sql(
        db,
        "INSERT INTO bursts (created_at, workload, device, status, samples_per_s, peak_mem_mib,"
        " record) VALUES ('2026-01-02T03:04:05.000000+00:00', 'cnn', 'cuda:0', 'ok', 1234.5,"
        f" 512.0, '{json.dumps(old_row)}')",
    )
    new_id = history.append(burst(mem_busy_pct=12.0))
    both_id = history.append(burst(mem_bw_util_pct=99.0, mem_busy_pct=55.0))  # new name wins

    old, new, both = history.records()
    for got, expected in ((old, 37.5), (new, 12.0), (both, 55.0)):
        assert got["mem_busy_pct"] == expected
        assert "mem_bw_util_pct" not in got
    assert history.get(old["id"]) == old and history.get(both_id)["mem_busy_pct"] == 55.0
    assert history.get(new_id)["mem_busy_pct"] == 12.0
    assert old["gpu_util_pct"] == 88.0  # the rest of the row as stored

    frame = history.frame()
    assert frame["mem_busy_pct"].tolist() == [37.5, 12.0, 55.0]
    assert "mem_bw_util_pct" not in frame.columns
    # the file itself is untouched: append-only
    assert "mem_bw_util_pct" in sql(db, "SELECT record FROM bursts WHERE id = 1")[0][0]


def test_old_fp32_rows_read_as_fp32_strict_with_one_warning_per_read(
    history: HistoryStore, db: Path
) -> None:
    """precision=fp32 measured IEEE everywhere: such rows read as fp32-strict, one warning for
    the whole read (not one per row), and stay as written on disk."""
    import warnings

    from workbench.core.knobs import RenamedValueWarning

    for _ in range(3):
        history.append(burst(knobs={"batch_size": 64, "precision": "fp32", "nccl": {}}))
    history.append(burst(knobs={"batch_size": 64, "precision": "tf32", "nccl": {}}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = history.records()
        results = [BurstResult.from_dict(row) for row in rows]  # no second warning
    renamed = [str(w.message) for w in caught if w.category is RenamedValueWarning]
    assert [r["knobs"]["precision"] for r in rows] == ["fp32-strict"] * 3 + ["tf32"]
    assert [r.knobs.precision for r in results] == ["fp32-strict"] * 3 + ["tf32"]
    assert len(renamed) == 1 and renamed[0].startswith("history ")
    assert "precision=fp32" in renamed[0] and "\n" not in renamed[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert history.get(1)["knobs"]["precision"] == "fp32-strict"
    assert len(caught) == 1
    stored = sql(db, "SELECT record FROM bursts WHERE id = 1")[0][0]  # append-only: as written
    assert json.loads(stored)["knobs"]["precision"] == "fp32"


NVML_RECORD = {
    "start": {"t_s": 0.01, "sm_clock_mhz": 1980.0, "mem_clock_mhz": 3201.0, "temp_c": 63.0,
              "power_w": 626.5, "throttle_reasons": []},
    "end": {"t_s": 1.96, "sm_clock_mhz": 1830.0, "mem_clock_mhz": 3201.0, "temp_c": 70.0,
            "power_w": 626.6, "throttle_reasons": ["sw_thermal_slowdown"]},
    "window": {"t_s": [0.01, 0.06], "sm_clock_mhz": [1980.0, None],
               "mem_clock_mhz": [3201.0, 3201.0], "temp_c": [63.0, 64.0],
               "power_w": [626.5, 630.1], "throttle_mask": [0, 32]},
    "samples": 2,
    "stride": 1,
    "clock_drop": {"from_mhz": 1980.0, "to_mhz": 1830.0, "pct": 7.58},
}  # fmt: skip


def test_a_bursts_nvml_record_round_trips_and_old_rows_load_without_it(
    history: HistoryStore, db: Path
) -> None:
    result = BurstResult(workload="resnet50", device="cuda:0", mem_clock_mhz=3201.0,
                         clock_drop_pct=7.58, nvml=NVML_RECORD)  # fmt: skip
    new_id = history.append(result.to_dict())
    old_row = burst(sm_clock_mhz=1980.0, throttle_reasons=["sw_power_cap"])  # before the record
    sql(
        db,
        "INSERT INTO bursts (created_at, workload, device, status, samples_per_s, peak_mem_mib,"
        " record) VALUES ('2026-01-02T03:04:05.000000+00:00', 'cnn', 'cuda:0', 'ok', 1234.5,"
        f" 512.0, '{json.dumps(old_row)}')",
    )

    kept = BurstResult.from_dict(history.get(new_id))
    assert kept.nvml == NVML_RECORD
    assert (kept.mem_clock_mhz, kept.clock_drop_pct) == (3201.0, 7.58)
    old = BurstResult.from_dict(history.records()[-1])
    assert (old.nvml, old.mem_clock_mhz, old.clock_drop_pct) == (None, None, None)
    assert old.sm_clock_mhz == 1980.0 and old.throttle_reasons == ["sw_power_cap"]
    frame = history.frame()
    assert {"nvml", "mem_clock_mhz", "clock_drop_pct"} <= set(frame.columns)


def test_store_renames_what_results_renames() -> None:
    from workbench.core import results
    from workbench.history import records

    assert records.RENAMED is results.RENAMED  # one table: the store reads the results'
    assert set(results.RENAMED.values()) <= {f.name for f in dataclasses.fields(BurstResult)}


# -- paths ---------------------------------------------------------------------------------


def test_default_path_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WORKBENCH_HISTORY", raising=False)
    monkeypatch.delenv("WORKBENCH_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".workbench" / "history.sqlite"

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "wbhome"))
    assert default_store_path() == tmp_path / "wbhome" / "history.sqlite"

    monkeypatch.setenv("WORKBENCH_HISTORY", str(tmp_path / "elsewhere" / "h.db"))
    assert default_store_path() == tmp_path / "elsewhere" / "h.db"

    monkeypatch.setenv("WORKBENCH_HISTORY", "")  # empty counts as unset
    assert default_store_path() == tmp_path / "wbhome" / "history.sqlite"


def test_default_store_creates_parent_dirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WORKBENCH_HISTORY", raising=False)
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "a" / "b"))
    history = HistoryStore()
    assert history.path == tmp_path / "a" / "b" / "history.sqlite"
    history.append(burst())
    assert history.path.is_file()


def test_open_store_accepts_store_path_or_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, history: HistoryStore
) -> None:
    assert open_store(history) is history
    assert open_store(str(history.path)).path == history.path
    monkeypatch.setenv("WORKBENCH_HISTORY", str(tmp_path / "default.sqlite"))
    assert open_store().path == tmp_path / "default.sqlite"


@pytest.mark.parametrize("bad", [":memory:", ""])
def test_memory_path_refused(bad: str) -> None:
    with pytest.raises(StoreError, match="needs a real file"):
        HistoryStore(bad)


# -- concurrency ---------------------------------------------------------------------------


def test_wal_is_on(history: HistoryStore, db: Path) -> None:
    assert history.journal_mode == "wal"
    assert sql(db, "PRAGMA journal_mode") == [("wal",)]


def test_wal_falls_back_to_default_journal() -> None:
    class NoWal:
        def execute(self, statement: str) -> Any:
            if "WAL" in statement:
                raise sqlite3.OperationalError("WAL not supported on this filesystem")
            return sqlite3.connect(":memory:").execute("SELECT 'delete'")

    assert store_mod._enable_wal(NoWal()) == "delete"  # type: ignore[arg-type]


def test_two_processes_appending_at_once(tmp_path: Path, db: Path) -> None:
    go = tmp_path / "go"
    writers = [start_writer(db, tag, 200, go) for tag in ("a", "b")]
    go.touch()  # both create the (new) file and append at the same time
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err.decode()

    rows = HistoryStore(db).records()
    assert len(rows) == 400
    assert len({r["id"] for r in rows}) == 400
    for tag in ("a", "b"):
        assert [r["i"] for r in rows if r["writer"] == tag] == list(range(200))


def test_threads_appending_at_once(history: HistoryStore) -> None:
    n_threads, per_thread = 4, 50
    barrier = threading.Barrier(n_threads)
    ids: list[int] = []

    def write(tag: int) -> None:
        barrier.wait()
        ids.extend(history.append(burst(thread=tag, i=i)) for i in range(per_thread))

    threads = [threading.Thread(target=write, args=(t,)) for t in range(n_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(history) == n_threads * per_thread
    assert len(set(ids)) == n_threads * per_thread
    assert sorted(ids) == [r["id"] for r in history.records()]


def test_thirty_processes_appending_at_once(db: Path) -> None:
    """30 spawned processes append at the same moment: every row lands once, ids unique."""
    from store_writers import run_writers

    writers, per_writer = 30, 10
    ids = run_writers(str(db), writers, per_writer)
    rows = HistoryStore(db).records()
    assert len(rows) == len(ids) == writers * per_writer
    assert sorted(ids) == [r["id"] for r in rows]
    for tag in range(writers):
        assert [r["i"] for r in rows if r["writer"] == tag] == list(range(per_writer))


def test_writer_killed_mid_burst_keeps_earlier_rows(tmp_path: Path, db: Path) -> None:
    history = HistoryStore(db)
    go = tmp_path / "go"
    go.touch()
    writer = start_writer(db, "k", -1, go)  # appends until killed
    deadline = time.monotonic() + 60
    while len(history) < 50 and time.monotonic() < deadline and writer.poll() is None:
        time.sleep(0.01)
    seen = len(history)
    writer.kill()  # SIGKILL on POSIX: no cleanup, possibly mid-transaction
    writer.communicate(timeout=30)
    assert seen >= 50

    rows = HistoryStore(db).records()
    assert len(rows) >= seen
    assert [r["i"] for r in rows] == list(range(len(rows)))
    assert sql(db, "PRAGMA integrity_check") == [("ok",)]
    history.append(burst())  # and the store still takes new bursts
    assert len(history) == len(rows) + 1


# -- schema versions and foreign files -----------------------------------------------------


def test_new_file_gets_current_schema_version(history: HistoryStore, db: Path) -> None:
    assert sql(db, "PRAGMA user_version") == [(store_mod.SCHEMA_VERSION,)]


def test_newer_schema_refused_and_untouched(history: HistoryStore, db: Path) -> None:
    history.append(burst())
    newer = store_mod.SCHEMA_VERSION + 1
    sql(db, f"PRAGMA user_version = {newer}")
    before = db.read_bytes()

    expected = (
        f"history store {db} has schema version {newer}; this workbench knows up to "
        f"{store_mod.SCHEMA_VERSION}. Upgrade workbench, or point WORKBENCH_HISTORY at another "
        "file."
    )
    with pytest.raises(StoreError) as info:
        HistoryStore(db)
    assert str(info.value) == expected
    assert db.read_bytes() == before


def test_non_sqlite_file_refused_and_untouched(db: Path) -> None:
    db.write_bytes(b"step,samples_per_s\n1,100.0\n" * 50)
    before = db.read_bytes()
    with pytest.raises(StoreError, match="is not an SQLite database") as info:
        HistoryStore(db)
    assert str(db) in str(info.value)
    assert db.read_bytes() == before


@pytest.mark.parametrize("user_version", [0, 1])
def test_foreign_sqlite_db_refused_and_untouched(db: Path, user_version: int) -> None:
    sql(
        db,
        "CREATE TABLE users (name TEXT)",
        "INSERT INTO users VALUES ('ada')",
        f"PRAGMA user_version = {user_version}",
    )
    before = db.read_bytes()
    with pytest.raises(StoreError, match=r"other tables \(users\).*not a workbench history"):
        HistoryStore(db)
    assert db.read_bytes() == before
    assert sql(db, "SELECT name FROM users") == [("ada",)]


def test_damaged_sqlite_file_refused_and_untouched(db: Path) -> None:
    db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    before = db.read_bytes()
    with pytest.raises(StoreError, match=r"cannot be used \(file is not a database\)"):
        HistoryStore(db)
    assert db.read_bytes() == before


def test_directory_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        HistoryStore(tmp_path)


# The schema of version 1 as it was released: the file a learner's earlier workbench wrote.
SCHEMA_V1 = (
    """CREATE TABLE bursts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at TEXT NOT NULL,
        workload TEXT NOT NULL,
        device TEXT,
        status TEXT NOT NULL,
        samples_per_s REAL,
        peak_mem_mib REAL,
        record TEXT NOT NULL
    )""",
    "CREATE INDEX bursts_workload ON bursts (workload, id)",
    "CREATE INDEX bursts_device ON bursts (device, id)",
    "CREATE INDEX bursts_status ON bursts (status, id)",
    "CREATE INDEX bursts_created_at ON bursts (created_at)",
)


def test_a_version_1_store_upgrades_and_keeps_its_rows(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Class mode (schema 2) adds learner and host: an older file keeps every row, readable
    by its owner under any learner name (rows without a learner are the file owner's)."""
    rows = [burst(i=i, samples_per_s=100.0 + i) for i in range(3)]
    inserts = [
        "INSERT INTO bursts (created_at, workload, device, status, samples_per_s, peak_mem_mib,"
        f" record) VALUES ('2026-11-0{i + 1}T10:00:00.000000+00:00', 'cnn', 'cpu', 'ok',"
        f" {100.0 + i}, 512.0, '{json.dumps(row)}')"
        for i, row in enumerate(rows)
    ]
    sql(db, *SCHEMA_V1, *inserts, "PRAGMA user_version = 1")

    monkeypatch.setenv("WORKBENCH_LEARNER", "ada")
    upgraded = HistoryStore(db)
    assert sql(db, "PRAGMA user_version") == [(store_mod.SCHEMA_VERSION,)]
    got = upgraded.records()
    assert [r["i"] for r in got] == [0, 1, 2]
    assert [(r["learner"], r["host"]) for r in got] == [(None, None)] * 3
    assert [r["samples_per_s"] for r in got] == [100.0, 101.0, 102.0]
    assert got[0]["created_at"] == "2026-11-01T10:00:00.000000+00:00"
    assert len(upgraded) == 3 and upgraded.answers() == [] and not upgraded.board_shared()

    new_id = upgraded.append(burst(i=3))
    assert upgraded.get(new_id)["learner"] == "ada"
    monkeypatch.setenv("WORKBENCH_LEARNER", "bob")  # another name: the old rows, not ada's new one
    assert [r["i"] for r in HistoryStore(db).records()] == [0, 1, 2]
    assert sql(db, "PRAGMA integrity_check") == [("ok",)]


# What schema 2 added, as released: class mode's learner and host, answers and the board switch.
# The answers and board tables are the library's own ``_CLASS_TABLES``, kept as schema 2 made
# them because its migration runs them too; ``test_an_upgraded_store_has_the_schema_of_a_new_one``
# checks that what they make is what a new file has.
SCHEMA_V2 = (
    *SCHEMA_V1,
    "ALTER TABLE bursts ADD COLUMN learner TEXT",
    "ALTER TABLE bursts ADD COLUMN host TEXT",
    "CREATE INDEX bursts_learner ON bursts (learner, id)",
    *store_mod._CLASS_TABLES,
)


def _schema(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Each table's columns (name, type, not null, default, primary key) and each index's."""
    names = sql(db, "SELECT name FROM sqlite_master WHERE type IN ('table', 'index')"
                " AND name NOT LIKE 'sqlite_%' ORDER BY name")  # fmt: skip
    return {name: [tuple(row[1:]) for row in sql(db, f"PRAGMA table_xinfo({name})")]
            or sql(db, f"PRAGMA index_info({name})") for (name,) in names}  # fmt: skip


@pytest.mark.parametrize("old", [(SCHEMA_V1, 1), (SCHEMA_V2, 2)], ids=["v1", "v2"])
def test_an_upgraded_store_has_the_schema_of_a_new_one(tmp_path: Path, old) -> None:
    """Every migration step together makes the tables, columns and indexes a new file has."""
    statements, version = old
    upgraded, new = tmp_path / "upgraded.sqlite", tmp_path / "new.sqlite"
    sql(upgraded, *statements, f"PRAGMA user_version = {version}")
    HistoryStore(upgraded)
    HistoryStore(new)
    assert _schema(upgraded) == _schema(new)
    assert {"bursts", "answers", "board"} <= _schema(new).keys()


def test_a_version_2_store_keeps_its_answers_readable_as_checks(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schema 3 adds kind, late and changed_to to answers: a room's earlier answers read back
    as checks whose lateness and edits are unknown, and new rows carry them."""
    old = ("INSERT INTO answers (created_at, learner, host, exercise, ok, message, prediction,"
           " measured) VALUES ('2026-12-01T10:00:00+00:00', 'ada', 'h1', '03-precision', 1,"
           " 'right', '2.0', '1.9')")  # fmt: skip
    sql(db, *SCHEMA_V2, old, "PRAGMA user_version = 2")

    monkeypatch.setenv("WORKBENCH_LEARNER", "ada")
    upgraded = HistoryStore(db)
    assert sql(db, "PRAGMA user_version") == [(store_mod.SCHEMA_VERSION,)]
    (before,) = upgraded.answers()
    assert before["kind"] == "check" and before["late"] is None and before["changed_to"] is None
    assert (before["ok"], before["prediction"], before["measured"]) == (True, 2.0, 1.9)
    upgraded.record_answer({"exercise": "03-precision", "kind": "prediction", "prediction": 1.2,
                            "late": True})  # fmt: skip
    after = upgraded.answers()[-1]
    assert (after["kind"], after["late"], after["prediction"], after["ok"]) == (
        "prediction", True, 1.2, None)  # fmt: skip
    assert sql(db, "PRAGMA integrity_check") == [("ok",)]


NOW = store_mod.SCHEMA_VERSION
NEXT = NOW + 1  # a future version, for the migration machinery's own tests


def _add_note_column(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE bursts ADD COLUMN note TEXT")
    conn.execute("UPDATE bursts SET note = 'migrated'")


def _columns(db: Path) -> list[str]:
    return [row[1] for row in sql(db, "PRAGMA table_info(bursts)")]


def test_registered_migration_runs_and_keeps_rows(
    monkeypatch: pytest.MonkeyPatch, history: HistoryStore, db: Path
) -> None:
    for i in range(3):
        history.append(burst(i=i))
    before = history.records()

    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", NEXT)
    monkeypatch.setitem(store_mod._MIGRATIONS, NOW, _add_note_column)
    migrated = HistoryStore(db)

    assert sql(db, "PRAGMA user_version") == [(NEXT,)]
    assert sql(db, "SELECT DISTINCT note FROM bursts") == [("migrated",)]
    assert migrated.records() == before
    HistoryStore(db)  # already at the next version: opening again migrates nothing
    assert sql(db, "PRAGMA user_version") == [(NEXT,)]


def test_failing_migration_rolls_back(
    monkeypatch: pytest.MonkeyPatch, history: HistoryStore, db: Path
) -> None:
    for i in range(3):
        history.append(burst(i=i))
    before_rows, before_columns = history.records(), _columns(db)

    def half_done(conn: sqlite3.Connection) -> None:
        _add_note_column(conn)
        raise RuntimeError("boom")

    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", NEXT)
    monkeypatch.setitem(store_mod._MIGRATIONS, NOW, half_done)
    with pytest.raises(
        StoreError, match=rf"from schema version {NOW} to {NEXT} .*boom.*rolled back"
    ):
        HistoryStore(db)

    assert sql(db, "PRAGMA user_version") == [(NOW,)]
    assert _columns(db) == before_columns
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", NOW)
    assert HistoryStore(db).records() == before_rows


def test_missing_migration_refused(
    monkeypatch: pytest.MonkeyPatch, history: HistoryStore, db: Path
) -> None:
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", NEXT)
    with pytest.raises(StoreError, match="no migration from it"):
        HistoryStore(db)
    assert sql(db, "PRAGMA user_version") == [(NOW,)]


def test_import_needs_only_stdlib() -> None:
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('wb_store', {str(STORE_FILE)!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "assert 'pandas' not in sys.modules, 'pandas imported eagerly'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_results_created_at_is_the_rows_one_clock(history: HistoryStore) -> None:
    """The result in memory and its stored row agree: the store keeps the result's clock."""
    from workbench.core.results import BurstResult
    from workbench.history.store import record_result

    r = BurstResult(workload="cnn", device="cpu", created_at="2026-12-03T18:00:00.123456+00:00")
    record_result(r, True, history)
    assert history.get(r.id)["created_at"] == r.created_at
    history.append(burst())  # a record without one is stamped now
    assert history.records()[-1]["created_at"] > r.created_at


def test_the_history_and_its_folder_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, usual_umask: None
) -> None:
    """Other users on the host cannot read the history (nor its WAL files), whatever the
    umask: WORKBENCH_HOME is made 0700, the file and SQLite's companions 0600."""
    import stat

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "wbhome"))
    store = HistoryStore()
    store.append({"workload": "cnn", "status": "ok"})
    conn = sqlite3.connect(store.path)  # held open: -wal and -shm stay there to be seen
    conn.execute("SELECT COUNT(*) FROM bursts").fetchall()
    files = [store.path, *store.path.parent.glob("history.sqlite-*")]
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in files}
    conn.close()
    assert stat.S_IMODE((tmp_path / "wbhome").stat().st_mode) == 0o700
    assert store.journal_mode != "wal" or "history.sqlite-wal" in modes
    assert modes and set(modes.values()) == {0o600}, modes
