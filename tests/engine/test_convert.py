"""workbench.engine.convert: atomic conversions, reuse by manifest, the CLI's data --format."""

from __future__ import annotations

import errno
import gc
import json
import subprocess
import sys
import threading
import time

import pytest

from workbench import cli
from workbench.core.knobs import KnobError
from workbench.engine.convert import convert_dataset
from workbench.engine.datasets import DataError, build_datasets
from workbench.engine.formats import open_format
from workbench.engine.formats.inuse import CopyInUse
from workbench.engine.formats.manifest import read_manifest


@pytest.fixture
def images(tmp_path):
    return build_datasets(tmp_path / "d", images_per_class=4, classes=2, token_mb=0.05).images


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_conversion_is_reused_only_while_its_source_is_unchanged(images):
    first = convert_dataset("lmdb", images)
    assert not first.reused and first.count == 8 and first.bytes > 0
    assert first.folder == images.parent / "images.lmdb"
    stamp = (first.folder / "data.mdb").stat().st_mtime_ns
    again = convert_dataset("lmdb", images)
    assert again.reused and (first.folder / "data.mdb").stat().st_mtime_ns == stamp
    (images / "class_00" / "0.jpg").write_bytes((images / "class_01" / "1.jpg").read_bytes())
    changed = convert_dataset("lmdb", images)  # same count, other bytes: made again
    assert not changed.reused and read_manifest(changed.folder).source_bytes == changed.source_bytes
    assert _leftovers(images.parent) == [".images.lmdb.lock", ".lock"]


def test_ctrl_c_leaves_no_half_dataset(images):
    def interrupt(message):
        if message.endswith("3/8"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert_dataset("shards", images, progress=interrupt)
    assert not (images.parent / "images.shards").exists()
    assert _leftovers(images.parent) == [".images.shards.lock", ".lock"]


def test_a_full_disk_leaves_no_half_dataset_and_says_so(images, monkeypatch):
    from workbench.engine.formats import predecoded

    def full(self, index, label, pixels):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(predecoded.PredecodedWriter, "write", full)
    with pytest.raises(DataError, match="No space left on device; nothing was left behind"):
        convert_dataset("predecoded", images, workers=1)
    assert not list(images.parent.glob("images.predecoded*"))
    assert _leftovers(images.parent) == [".images.predecoded-73.lock", ".lock"]


def test_two_conversions_at_once_make_one_copy_and_the_second_reuses_it(images):
    """Without a lock, both converted and the second swapped its copy in, deleting the first's
    while a burst could already be reading it."""
    first_writing, results = threading.Event(), {}

    def slow(message: str) -> None:
        first_writing.set()
        time.sleep(0.05)  # the second conversion starts while this one writes

    def first() -> None:
        results["first"] = convert_dataset("lmdb", images, workers=1, progress=slow)

    thread = threading.Thread(target=first)
    thread.start()
    assert first_writing.wait(30)
    second = convert_dataset("lmdb", images, workers=1)
    thread.join(30)
    assert not results["first"].reused and second.reused
    assert second.folder == results["first"].folder
    assert _leftovers(images.parent) == [".images.lmdb.lock", ".lock"]


def test_a_copy_being_read_is_never_replaced_under_its_reader(images):
    """A reader in another process (here: a live dataset) holds the copy; a conversion from a
    changed source leaves it in place and says so, and goes ahead once the reader is gone."""
    folder = convert_dataset("shards", images).folder
    reader = open_format(folder, "shards")
    (images / "class_00" / "0.jpg").write_bytes((images / "class_01" / "1.jpg").read_bytes())
    with pytest.raises(CopyInUse, match="is being read by another process"):
        convert_dataset("shards", images)
    assert sum(1 for _ in reader.raw_samples()) == 8  # its files are all still there
    assert _leftovers(images.parent) == [".images.shards.lock", ".lock"]
    del reader
    gc.collect()
    assert not convert_dataset("shards", images).reused


def test_a_reader_in_another_process_keeps_the_copy(images, tmp_path):
    folder = convert_dataset("predecoded", images, resolution=16, workers=1).folder
    ready = tmp_path / "ready"
    code = (
        "import sys, time; from pathlib import Path; from workbench.engine.formats import "
        "open_format; d = open_format(Path(sys.argv[1]), 'predecoded'); "
        "Path(sys.argv[2]).touch(); time.sleep(60)"
    )
    reader = subprocess.Popen([sys.executable, "-c", code, str(folder), str(ready)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and reader.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists()
        (images / "class_00" / "0.jpg").write_bytes((images / "class_01" / "1.jpg").read_bytes())
        with pytest.raises(CopyInUse):
            convert_dataset("predecoded", images, resolution=16, workers=1)
    finally:
        reader.kill()
        reader.wait()
    assert not convert_dataset("predecoded", images, resolution=16, workers=1).reused


def test_bad_arguments_name_the_option(images):
    with pytest.raises(KnobError, match="format='tfrecord' is not allowed"):
        convert_dataset("tfrecord", images)
    with pytest.raises(KnobError, match="resolution=4 is not allowed: an integer from 8"):
        convert_dataset("predecoded", images, resolution=4)
    with pytest.raises(KnobError, match="resolution=64 is not allowed: only with --format"):
        convert_dataset("shards", images, resolution=64)


def test_the_cli_converts_prints_rate_and_sizes_and_reuses(images, tmp_path, capsys):
    out = tmp_path / "elsewhere"
    assert cli.main(["data", "--format", "predecoded", "--from", str(images), "--to", str(out),
                     "--resolution", "32"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "predecoded: 8 images in" in text and "images/s" in text
    assert "on disk (source:" in text and str(out / "images.predecoded-32") in text
    assert cli.main(["data", "--format", "predecoded", "--from", str(images), "--to", str(out),
                     "--resolution", "32", "--json"]) == 0  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert doc["reused"] and doc["count"] == 8 and doc["bytes"] == 8 * 32 * 32 * 3 + 8 * 8


def test_the_cli_refuses_bad_input_with_exit_2(images, tmp_path, capsys):
    assert cli.main(["data", "--format", "lmdb", "--from", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["data", "--resolution", "64"]) == 2
    assert "--resolution is not allowed without --format" in capsys.readouterr().err
