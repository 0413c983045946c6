"""One rank of a distributed burst or comm benchmark: the program torchrun starts.

``python -m workbench.distributed.rank JOB.json`` (see ``workbench.distributed.torchrun``).
The rank reads the job, joins the process group (NCCL on GPUs, gloo on CPUs), runs the same
burst loop as the kernel (``workbench.engine.burst.measure_here``) with a
:class:`DdpCoordinator`, and reports through its event file. Rank 0 gathers every rank's
numbers and writes the job's result.

In a multi-node job (``wbstore://job-file/TAG`` instead of a file) the rank first reads the
job's file (``WORKBENCH_JOB_SECRET_FILE``: the secret and the store's address), checks the
spec's MAC before it imports anything the spec names, seals every event, and builds its
process group on the kernel's store (a prefix of the job's own), so that no agent needs to
host a store that listens on every interface (``workbench.distributed.multinode``). Ranks
exchange their rows as JSON (``workbench.distributed.jsoncomm``), never as pickles.

A rank that fails writes its error and exits at once with ``os._exit``: tearing down a process
group whose peer is gone can block, and torchrun stops the other ranks when one exits non-zero.

For the test suite only: with ``WORKBENCH_COUNT_GRAD_SYNCS=1`` in the job's environment each
rank counts DDP's gradient all-reduce rounds (a comm hook) and its optimizer steps, and adds
both to its row, so a test can check one all-reduce per optimizer step under ``grad_accum`` in
a real job. The hook is a Python call per bucket: never on in a burst whose numbers count.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_post_hook

from workbench.core.allocconf import ENV_VARS as ALLOC_ENV_VARS
from workbench.core.knobs import Knobs
from workbench.distributed import allreduce
from workbench.distributed.jsoncomm import gather_json
from workbench.distributed.nodes import NODE_ENV, NODE_INDEX_ENV
from workbench.distributed.storejob import StoreJob, is_job_url
from workbench.distributed.torchrun import EventLog, JobSpec, backend_for
from workbench.engine import hardware
from workbench.engine.burst import measure_here
from workbench.engine.failures import describe_error, is_oom_error, traceback_text
from workbench.engine.loop import BurstProgress, LoopControl
from workbench.engine.sharding import ddp_model, shard_model, shards
from workbench.engine.window import BurstWindow
from workbench.engine.workloads import resolve_workload

HELD_PER_RANK = ("param_mib_per_rank", "grad_mib_per_rank", "optimizer_state_mib_per_rank")
"""What a rank holds at rest (``BurstResult``'s fields of these names): in each rank's row,
and the job's largest in the merged result."""
_PROGRESS_EVERY_S = 0.25
_WATCH_EVERY_S = 1.0
COUNT_GRAD_SYNCS_ENV = "WORKBENCH_COUNT_GRAD_SYNCS"


class RankFailed(RuntimeError):
    """This rank's burst ended in OOM or an error (its status travels with it)."""

    def __init__(self, status: str, error: str | None, traceback: str | None = None):
        super().__init__(error or status)
        self.status = status
        self.traceback = traceback
        """The burst's own traceback (``BurstResult.traceback``), not this exception's."""


class DdpCoordinator:
    """The ranks of a data-parallel job (DDP, or FSDP2 with ``sharding=fsdp``), agreeing
    through a gloo group of their own.

    The control group is separate from the training group: decisions (stop now?) go over
    gloo between the hosts and never wait for the GPU, and they cannot interleave with the
    gradient all-reduces that DDP issues on the training group.
    """

    def __init__(self, knobs: Knobs, dev: torch.device, on_phase) -> None:
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.knobs, self.dev, self._on_phase = knobs, dev, on_phase
        self.control = dist.new_group(backend="gloo")
        self.sync_counts: dict[str, int] = {}

    @property
    def shard(self) -> tuple[int, int]:
        return self.rank, self.world_size

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """DDP around the model, or FSDP2's shards with ``sharding=fsdp`` on several ranks
        (``workbench.engine.sharding``); the model itself for a one-rank job without NCCL."""
        if not needs_ddp(self.knobs):
            return model  # one rank only for a fresh allocator: train it as the kernel would
        if shards(self.knobs):
            self._on_phase("fsdp")
            return shard_model(model, self.knobs, self.dev)
        self._on_phase("ddp")  # DDP's constructor broadcasts the weights: a wait for all ranks
        ddp = ddp_model(model, self.knobs, self.dev)
        if os.environ.get(COUNT_GRAD_SYNCS_ENV) == "1":
            self.sync_counts = count_grad_syncs(ddp)
        return ddp

    def agree_stop(self, stop_here: bool) -> bool:
        """Rank 0's decision, broadcast: one small host-side message per step (~0.1 ms)."""
        flag = torch.tensor([1 if stop_here else 0], dtype=torch.uint8)
        dist.broadcast(flag, src=0, group=self.control)
        return bool(flag.item())

    def barrier(self) -> None:
        dist.barrier(group=self.control)

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` on rank 0 (None elsewhere)."""
        return gather_json(obj, dst=0, group=self.control)


def needs_ddp(knobs: Knobs) -> bool:
    """DDP wraps the model with several ranks, or with NCCL variables (they act only through
    DDP's communicator); a one-rank job that exists for ``alloc_conf`` alone trains unwrapped,
    so it measures what the same knobs measure in the kernel, less the allocator's defaults."""
    return knobs.world_size > 1 or bool(knobs.nccl)


def count_grad_syncs(ddp: DistributedDataParallel) -> dict[str, int]:
    """Counters, live: ``grad_sync_rounds`` (backward passes whose gradients DDP all-reduced:
    the round's last bucket) and ``optimizer_steps`` (every optimizer of this process).

    The hook all-reduces as DDP's own default does (``allreduce_hook``): the count is of the
    real collectives, in the real job. See the module docstring: for the test suite only.
    """
    counts = {"grad_sync_rounds": 0, "optimizer_steps": 0}

    def hook(state, bucket):  # no annotations: DDP compares them with the class, not text
        if bucket.is_last():
            counts["grad_sync_rounds"] += 1
        return default_hooks.allreduce_hook(None, bucket)

    def on_step(optimizer: object, args: object, kwargs: object) -> None:
        counts["optimizer_steps"] += 1

    ddp.register_comm_hook(None, hook)
    register_optimizer_step_post_hook(on_step)
    return counts


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    rank = int(os.environ["RANK"])
    job = None
    if is_job_url(args[0]):  # a multi-node job: everything through the kernel's store
        job = StoreJob(args[0])
        spec, events = job.spec(), job.event_log(rank)
        job.watch_kernel(spec.timeout_s)
    else:
        spec = JobSpec.read(args[0])
        events = EventLog(Path(spec.out_dir) / f"rank{rank}.jsonl", rank)
        _watch_parent(spec.parent_pid, spec.timeout_s)
    events.write("start", pid=os.getpid(), node=node_here(), host=socket.gethostname())
    events.write("phase", phase="start")
    try:
        out = _run(spec, rank, events, job)
    except BaseException as exc:  # any failure is reported, then the rank ends
        if isinstance(exc, RankFailed):  # already described by the burst
            status, error, trace = exc.status, str(exc), exc.traceback
        else:
            status, error = ("oom" if is_oom_error(exc) else "error"), describe_error(exc)
            trace = traceback_text(exc)
        events.write("error", status=status, error=error, traceback=trace)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    if rank == 0:
        events.write("result", **out)
    events.write("phase", phase="done")
    dist.destroy_process_group()
    return 0


def _run(spec: JobSpec, rank: int, events: EventLog, job: StoreJob | None) -> dict[str, Any]:
    dev = rank_device(spec, machine_local_rank())
    events.write("phase", phase="init")
    backend = backend_for(dev.type)
    store = {}
    if job is not None:  # the kernel's store, not one that rank 0's agent would host
        store = {"store": job.group_store(), "rank": rank,
                 "world_size": int(os.environ["WORLD_SIZE"])}  # fmt: skip
    dist.init_process_group(backend, timeout=timedelta(seconds=spec.timeout_s),
                            device_id=dev if dev.type == "cuda" else None, **store)  # fmt: skip
    if spec.mode == "comm":
        events.write("phase", phase="comm")
        control = dist.new_group(backend="gloo")
        return allreduce.run_rank(spec.sizes_bytes, dev, control, by_node=spec.nodes > 1)
    return _burst(spec, dev, backend, events)


def machine_local_rank() -> int:
    """This rank's place among the ranks on this machine: LOCAL_RANK, after the ranks of the
    local launcher's earlier "nodes" (``WORKBENCH_NODE_INDEX``), which share its GPUs."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    node_index = int(os.environ.get(NODE_INDEX_ENV, "0"))
    return node_index * int(os.environ.get("LOCAL_WORLD_SIZE", "1")) + local


def rank_device(spec: JobSpec, local_rank: int) -> torch.device:
    """This rank's device: the GPU the job was launched for at ``local_rank``, not simply
    ``cuda:LOCAL_RANK`` (a job asked for ``cuda:1`` would run on GPU 0). Made current, so that
    whatever allocates on "the" CUDA device (a library, a default stream) uses it too."""
    if spec.device != "cuda":
        return torch.device("cpu")
    if not 0 <= local_rank < len(spec.device_indices):
        named = spec.device_indices
        raise RuntimeError(f"LOCAL_RANK={local_rank}: the job names a GPU for local ranks "
                           f"0..{len(named) - 1} only ({named})")  # fmt: skip
    index = spec.device_indices[local_rank]
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def _burst(spec: JobSpec, dev: torch.device, backend: str, events: EventLog) -> dict[str, Any]:
    knobs = Knobs.from_dict(spec.knobs)
    coord = DdpCoordinator(knobs, dev, lambda phase: events.write("phase", phase=phase))
    events.write("phase", phase="setup")
    wl = resolve_workload(spec.workload, spec.data_dir)
    window = BurstWindow(seconds=spec.seconds, min_steps=spec.min_steps,
                         warmup_steps=spec.warmup_steps)  # fmt: skip
    loop = LoopControl(window, threading.Event(), _progress_writer(events, coord.rank),
                       time.perf_counter, coord)  # fmt: skip
    result = measure_here(wl, knobs, dev, loop)  # planned there, as every rank plans
    if result.status != "ok":
        raise RankFailed(result.status, result.error, result.traceback)
    rows = coord.gather({**_rank_row(result, coord.rank, dev), **coord.sync_counts})
    if rows is None:
        return {}
    return merge_ranks(result.to_dict(), rows, backend, dev.type)


def _progress_writer(events: EventLog, rank: int):
    """Phase changes from every rank (to find a hung one); progress from rank 0, throttled."""
    last = {"phase": None, "t": 0.0}

    def report(p: BurstProgress) -> None:
        if p.phase != last["phase"]:
            last["phase"] = p.phase
            events.write("phase", phase=p.phase)
        now = time.monotonic()
        if rank == 0 and (now - last["t"] >= _PROGRESS_EVERY_S or p.phase == "done"):
            last["t"] = now
            events.write("progress", phase=p.phase, elapsed_s=p.elapsed_s,
                         window_s=p.window_s, steps=p.steps)  # fmt: skip

    return report


def _rank_row(r, rank: int, dev: torch.device) -> dict[str, Any]:
    """What each rank contributes: enough to merge, and to show a straggler."""
    return {
        "rank": rank,
        "node": node_here(),
        "host": socket.gethostname(),
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
        "device": str(dev),
        "pid": os.getpid(),
        "steps": r.steps,
        "samples": r.samples,
        "samples_from": r.samples_from,
        "measured_s": r.measured_s,
        "step_ms_p50": r.step_ms_p50,
        "step_ms_iqr": r.step_ms_iqr,
        "data_wait_pct": r.data_wait_pct,
        "peak_mem_mib": r.peak_mem_mib,
        "peak_reserved_mib": r.peak_reserved_mib,
        "setup_peak_mem_mib": r.setup_peak_mem_mib,
        **{name: getattr(r, name) for name in HELD_PER_RANK},
        "gpu_util_pct": r.gpu_util_pct,
        "power_w": r.power_w,
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "alloc_env": {k: os.environ[k] for k in ALLOC_ENV_VARS if k in os.environ},
        "suspect": list(r.suspect),
    }


def merge_ranks(
    rank0: dict[str, Any], rows: list[dict[str, Any]], backend: str, device_type: str
) -> dict[str, Any]:
    """One job result from rank 0's result and every rank's row.

    Samples count all ranks; the window is the longest rank's (they start and end together,
    so this is the job's wall time). Memory (the training peak, and set-up's beside it): on
    GPUs the largest rank's (each GPU has its own limit); on a CPU the sum (the ranks share the
    host's memory). What one rank holds at rest
    (``param_mib_per_rank`` and the others of :data:`HELD_PER_RANK`): the largest rank's,
    the one that must fit (FSDP's shards differ by a row where a dimension does not divide).
    """
    out = dict(rank0)
    samples = sum(row["samples"] for row in rows)
    window_s = max(row["measured_s"] or 0.0 for row in rows)
    out.update(samples=samples, measured_s=window_s, ranks=rows, backend=backend)
    out["samples_per_s"] = samples / window_s if window_s > 0 else None
    if rank0.get("tokens_per_s") and rank0.get("samples_per_s") and out["samples_per_s"]:
        tokens_per_sample = rank0["tokens_per_s"] / rank0["samples_per_s"]
        out["tokens_per_s"] = out["samples_per_s"] * tokens_per_sample
    for name in ("peak_mem_mib", "setup_peak_mem_mib"):
        mems = [row[name] for row in rows if row.get(name) is not None]
        if mems:
            out[name] = max(mems) if device_type == "cuda" else sum(mems)
    for name in HELD_PER_RANK:
        held = [row[name] for row in rows if row.get(name) is not None]
        out[name] = max(held) if held else None
    waits = [row["data_wait_pct"] for row in rows if row["data_wait_pct"] is not None]
    out["data_wait_pct"] = sum(waits) / len(waits) if waits else None
    _merge_flops(out, len(rows))
    out["suspect"] = [f"rank {row['rank']}: {p}" for row in rows for p in row.get("suspect", [])]
    return out


def _merge_flops(out: dict[str, Any], world_size: int) -> None:
    """MFU of the job: achieved FLOP/s of all ranks over the peak of all their devices."""
    flops, sps = out.get("flops_per_sample"), out.get("samples_per_s")
    if flops is None or sps is None:
        return
    out["achieved_tflops"] = flops * sps / 1e12
    peak_tflops = out.get("peak_tflops")
    peak = peak_tflops * 1e12 if peak_tflops else None
    out["mfu_pct"] = hardware.estimate_mfu(flops, sps / world_size, peak)


def node_here() -> str:
    """This rank's node as results name it: the launcher's ``WORKBENCH_NODE``, SLURM's node
    name (srun sets it per task), else the host name."""
    return (os.environ.get(NODE_ENV) or os.environ.get("SLURMD_NODENAME")
            or socket.gethostname())  # fmt: skip


def _watch_parent(parent_pid: int, timeout_s: float) -> None:
    """End this rank if the process that launched the job is gone, or long past its deadline.

    torchrun stops its ranks when *it* is stopped, but not when the kernel above it is killed
    (SIGKILL leaves torchrun running); this thread makes sure no rank outlives the kernel, and
    torchrun, which ends its job when a rank fails, follows. The rank exits with 3.
    """
    deadline = time.monotonic() + timeout_s + 60.0
    launcher = _process(parent_pid)

    def watch() -> None:
        while True:
            if not is_alive(launcher) or time.monotonic() > deadline:
                os._exit(3)
            time.sleep(_WATCH_EVERY_S)

    threading.Thread(target=watch, name="workbench-parent-watch", daemon=True).start()


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def is_alive(proc: psutil.Process | None) -> bool:
    """Still the same process (psutil compares its start time: a reused pid is not it), and
    not a zombie: a killed kernel stays one until the server above it reaps it, which can take
    seconds or, with a careless parent, forever, and signal 0 answers for a zombie as for the
    living."""
    if proc is None:
        return False
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # not ours to inspect: alive, as far as we can tell
        return True


if __name__ == "__main__":
    sys.exit(main())
