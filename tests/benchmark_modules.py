"""The benchmark scripts as modules, for their tests: ``benchmarks/`` is not a package (its
scripts run as ``python benchmarks/NAME.py``), so a test loads one from its file."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/NAME.py``, executed once more and registered as ``sys.modules[NAME]`` (its
    dataclasses look their module up there, and the scripts import one another by name)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
