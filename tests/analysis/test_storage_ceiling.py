"""analysis.storage_ceiling: raw cold reads per format, and what they do to the verdict."""

from __future__ import annotations

import pytest
import torch

from workbench.analysis.diagnosis import judge
from workbench.analysis.loader_ceiling import LoaderResult
from workbench.analysis.storage_ceiling import StorageCeiling, storage_bound, storage_ceiling
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.engine.convert import convert_dataset
from workbench.engine.datasets import build_datasets
from workbench.engine.workloads import resolve_workload

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    root = tmp_path_factory.mktemp("ceil")
    paths = build_datasets(root, images_per_class=5, classes=2, token_mb=0.05)
    for fmt in ("shards", "lmdb", "predecoded"):
        convert_dataset(fmt, paths.images, workers=1)
    return resolve_workload("cnn", root)


@pytest.mark.parametrize("fmt", ["files", "shards", "lmdb", "predecoded"])
def test_one_cold_pass_reads_every_sample_of_the_format_once(cnn, fmt):
    c = storage_ceiling(cnn, Knobs(data_format=fmt, num_workers=2), seconds=30.0)
    assert c.ok and c.samples == 10 and c.threads == 2 and c.device
    if fmt == "files":
        assert c.bytes == sum((cnn.image_dir / p).stat().st_size for p, _ in cnn.dataset().samples)
    if fmt == "predecoded":
        assert c.bytes == 10 * 73 * 73 * 3
    assert c.samples_per_s > 0 and c.mb_s > 0


def test_a_format_not_built_is_a_failed_ceiling_not_a_crash(tmp_path):
    build_datasets(tmp_path, images_per_class=2, classes=2, token_mb=0.05)
    c = storage_ceiling(resolve_workload("cnn", tmp_path), Knobs(data_format="lmdb"))
    assert c.status == "error" and "workbench data --format lmdb" in c.error


def _ok(sps: float) -> BurstResult:
    return BurstResult(status="ok", workload="cnn", device="cpu", samples_per_s=sps,
                       data_wait_pct=50.0)  # fmt: skip


def _judged(cnn, storage_sps: float, loader_sps: float, compute_sps: float, **knobs):
    storage = StorageCeiling("files", samples_per_s=storage_sps, mb_s=storage_sps * 0.11,
                             device="SATA /dev/sda")  # fmt: skip
    loader = LoaderResult(status="ok", samples_per_s=loader_sps)
    return judge(cnn, Knobs(**knobs), CPU, _ok(loader_sps), loader, _ok(compute_sps), storage)


def test_a_loader_held_by_the_disk_is_storage_bound_and_told_formats_and_disks(cnn):
    d = _judged(cnn, storage_sps=95, loader_sps=100, compute_sps=400)
    assert d.verdict == "storage-bound"
    assert "SATA /dev/sda" in d.reason and "NVMe" in d.reason and "workbench io" in d.reason
    assert [(s.knob, s.value) for s in d.suggestions[:2]] == [
        ("data_format", "shards"), ("data_format", "lmdb")]  # fmt: skip
    assert "storage" in d.summary() and d.to_dict()["storage_samples_per_s"] == 95


def test_a_fast_disk_under_a_slow_loader_suggests_predecoded_pixels(cnn):
    d = _judged(cnn, storage_sps=5000, loader_sps=100, compute_sps=400)
    assert d.verdict == "data-bound"
    assert ("data_format", "predecoded") in [(s.knob, s.value) for s in d.suggestions]


def test_a_compute_bound_run_is_warned_about_a_cold_first_epoch(cnn):
    d = _judged(cnn, storage_sps=50, loader_sps=1000, compute_sps=100)
    assert d.verdict == "compute-bound" and "a first epoch" in d.reason


def test_the_storage_rule_on_numbers():
    assert storage_bound(90, 100, 400) and not storage_bound(300, 100, 400)
    assert not storage_bound(390, 400, 400) and not storage_bound(None, 100, 400)


def test_cold_drops_lmdb_pages_this_process_had_mapped(cnn):
    from workbench.engine.formats import dataset_for
    from workbench.engine.storage import _MEMORY_FS, cached_fraction, device_of, drop_dataset_pages

    knobs = Knobs(data_format="lmdb")
    data_mdb = cnn.image_dir.parent / "images.lmdb" / "data.mdb"
    if device_of(data_mdb).fstype in _MEMORY_FS:
        pytest.skip("the data is in RAM: no page cache to drop")
    ds = dataset_for(cnn, knobs)
    for i in range(len(ds)):
        ds.raw(i)  # every value's pages mapped in this process
    assert cached_fraction(data_mdb) > 0.5
    drop_dataset_pages(cnn, knobs)
    assert cached_fraction(data_mdb) < 0.1
    assert ds.raw(3)[0] in (0, 1)  # the dataset reopens its environment
