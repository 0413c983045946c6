"""Distributed bursts and the all-reduce benchmark, run as torchrun jobs from the kernel or CLI.

NCCL reads its variables once, when a communicator is created, so NCCL knobs can only act in
fresh processes: a burst with ``world_size > 1`` (or with NCCL variables on a GPU) runs as a
real DDP job under torchrun, and the variables reach the ranks through *their* environment.
The kernel's own ``os.environ`` is never changed.

The backend follows the device: NCCL on GPUs, gloo on CPUs (where NCCL variables are reported
in ``no_effect``). Process handling lives in ``workbench.distributed.torchrun``; the ranks' code in
``workbench.distributed.rank``; the benchmark's timing in ``workbench.distributed.allreduce``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from workbench.core import allocconf, ambient, nccl
from workbench.core.errors import InputError
from workbench.core.knobs import KnobError, Knobs
from workbench.core.results import BurstResult, utc_now
from workbench.distributed.allreduce import CPU_SIZES, GPU_SIZES, CommResult, wrong_sums
from workbench.distributed.launchers import (
    LAUNCHERS,
    Launcher,
    LaunchError,
    parse_hosts,
    pick_launcher,
)
from workbench.distributed.multinode import MultiNodeJob, node_rows
from workbench.distributed.torchrun import JobOutcome, JobSpec, TorchrunJob, backend_for, check_port
from workbench.engine import hardware
from workbench.engine.burst import BurstProgress
from workbench.engine.window import BurstWindow
from workbench.engine.workloads import default_workload_name, name_for_ranks
from workbench.history.store import record_result

__all__ = ["comm_bench", "default_timeout_s", "job_devices", "run_distributed_burst",
           "worker_env"]  # fmt: skip

_SETUP_ALLOWANCE_S = 120.0  # torchrun + one torch import per rank + model and loader set-up


def default_timeout_s(seconds: float, knobs: Knobs) -> float:
    """Long enough for start-up, compilation and the window; short enough to catch a hang."""
    compile_allowance = 300.0 if knobs.compile != "off" else 0.0
    return _SETUP_ALLOWANCE_S + compile_allowance + 4.0 * seconds


def worker_env(nccl_vars: Mapping[str, str], nproc: int, alloc_conf: str = "") -> dict[str, str]:
    """The ranks' environment: this process's, plus the NCCL knobs, plus what a rank needs.

    A copy: ``os.environ`` itself is left as it was. What the ranks inherit from it beyond the
    knobs is recorded in the result (``workbench.core.ambient``); a knob wins over an ambient
    variable of the same name. Each rank gets an equal share of the CPU
    cores as its thread count (torchrun would otherwise force 1 thread and say so), and the
    parent's import path, so a workload importable here is importable there.

    ``PYTHONSAFEPATH=1``: ``python -m torch.distributed.run`` (the launcher, and the ranks it
    starts) would otherwise put the current directory first on ``sys.path``, so a ``torch.py``
    beside the user's workload would be imported in torch's place in every rank. The directory
    still reaches the ranks, after the installed packages, through ``PYTHONPATH`` (the parent's
    path in its order: the CLI puts it last). Python 3.10 ignores the variable: there the
    directory stays first, as ``python -m`` has it.
    """
    env = dict(os.environ)
    env.update(nccl_vars)
    env.update(allocconf.env_for(alloc_conf))  # both names: the knob wins over a stale one
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONSAFEPATH"] = "1"
    return env


def check_world_size(world_size: int, device: torch.device, remote: bool = False) -> None:
    """One rank per GPU on a GPU machine, from ``device`` on; on a CPU at most one per core.
    ``remote``: the ranks run on other machines, whose GPUs and cores are not known here."""
    if remote:
        return
    if device.type == "cuda":
        have, first = torch.cuda.device_count(), device.index or 0
        if first + world_size > have:
            allowed = (f"1..{have - first}: one rank per GPU from {device} on, and this "
                       f"machine has {have} (cuda:0 to cuda:{have - 1})")  # fmt: skip
            raise KnobError("world_size", world_size, allowed)
        return
    cores = os.cpu_count() or 1
    if world_size > cores:
        raise KnobError("world_size", world_size,
                        f"1..{cores} on this CPU (one rank per core; it has {cores})")  # fmt: skip


def job_devices(device: torch.device, world_size: int) -> list[int]:
    """The CUDA index each local rank runs on: ``device``'s own, and the ones after it.

    A rank must not take ``cuda:LOCAL_RANK`` by itself: a job asked for ``cuda:1`` would run
    on GPU 0 and report it as asked. The indices are this process's numbering (after its
    ``CUDA_VISIBLE_DEVICES``), which the ranks inherit with its environment, so each rank's
    ``device`` names the GPU that really ran. Empty on a CPU.
    """
    if device.type != "cuda":
        return []
    first = device.index or 0
    return list(range(first, first + world_size))


def run_distributed_burst(
    workload: Any,
    knobs: Knobs,
    *,
    window: BurstWindow = BurstWindow(),  # noqa: B008 (frozen: one shared default is safe)
    device: torch.device | str | None = None,
    data_dir: str | Path | None = None,
    record: bool = True,
    store: object = None,
    cancel: threading.Event | None = None,
    progress: Callable[[BurstProgress], None] | None = None,
    timeout_s: float | None = None,
    port: int | None = None,
    launcher: str | None = None,
    hosts: Sequence[str] | str | None = None,
) -> BurstResult:
    """A burst as a DDP job of ``knobs.world_size`` ranks under torchrun; a BurstResult.

    Samples/s counts all ranks; ``ranks`` keeps each rank's step time, data wait and memory so
    a straggler shows. A failing rank, a hang (``timeout_s``) or a cancel ends the whole job
    and becomes the result's status, with the failing rank's error.

    With ``knobs.nodes > 1`` the job spans nodes (``workbench.distributed.multinode``):
    ``launcher`` (local, ssh, slurm; None picks one, see ``pick_launcher``) starts one agent
    per node, ``hosts`` lists them for ssh; ``nodes`` in the result has a row per node.
    """
    dev = hardware.resolve_device(device)
    chosen = _launcher_for(knobs.nodes, launcher, hosts)
    check_world_size(knobs.world_size if _all_here(chosen) else knobs.world_size // knobs.nodes,
                     dev, remote=not _all_here(chosen))  # fmt: skip
    check_port(port if chosen is None else None)
    if data_dir is None and hasattr(workload, "extras"):
        data_dir = workload.extras.get("source_data_dir")
    name = _workload_name(workload, dev, data_dir)
    timeout_s = default_timeout_s(window.seconds, knobs) if timeout_s is None else float(timeout_s)
    notes = nccl.check_env(knobs.nccl)
    for note in notes:
        warnings.warn(note, stacklevel=2)
    out_dir = Path(tempfile.mkdtemp(prefix="workbench-job-"))
    here = knobs.world_size if _all_here(chosen) else knobs.world_size // knobs.nodes
    spec = JobSpec(
        mode="burst", out_dir=str(out_dir), device=dev.type, parent_pid=os.getpid(),
        device_indices=job_devices(dev, here), timeout_s=timeout_s, workload=name,
        knobs=knobs.to_dict(), seconds=float(window.seconds), min_steps=window.min_steps,
        warmup_steps=window.warmup_steps, data_dir=str(data_dir) if data_dir is not None else None,
        nodes=knobs.nodes,
    )  # fmt: skip
    try:
        env = worker_env(knobs.nccl, here, knobs.alloc_conf)
        job = _job(spec, knobs, chosen, env, port)
        outcome = _run_job(job, knobs, cancel, _progress_relay(progress))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    result = _burst_result(outcome, name, knobs, dev, window.seconds)
    if chosen is not None and result.ok:
        result.nodes = node_rows(result.ranks, dev.type)
    ambient.stamp(result, knobs, dev.type)  # this process's environment: what the ranks got
    record_result(result, record, store)
    return result


def _workload_name(workload: Any, dev: torch.device, data_dir: str | Path | None) -> str:
    """What the ranks resolve the workload from (they are other processes: no objects),
    checked before torchrun starts: a name they could not import, or a function defined in
    ``__main__``, is refused here with the fix, not after seconds of launching."""
    if workload is None:
        return default_workload_name(dev.type)
    return name_for_ranks(workload, data_dir)


def _progress_relay(progress: Callable[[BurstProgress], None] | None):
    """Rank 0's progress events, as the BurstProgress a caller of run_burst expects."""
    if progress is None:
        return None
    progress(BurstProgress("setup", 0.0, 0.0, 0))  # torchrun starting: says so at once

    def relay(event: dict[str, Any]) -> None:
        if event["event"] == "progress" and event["rank"] == 0:
            progress(BurstProgress(event["phase"], event["elapsed_s"], event["window_s"],
                                   event["steps"]))  # fmt: skip

    return relay


