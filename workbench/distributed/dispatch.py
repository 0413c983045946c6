"""``run_burst``: one burst, in this process or as a torchrun job, whichever its knobs need.

The engine measures a burst in one process (``workbench.engine.burst.run_in_process``); this
layer adds the other way, a DDP job under torchrun (``workbench.distributed.jobs``). Knobs
that only fresh processes can honour (``engine.plan.processes_why``: several ranks, NCCL
variables on a GPU) go to a job; everything else stays here, planned once
(``engine.plan.plan_burst``) with that answer. Either way the burst holds the process's burst
slot, so a newer burst anywhere in the kernel stops it first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from workbench.core import cost
from workbench.core.knobs import Knobs, not_an_argument
from workbench.core.results import BurstResult
from workbench.engine import hardware
from workbench.engine.burst import finish, run_in_process, superseded
from workbench.engine.loop import BurstProgress, Clock
from workbench.engine.plan import plan_burst, processes_why
from workbench.engine.slot import exclusive
from workbench.engine.window import BurstWindow
from workbench.engine.workloads import WorkloadArg, resolve_target
from workbench.history.store import record_result


def run_burst(
    workload: WorkloadArg = None,
    knobs: Knobs | None = None,
    *,
    seconds: float | None = None,
    min_steps: int | None = None,
    warmup_steps: int | None = None,
    window: BurstWindow | None = None,
    device: str | torch.device | None = None,
    data_dir: str | Path | None = None,
    record: bool = True,
    store: object = None,
    cancel: threading.Event | None = None,
    progress: Callable[[BurstProgress], None] | None = None,
    clock: Clock = time.perf_counter,
    timeout_s: float | None = None,
    price_per_hour: float | None = None,
    epoch_samples: float | None = None,
    launcher: str | None = None,
    hosts: Sequence[str] | str | None = None,
    check: bool = False,
    **misspelt: Any,
) -> BurstResult:
    """Run one measured training burst and return (and record) its BurstResult.

    A burst that fails (``oom``, ``error``) is a result, not an exception; ``check=True``
    raises it (``BurstResult.raise_for_status``: ``BurstFailed`` with the burst's error). A
    keyword that is no argument (``batchsize=64``) is refused naming the nearest one, a knob
    among them (knobs go in ``Knobs(...)``).

    ``workload``: a built-in name (``cnn``, ``resnet50``, ``gpt``), a Workload, or a factory;
    None picks ``cnn`` on a CPU and ``resnet50`` on a GPU. The window: ``window`` (a
    BurstWindow; default 3 s, at least 5 steps, 3 warm-up steps), with ``seconds``,
    ``min_steps`` or ``warmup_steps`` replacing its numbers. ``cancel``: set it (from another
    thread) to stop at the next step boundary; the result then has ``status="cancelled"``.
    ``record``/``store``: append the result to the history store (default location unless a
    store or path is given).

    With ``world_size > 1`` (or NCCL variables or ``alloc_conf`` on a GPU) the burst runs
    under torchrun, in fresh processes (``workbench.distributed.jobs``); ``timeout_s`` bounds
    that job. ``price_per_hour`` (default: ``$WORKBENCH_PRICE_PER_HOUR``, else none) gives the
    result a ``cost`` (``workbench.core.cost``); ``epoch_samples``, a dataset size, adds the
    cost per epoch. An OOM result gets ``oom_report`` (``workbench.engine.oom``).

    With ``knobs.nodes > 1`` the job spans nodes: ``launcher`` (``local``, ``ssh``,
    ``slurm``; None: slurm inside an allocation, ssh with ``hosts``, else local) starts one
    torchrun agent per node, ``hosts`` (ssh) names them.
    """
    if misspelt:
        raise not_an_argument("run_burst", next(iter(misspelt)), misspelt, _ARGUMENTS)
    result = _dispatch(workload, knobs, window, seconds, min_steps, warmup_steps, device,
                       data_dir, record, store, cancel, progress, clock, timeout_s,
                       price_per_hour, epoch_samples, launcher, hosts)  # fmt: skip
    return result.raise_for_status() if check else result


_ARGUMENTS = ("workload", "knobs", "seconds", "min_steps", "warmup_steps", "window", "device",
              "data_dir", "record", "store", "cancel", "progress", "clock", "timeout_s",
              "price_per_hour", "epoch_samples", "launcher", "hosts", "check")  # fmt: skip


def _dispatch(
    workload: WorkloadArg, knobs: Knobs | None, window: BurstWindow | None,
    seconds: float | None, min_steps: int | None, warmup_steps: int | None,
    device: str | torch.device | None, data_dir: str | Path | None, record: bool,
    store: object, cancel: threading.Event | None,
    progress: Callable[[BurstProgress], None] | None, clock: Clock, timeout_s: float | None,
    price_per_hour: float | None, epoch_samples: float | None, launcher: str | None,
    hosts: Sequence[str] | str | None,
) -> BurstResult:  # fmt: skip
    """``run_burst``'s body: here or as a torchrun job."""
    win = BurstWindow.of(window, seconds=seconds, min_steps=min_steps, warmup_steps=warmup_steps)
    money = (cost.resolve_price(price_per_hour), cost.check_count(epoch_samples, "epoch_samples"))
    knobs = Knobs() if knobs is None else knobs
    stop = cancel or threading.Event()
    dev = hardware.resolve_device(device)
    why = processes_why(knobs, dev)  # the one "torchrun or here?"; the plan keeps the answer
    if why is None:
        wl, dev = resolve_target(workload, dev, data_dir)
        plan = plan_burst(knobs, wl, dev, processes=None)
        return run_in_process(wl, knobs, dev, win, record=record, store=store, cancel=stop,
                              progress=progress, clock=clock, money=money, plan=plan)  # fmt: skip
    from workbench.distributed import jobs  # torchrun, launchers, stores: a job's only

    with exclusive(stop) as got:  # superseded while it waited: no job starts beside the newer
        if got:
            result = jobs.run_distributed_burst(
                workload, knobs, window=win, device=dev, data_dir=data_dir, record=False,
                cancel=stop, progress=progress, timeout_s=timeout_s, launcher=launcher,
                hosts=hosts,
            )  # fmt: skip
    if not got:
        wl, dev = resolve_target(workload, dev, data_dir)
        result = superseded(wl, knobs, dev, win)
    finish(result, money, store)
    record_result(result, record, store)
    return result
