"""One rank of a distributed burst or comm benchmark: the program torchrun starts.

``python -m workbench.dist_worker JOB.json`` (see ``workbench.launch``). The rank reads the job,
joins the process group (NCCL on GPUs, gloo on CPUs), runs the same burst loop as the kernel
(``workbench.burst.measure_here``) with a :class:`DdpCoordinator`, and reports through its
event file. Rank 0 gathers every rank's numbers and writes the job's result.

A rank that fails writes its error and exits at once with ``os._exit``: tearing down a process
group whose peer is gone can block, and torchrun stops the other ranks when one exits non-zero.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from workbench import hardware
from workbench.burst import BurstPlan, BurstProgress, describe_error, is_oom_error, measure_here
from workbench.knobs import Knobs
from workbench.launch import EventLog, JobSpec, backend_for
from workbench.training import DDP_KNOBS
from workbench.workloads import resolve_workload

_PROGRESS_EVERY_S = 0.25


class RankFailed(RuntimeError):
    """This rank's burst ended in OOM or an error (its status travels with it)."""

    def __init__(self, status: str, error: str | None):
        super().__init__(error or status)
        self.status = status


class DdpCoordinator:
    """The ranks of a DDP job, agreeing through a gloo group of their own.

    The control group is separate from the training group: decisions (stop now?) go over
    gloo between the hosts and never wait for the GPU, and they cannot interleave with the
    gradient all-reduces that DDP issues on the training group.
    """

    def __init__(self, knobs: Knobs, dev: torch.device, on_phase) -> None:
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.knobs, self.dev, self._on_phase = knobs, dev, on_phase
        self.control = dist.new_group(backend="gloo")

    @property
    def shard(self) -> tuple[int, int]:
        return self.rank, self.world_size

    def wrap_model(self, model: nn.Module) -> nn.Module:
        self._on_phase("ddp")  # DDP's constructor broadcasts the weights: a wait for all ranks
        return DistributedDataParallel(
            model,
            device_ids=[self.dev.index] if self.dev.type == "cuda" else None,
            **{name: getattr(self.knobs, name) for name in DDP_KNOBS},  # as ddp_kwargs() says
        )

    def agree_stop(self, stop_here: bool) -> bool:
        """Rank 0's decision, broadcast: one small host-side message per step (~0.1 ms)."""
        flag = torch.tensor([1 if stop_here else 0], dtype=torch.uint8)
        dist.broadcast(flag, src=0, group=self.control)
        return bool(flag.item())

    def barrier(self) -> None:
        dist.barrier(group=self.control)

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` on rank 0 (None elsewhere)."""
        out = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0, group=self.control)
        return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = JobSpec.read(args[0])
    rank = int(os.environ["RANK"])
    events = EventLog(Path(spec.out_dir) / f"rank{rank}.jsonl", rank)
    events.write("start", pid=os.getpid())
    events.write("phase", phase="start")
    _watch_parent(spec.parent_pid, spec.timeout_s)
    try:
        out = _run(spec, rank, events)
    except BaseException as exc:  # any failure is reported, then the rank ends
        if isinstance(exc, RankFailed):  # already described by the burst
            status, error = exc.status, str(exc)
        else:
            status, error = ("oom" if is_oom_error(exc) else "error"), describe_error(exc)
        events.write("error", status=status, error=error,
                     traceback=traceback.format_exc()[-4000:])  # fmt: skip
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    if rank == 0:
        events.write("result", **out)
    events.write("phase", phase="done")
    dist.destroy_process_group()
    return 0


def _run(spec: JobSpec, rank: int, events: EventLog) -> dict[str, Any]:
    dev = _device(spec.device)
    events.write("phase", phase="init")
    backend = backend_for(dev.type)
    dist.init_process_group(backend, timeout=timedelta(seconds=spec.timeout_s),
                            device_id=dev if dev.type == "cuda" else None)  # fmt: skip
    if spec.mode == "comm":
        from workbench import comm

        events.write("phase", phase="comm")
        return comm.run_rank(spec.sizes_bytes, dev, dist.new_group(backend="gloo"))
    return _burst(spec, dev, backend, events)


def _device(kind: str) -> torch.device:
    if kind == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _burst(spec: JobSpec, dev: torch.device, backend: str, events: EventLog) -> dict[str, Any]:
    knobs = Knobs.from_dict(spec.knobs)
    coord = DdpCoordinator(knobs, dev, lambda phase: events.write("phase", phase=phase))
    events.write("phase", phase="setup")
    wl = resolve_workload(spec.workload, spec.data_dir)
    plan = BurstPlan(spec.seconds, spec.min_steps, spec.warmup_steps, threading.Event(),
                     _progress_writer(events, coord.rank), time.perf_counter, coord)  # fmt: skip
    result = measure_here(wl, knobs, dev, plan)
    if result.status != "ok":
        raise RankFailed(result.status, result.error)
    rows = coord.gather(_rank_row(result, coord.rank, dev))
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
        "device": str(dev),
        "pid": os.getpid(),
        "steps": r.steps,
        "samples": r.samples,
        "measured_s": r.measured_s,
        "step_ms_p50": r.step_ms_p50,
        "step_ms_iqr": r.step_ms_iqr,
        "data_wait_pct": r.data_wait_pct,
        "peak_mem_mib": r.peak_mem_mib,
        "peak_reserved_mib": r.peak_reserved_mib,
        "gpu_util_pct": r.gpu_util_pct,
        "power_w": r.power_w,
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
    }


def merge_ranks(
    rank0: dict[str, Any], rows: list[dict[str, Any]], backend: str, device_type: str
) -> dict[str, Any]:
    """One job result from rank 0's result and every rank's row.

    Samples count all ranks; the window is the longest rank's (they start and end together,
    so this is the job's wall time). Memory: on GPUs the largest rank's (each GPU has its own
    limit); on a CPU the sum (the ranks share the host's memory).
    """
    out = dict(rank0)
    samples = sum(row["samples"] for row in rows)
    window_s = max(row["measured_s"] or 0.0 for row in rows)
    out.update(samples=samples, measured_s=window_s, ranks=rows, backend=backend)
    out["samples_per_s"] = samples / window_s if window_s > 0 else None
    if rank0.get("tokens_per_s") and rank0.get("samples_per_s") and out["samples_per_s"]:
        tokens_per_sample = rank0["tokens_per_s"] / rank0["samples_per_s"]
        out["tokens_per_s"] = out["samples_per_s"] * tokens_per_sample
    mems = [row["peak_mem_mib"] for row in rows if row["peak_mem_mib"] is not None]
    if mems:
        out["peak_mem_mib"] = max(mems) if device_type == "cuda" else sum(mems)
    waits = [row["data_wait_pct"] for row in rows if row["data_wait_pct"] is not None]
    out["data_wait_pct"] = sum(waits) / len(waits) if waits else None
    _merge_flops(out, len(rows))
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


def _watch_parent(parent_pid: int, timeout_s: float) -> None:
    """End this rank if the process that launched the job is gone, or long past its deadline.

    torchrun stops its ranks when *it* is stopped, but not when the kernel above it is killed
    (SIGKILL leaves torchrun running); this thread makes sure no rank outlives the kernel.
    """
    deadline = time.monotonic() + timeout_s + 60.0

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if not _alive(parent_pid) or time.monotonic() > deadline:
                os._exit(3)

    threading.Thread(target=watch, name="workbench-parent-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


if __name__ == "__main__":
    sys.exit(main())
