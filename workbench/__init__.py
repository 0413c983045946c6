"""workbench: move a knob, rerun a short real training burst, see throughput and memory.

The public names are loaded on first use, so that ``import workbench`` (and the CLI's light
commands such as ``workbench history``) do not pay for importing torch until a burst needs it.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from workbench.history.store import StoreWarning, open_store, pending_results

__version__ = "0.1.0"
DISTRIBUTION = "throughput-workbench"
"""Our name on the package index (``pip install throughput-workbench``); the import name stays
``workbench``. The index's ``workbench`` is an unrelated project."""

_EXPORTS = {
    "Knobs": "workbench.core.knobs",
    "KnobError": "workbench.core.knobs",
    "RenamedValueWarning": "workbench.core.knobs",
    "knob_specs": "workbench.core.knobs",
    "run_burst": "workbench.distributed.dispatch",
    "BurstProgress": "workbench.engine.burst",
    "BurstResult": "workbench.core.results",
    "BurstFailed": "workbench.core.results",
    "Workload": "workbench.engine.workloads",
    "register_workload": "workbench.engine.workloads",
    "workload_names": "workbench.engine.workloads",
    "hf_causal_lm": "workbench.engine.workloads",
    "HistoryStore": "workbench.history.store",
    "open_store": "workbench.history.store",
    "retry_pending": "workbench.history.store",
    "DataError": "workbench.engine.datasets",
    "build_datasets": "workbench.engine.datasets",
    "ensure_datasets": "workbench.engine.datasets",
    "Bench": "workbench.notebook.ui",
    "save_config": "workbench.config",
    "load_config": "workbench.config",
    "TunedConfig": "workbench.config.tuned_config",
    "BurstRunner": "workbench.notebook.runner",
    "sweep": "workbench.analysis.sweeps",
    "diagnose": "workbench.analysis.diagnosis",
    "Diagnosis": "workbench.analysis.diagnosis",
    "tune": "workbench.tuning.tuner",
    "TuneResult": "workbench.tuning.result",
    "profile_burst": "workbench.analysis.profiling",
    "ProfileResult": "workbench.analysis.profiling",
    "comm_bench": "workbench.distributed.jobs",
    "CommResult": "workbench.distributed.allreduce",
    "memory_snapshot": "workbench.analysis.memory_views",
    "MemorySnapshot": "workbench.analysis.memory_views",
    "convert_dataset": "workbench.engine.convert",
    "storage_check": "workbench.engine.storage",
    "compare_formats": "workbench.analysis.format_bench",
    "compare_sharding": "workbench.analysis.sharding_compare",
    "ShardingComparison": "workbench.analysis.sharding_compare",
    "parity": "workbench.analysis.parity",
    "ParityResult": "workbench.analysis.parity",
    "verify": "workbench.analysis.verify",
    "VerifyResult": "workbench.analysis.verify",
}

if TYPE_CHECKING:
    from workbench.analysis.diagnosis import Diagnosis, diagnose
    from workbench.analysis.format_bench import compare_formats
    from workbench.analysis.memory_views import MemorySnapshot, memory_snapshot
    from workbench.analysis.parity import ParityResult, parity
    from workbench.analysis.profiling import ProfileResult, profile_burst
    from workbench.analysis.sharding_compare import ShardingComparison, compare_sharding
    from workbench.analysis.sweeps import sweep
    from workbench.analysis.verify import VerifyResult, verify
    from workbench.config.saved import TunedConfig, load_config, save_config
    from workbench.core.knobs import KnobError, Knobs, RenamedValueWarning, knob_specs
    from workbench.core.results import BurstFailed, BurstResult
    from workbench.distributed.allreduce import CommResult
    from workbench.distributed.dispatch import run_burst
    from workbench.distributed.jobs import comm_bench
    from workbench.engine.burst import BurstProgress
    from workbench.engine.convert import convert_dataset
    from workbench.engine.datasets import DataError, build_datasets, ensure_datasets
    from workbench.engine.storage import storage_check
    from workbench.engine.workloads import (
        Workload,
        hf_causal_lm,
        register_workload,
        workload_names,
    )
    from workbench.history.store import HistoryStore, open_store, retry_pending
    from workbench.notebook.runner import BurstRunner
    from workbench.notebook.ui import Bench
    from workbench.tuning.result import TuneResult
    from workbench.tuning.tuner import tune


def __getattr__(name: str) -> Any:
    if name == "plots":  # a module: wb.plots.throughput(df, "batch_size")
        return importlib.import_module("workbench.notebook.plots")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def history(store: Any = None, **filters: Any):
    """Past bursts from the history store as a pandas DataFrame (newest last).

    Bursts measured while the store could not record them are not in it yet: a warning says
    how many, and ``retry_pending()`` stores them."""
    target = open_store(store)
    kept = pending_results(target)
    if kept:
        warnings.warn(f"{len(kept)} burst(s) measured while {target.where()} could not record "
                      "them are kept aside, not in this history yet: workbench.retry_pending() "
                      "stores them", StoreWarning, stacklevel=2)  # fmt: skip
    return target.frame(**filters)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [  # noqa: RUF022 (grouped as in _EXPORTS)
    "Knobs", "KnobError", "RenamedValueWarning", "knob_specs", "run_burst", "BurstProgress",
    "BurstResult", "BurstFailed",
    "Workload", "register_workload", "workload_names", "hf_causal_lm", "HistoryStore",
    "open_store",
    "retry_pending", "DataError", "build_datasets", "ensure_datasets", "history", "Bench",
    "save_config", "load_config", "TunedConfig",
    "BurstRunner", "plots", "sweep", "diagnose", "Diagnosis", "tune", "TuneResult",
    "profile_burst", "ProfileResult", "comm_bench", "CommResult", "memory_snapshot",
    "MemorySnapshot", "convert_dataset", "storage_check", "compare_formats",
    "compare_sharding", "ShardingComparison", "parity", "ParityResult", "verify", "VerifyResult",
]  # fmt: skip
