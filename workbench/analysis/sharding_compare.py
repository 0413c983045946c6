"""``compare_sharding``: DDP against FSDP2 on the same job, memory per rank beside speed.

Three bursts of one workload with the same knobs but for the sharding ones
(:data:`SHARDING_CASES`): ``ddp`` (a whole replica on every rank), ``fsdp`` (each rank its
shards; every block frees its gathered parameters after its forward, PyTorch's default) and
``fsdp-kept`` (``reshard_after_forward=False``: the gathered blocks wait for their backward).
Each row has the throughput, the peak and what the fullest rank holds at rest
(``param_mib_per_rank``, ``grad_mib_per_rank``, ``optimizer_state_mib_per_rank``), and the
share of that held memory each case saves against ``ddp``. What to expect: on N ranks the
held memory falls to about 1/N with fsdp; the peak falls by less (activations are not
sharded, and a gathered block comes on top); throughput pays for the all-gathers, most where
the links are slow or the model small (on gloo between CPU processes it can fall several-fold).

FSDP shards over the ranks of a job, so a comparison needs two ranks at least: with fewer
(one GPU) nothing runs and ``skipped`` says why. The GPU session calls this with the GPUs it
has; the lesson on a transformer reads its ``frame()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from workbench.core.errors import InputError
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.distributed.dispatch import run_burst
from workbench.engine import hardware
from workbench.engine.workloads import WorkloadArg

__all__ = ["SHARDING_CASES", "ShardingComparison", "compare_sharding", "held_mib"]

SHARDING_CASES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("ddp", {"sharding": "ddp", "reshard_after_forward": True}),
    ("fsdp", {"sharding": "fsdp", "reshard_after_forward": True}),
    ("fsdp-kept", {"sharding": "fsdp", "reshard_after_forward": False}),
)
"""The cases, by name, and the knobs each sets on top of the base."""
_HELD = ("param_mib_per_rank", "grad_mib_per_rank", "optimizer_state_mib_per_rank")
_SHOWN = ("status", "samples_per_s", "tokens_per_s", "step_ms_p50", "mfu_pct", "peak_mem_mib",
          "peak_reserved_mib", *_HELD)  # fmt: skip


def held_mib(r: BurstResult) -> float | None:
    """What the fullest rank holds at rest: parameters, gradients and optimizer state, MiB."""
    parts = [getattr(r, name) for name in _HELD]
    return None if None in parts else sum(parts)


@dataclass
class ShardingComparison:
    """The bursts of :func:`compare_sharding`, one per case, and their rows."""

    workload: str
    world_size: int
    results: dict[str, BurstResult] = field(default_factory=dict)
    skipped: str | None = None
    """Why nothing ran (fewer than two ranks here), or None."""

    def rows(self) -> list[dict[str, Any]]:
        """One dict per case: its name, the figures of :data:`_SHOWN`, ``held_mib_per_rank``
        and ``held_saved_pct`` (against ddp's), ``no_effect`` and ``error``."""
        whole = held_mib(self.results["ddp"]) if "ddp" in self.results else None
        out = []
        for case, r in self.results.items():
            row: dict[str, Any] = {"case": case, **{name: getattr(r, name) for name in _SHOWN}}
            row["held_mib_per_rank"] = held = held_mib(r)
            saved = None if held is None or not whole else 100.0 * (whole - held) / whole
            row["held_saved_pct"] = saved
            row["no_effect"], row["error"] = dict(r.no_effect), r.error
            out.append(row)
        return out

    def frame(self) -> Any:
        """:meth:`rows` as a DataFrame."""
        import pandas as pd  # the engine runs without pandas imported

        return pd.DataFrame(self.rows())

    def table(self) -> str:
        """What a person reads: one line per case, or why nothing ran."""
        head = f"{self.workload} on {self.world_size} ranks"
        if self.skipped:
            return f"{head}: not measured: {self.skipped}"
        lines = [head]
        for row in self.rows():
            if row["status"] != "ok":
                lines.append(f"  {row['case']:<10} {row['status']}: {row['error']}")
                continue
            saved = row["held_saved_pct"]
            lines.append(
                f"  {row['case']:<10} {_num(row['samples_per_s'])} samples/s, peak "
                f"{_num(row['peak_mem_mib'])} MiB, held per rank "
                f"{_num(row['held_mib_per_rank'])} MiB"
                + ("" if saved is None or row["case"] == "ddp" else f" ({saved:.0f}% less)")
            )
        return "\n".join(lines)


def compare_sharding(
    workload: WorkloadArg = "gpt",
    base: Knobs | None = None,
    *,
    world_size: int | None = None,
    device: str | torch.device | None = None,
    cases: Sequence[str] | None = None,
    run: Callable[..., BurstResult] = run_burst,
    **burst: Any,
) -> ShardingComparison:
    """One burst per case of :data:`SHARDING_CASES` (``cases``: their names, default all),
    each ``base`` with that case's knobs, on ``world_size`` ranks (default: every GPU on
    CUDA, two ranks on a CPU). ``burst``: ``run_burst``'s other options (``seconds``,
    ``data_dir``, ``record``, ``store``, ...); ``run`` stands in for it in tests. With fewer
    than two ranks nothing runs and ``skipped`` says why."""
    dev = hardware.resolve_device(device)
    ranks = world_size if world_size is not None else _default_ranks(dev)
    base = (base or Knobs()).replace(world_size=max(1, ranks), nodes=1)
    name = workload if isinstance(workload, str) else getattr(workload, "name", str(workload))
    out = ShardingComparison(workload=name, world_size=ranks)
    if ranks < 2:
        where = "one GPU" if dev.type == "cuda" else "one rank"
        out.skipped = f"fsdp shards over the ranks of a job: {where} here, nothing to shard across"
        return out
    chosen = dict(SHARDING_CASES)
    for case in cases or list(chosen):
        if case not in chosen:
            raise InputError.not_allowed("cases", case, "names from " + ", ".join(chosen))
        out.results[case] = run(workload, base.replace(**chosen[case]), device=dev, **burst)
    return out


def _default_ranks(dev: torch.device) -> int:
    return torch.cuda.device_count() if dev.type == "cuda" else 2


def _num(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