def _burst_result(
    outcome: JobOutcome, name: str, knobs: Knobs, dev: torch.device, seconds: float
) -> BurstResult:
    if outcome.status == "ok" and outcome.result is not None:
        data = {k: v for k, v in outcome.result.items() if k not in ("event", "rank", "t")}
        result = BurstResult.from_dict(data)
        result.id = None
        result.launch_s = outcome.elapsed_s
        return result
    info = hardware.device_info(dev)
    return BurstResult(
        status=_status(outcome), error=outcome.error, workload=name.rsplit(":", 1)[-1],
        device=str(dev),
        knobs=knobs, device_name=info.name, device_mem_mib=info.total_mem_mib,
        seconds=float(seconds), created_at=utc_now(), versions=hardware.versions(),
        backend=backend_for(dev.type), launch_s=outcome.elapsed_s,
        nccl_flags=nccl.flags(knobs.nccl), traceback=_rank_traceback(outcome),
    )  # fmt: skip


def _rank_traceback(outcome: JobOutcome) -> str | None:
    """The traceback of the rank that failed first (whose error the result names), as that
    rank wrote it in its error event; None when no rank got as far as writing one."""
    errors = [e for evs in outcome.events.values() for e in evs if e.get("event") == "error"]
    first = min(errors, key=lambda e: e.get("t", 0.0), default=None)
    return first.get("traceback") if first is not None else None


