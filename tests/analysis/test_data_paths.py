"""workbench.analysis.data_paths: which data paths can run here, and why the others cannot.

A CUDA device is named (``torch.device("cuda")``) but never touched: what decides a path is the
device's type, the workload, the knobs, the copies built and whether DALI is installed.
"""

from __future__ import annotations

import pytest
import torch
from workloads_for_tests import tensor_workload

from workbench.analysis import data_paths
from workbench.analysis.data_paths import (
    PATH_NAMES,
    available_paths,
    built_formats,
    path_space,
)
from workbench.core.knobs import Knobs
from workbench.engine.convert import convert_dataset
from workbench.engine.workloads import resolve_workload

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture
def cnn(tiny_data):
    return resolve_workload("cnn", tiny_data)


@pytest.fixture
def no_dali(monkeypatch):
    monkeypatch.setattr(data_paths, "dali_available", lambda: "NVIDIA DALI is not installed: x")


@pytest.fixture
def dali(monkeypatch):
    monkeypatch.setattr(data_paths, "dali_available", lambda: None)


@pytest.fixture
def predecoded(tiny_data, tmp_path, monkeypatch):
    """A predecoded copy of the session's images, built where only this test looks."""
    root = tmp_path / "formats"
    monkeypatch.setenv("WORKBENCH_FORMATS", str(root))
    convert_dataset("predecoded", tiny_data / "images", root, workers=1)
    return root


def _by_name(paths):
    return {p.name: p for p in paths}


def test_on_a_cpu_the_workers_paths_run_and_the_others_say_why(cnn, no_dali):
    paths = available_paths(cnn, Knobs(num_workers=1), CPU, cores=2)
    assert [p.name for p in paths] == list(PATH_NAMES)  # least change first
    p = _by_name(paths)
    assert p["cpu"].available and p["cpu"].changes["num_workers"] == 1
    assert p["cpu"].label == "CPU decode, 1 worker (now)"
    assert p["cpu-all-cores"].available and p["cpu-all-cores"].changes["num_workers"] == 2
    assert not p["gpu-decode"].available and "CUDA" in p["gpu-decode"].why
    assert not p["predecoded"].available
    assert "workbench data --format predecoded" in p["predecoded"].why  # how to build it
    assert not p["dali"].available and "not installed" in p["dali"].why


def test_all_cores_is_no_other_path_when_the_workers_already_fill_them(cnn, no_dali):
    p = _by_name(available_paths(cnn, Knobs(num_workers=2), CPU, cores=2))
    assert not p["cpu-all-cores"].available
    assert "already is one worker per core" in p["cpu-all-cores"].why


def test_on_cuda_an_image_workload_can_decode_on_the_device(cnn, no_dali):
    p = _by_name(available_paths(cnn, Knobs(num_workers=4), CUDA, cores=16))
    gpu = p["gpu-decode"]
    assert gpu.available and gpu.changes == {"decode": "gpu", "loader": "torch",
                                             "data_format": "files", "num_workers": 8}  # fmt: skip
    assert gpu.changed(Knobs(num_workers=4)) == {"decode": "gpu", "num_workers": 8}
    assert gpu.knobs(Knobs(num_workers=4, batch_size=7)).batch_size == 7  # the rest is kept
    pre = p["predecoded"]  # not built: listed as what it would be here, with how to build it
    assert not pre.available and pre.changes["decode"] == "gpu"


def test_a_built_predecoded_copy_is_a_path_decoded_where_the_device_allows(cnn, predecoded):
    on_cpu = _by_name(available_paths(cnn, Knobs(), CPU, cores=2))["predecoded"]
    assert on_cpu.available and on_cpu.changes["decode"] == "cpu"
    on_cuda = _by_name(available_paths(cnn, Knobs(), CUDA, cores=2))["predecoded"]
    assert on_cuda.available and on_cuda.changes["decode"] == "gpu"
    assert "uint8 pixels" in on_cuda.why and "on the device" in on_cuda.why


def test_a_transform_the_device_cannot_mirror_keeps_predecoded_on_the_cpu(cnn, predecoded):
    from dataclasses import replace

    from torchvision import transforms

    def dataset():
        d = cnn.dataset()
        d.transform = transforms.Compose(
            [transforms.RandomResizedCrop(64), transforms.ColorJitter(0.4), transforms.ToTensor()]
        )
        return d

    jittered = replace(cnn, dataset=dataset)
    p = _by_name(available_paths(jittered, Knobs(), CUDA, cores=2))
    assert not p["gpu-decode"].available and "ColorJitter" in p["gpu-decode"].why
    assert p["predecoded"].available and p["predecoded"].changes["decode"] == "cpu"


def test_dali_is_a_path_only_where_installed(cnn, dali):
    p = _by_name(available_paths(cnn, Knobs(data_format="lmdb"), CUDA, cores=8))["dali"]
    # DALI reads files and shards: from an lmdb start its path reads the files
    assert p.available and p.changes["loader"] == "dali" and p.changes["data_format"] == "files"


def test_a_workload_without_images_has_only_the_workers_paths(dali):
    p = _by_name(available_paths(tensor_workload(), Knobs(), CUDA, cores=4))
    assert p["cpu"].available and p["cpu-all-cores"].available
    assert p["cpu"].label == "loader, 0 workers (now)"  # no decoding spoken of
    for name in ("gpu-decode", "predecoded", "dali"):
        assert not p[name].available and "reads no image folder" in p[name].why
    assert path_space(tensor_workload(), Knobs(), CUDA) == {}


def test_the_tuners_data_path_space_holds_what_is_built_and_installed(cnn, predecoded, dali):
    assert built_formats(cnn) == ["files", "predecoded"]  # no shards, no lmdb built
    space = path_space(cnn, Knobs(), CUDA)
    assert space == {"decode": ["cpu", "gpu"], "data_format": ["files", "predecoded"],
                     "loader": ["torch", "dali"]}  # fmt: skip
    assert "decode" not in path_space(cnn, Knobs(), CPU)  # a CPU decodes in its workers


def test_nothing_built_and_no_dali_leaves_decode_alone_in_the_space(cnn, no_dali):
    assert path_space(cnn, Knobs(), CUDA) == {"decode": ["cpu", "gpu"]}
