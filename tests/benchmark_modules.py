"""The benchmark scripts as modules, for their tests: ``benchmarks/`` is not a package (its
scripts run as ``python benchmarks/NAME.py``), so a test loads one from its file. The tuner's
proving ground is a package in that folder (``benchmarks/proving_ground/``), imported as the
scripts import it."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/NAME.py``, executed once more and registered as ``sys.modules[NAME]`` (its
    dataclasses look their module up there, and the scripts import one another by name)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def benchmark_fixture(name: str):
    """A module-scoped fixture that is ``benchmarks/NAME.py`` loaded once for the test module:
    ``steps = benchmark_fixture("gpu_steps")`` gives the tests a ``steps`` argument."""

    @pytest.fixture(scope="module")
    def module() -> ModuleType:
        return load_benchmark(name)

    return module


def proving_ground(name: str) -> ModuleType:
    """``benchmarks/proving_ground/NAME.py``, the tuner's simulated landscapes, as the benchmark
    scripts import it: ``proving_ground.NAME``, with ``benchmarks/`` on the path (at its end, so
    that no script's name shadows an installed module)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    return importlib.import_module(f"proving_ground.{name}")
