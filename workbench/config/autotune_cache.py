"""Where a self-tuned loader remembers its answer: one small JSON file per question.

The question is "which workers and prefetch for this dataset, from these saved knobs, on this
machine?", so the key is made of three parts, each cheap to compute at start-up:

- **machine**: host name, CPUs this process may use (its affinity, not the box's count: a
  SLURM job sees its share), the CPU model, the GPU model (None without CUDA) and the number
  of ranks on this node (they share the CPUs). Loader speed is a property of these.
- **dataset**: its type, its length and either its ``root`` folder with the folder's mtime (an
  ImageFolder-like dataset: a new copy of the data is a new question) or, without a ``root``,
  the shapes and dtypes of its first item (one ``dataset[0]``: a different transform that
  changes the sample size is a new question). Never a hash of the data: that would read it.
- **knobs**: the loader arguments tuning starts from (batch size, workers, prefetch, pinned
  memory, collate function) and the search's bounds.

Files live in ``$WORKBENCH_HOME/autotune/`` (a 0700 folder), one per key, mode 0600, written
whole by a rename (``workbench.core.private``): two jobs finishing at once leave one complete
answer, never a torn file. A file that cannot be read is a miss, not an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench.core.private import private_dir, private_output, workbench_home

__all__ = ["cache_key", "cache_path", "dataset_fingerprint", "machine", "read", "write"]

FOLDER = "autotune"


def machine(local_ranks: int = 1) -> dict[str, Any]:
    """What a loader's speed depends on here (see the module docstring)."""
    # torch (through hardware) only when a loader is tuned: importing this module stays light
    from workbench.engine.hardware import cpu_model

    return {
        "host": socket.gethostname(),
        "cpus": usable_cpus(),
        "cpu_model": cpu_model(),
        "gpu": _gpu_name(),
        "local_ranks": local_ranks,
    }


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def dataset_fingerprint(dataset: Any) -> dict[str, Any]:
    """Type, length, and the root folder's mtime or the first item's shapes (cheap: no data
    is hashed, at most one item is read)."""
    kind = type(dataset)
    found: dict[str, Any] = {"type": f"{kind.__module__}.{kind.__qualname__}", "len": len(dataset)}
    root = getattr(dataset, "root", None)
    if isinstance(root, str | os.PathLike) and Path(root).exists():
        path = Path(root).resolve()
        found.update(root=str(path), root_mtime_ns=path.stat().st_mtime_ns)
    else:
        found["item"] = _structure(dataset[0])
    return found


def cache_key(parts: Mapping[str, Any]) -> str:
    """A short stable name for ``parts`` (sorted JSON, SHA-256, 16 hex digits)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_path(key: str) -> Path:
    return workbench_home() / FOLDER / f"loader-{key}.json"


def read(key: str) -> dict[str, Any] | None:
    """The saved answer for ``key``; None when there is none or it cannot be read."""
    try:
        doc = json.loads(cache_path(key).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(doc, dict) and all(isinstance(doc.get(k), int) for k in _ANSWER)
    return doc if ok else None


def write(key: str, doc: Mapping[str, Any]) -> Path:
    """Save ``doc`` (0600, in a 0700 folder) as the answer for ``key``."""
    target = cache_path(key)
    private_dir(target.parent)
    with private_output(target) as out:
        out.write_text(json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")
    return target


_ANSWER = ("num_workers", "prefetch_factor")


def _structure(item: Any) -> Any:
    """Shapes and dtypes of a sample's tensors (any nest of tuples, lists, dicts); the type
    name of anything else."""
    if isinstance(item, tuple | list):
        return [_structure(x) for x in item]
    if isinstance(item, dict):
        return {str(k): _structure(v) for k, v in sorted(item.items(), key=lambda kv: str(kv[0]))}
    shape = getattr(item, "shape", None)
    if shape is not None:
        return {"shape": list(shape), "dtype": str(getattr(item, "dtype", ""))}
    return type(item).__name__


def _gpu_name() -> str | None:
    # torch only when a loader is tuned: importing this module stays light
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
