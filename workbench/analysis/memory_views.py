"""A burst recorded allocation by allocation: ``memory_snapshot`` and its per-step timeline.

``memory_snapshot(...)`` runs a burst under PyTorch's memory history recorder and saves the
pickle that https://pytorch.org/memory_viz opens, plus the allocated/reserved (CUDA) or process
memory (CPU) at every step, which ``wb.plots.memory_timeline(snap.steps)`` draws. The recorder
exists only for CUDA: on a CPU there is no file (``why_no_file`` says so), and the per-step
timeline is still recorded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import torch

from workbench.core.knobs import KnobError, Knobs
from workbench.core.private import private_output
from workbench.distributed.dispatch import run_burst
from workbench.engine import hardware
from workbench.engine.memory import MIB
from workbench.history.store import default_store_path


@dataclass
class MemorySnapshot:
    """What ``memory_snapshot`` recorded: the burst, the file for pytorch.org/memory_viz (CUDA
    only), and memory at every step of warm-up and window."""

    result: Any
    path: Path | None
    why_no_file: str | None
    steps: list[dict[str, Any]] = field(default_factory=list)
    """Per step: ``step``, ``phase``, ``allocated_mib`` and ``reserved_mib`` (CUDA) or
    ``process_mib`` (CPU: this process's RSS)."""

    def frame(self):
        import pandas as pd  # the engine runs without pandas imported

        return pd.DataFrame(self.steps)

    def summary(self) -> str:
        where = f"snapshot: {self.path} (open it at https://pytorch.org/memory_viz)"
        return f"{self.result.summary()}\n{where if self.path else self.why_no_file}"


def memory_snapshot(
    workload: Any = None,
    knobs: Any = None,
    *,
    path: str | Path | None = None,
    max_entries: int = 100_000,
    stacks: str = "python",
    **burst: Any,
) -> MemorySnapshot:
    """Run one burst while PyTorch records every allocation, and save the snapshot.

    On CUDA, ``torch.cuda.memory._record_memory_history`` records allocations with their stacks
    and ``_dump_snapshot`` writes the pickle that https://pytorch.org/memory_viz opens (drag the
    file onto the page). ``path``: the file (default ``$WORKBENCH_HOME/snapshots/burst-N.pickle``).
    ``stacks``: ``"python"`` (the default) records Python frames only; ``"all"`` adds C++
    frames, which make the dump far slower (torchtitan measured 461 s against 4 s on H100s)
    and rarely tell a training loop's author more.
    On a CPU PyTorch has no such recorder: the burst still runs, ``steps`` holds the process's
    RSS at every step, and ``why_no_file`` says why there is no file. A burst with
    ``alloc_conf`` runs in a fresh process on a GPU, where this process cannot record it: it is
    refused. Other keywords go to ``run_burst``.
    """
    knobs = knobs or Knobs()
    if stacks not in ("python", "all"):
        raise KnobError("stacks", stacks, "'python' (Python frames, the default) or 'all' "
                        "(Python and C++ frames: a much slower dump)")  # fmt: skip
    dev = hardware.resolve_device(burst.pop("device", None))
    cuda = dev.type == "cuda"
    if cuda and (knobs.alloc_conf or knobs.world_size > 1 or knobs.nccl):
        raise KnobError("alloc_conf" if knobs.alloc_conf else "world_size",
                        knobs.alloc_conf or knobs.world_size,
                        "a snapshot records this process; these knobs run the burst in fresh "
                        "processes: snapshot without them")  # fmt: skip
    steps: list[dict[str, Any]] = []
    recorder = _StepRecorder(dev, steps, burst.pop("progress", None))
    if cuda:
        torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks=stacks)
    try:
        result = run_burst(workload, knobs, device=dev, progress=recorder, **burst)
        target, why = None, _NO_RECORDER
        if cuda:
            target = _snapshot_path(path, result)
            with private_output(target) as out:  # 0600: it holds every allocation's stack
                torch.cuda.memory._dump_snapshot(str(out))
            why = None
    finally:
        if cuda:
            torch.cuda.memory._record_memory_history(enabled=None)
    return MemorySnapshot(result, target, why, steps)


_NO_RECORDER = (
    "no snapshot file: PyTorch records allocation history only for CUDA "
    "(torch.cuda.memory._record_memory_history); on a CPU the steps hold the process's RSS"
)


class _StepRecorder:
    """A progress callback that reads memory at every step (host counters: no device sync)."""

    def __init__(self, dev: torch.device, steps: list[dict[str, Any]], chain: Any) -> None:
        self.dev, self.steps, self.chain = dev, steps, chain
        self.proc = psutil.Process()
        self.seen = {"warmup": 0, "measuring": 0}
        self.t0 = time.perf_counter()

    def __call__(self, p: Any) -> None:
        if self.chain is not None:
            self.chain(p)
        if p.phase not in self.seen or p.steps == self.seen[p.phase]:
            return
        self.seen[p.phase] = p.steps
        row: dict[str, Any] = {"step": len(self.steps) + 1, "phase": p.phase,
                               "t_s": round(time.perf_counter() - self.t0, 3)}  # fmt: skip
        if self.dev.type == "cuda":
            row["allocated_mib"] = torch.cuda.memory_allocated(self.dev) / MIB
            row["reserved_mib"] = torch.cuda.memory_reserved(self.dev) / MIB
        else:
            row["process_mib"] = self.proc.memory_info().rss / MIB
        self.steps.append(row)


def _snapshot_path(path: str | Path | None, result: Any) -> Path:
    if path is not None:
        return Path(path).expanduser()
    folder = default_store_path().parent / "snapshots"
    return folder / f"burst-{result.id or int(time.time())}.pickle"