def _status(outcome: JobOutcome) -> str:
    """A job stopped at its timeout is an ``error`` result (the message says it hung)."""
    return "error" if outcome.status == "timeout" else outcome.status


def comm_bench(
    world_size: int | None = None,
    *,
    sizes: list[int] | tuple[int, ...] | None = None,
    knobs: Knobs | None = None,
    device: torch.device | str | None = None,
    timeout_s: float = 300.0,
    port: int | None = None,
    cancel: threading.Event | None = None,
    nodes: int = 1,
    launcher: str | None = None,
    hosts: Sequence[str] | str | None = None,
) -> CommResult:
    """All-reduce over message sizes on ``world_size`` ranks (default: every GPU from
    ``device`` on; 2 on a CPU).

    ``knobs.nccl`` variables reach the ranks as for a burst. ``sizes`` in bytes (default
    8 KiB to 256 MiB on a GPU, to 8 MiB on a CPU). The result's ``table()`` prints what
    nccl-tests prints; ``frame()`` feeds ``plots.comm``.

    ``nodes > 1``: across nodes, started by ``launcher`` on ``hosts`` as a burst is; each
    size then has a row per ``scope``: ``intra`` (the ranks of each node) and ``inter`` (one
    rank per node), so the link that limits shows.
    """
    knobs = knobs or Knobs()
    dev = hardware.resolve_device(device)
    world_size = world_size or _default_comm_ranks(dev) * max(1, _int_nodes(nodes))
    knobs = knobs.replace(world_size=world_size, nodes=_int_nodes(nodes))  # KnobError: divides
    chosen = _launcher_for(knobs.nodes, launcher, hosts)
    here = world_size if _all_here(chosen) else world_size // knobs.nodes
    check_world_size(here, dev, remote=not _all_here(chosen))
    check_port(port if chosen is None else None)
    sizes_bytes = _check_sizes(sizes, dev)
    out_dir = Path(tempfile.mkdtemp(prefix="workbench-comm-"))
    spec = JobSpec(mode="comm", out_dir=str(out_dir), device=dev.type, parent_pid=os.getpid(),
                   device_indices=job_devices(dev, here), timeout_s=float(timeout_s),
                   sizes_bytes=sizes_bytes, nodes=knobs.nodes)  # fmt: skip
    env = worker_env(knobs.nccl, here)
    try:
        outcome = _run_job(_job(spec, knobs, chosen, env, port), knobs, cancel, None)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    result = _comm_result(outcome, knobs, dev)
    result.nodes = knobs.nodes
    result.nccl_env = {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")}
    return result


def _int_nodes(nodes: Any) -> int:
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise KnobError("nodes", nodes, "a whole number of nodes, 1 or more")
    return nodes


def _launcher_for(
    nodes: int, launcher: str | None, hosts: Sequence[str] | str | None
) -> Launcher | None:
    """The launcher of a multi-node job; None for one node (torchrun on this machine)."""
    if nodes > 1:
        return pick_launcher(launcher, hosts)
    if parse_hosts(hosts):
        raise InputError.not_allowed("hosts", hosts if isinstance(hosts, str) else ",".join(hosts),
                                     "no hosts with nodes=1 (the job runs on this machine); "
                                     "set nodes to the number of hosts")  # fmt: skip
    if launcher is not None and launcher not in LAUNCHERS:
        raise InputError.not_allowed("launcher", launcher, "one of " + ", ".join(LAUNCHERS))
    return None


def _all_here(launcher: Launcher | None) -> bool:
    """Every rank on this machine: one node, or the local launcher's "nodes"."""
    return launcher is None or launcher.name == "local"


def _job(
    spec: JobSpec, knobs: Knobs, launcher: Launcher | None, env: dict[str, str], port: int | None
) -> TorchrunJob:
    if launcher is None:
        return TorchrunJob(spec, knobs.world_size, env, port)
    if not _all_here(launcher) and "OMP_NUM_THREADS" not in os.environ:
        env.pop("OMP_NUM_THREADS", None)  # this machine's core count says nothing of theirs
    spec.parent_pid = 0  # the ranks watch the kernel's store, not a pid of this host
    return MultiNodeJob(spec, launcher, knobs.nodes, knobs.world_size // knobs.nodes, env)


def _run_job(job: TorchrunJob, knobs: Knobs, cancel, on_event) -> JobOutcome:
    """Run the job; a multi-node job first checks every node's interfaces (NcclError naming
    the node); a node that cannot be asked ends it as an error result naming that node."""
    if isinstance(job, MultiNodeJob):
        try:
            job.check_nodes(knobs.nccl)
        except LaunchError as exc:
            return JobOutcome("error", None, str(exc), 0.0)
    return job.run(cancel, on_event)


def _default_comm_ranks(dev: torch.device) -> int:
    if dev.type != "cuda":
        return 2
    return torch.cuda.device_count() - (dev.index or 0)


def _check_sizes(sizes: Any, dev: torch.device) -> list[int]:
    if sizes is None:
        return list(GPU_SIZES if dev.type == "cuda" else CPU_SIZES)
    clean = []
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or not 4 <= size <= 2**34:
            raise InputError.not_allowed("sizes", size, "message sizes in bytes, 4 B to 16 GiB")
        clean.append(size)
    if not clean:
        raise InputError.not_allowed("sizes", list(sizes), "at least one message size in bytes")
    return clean


def _comm_result(outcome: JobOutcome, knobs: Knobs, dev: torch.device) -> CommResult:
    info = hardware.device_info(dev)
    result = CommResult(
        status=_status(outcome), error=outcome.error,
        world_size=knobs.world_size, backend=backend_for(dev.type), device=dev.type,
        device_name=info.name, nccl=dict(knobs.nccl), nccl_flags=nccl.flags(knobs.nccl),
        elapsed_s=outcome.elapsed_s, created_at=utc_now(), versions=hardware.versions(),
    )  # fmt: skip
    if knobs.nccl and dev.type != "cuda":
        result.no_effect["nccl"] = nccl.ON_GLOO
    if outcome.result is not None:
        result.rows = outcome.result.get("rows", [])
        result.suspect = wrong_sums(result.rows)
    return result
