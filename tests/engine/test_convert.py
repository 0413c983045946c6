"""workbench.engine.convert: atomic conversions, reuse by manifest, the CLI's data --format."""

from __future__ import annotations

import errno
import json

import pytest

from workbench import cli
from workbench.core.knobs import KnobError
from workbench.engine.convert import convert_dataset
from workbench.engine.datasets import DataError, build_datasets
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
    assert _leftovers(images.parent) == [".lock"]


def test_ctrl_c_leaves_no_half_dataset(images):
    def interrupt(message):
        if message.endswith("3/8"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert_dataset("shards", images, progress=interrupt)
    assert not (images.parent / "images.shards").exists()
    assert _leftovers(images.parent) == [".lock"]


def test_a_full_disk_leaves_no_half_dataset_and_says_so(images, monkeypatch):
    from workbench.engine.formats import predecoded

    def full(self, index, label, pixels):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(predecoded.PredecodedWriter, "write", full)
    with pytest.raises(DataError, match="No space left on device; nothing was left behind"):
        convert_dataset("predecoded", images, workers=1)
    assert not list(images.parent.glob("images.predecoded*"))
    assert _leftovers(images.parent) == [".lock"]


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
