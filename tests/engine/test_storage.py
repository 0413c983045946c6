"""engine.storage: the page cache dropped for real, the device named, and agreement with fio."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from pathlib import Path

import pytest
from conftest import IN_CI

from workbench import cli
from workbench.engine.storage import (
    _MEMORY_FS,
    cached_fraction,
    device_of,
    drop_pages,
    measure_one,
    storage_check,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import storage_vs_fio

FIELDS = {"seq_read_mb_s", "rand_4k_iops", "rand_1m_mb_s"}


def _file(folder: Path, mib: int) -> Path:
    path = folder / "blob.bin"
    with open(path, "wb") as handle:
        for _ in range(mib):
            handle.write(os.urandom(2**20))
    return path


def _on_disk(folder: Path) -> None:
    if device_of(folder).fstype in _MEMORY_FS:
        pytest.skip(f"{folder} is in RAM ({device_of(folder).fstype}): no page cache to drop")


def test_dropping_pages_empties_the_cache_for_that_file_only(tmp_path):
    _on_disk(tmp_path)
    blob = _file(tmp_path, 4)
    other = tmp_path / "other.bin"
    shutil.copy(blob, other)
    blob.read_bytes(), other.read_bytes()
    assert cached_fraction(blob) > 0.9 and cached_fraction(other) > 0.9
    assert drop_pages([blob, tmp_path / "missing.bin"]) == (1, 4 * 2**20)
    assert cached_fraction(blob) < 0.05 and cached_fraction(other) > 0.9


def test_storage_check_measures_cold_and_warm_and_removes_its_file(tmp_path):
    check = storage_check(tmp_path, size_mib=4, seconds=0.05)
    doc = check.to_dict()
    for cache in ("cold", "warm"):
        assert set(doc[cache]) == FIELDS and all(v > 0 for v in doc[cache].values())
    assert doc["path"] == str(tmp_path) and doc["device"] and doc["file_mib"] == 4
    assert not list(tmp_path.iterdir())  # the test file is gone
    assert (
        doc["warm"]["rand_4k_iops"] > doc["cold"]["rand_4k_iops"]
        or doc["device_info"]["fstype"] in _MEMORY_FS
    )


def test_the_device_is_named_from_what_linux_says():
    if Path("/dev/shm").is_dir() and device_of("/dev/shm").fstype == "tmpfs":
        assert device_of("/dev/shm").describe().startswith("tmpfs (RAM)")
    assert device_of("/proc").fstype == "proc"
    root = device_of("/")
    assert root.mount == "/" and root.kind


def test_the_cli_prints_one_json_document_and_refuses_a_missing_path(tmp_path, capsys):
    assert cli.main(["io", "--path", str(tmp_path), "--size-mib", "2", "--seconds", "0.05",
                     "--json"]) == 0  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert {"path", "device", "cold", "warm"} <= set(doc) and set(doc["cold"]) == FIELDS
    assert cli.main(["io", "--path", str(tmp_path / "nope")]) == 2
    assert "storage path" in capsys.readouterr().err


HIGHEST_RATIO = {"rand_4k_iops": 2.0, "seq_read_mb_s": 5.0}
"""How far above fio ours may read. Cold 4 KiB reads are the disk's: within 2x. A warm
sequential read is a memory copy out of the page cache, where fio's own cost per read
differs from machine to machine: on the 2026-12-04 build VM fio read a cached 32 MiB file at
1.9-2.1 GB/s while a bare ``read()`` loop did 7.9 GB/s and ``workbench io`` 4.9-5.7 GB/s
(on the VM before it, within 2x of fio). Below fio by half is a fault on either side."""


def test_the_rates_agree_with_fio_on_the_same_file(tmp_path):
    """Same file, same method (psync, one thread, random map, fadvise hints): medians of three
    interleaved runs. The bound is loose (a shared 2-core CI box moves both sides); the
    benchmark (benchmarks/storage_vs_fio.py) measures the real ratio."""
    if shutil.which("fio") is None:
        if IN_CI:
            pytest.fail("CI installs fio (.ci/run), but it is not on PATH")
        pytest.skip("fio is not installed (apt-get install fio)")
    blob = _file(tmp_path, 32)
    for field, cold in (("rand_4k_iops", True), ("seq_read_mb_s", False)):
        ours, fio = [], []
        for _ in range(3):
            ours.append(measure_one(blob, field, cold=cold, seconds=0.3))
            fio.append(storage_vs_fio.fio_rate(blob, field, cold=cold, seconds=0.3))
        ratio = statistics.median(ours) / statistics.median(fio)
        assert 0.5 < ratio < HIGHEST_RATIO[field], (field, cold, ours, fio)
