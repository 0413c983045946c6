"""`workbench data`: the sample datasets, built by class, in all or for a batch, and reused."""

import json

import pytest

from workbench.cli import main


def test_data_command_builds_and_reuses(tmp_path, capsys):
    out = tmp_path / "d"
    args = ["data", "--out", str(out), "--images-per-class", "2", "--classes", "2",
            "--token-mb", "0.01", "--json"]  # fmt: skip
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["root"] == str(out) and len(list(out.rglob("*.jpg"))) == 4
    assert main(args) == 0  # second time: reused, same answer
    assert json.loads(capsys.readouterr().out) == doc


def test_data_command_builds_a_set_by_its_total_or_for_a_batch(tmp_path, capsys):
    out = tmp_path / "d"
    common = ["data", "--out", str(out), "--classes", "2", "--token-mb", "0.01", "--json"]
    assert main([*common, "--images", "5"]) == 0  # rounded up to whole classes: 3 each
    capsys.readouterr()
    assert len(list(out.rglob("*.jpg"))) == 6
    # for batch 1 at SHORT_EPOCH_BATCHES (50) batches an epoch: 50 images, 25 a class
    assert main([*common, "--for-batch", "1"]) == 0
    capsys.readouterr()
    assert len(list(out.rglob("*.jpg"))) == 50


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--images", "1"], "--images=1 is not allowed: an integer >= --classes (2)"),
        (["--for-batch", "0"], "--for-batch=0 is not allowed: a batch size >= 1"),
        (["--images-per-class", "0"], "--images-per-class=0 is not allowed: an integer >= 1"),
        (["--classes", "0"], "--classes=0 is not allowed: an integer >= 1"),
        (["--images", "8", "--for-batch", "2"], "not allowed with argument"),
        (["--for-batch", "2", "--format", "lmdb"], "--for-batch is not allowed with --format"),
    ],
)
def test_data_command_refuses_a_bad_size(args, said, tmp_path, capsys):
    out = tmp_path / "d"
    base = ["--classes", "2"] if "--classes" not in args else []
    assert main(["data", "--out", str(out), *base, *args]) == 2
    assert said in capsys.readouterr().err
    assert not out.exists()
