"""workbench: move a knob, rerun a short real training burst, see throughput and memory.

The public names are loaded on first use, so that ``import workbench`` (and the CLI's light
commands such as ``workbench history``) do not pay for importing torch until a burst needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Knobs": "workbench.knobs",
    "KnobError": "workbench.knobs",
    "knob_specs": "workbench.knobs",
    "run_burst": "workbench.burst",
    "BurstProgress": "workbench.burst",
    "BurstResult": "workbench.results",
    "Workload": "workbench.workloads",
    "register_workload": "workbench.workloads",
    "workload_names": "workbench.workloads",
    "HistoryStore": "workbench.store",
    "open_store": "workbench.store",
    "DataError": "workbench.data",
    "build_datasets": "workbench.data",
    "ensure_datasets": "workbench.data",
    "Bench": "workbench.ui",
    "save_config": "workbench.config",
    "load_config": "workbench.config",
    "TunedConfig": "workbench.config",
    "BurstRunner": "workbench.runner",
    "sweep": "workbench.sweeps",
    "diagnose": "workbench.diagnosis",
    "Diagnosis": "workbench.diagnosis",
    "tune": "workbench.tuner",
    "TuneResult": "workbench.tune_result",
    "profile_burst": "workbench.profiling",
    "ProfileResult": "workbench.profiling",
    "comm_bench": "workbench.distributed",
    "CommResult": "workbench.comm",
    "convert_dataset": "workbench.convert",
    "storage_check": "workbench.storage",
    "compare_formats": "workbench.format_bench",
}

if TYPE_CHECKING:
    from workbench.burst import BurstProgress, run_burst
    from workbench.comm import CommResult
    from workbench.config import TunedConfig, load_config, save_config
    from workbench.convert import convert_dataset
    from workbench.data import DataError, build_datasets, ensure_datasets
    from workbench.diagnosis import Diagnosis, diagnose
    from workbench.distributed import comm_bench
    from workbench.format_bench import compare_formats
    from workbench.knobs import KnobError, Knobs, knob_specs
    from workbench.profiling import ProfileResult, profile_burst
    from workbench.results import BurstResult
    from workbench.runner import BurstRunner
    from workbench.storage import storage_check
    from workbench.store import HistoryStore, open_store
    from workbench.sweeps import sweep
    from workbench.tune_result import TuneResult
    from workbench.tuner import tune
    from workbench.ui import Bench
    from workbench.workloads import Workload, register_workload, workload_names


def __getattr__(name: str) -> Any:
    if name == "plots":  # a module: wb.plots.throughput(df, "batch_size")
        return importlib.import_module("workbench.plots")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def history(store: Any = None, **filters: Any):
    """Past bursts from the history store as a pandas DataFrame (newest last)."""
    from workbench.store import open_store

    return open_store(store).frame(**filters)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [  # noqa: RUF022 (grouped as in _EXPORTS)
    "Knobs", "KnobError", "knob_specs", "run_burst", "BurstProgress", "BurstResult",
    "Workload", "register_workload", "workload_names", "HistoryStore", "open_store",
    "DataError", "build_datasets", "ensure_datasets", "history", "Bench", "save_config",
    "load_config", "TunedConfig",
    "BurstRunner", "plots", "sweep", "diagnose", "Diagnosis", "tune", "TuneResult",
    "profile_burst", "ProfileResult", "comm_bench", "CommResult",
    "convert_dataset", "storage_check", "compare_formats",
]  # fmt: skip
