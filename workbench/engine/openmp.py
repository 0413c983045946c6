"""The OpenMP runtime PyTorch's CPU kernels run on, and the one thing a burst asks of it.

Why a burst cares. A burst runs on a fresh thread (``workbench.engine.burst_thread`` says why),
and a production loop runs on the main thread. On a CPU the two are not the same place.
PyTorch's Linux builds run intra-op work on GNU OpenMP (libgomp), and libgomp gives every thread
that opens a parallel region a team (a pool of worker threads) of its own. Its idle workers spin
before they sleep: 300,000 times while the process manages no more OpenMP threads than there are
CPUs, 100 times once it manages more (libgomp's ``GOMP_SPINCOUNT`` documentation). The kernel's
or the script's main thread has owned a team since its first parallel op; a burst's fresh thread
adds a second one, the count passes the CPUs, and the burst's workers stop spinning, which
leaves the cores to the DataLoader's worker processes. Measured on the 2-core test machine (a
plain loop, small convnet, one worker, batch 32): 1.36-1.49x faster on a fresh thread than on the
main thread of the same process. Not a fact about the user's loop: an artefact of where the
burst ran.

The cure is to make the fresh thread's conditions the main thread's exactly: the calling thread
lets go of its team first (OpenMP 5.0's ``omp_pause_resource_all``; libgomp frees the calling
thread's pool and takes its threads off the managed count), so the burst's team is the only one
in the process, as the production loop's is. Measured the same way: 1.01-1.06x (3 pairs). The
caller's next parallel op builds a new team (a few microseconds of thread starts).

Where the runtime has no such entry point (a build without OpenMP, an older runtime), nothing is
released and :func:`release_pool` says so; the burst then decides where to run
(``workbench.engine.burst_thread``).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from pathlib import Path

import torch

_log = logging.getLogger(__name__)

_OMP_PAUSE_SOFT = 1  # omp_pause_resource_t: omp_pause_soft (threads released, state kept)
_RUNTIME_NAMES = ("libgomp", "libomp", "libiomp5")


def release_pool() -> bool:
    """Release the calling thread's OpenMP team; True when the runtime did (or had none to
    release), False when this runtime cannot be asked (then nothing changed)."""
    pause = _pause_entry_point()
    if pause is None:
        return False
    return pause(_OMP_PAUSE_SOFT) == 0  # non-zero: called inside a parallel region


def can_release() -> bool:
    """Whether :func:`release_pool` can act in this process."""
    return _pause_entry_point() is not None


@functools.cache
def _pause_entry_point() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """``omp_pause_resource_all`` of the OpenMP runtime torch loaded, once per process."""
    if not torch.backends.openmp.is_available():
        return None
    for path in _loaded_runtimes():
        try:
            lib = ctypes.CDLL(path)  # already loaded: the same handle, nothing new mapped
            entry = lib.omp_pause_resource_all
        except (OSError, AttributeError):
            continue
        entry.argtypes, entry.restype = [ctypes.c_int], ctypes.c_int
        return entry
    _log.info("no OpenMP runtime with omp_pause_resource_all is loaded")
    return None


def _loaded_runtimes() -> list[str]:
    """Paths of the OpenMP runtimes in this process: from the process's own map on Linux,
    else the ones shipped in torch's ``lib`` folder (macOS wheels bring libomp there)."""
    maps = Path("/proc/self/maps")
    found: list[str] = []
    if maps.exists():
        for line in maps.read_text().splitlines():
            path = line.split()[-1] if line.split() else ""
            if path.startswith("/") and _is_runtime(path) and path not in found:
                found.append(path)
    if found:
        return found
    lib_dir = Path(torch.__file__).parent / "lib"
    if not lib_dir.is_dir():
        return []
    return [str(lib_dir / n) for n in sorted(os.listdir(lib_dir)) if _is_runtime(n)]


def _is_runtime(path: str) -> bool:
    name = os.path.basename(path)
    return any(name.startswith(prefix) for prefix in _RUNTIME_NAMES)


__all__ = ["can_release", "release_pool"]
