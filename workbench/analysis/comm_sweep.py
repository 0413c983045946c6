"""A ``comm`` sweep: the all-reduce benchmark once per value of an NCCL variable, and what to
take from it.

Two suggestions come out, each with the numbers that support it:

- **the winner per size range**: for each message size the value whose all-reduce was fastest
  (highest busbw), consecutive sizes with the same winner merged into one range. NCCL's own
  tuner picks an algorithm and protocol per size too; a range where another value wins by a
  clear margin is where forcing it (or, better, fixing what misleads the tuner) pays.
  ``margin_pct`` says by how much the winner beat the next value: a few percent is within the
  noise of a 50 ms loop.
- **bucket_cap_mb just past the knee**: DDP all-reduces gradients bucket by bucket while the
  backward pass goes on, so a bucket is a message. busbw climbs with message size (latency
  dominates small ones) and flattens once the link is full. The first measured size that
  reaches ``KNEE_SHARE`` of the peak busbw is past the knee: larger buckets gain at most the
  rest, and delay the first all-reduce (less overlap with backward). That size, in MiB, is the
  suggestion (not below the knob's smallest allowed value).

On a CPU the ranks talk over gloo and NCCL variables do nothing there: the sweep still runs (it
measures gloo's curve, so the bucket suggestion is real for gloo), and says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.config.comm_suggestions import describe_comm
from workbench.core.errors import InputError
from workbench.core.knobs import SPECS, Knobs
from workbench.core.nccl import ON_GLOO, check_variable
from workbench.distributed.allreduce import CommResult
from workbench.distributed.jobs import comm_bench

__all__ = ["KNEE_SHARE", "CommSweep", "bucket_suggestion", "comm_sweep", "winners_by_size"]

KNEE_SHARE = 0.8
"""A size is past the knee once its busbw reaches this share of the peak."""
_MIB = 2**20


@dataclass(kw_only=True)
class CommSweep:
    """One CommResult per value of ``variable``, and the suggestions drawn from them."""

    variable: str
    results: dict[str, CommResult]
    winners: list[dict[str, Any]] = field(default_factory=list)
    bucket: dict[str, Any] | None = None
    note: str | None = None
    """Why the numbers do not speak for NCCL (gloo ran), or None."""

    def suggestions(self) -> dict[str, Any]:
        """What a saved config keeps (``save_config(..., comm=sweep.suggestions())``)."""
        first = next(iter(self.results.values()))
        return {
            "variable": self.variable,
            "values": list(self.results),
            "backend": first.backend,
            "device": first.device_name or first.device,
            "world_size": first.world_size,
            "nodes": first.nodes,
            "measured_at": first.created_at,
            "note": self.note,
            "winners": self.winners,
            "bucket_cap_mb": self.bucket,
        }

    def table(self) -> str:
        """What a person reads: busbw per size and value, the winners, the bucket size."""
        lines = [f"comm sweep over {self.variable}: {', '.join(self.results)}"]
        if self.note:
            lines.append(f"note: {self.note}")
        failed = {v: r for v, r in self.results.items() if not r.ok}
        lines += [f"{self.variable}={v}: {r.status}: {r.error}" for v, r in failed.items()]
        lines += describe_comm(self.suggestions())
        return "\n".join(lines)


def comm_sweep(
    variable: str,
    values: Sequence[str],
    *,
    knobs: Knobs | None = None,
    world_size: int | None = None,
    sizes: Sequence[int] | None = None,
    **comm_kwargs: Any,
) -> CommSweep:
    """``comm_bench`` once per value of the NCCL ``variable``; the winners per size range and
    the bucket size past the knee. ``comm_kwargs`` go to comm_bench (device, timeout_s, ...)."""
    values = _check(variable, values)
    base = knobs or Knobs()
    results: dict[str, CommResult] = {}
    for value in values:
        run_knobs = base.replace(nccl={**base.nccl, variable: value})
        results[value] = comm_bench(world_size, sizes=list(sizes) if sizes else None,
                                    knobs=run_knobs, **comm_kwargs)  # fmt: skip
    ok = {v: r for v, r in results.items() if r.ok and r.rows and not r.suspect}
    winners = winners_by_size({v: sweep_rows(r.rows) for v, r in ok.items()})
    note = None
    if any(r.backend == "gloo" for r in results.values()):
        note = f"{ON_GLOO}: {variable} had no effect, the values differ by noise only"
    return CommSweep(variable=variable, results=results, winners=winners,
                     bucket=bucket_suggestion(winners), note=note)  # fmt: skip


def _check(variable: Any, values: Sequence[Any]) -> list[str]:
    if not isinstance(variable, str) or not variable.startswith("NCCL_"):
        raise InputError.not_allowed("variable", variable, "an NCCL variable, e.g. NCCL_ALGO")
    clean = [str(v).strip() for v in values]
    if not clean or len(set(clean)) != len(clean):
        raise InputError.not_allowed("values", list(values), f"distinct values of {variable}")
    for value in clean:
        check_variable(variable, value)  # a bad value raises, naming variable and value
    return clean


def sweep_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows a sweep ranks values by: all of them on one node; across nodes (rows with a
    ``scope``) the ``inter`` rows only, the link the network variables act on and the one
    that limits DDP there (the ``intra`` rows stay in each result)."""
    if any("scope" in row for row in rows):
        return [row for row in rows if row.get("scope") == "inter"]
    return rows


