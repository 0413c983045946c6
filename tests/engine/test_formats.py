"""workbench.engine.formats: the same samples, labels and transforms under every data_format."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from workbench.config import load_config, save_config
from workbench.core.knobs import KnobError, Knobs
from workbench.engine.convert import convert_dataset
from workbench.engine.datasets import ImageFiles, build_datasets
from workbench.engine.formats import FormatError, FormatMissing, dataset_for, located, open_format
from workbench.engine.formats.predecoded import predecode, resolution_for
from workbench.engine.formats.shards import ShardDataset
from workbench.engine.loaders import build_loader
from workbench.engine.workloads import resolve_workload

FORMATS = ("shards", "lmdb", "predecoded")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """18 images in 3 classes, converted to every format (predecoded at cnn's 73 px)."""
    paths = build_datasets(tmp_path_factory.mktemp("fmt"), images_per_class=6, classes=3,
                           token_mb=0.05)  # fmt: skip
    for fmt in FORMATS:
        convert_dataset(fmt, paths.images, workers=2)
    return paths.root


@pytest.fixture(scope="module")
def source(root):
    return ImageFiles(root / "images")


def _folder(root, fmt):
    suffix = "predecoded-73" if fmt == "predecoded" else fmt
    return root / f"images.{suffix}"


def test_the_same_sample_has_the_same_label_under_every_format(root, source):
    expected = {i: label for i, (_, label) in enumerate(source.samples)}
    shards = dict(ShardDataset(_folder(root, "shards")).indexed_labels())
    assert shards == expected
    for fmt in ("lmdb", "predecoded"):
        ds = open_format(_folder(root, fmt), fmt)
        assert len(ds) == len(source)
        assert {i: ds.raw(i)[0] for i in range(len(ds))} == expected


@pytest.mark.parametrize("fmt", ["lmdb", "predecoded"])
def test_a_map_style_copy_ends_a_for_loop_like_a_list(root, source, fmt):
    """Past its last sample an index is an IndexError (what ends `for x in dataset`), not a
    corrupt-file error; negative indices count from the end."""
    ds = open_format(_folder(root, fmt), fmt)
    assert sum(1 for _ in ds) == len(source)
    assert ds[-1][1] == ds[len(ds) - 1][1]
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_shards_and_lmdb_hold_the_source_jpegs_and_predecoded_its_pixels(root, source):
    lmdb = open_format(_folder(root, "lmdb"), "lmdb")
    by_key = {
        int(s["__key__"]): s["jpg"] for s in ShardDataset(_folder(root, "shards")).raw_samples()
    }
    pre = open_format(_folder(root, "predecoded"), "predecoded")
    for i, (path, _) in enumerate(source.samples):
        jpeg = Path(path).read_bytes()
        assert lmdb.raw(i)[1] == jpeg and by_key[i] == jpeg
        assert pre.raw(i)[1].tobytes() == predecode(path, 73)
    assert pre.raw(0)[1].shape == (73, 73, 3) and resolution_for(224) == 256


@pytest.mark.parametrize("fmt", ["files", *FORMATS])
def test_every_format_feeds_the_workloads_own_transform(root, source, fmt):
    wl = resolve_workload("cnn", root)
    ds = dataset_for(wl, Knobs(data_format=fmt))
    x, y = next(iter(ds)) if fmt == "shards" else ds[0]
    assert x.shape == (3, 64, 64) and x.dtype == torch.float32 and 0 <= y < 3
    assert abs(float(x.mean())) < 3  # normalized as the files' transform does
    assert len(ds) == len(source)
    assert type(ds.transform) is type(wl.dataset().transform)


def test_shards_give_every_sample_once_per_epoch_across_workers(root, source):
    ds = ShardDataset(_folder(root, "shards"), transform=lambda img: 0)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    epochs = [[int(y) for _, y in loader] for _ in range(2)]
    want = Counter(label for _, label in source.samples)
    assert Counter(epochs[0]) == want and Counter(epochs[1]) == want
    halves = [ShardDataset(_folder(root, "shards")).for_rank(r, 2)._my_shards()[0] for r in (0, 1)]
    assert sorted(halves[0] + halves[1]) == ds.shards and not set(halves[0]) & set(halves[1])


def test_a_torch_loader_burst_runs_in_every_format(root):
    wl = resolve_workload("cnn", root)
    for fmt in FORMATS:
        knobs = Knobs(data_format=fmt, batch_size=4, num_workers=1, cache="cold")
        stream = build_loader(wl, knobs, torch.device("cpu"))
        try:
            x, y = next(stream)
            assert x.shape == (4, 3, 64, 64) and y.shape == (4,)
            assert stream.cold_files and all(f.exists() for f in stream.cold_files)
        finally:
            stream.close()


def test_a_format_not_built_says_the_command_that_builds_it(tmp_path):
    paths = build_datasets(tmp_path, images_per_class=2, classes=2, token_mb=0.05)
    wl = resolve_workload("resnet50", tmp_path)
    with pytest.raises(FormatMissing) as err:
        located(wl, Knobs(data_format="predecoded"))
    assert err.value.knob == "data_format"
    assert f"workbench data --format predecoded --from {paths.images} --resolution 256" in str(
        err.value
    )


def test_missing_or_corrupt_files_are_named(root, tmp_path):
    for fmt, victim in (("shards", "shard-00000.tar"), ("lmdb", "data.mdb")):
        copy = tmp_path / _folder(root, fmt).name
        shutil.copytree(_folder(root, fmt), copy)
        target = copy / victim
        target.write_bytes(target.read_bytes()[:1000])  # truncated
        with pytest.raises(FormatError, match=str(target)):
            open_format(copy, fmt)
    copy = tmp_path / "images.lmdb"
    (copy / "manifest.json").write_text("{ not json")
    with pytest.raises(FormatError, match=f"corrupt manifest {copy / 'manifest.json'}"):
        open_format(copy, "lmdb")
    (copy / "manifest.json").unlink()
    with pytest.raises(FormatError, match=f"{copy / 'manifest.json'} is missing"):
        open_format(copy, "lmdb")


def test_a_corrupt_shard_read_names_the_shard(root, tmp_path):
    copy = tmp_path / "images.shards"
    shutil.copytree(_folder(root, "shards"), copy)
    ds = ShardDataset(copy)
    victim = copy / "shard-00001.tar"
    size = victim.stat().st_size
    victim.write_bytes(victim.read_bytes()[:700] + b"\0" * (size - 700))  # same size, garbage
    with pytest.raises(FormatError, match=r"shard-00001\.tar"):
        list(ds.raw_samples([str(victim)]))


def test_the_knobs_refuse_bad_values_and_dali_with_formats_it_cannot_read():
    with pytest.raises(KnobError, match="data_format='parquet' is not allowed: one of files, "
                       "shards, lmdb, predecoded"):  # fmt: skip
        Knobs(data_format="parquet")
    with pytest.raises(KnobError, match="cache='hot' is not allowed: one of warm, cold"):
        Knobs().with_text(["cache=hot"])
    with pytest.raises(KnobError, match="files or shards with loader=dali: DALI's LMDB"):
        Knobs(loader="dali", data_format="lmdb")
    with pytest.raises(KnobError, match="predecoded pixels skip the JPEG decoder"):
        Knobs(loader="dali", data_format="predecoded")
    assert Knobs(loader="dali", data_format="shards").data_format == "shards"


def test_formats_travel_through_set_and_saved_configs(tmp_path):
    knobs = Knobs().with_text(["data_format=lmdb", "cache=cold"])
    assert (knobs.data_format, knobs.cache) == ("lmdb", "cold")
    save_config(knobs, tmp_path / "t.yaml")
    loaded = load_config(tmp_path / "t.yaml", check_machine=False).knobs
    assert (loaded.data_format, loaded.cache) == ("lmdb", "cold")


def test_a_token_workload_has_no_image_formats(root):
    gpt = resolve_workload("gpt", root)
    with pytest.raises(KnobError, match="workload 'gpt' reads no image folder"):
        dataset_for(gpt, Knobs(data_format="shards"))


def test_the_panel_has_format_and_cache_controls_with_their_docs():
    from workbench.notebook.ui.controls import KnobControls

    controls = KnobControls(Knobs(data_format="lmdb"), "cpu").controls
    fmt, cache = controls["data_format"], controls["cache"]
    assert list(fmt.options) == ["files", "shards", "lmdb", "predecoded"] and fmt.value == "lmdb"
    assert list(cache.options) == ["warm", "cold"] and "first epoch" in cache.tooltip
    assert "workbench data --format" in fmt.tooltip
