"""The DataLoader keyword arguments the knobs mean: one mapping for the burst's loader and for
a saved config's ``cfg.dataloader_kwargs()``, in a module without torch, so that
``load_config`` (which checks the saved loader section against it) imports no torch.

Start method: worker processes are forked (``multiprocessing_context="fork"`` where the
platform has it); ``engine.loaders.torch_loader`` says why. ``timeout``: the stream waits for
a batch in ``WORKER_POLL_S`` slices and gives up after ``WORKER_TIMEOUT_S``.
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

from workbench.core.knobs import Knobs

WORKER_TIMEOUT_S = 120.0
"""A worker that hangs (deadlock, dead NFS mount) becomes an error after this long, not a hang."""
WORKER_POLL_S = 2.0
"""How often a wait for a batch looks at the workers. torch finds a dead worker at once through
its SIGCHLD handler, but that handler exists only when the loader runs on the main thread;
elsewhere (the panel's burst thread) a death is seen only when a wait for data times out. With
``DataLoader(timeout=120)`` that was after 120 s, so the stream waits in short slices."""


def device_type(device: Any) -> str:
    """``"cuda"`` or ``"cpu"`` of a ``torch.device`` or a device string, without torch."""
    return getattr(device, "type", None) or str(device).split(":", 1)[0]


def dataloader_kwargs(knobs: Knobs, device: Any, poll_s: float = WORKER_POLL_S) -> dict[str, Any]:
    """The DataLoader keyword arguments these knobs mean on ``device`` (a ``torch.device`` or
    a string); ``poll_s``: the worker timeout of one wait slice."""
    on_cuda = device_type(device) == "cuda"
    kwargs: dict[str, Any] = {
        "batch_size": knobs.batch_size,
        "shuffle": True,
        "drop_last": True,
        "num_workers": knobs.num_workers,
        "pin_memory": knobs.pin_memory and on_cuda,
    }
    if knobs.num_workers > 0:
        kwargs["persistent_workers"] = knobs.persistent_workers
        kwargs["prefetch_factor"] = knobs.prefetch_factor or 2
        kwargs["timeout"] = poll_s  # the stream retries up to WORKER_TIMEOUT_S
        if "fork" in mp.get_all_start_methods():
            kwargs["multiprocessing_context"] = "fork"
    return kwargs


__all__ = ["WORKER_POLL_S", "WORKER_TIMEOUT_S", "dataloader_kwargs", "device_type"]
