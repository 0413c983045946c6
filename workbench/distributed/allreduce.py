"""All-reduce benchmark: how fast the ranks of this machine can sum a tensor, by message size.

Timing follows nccl-tests (``all_reduce_perf``): per size, warm-up calls, then a timed loop of
back-to-back in-place all-reduces between two device synchronizations; time per call is the
loop's time over its count, averaged over the ranks. From it:

- ``algbw`` = bytes / time: what the caller sees;
- ``busbw`` = algbw x 2(n-1)/n: what each rank's link carries in a ring all-reduce (of S
  bytes, each rank sends (n-1)/n x S in the reduce-scatter and as much again in the all-gather:
  2(n-1)/n x S), comparable with a link's rated bandwidth and across rank counts. With one
  rank nothing crosses a link, so busbw is 0, as nccl-tests prints it.

Each size is also checked once for a correct sum (each rank contributes rank + 1); a size whose
sum came out wrong is named in ``CommResult.suspect``: its bandwidth is that of a transport that
corrupts data, not a number to tune by. This module runs in the torchrun ranks (``run_rank``);
``CommResult`` is what the caller gets back.

For the test suite only: ``WORKBENCH_COMM_FAULT_RANK=N`` in the job's environment makes rank N
contribute one more than it should, so the wrong-sum path runs in a real job.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from workbench.core.errors import InputError
from workbench.distributed.jsoncomm import all_gather_json, gather_json

GB = 1e9  # nccl-tests' GB/s are 10^9 bytes per second
GPU_SIZES = tuple(8 * 1024 * 2**i for i in range(16))  # 8 KiB .. 256 MiB
CPU_SIZES = tuple(8 * 1024 * 4**i for i in range(6))  # 8 KiB .. 8 MiB: gloo on a CPU is slow
_WARMUP_CALLS = 3
_TARGET_LOOP_S = 0.05
_MAX_CALLS = 1000
FAULT_RANK_ENV = "WORKBENCH_COMM_FAULT_RANK"


_UNITS = {"": 1, "B": 1, "K": 2**10, "KIB": 2**10, "M": 2**20, "MIB": 2**20, "G": 2**30,
          "GIB": 2**30}  # fmt: skip


def parse_sizes(text: str) -> list[int]:
    """``"8K,1M,256M"`` -> bytes (K, M, G are powers of 1024, as nccl-tests reads them)."""
    sizes = []
    for item in text.split(","):
        raw = item.strip().upper()
        digits = raw.rstrip("KMGIB")
        try:
            sizes.append(int(float(digits) * _UNITS[raw[len(digits) :]]))
        except (ValueError, KeyError):
            raise InputError.not_allowed(
                "sizes", item.strip(), "sizes like 8K, 1M, 256M or bytes"
            ) from None
    return sizes


def bus_factor(world_size: int) -> float:
    """Bytes on each link per byte reduced, for a ring all-reduce."""
    return 2 * (world_size - 1) / world_size


def run_rank(
    sizes_bytes: list[int], dev: torch.device, control, by_node: bool = False
) -> dict[str, Any]:
    """Benchmark every size on this rank; rank 0 returns the rows (others an empty dict).

    ``by_node`` (a multi-node job): no row for all ranks together, but one per size and
    *scope*: ``intra`` (the ranks of each node among themselves, every node at once) and
    ``inter`` (one rank per node: each node's first), so the link that limits shows.
    """
    world = dist.get_world_size()
    scopes = node_scopes(control) if by_node else [("", None, world, True)]
    rows = []
    for size in sizes_bytes:
        count = max(1, size // 4)
        for scope, group, size_n, member in scopes:
            row = _measure(count, dev, control, group, size_n, member)
            if row is not None:
                rows.append({**row, "scope": scope, "ranks": size_n} if scope else row)
    return {"rows": rows, "world_size": world} if dist.get_rank() == 0 else {}


def node_scopes(control) -> list[tuple[str, Any, int, bool]]:
    """(scope, this rank's group, ranks per group, whether this rank is in one) for ``intra``
    (a group per node; left out when each node has one rank: no link within it) and
    ``inter`` (the first rank of each node). Every rank creates every group, in one order,
    as ``new_group`` requires."""
    here = (int(os.environ.get("GROUP_RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")))
    where = all_gather_json(here, group=control)
    me = dist.get_rank()
    by_node: dict[int, list[int]] = {}
    for rank, (node, _) in enumerate(where):
        by_node.setdefault(node, []).append(rank)
    scopes = []
    groups = {node: dist.new_group(ranks) for node, ranks in sorted(by_node.items())}
    per_node = min(len(ranks) for ranks in by_node.values())
    if per_node > 1:
        scopes.append(("intra", groups[where[me][0]], per_node, True))
    firsts = [ranks[0] for _, ranks in sorted(by_node.items())]
    inter = dist.new_group(firsts)
    scopes.append(("inter", inter if me in firsts else None, len(firsts), me in firsts))
    return scopes


def _measure(count: int, dev: torch.device, control, group, size_n: int, member: bool):
    """One size on one scope: the members sum and time, everyone agrees and gathers; the
    row on rank 0 (None elsewhere)."""
    correct = _check_sum(count, dev, group, size_n) if member else True
    calls = _agree_calls(count, dev, control, group if member else False)
    per_call_s = _timed_loop(count, dev, calls, control, group if member else False)
    times = gather_json((per_call_s, correct), dst=0, group=control)
    if times is None:
        return None
    timed = [t for t, _ in times if t is not None]
    ok = all(c for _, c in times)
    return _row(count * 4, sum(timed) / len(timed), calls, size_n, ok)


def _check_sum(count: int, dev: torch.device, group, world: int) -> bool:
    """Every element must come back as 1 + 2 + ... + world: small integers, exact in float32."""
    me = dist.get_rank(group) if group is not None else dist.get_rank()
    buf = torch.full((count,), _contribution(me), dtype=torch.float32, device=dev)
    dist.all_reduce(buf, group=group)
    expected = world * (world + 1) / 2
    return bool(torch.all(buf == expected).item())


def _contribution(rank: int) -> float:
    """rank + 1; one more on the rank that the test suite's fault variable names."""
    fault = os.environ.get(FAULT_RANK_ENV, "")
    return float(rank + 1 + (1 if fault.strip() == str(rank) else 0))


def _agree_calls(count: int, dev: torch.device, control, group=None) -> int:
    """Enough calls for a loop of about 50 ms, the same number on every rank (the slowest
    rank's warm-up decides, or the ranks would wait for each other's extra calls).
    ``group``: the ranks that all-reduce (None: all); False: this rank only agrees."""
    per_call = torch.zeros(1, dtype=torch.float64)
    if group is not False:
        buf = torch.zeros(count, dtype=torch.float32, device=dev)
        _sync(dev)
        t0 = time.perf_counter()
        for _ in range(_WARMUP_CALLS):
            dist.all_reduce(buf, group=group)
        _sync(dev)
        per_call[0] = (time.perf_counter() - t0) / _WARMUP_CALLS
    dist.all_reduce(per_call, op=dist.ReduceOp.MAX, group=control)
    return int(min(_MAX_CALLS, max(5, math.ceil(_TARGET_LOOP_S / max(per_call.item(), 1e-7)))))


def _timed_loop(count: int, dev: torch.device, calls: int, control, group=None) -> float | None:
    """Seconds per call; None on a rank outside the scope's groups (``group=False``)."""
    dist.barrier(group=control)
    if group is False:
        return None
    buf = torch.zeros(count, dtype=torch.float32, device=dev)  # zeros: sums never overflow
    _sync(dev)
    t0 = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(buf, group=group)
    _sync(dev)
    return (time.perf_counter() - t0) / calls


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _row(size_bytes: int, time_s: float, calls: int, world: int, correct: bool) -> dict:
    algbw = size_bytes / time_s / GB
    return {
        "size_bytes": size_bytes,
        "count": size_bytes // 4,
        "dtype": "float32",
        "calls": calls,
        "time_us": time_s * 1e6,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * bus_factor(world),
        "correct": correct,
    }


@dataclass(kw_only=True)
class CommResult:
    """An all-reduce benchmark: one row per message size, and how it ran."""

    status: str = "ok"
    error: str | None = None
    world_size: int = 1
    nodes: int = 1
    """Above 1, each size has an ``intra`` row (ranks of a node) and an ``inter`` row (one
    rank per node); ``scope`` and ``ranks`` (ranks per group) say which."""
    backend: str | None = None
    device: str = ""
    device_name: str | None = None
    nccl: dict[str, str] = field(default_factory=dict)
    nccl_flags: dict[str, str] = field(default_factory=dict)
    nccl_env: dict[str, str] = field(default_factory=dict)
    """Every NCCL_* variable the ranks ran with: the knobs (``nccl``) and any already in the
    launching process's environment (NVIDIA's containers set some), which act just the same."""
    no_effect: dict[str, str] = field(default_factory=dict)
    suspect: list[str] = field(default_factory=list)
    """Self-checks that failed (a wrong sum): numbers not to trust. Empty when all passed."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float | None = None
    created_at: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def peak_busbw_gbps(self) -> float | None:
        values = [r["busbw_gbps"] for r in self.rows]
        return max(values) if values and self.world_size > 1 else None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def frame(self):
        """One row per message size (pandas DataFrame), ready for ``plots.comm``."""
        import pandas as pd  # pandas (~0.2 s): only for the table

        columns = ["size_bytes", "count", "dtype", "calls", "time_us", "algbw_gbps",
                   "busbw_gbps", "correct"]  # fmt: skip
        if self.nodes > 1:
            columns += ["scope", "ranks"]
        df = pd.DataFrame(self.rows, columns=columns)
        df["world_size"], df["backend"] = self.world_size, self.backend
        return df

    def table(self) -> str:
        """The nccl-tests style table a person reads in a terminal."""
        if not self.ok:
            return f"comm {self.status}: {self.error}"
        head = (f"all-reduce, {self.world_size} rank(s), {self.backend} on {self.device}"
                f"{' (' + self.device_name + ')' if self.device_name else ''}")  # fmt: skip
        scoped = any("scope" in r for r in self.rows)
        if scoped:
            head += f", {self.nodes} nodes (intra: ranks of one node; inter: one rank per node)"
        scope_head = f"{'scope':>6} {'ranks':>5} " if scoped else ""
        lines = [head, f"{'size':>10} {scope_head}{'time us':>10} {'algbw GB/s':>11} "
                       f"{'busbw GB/s':>11}  ok"]  # fmt: skip
        for r in self.rows:
            scope = f"{r.get('scope', ''):>6} {r.get('ranks', ''):>5} " if scoped else ""
            lines.append(
                f"{_size(r['size_bytes']):>10} {scope}{r['time_us']:>10.1f} "
                f"{r['algbw_gbps']:>11.3f} {r['busbw_gbps']:>11.3f}  "
                f"{'yes' if r['correct'] else 'NO'}"
            )
        if self.world_size == 1:
            lines.append("one rank: nothing crosses a link: busbw is 0, and algbw only times "
                         "the call itself (NCCL moves no data), as nccl-tests shows; a link "
                         "needs 2 or more ranks")  # fmt: skip
        lines += [f"SUSPECT: {note}" for note in self.suspect]
        return "\n".join(lines)


def wrong_sums(rows: list[dict[str, Any]]) -> list[str]:
    """The ``suspect`` entry for rows whose all-reduce gave a wrong sum (none: empty)."""
    bad = [_size(r["size_bytes"]) for r in rows if not r["correct"]]
    if not bad:
        return []
    return [f"all-reduce gave a wrong sum at {', '.join(bad)}: data is corrupted between the "
            "ranks (a link, driver or NCCL setting); these bandwidths measure a broken "
            "transport"]  # fmt: skip


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"
