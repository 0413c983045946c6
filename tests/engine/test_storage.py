"""engine.storage: the page cache dropped for real, the device named, and agreement with fio."""

from __future__ import annotations

import errno
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import pytest
from ci_env import IN_CI

from workbench import cli
from workbench.engine import storage
from workbench.engine.datasets import DataError
from workbench.engine.storage import (
    _MEMORY_FS,
    cached_fraction,
    check_dir,
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


def test_without_a_path_it_writes_in_the_learners_own_folder_never_the_data_root(
    tmp_path, monkeypatch
):
    """A room mounts the dataset read-only (notebooks/README.md): lesson 9's check, which
    passes no path, must write into the learner's own space."""
    data, formats, home = tmp_path / "data", tmp_path / "mine" / "formats", tmp_path / "home"
    data.mkdir()
    monkeypatch.setenv("WORKBENCH_DATA", str(data))
    monkeypatch.setenv("WORKBENCH_FORMATS", str(formats))  # not made yet: made, 0700
    monkeypatch.setenv("WORKBENCH_HOME", str(home))
    check = storage_check(size_mib=1, seconds=0.01)
    assert check.path == str(formats) and check_dir() == formats
    assert formats.is_dir() and formats.stat().st_mode & 0o777 == 0o700
    assert list(formats.iterdir()) == [] and list(data.iterdir()) == []
    monkeypatch.delenv("WORKBENCH_FORMATS")
    assert storage_check(size_mib=1, seconds=0.01).path == str(home)


def test_a_read_only_folder_is_refused_with_how_to_measure_it(tmp_path, monkeypatch):
    def read_only(folder, prefix, suffix):
        raise OSError(errno.EROFS, "Read-only file system", str(folder))

    monkeypatch.setattr(storage, "scratch_file", read_only)
    with pytest.raises(DataError) as err:
        storage_check(tmp_path, size_mib=1, seconds=0.01)
    said = str(err.value)
    assert str(tmp_path) in said and "Read-only file system" in said
    assert "pass a file on it of at least 1 MiB" in said and "$WORKBENCH_FORMATS" in said


def test_a_file_on_a_read_only_dataset_is_read_as_it_is(tmp_path):
    blob = _file(tmp_path, 2)  # e.g. the sample set's token file
    before = sorted(tmp_path.iterdir()), blob.read_bytes()
    check = storage_check(blob, seconds=0.01)
    assert check.test_file == str(blob) and check.file_mib == 2
    assert (sorted(tmp_path.iterdir()), blob.read_bytes()) == before  # nothing written


def test_the_test_file_follows_no_symlink_planted_at_a_predictable_name(tmp_path):
    """The test file was ``.workbench-io-<pid>.bin``, opened with ``open(.., "wb")``: a symlink
    planted there had a file of someone else's choosing filled with noise."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / f".workbench-io-{os.getpid()}.bin").symlink_to(victim)
    storage_check(tmp_path, size_mib=1, seconds=0.01)
    assert victim.read_text() == "mine"


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


@pytest.mark.timing  # ours against fio, both real: a busy machine moves either
def test_the_rates_agree_with_fio_on_the_same_file(tmp_path):
    """Same file, same method (psync, one thread, random map, fadvise hints): medians of three
    interleaved runs. The bound is loose (a shared 2-core CI box moves both sides); the
    benchmark (benchmarks/storage_vs_fio.py) measures the real ratio."""
    if shutil.which("fio") is None:
        if IN_CI:
            pytest.fail("CI installs fio (.ci/run), but it is not on PATH")
        pytest.skip("fio is not installed (apt-get install fio)")
    blob = _file(tmp_path, 32)
    ours, fio = [], []
    for _ in range(3):
        ours.append(measure_one(blob, "rand_4k_iops", cold=True, seconds=0.3))
        fio.append(storage_vs_fio.fio_rate(blob, "rand_4k_iops", cold=True, seconds=0.3))
    ratio = statistics.median(ours) / statistics.median(fio)
    assert 0.5 < ratio < 2.0, (ours, fio)


@pytest.mark.timing  # ours against fio, both real: a busy machine moves either
def test_a_warm_read_is_a_memory_copy_no_faster_than_a_bare_read_loop(tmp_path):
    """Warm, a sequential read copies out of the page cache: its ceiling is a bare ``read()``
    loop over the same file, not fio, whose own cost per read differs between machines (the
    2026-12-04 build VM: fio 1.2-2.1 GB/s, a bare loop 7.9, ``workbench io`` 4.9-7.0). A memory
    copy's speed moves with where its pages land: on the 2026-12-05 VM ours/bare was 0.43 in one
    clean-clone run (9.4 vs 22 GB/s, all three pairs) and 1.7 minutes later (24 vs 14 GB/s).
    So within 4x of the bare loop either way, which still fails a warm read served by the disk
    (cold there: 2.5-2.8 GB/s, 0.12-0.19 of the bare loop), and not below fio by half."""
    if shutil.which("fio") is None:
        if IN_CI:
            pytest.fail("CI installs fio (.ci/run), but it is not on PATH")
        pytest.skip("fio is not installed (apt-get install fio)")
    blob = _file(tmp_path, 32)
    ours, bare, fio = [], [], []
    for _ in range(3):
        ours.append(measure_one(blob, "seq_read_mb_s", cold=False, seconds=0.3))
        bare.append(_bare_read_mb_s(blob, seconds=0.3))
        fio.append(storage_vs_fio.fio_rate(blob, "seq_read_mb_s", cold=False, seconds=0.3))
    to_bare = statistics.median(ours) / statistics.median(bare)
    assert 0.25 < to_bare < 4.0, (ours, bare)
    assert statistics.median(ours) > 0.5 * statistics.median(fio), (ours, fio)


def _bare_read_mb_s(path: Path, seconds: float) -> float:
    """1 MiB ``os.read`` calls, front to back and round again, for ``seconds``."""
    done, t0 = 0, time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        while time.perf_counter() - t0 < seconds:
            os.lseek(fd, 0, os.SEEK_SET)
            while chunk := os.read(fd, 1 << 20):
                done += len(chunk)
    finally:
        os.close(fd)
    return done / (time.perf_counter() - t0) / 1e6
