"""benchmarks/wheelhouse.py: the wheels a lent GPU box installs with no network. A missing
dependency shows only there, where nothing can be fetched; so the closure check, the pruning
and the pins are tested here on wheels written for the test (no download)."""

import importlib.util
import json
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def wheelhouse():
    spec = importlib.util.spec_from_file_location("wheelhouse", _BENCH / "wheelhouse.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _wheel(folder: Path, name: str, version: str, *requires: str) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}-{version}.dist-info/METADATA", "\n".join(lines) + "\n\nA body.\n")
    return path


def test_only_what_the_box_needs_and_lacks_must_be_pinned(wheelhouse, tmp_path):
    wheel = _wheel(tmp_path, "kernel", "1.0",
                   "traitlets>=5",  # pinned at a version it accepts
                   "jinja2>=3",  # on the box
                   "debugpy>=1.6",  # left out on purpose
                   "pytest; extra == 'test'",  # an extra
                   "appnope; sys_platform == 'darwin'",  # another platform
                   "exceptiongroup; python_version < '3.11'",  # an older Python
                   "tornado>=6.5",  # pinned too old
                   "zmq-thing")  # fmt: skip
    pins = {"traitlets": Version("5.14"), "tornado": Version("6.4")}
    problems = wheelhouse.closure_problems([wheel], pins)
    assert problems == [
        "kernel-1.0 needs tornado>=6.5, pinned tornado==6.4",
        "kernel-1.0 needs zmq-thing: neither pinned nor on the box",
    ]


def test_unpinned_wheels_are_removed_so_one_version_of_each_is_left(wheelhouse, tmp_path):
    kept = _wheel(tmp_path, "traitlets", "5.14.3")
    _wheel(tmp_path, "traitlets", "5.9.0")
    _wheel(tmp_path, "dropped", "1.0")
    removed = wheelhouse.prune({"traitlets": Version("5.14.3")}, tmp_path)
    assert removed == ["dropped-1.0-py3-none-any.whl", "traitlets-5.9.0-py3-none-any.whl"]
    assert list(tmp_path.glob("*.whl")) == [kept]


def test_a_lock_line_that_is_not_a_pin_or_is_pinned_twice_is_refused(wheelhouse, tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("# a comment\nTraitlets==5.14.3  # the kernel's config\n\nnbclient>=0.10\n")
    with pytest.raises(ValueError, match=r"lock\.txt:4: 'nbclient>=0.10' is not name==version"):
        wheelhouse.read_lock(lock)
    lock.write_text("traitlets==5.14.3\nTraitlets==5.9\n")
    with pytest.raises(ValueError, match=r"lock\.txt:2: Traitlets is pinned twice"):
        wheelhouse.read_lock(lock)


def test_the_pins_hold_the_roots_and_nothing_the_box_has(wheelhouse):
    pins = wheelhouse.read_lock()
    assert {canonicalize_name(r) for r in wheelhouse.ROOTS} <= set(pins)
    assert not set(pins) & (wheelhouse.BOX_HAS | set(wheelhouse.LEFT_OUT))
    assert pins["ipykernel"] >= Version("6.29")  # pyproject's dev extra: what the tests ran with


def test_every_import_a_lesson_can_reach_is_on_the_box_or_in_the_wheelhouse(wheelhouse):
    """The dry check of the box: every notebook's imports, the whole workbench package's (lazy
    ones too) and the script lesson 8 runs, against the box's packages and the pins."""
    modules = wheelhouse.imported_modules(wheelhouse.lesson_sources())
    assert {"torch", "torchvision", "pynvml", "yaml", "pandas", "altair", "ipywidgets"} <= {
        m.split(".")[0] for m in modules}  # fmt: skip
    assert wheelhouse.import_problems(modules, wheelhouse.read_lock()) == []


def test_an_import_the_box_would_lack_is_named(wheelhouse, tmp_path):
    (tmp_path / "workbench").mkdir()
    (tmp_path / "workbench" / "late.py").write_text(
        "def f():\n    import importlib\n    return importlib.import_module('zarr.storage')\n"
    )
    (tmp_path / "notebooks").mkdir()
    cell = {
        "cell_type": "code",
        "source": [
            "%matplotlib inline\n",
            "!pip list\n",
            "import scipy.stats\n",
            "import nvidia.dali.fn\n",
            "from workbench import Knobs\n",
            "import json",
        ],
    }
    (tmp_path / "notebooks" / "01_x.ipynb").write_text(json.dumps({"cells": [cell]}))
    modules = wheelhouse.imported_modules(wheelhouse.lesson_sources(tmp_path))
    assert modules == {"zarr.storage", "importlib", "scipy.stats", "nvidia.dali.fn",
                       "workbench", "json"}  # fmt: skip
    providers = {"scipy": ["scipy"], "torch": ["torch"]}  # zarr: installed nowhere
    assert wheelhouse.import_problems(modules, {}, providers) == [
        "scipy.stats (scipy): neither on the box nor pinned in wheelhouse.txt",
        "zarr.storage: no distribution here provides it, so neither can the box",
    ]
    assert wheelhouse.import_problems({"scipy"}, {"scipy": Version("1.14")}, providers) == []
