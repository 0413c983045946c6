"""Where a burst's memory goes: the parts of its peak, fragmentation, and a recorded snapshot.

Every burst reports ``memory_breakdown`` (MiB):

- ``params_mib``, ``grads_mib``, ``optimizer_mib``: the bytes of the model's parameters, of
  one gradient per trainable parameter (what a full backward holds before the optimizer step;
  with ``zero_grad(set_to_none=True)`` they are freed between steps, so at a peak in the
  forward pass fewer may be resident) and of the optimizer's state tensors (momentum, Adam's
  two moments and step counters), summed over distinct storages. These are exact on any device.
- ``activations_mib``: what one micro-batch's forward keeps for the backward pass, counted
  with autograd's saved-tensor hooks on the burst's first batch (parameters left out; with
  activation checkpointing, the inputs kept by each recomputed block instead of its insides).
  Measured on the eager model: ``None`` under ``torch.compile``, whose graphs save other
  tensors.
- ``peak_mib`` and, on CUDA, ``rest_mib`` = peak allocated - parameters - gradients -
  optimizer state: activations plus workspace (cuBLAS/cuDNN scratch, temporaries). On a CPU
  the peak is the process tree's PSS, which also holds the interpreter and torch's libraries,
  so ``rest_mib`` is None there.

On CUDA ``fragmentation_pct`` = (peak reserved - peak allocated) / peak reserved: memory the
caching allocator holds but no tensor uses at the peak. Reserved memory only grows inside a
burst (nothing empties the cache), so the peak reserved is what was reserved at the allocated
peak. That share is what ``alloc_conf=expandable_segments:True`` attacks.

``memory_snapshot(...)`` runs a burst under PyTorch's memory history recorder and saves the
pickle that https://pytorch.org/memory_viz opens, plus the allocated/reserved (CUDA) or process
memory (CPU) at every step for :func:`timeline_chart`. The recorder exists only for CUDA: on a
CPU the snapshot is refused with the reason, and the per-step timeline is still recorded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import torch
from torch import nn

MIB = 2**20
_KEPT = threading.local()


def tensor_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (tensors sharing one count once)."""
    seen: dict[tuple[str, int], int] = {}
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            continue
        storage = t.untyped_storage()
        seen[(str(t.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


def static_parts(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """Parameters, gradients (one per trainable parameter) and optimizer state, in MiB."""
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    grads = sum(p.numel() * p.element_size() for p in {id(p): p for p in trainable}.values())
    state = [v for s in optimizer.state.values() for v in s.values()]
    return {
        "params_mib": tensor_bytes(params) / MIB,
        "grads_mib": grads / MIB,
        "optimizer_mib": tensor_bytes(state) / MIB,
    }


class SavedTensorProbe:
    """Counts what autograd keeps for the backward pass while it is active (this thread).

    Parameters are left out (they are memory of their own, not activations). A block under
    activation checkpointing saves nothing through these hooks (checkpoint's own hooks take
    over inside it); the inputs it keeps to recompute from are counted by ``note_kept``.
    """

    def __init__(self, params: Iterable[torch.Tensor] = ()) -> None:
        self._skip = {(str(p.device), p.untyped_storage().data_ptr()) for p in params}
        self._seen: dict[tuple[str, int], int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        """Count, and keep a detached view: returning ``t`` itself would make a saved *output*
        hold its own ``grad_fn`` (tensor -> node -> packed tensor), a cycle through C++ that
        Python's collector cannot see, and each probe's activations would never be freed."""
        self.add(t)
        return t.detach()

    def add(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        key = (str(t.device), t.untyped_storage().data_ptr())
        if key not in self._skip:
            self._seen[key] = t.untyped_storage().nbytes()

    @property
    def mib(self) -> float:
        return sum(self._seen.values()) / MIB

    def __enter__(self) -> SavedTensorProbe:
        _KEPT.probe = self
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
        _KEPT.probe = None


def note_kept(args: Iterable[Any]) -> None:
    """A checkpointed block keeps its inputs to recompute from: count them in an active probe."""
    probe = getattr(_KEPT, "probe", None)
    if probe is not None:
        for a in args:
            probe.add(a)


def breakdown(
    parts: dict[str, float] | None,
    activations_mib: float | None,
    peak_mib: float | None,
    on_cuda: bool,
) -> dict[str, Any] | None:
    """The result's ``memory_breakdown`` from the static parts, the probe and the peak."""
    if parts is None:
        return None
    out: dict[str, Any] = {**{k: round(v, 3) for k, v in parts.items()}}
    out["activations_mib"] = None if activations_mib is None else round(activations_mib, 3)
    out["peak_mib"] = None if peak_mib is None else round(peak_mib, 3)
    rest = None
    if on_cuda and peak_mib is not None:
        rest = max(0.0, peak_mib - sum(parts.values()))
    out["rest_mib"] = None if rest is None else round(rest, 3)
    return out


def fragmentation_pct(peak_allocated_mib: float | None, peak_reserved_mib: float | None):
    """Reserved but unused at the peak, as a share of reserved; None without both figures."""
    if peak_allocated_mib is None or not peak_reserved_mib:
        return None
    return max(0.0, 100.0 * (peak_reserved_mib - peak_allocated_mib) / peak_reserved_mib)


def activation_mib(state: Any, batch: Any) -> float | None:
    """What one micro-batch's forward keeps for backward (MiB), on the burst's own batch: a
    training-mode forward and loss under :class:`SavedTensorProbe`, its graph then dropped (no
    backward, no optimizer step). None when it cannot be counted."""
    from workbench.batches import split_batch

    model = state.plain or state.model
    inputs, target = split_batch(batch)
    try:
        with SavedTensorProbe(model.parameters()) as probe, state.autocast():
            loss = state.loss_fn(state.forward(model, inputs), target)
        del loss
    except Exception as exc:
        from workbench.failures import is_oom_error

        if is_oom_error(exc):
            raise
        return None
    return probe.mib


# --------------------------------------------------------------------------- snapshot


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
        import pandas as pd

        return pd.DataFrame(self.steps)

    def chart(self):
        return timeline_chart(self.steps, device_mem_mib=self.result.device_mem_mib)

    def summary(self) -> str:
        where = f"snapshot: {self.path} (open it at https://pytorch.org/memory_viz)"
        return f"{self.result.summary()}\n{where if self.path else self.why_no_file}"


def memory_snapshot(
    workload: Any = None,
    knobs: Any = None,
    *,
    path: str | Path | None = None,
    max_entries: int = 100_000,
    **burst: Any,
) -> MemorySnapshot:
    """Run one burst while PyTorch records every allocation, and save the snapshot.

    On CUDA, ``torch.cuda.memory._record_memory_history`` records allocations with their stacks
    and ``_dump_snapshot`` writes the pickle that https://pytorch.org/memory_viz opens (drag the
    file onto the page). ``path``: the file (default ``$WORKBENCH_HOME/snapshots/burst-N.pickle``).
    On a CPU PyTorch has no such recorder: the burst still runs, ``steps`` holds the process's
    RSS at every step, and ``why_no_file`` says why there is no file. A burst with
    ``alloc_conf`` runs in a fresh process on a GPU, where this process cannot record it: it is
    refused. Other keywords go to ``run_burst``.
    """
    from workbench import hardware
    from workbench.burst import run_burst
    from workbench.knobs import KnobError, Knobs

    knobs = knobs or Knobs()
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
        torch.cuda.memory._record_memory_history(max_entries=max_entries)
    try:
        result = run_burst(workload, knobs, device=dev, progress=recorder, **burst)
        target, why = None, _NO_RECORDER
        if cuda:
            target = _snapshot_path(path, result)
            torch.cuda.memory._dump_snapshot(str(target))
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
        target = Path(path).expanduser()
    else:
        from workbench.store import default_store_path

        folder = default_store_path().parent / "snapshots"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"burst-{result.id or int(time.time())}.pickle"
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def timeline_chart(steps: list[dict[str, Any]], device_mem_mib: float | None = None):
    """Allocated and reserved (CUDA) or process RSS (CPU) at every step, as an Altair chart;
    the y axis fits the data (the device's capacity is said in the title, not drawn)."""
    import altair as alt
    import pandas as pd

    frame = pd.DataFrame(steps)
    series = [c for c in ("allocated_mib", "reserved_mib", "process_mib") if c in frame]
    if frame.empty or not series:
        return (
            alt.Chart(pd.DataFrame({"text": ["no steps recorded yet: run a burst"]}))
            .mark_text(size=14)
            .encode(text="text:N")
        )
    long = frame.melt(id_vars=["step", "phase"], value_vars=series, var_name="what",
                      value_name="MiB")  # fmt: skip
    title = "memory at every step"
    if device_mem_mib:
        title += f" (capacity {device_mem_mib:,.0f} MiB)"
    return (
        alt.Chart(long, title=title)
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", title="step (warm-up, then the measured window)"),
            y=alt.Y("MiB:Q", scale=alt.Scale(zero=False), title="MiB"),
            color=alt.Color("what:N", title=None),
            tooltip=["step", "phase", "what", alt.Tooltip("MiB:Q", format=",.1f")],
        )
        .properties(width=420, height=220)
    )
