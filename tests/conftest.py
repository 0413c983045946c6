"""Shared fixtures: an isolated WORKBENCH_HOME per test and one tiny dataset per session."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

# A suite started in the background by a non-interactive shell (`make test &`, nohup) inherits
# SIGINT ignored, and so would every process it starts: the Ctrl-C tests would fail for the
# shell's sake. Python's own handler is what a terminal gives; children get the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    timing = os.environ.get("WORKBENCH_TIMING_TESTS") == "1"
    skip_timing = pytest.mark.skip(reason="compares real timings: WORKBENCH_TIMING_TESTS=1")
    for item in items:
        if item.get_closest_marker("gpu") and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
        if item.get_closest_marker("timing") and not timing:
            item.add_marker(skip_timing)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """No test reads or writes the user's ~/.workbench."""
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "wbhome"))
    monkeypatch.delenv("WORKBENCH_HISTORY", raising=False)
    # nor a class store a developer's shell names (its bursts would land in the room's store)
    for name in ("WORKBENCH_STORE", "WORKBENCH_ROLE", "WORKBENCH_LEARNER"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def usual_umask():
    """The test runs under the usual umask, 022 (new folders 0755, files 0644): what a folder
    or file the workbench must keep private would get if it were made plainly."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture(autouse=True)
def _workload_registry():
    """Workloads a test registers by name are gone after it: no test sees another's."""
    from workbench.engine import workloads

    saved = dict(workloads._REGISTRY)
    yield
    workloads._REGISTRY.clear()
    workloads._REGISTRY.update(saved)


@pytest.fixture(autouse=True)
def _no_ambient_nccl(monkeypatch):
    """NVIDIA's containers set NCCL_* variables; tests assert on the ones they set."""
    for name in [n for n in os.environ if n.startswith("NCCL_")]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """A small data root (images/ and tokens/) shared by the whole session."""
    from workbench.engine.datasets import build_datasets

    root = tmp_path_factory.mktemp("data")
    build_datasets(root, images_per_class=12, classes=3, token_mb=0.25)
    return root


@pytest.fixture
def store_path(tmp_path) -> Path:
    return tmp_path / "history.sqlite"


@pytest.fixture(scope="module")
def converted_images(tmp_path_factory) -> Path:
    """A small image folder of its own, with its shards, LMDB and predecoded (64 px crop)
    copies beside it: the production side's tests read every format."""
    from workbench.engine.convert import convert_dataset
    from workbench.engine.datasets import build_datasets

    root = tmp_path_factory.mktemp("prod") / "data"
    build_datasets(root, images_per_class=4, classes=2, token_mb=0.01)
    for fmt in ("shards", "lmdb", "predecoded"):
        convert_dataset(fmt, root / "images", resolution=73 if fmt == "predecoded" else None,
                        workers=1)  # fmt: skip
    return root / "images"