def winners_by_size(rows_by_value: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Size ranges with the same fastest value: ``from_bytes``, ``to_bytes``, ``value``,
    ``sizes_bytes`` and ``busbw_gbps`` (the winner's, at each size of the range),
    ``margin_pct`` (the smallest lead over the next value in the range; None with one value)."""
    by_size: dict[int, dict[str, dict[str, Any]]] = {}
    for value, rows in rows_by_value.items():
        for row in rows:
            by_size.setdefault(row["size_bytes"], {})[value] = row
    ranges: list[dict[str, Any]] = []
    for size in sorted(by_size):
        ranked = sorted(by_size[size].items(), key=lambda item: item[1]["time_us"])
        value, best = ranked[0]
        margin = None
        if len(ranked) > 1:
            margin = (ranked[1][1]["time_us"] / best["time_us"] - 1) * 100
        last = ranges[-1] if ranges else None
        if last is not None and last["value"] == value:
            last["to_bytes"] = size
            last["sizes_bytes"].append(size)
            last["busbw_gbps"].append(best["busbw_gbps"])
            if margin is not None:
                last["margin_pct"] = min(last["margin_pct"], margin)
            continue
        ranges.append({"from_bytes": size, "to_bytes": size, "value": value,
                       "sizes_bytes": [size], "busbw_gbps": [best["busbw_gbps"]],
                       "margin_pct": margin})  # fmt: skip
    for r in ranges:
        r["busbw_gbps"] = [round(x, 4) for x in r["busbw_gbps"]]
        r["margin_pct"] = None if r["margin_pct"] is None else round(r["margin_pct"], 1)
    return ranges


def bucket_suggestion(winners: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``bucket_cap_mb`` at the first size whose best busbw reaches KNEE_SHARE of the peak,
    with the measured busbw there and at the peak; None without bandwidths (one rank)."""
    curve = _best_curve(winners)
    if not curve or max(bw for _, bw in curve) <= 0:
        return None
    peak_size, peak = max(curve, key=lambda point: point[1])
    knee_size, knee_bw = next((s, bw) for s, bw in curve if bw >= KNEE_SHARE * peak)
    low = SPECS["bucket_cap_mb"].low
    mib = max(knee_size / _MIB, low)
    return {
        "value": round(mib, 4),
        "at_bytes": knee_size,
        "busbw_gbps": round(knee_bw, 4),
        "peak_busbw_gbps": round(peak, 4),
        "peak_at_bytes": peak_size,
        "share_of_peak_pct": round(knee_bw / peak * 100, 1),
        "clamped_to_min": knee_size / _MIB < low,
    }


def _best_curve(winners: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(size, best busbw) for every measured size, smallest first."""
    return [pt for r in winners for pt in zip(r["sizes_bytes"], r["busbw_gbps"], strict=True)]
