"""Out of memory, explained: what was tried, what fitted, where the memory went, what frees it.

An OOM burst gets ``oom_report``:

- ``tried``: the workload, device, batch size and the knobs that differ from the defaults;
- ``largest_fitting_batch``: the largest ``batch_size`` that ran ok in the history with the
  same other knobs (same workload and device), with its peak; None when none did;
- ``breakdown``: the memory breakdown at the failure (``workbench.memory``): what the
  parameters, gradients and optimizer state hold, and what one micro-batch's forward saves;
  with ``sharding=fsdp`` on several ranks these are one rank's shards, and ``sharded_over``
  says over how many ranks (1 where nothing is sharded);
- ``frees``: the knobs that would free memory here, ranked by what they *saved in measured
  bursts* of this workload on this device: pairs of ok bursts whose knobs differ only in that
  change (for ``grad_accum``: a smaller batch times more micro-batches, the same effective
  batch). The saving is the median over the pairs, of the peak (reserved memory on CUDA, what
  an allocation has to fit in). Changes never measured here follow, unranked, with what they
  are expected to do and the sweep that would measure them. Advice is only ever about knobs.
  ``sharding=fsdp`` is offered to a job of several ranks that runs DDP, and
  ``reshard_after_forward=True`` to one that shards and keeps its gathered parameters.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

from workbench.core.knobs import FP32_PRECISIONS
from workbench.engine.sharding import shards
from workbench.history.store import open_store

# (knob, the change in words, is this row's knobs the "before", is it the "after")
_Change = tuple[str, str, Callable[[Mapping[str, Any]], bool], Callable[[Mapping[str, Any]], bool]]
_CHANGES: tuple[_Change, ...] = (
    ("activation_checkpointing", "activation_checkpointing=True",
     lambda k: not k.get("activation_checkpointing"),
     lambda k: bool(k.get("activation_checkpointing"))),
    ("precision", "precision=bf16",
     lambda k: k.get("precision", "default") in FP32_PRECISIONS,
     lambda k: k.get("precision") == "bf16"),
    ("alloc_conf", "alloc_conf=expandable_segments:True",
     lambda k: not k.get("alloc_conf"),
     lambda k: "expandable_segments:True" in (k.get("alloc_conf") or "")),
    ("optimizer_impl", "optimizer_impl=fused",
     lambda k: k.get("optimizer_impl", "foreach") != "fused",
     lambda k: k.get("optimizer_impl") == "fused"),
    ("sharding", "sharding=fsdp",
     lambda k: k.get("sharding", "ddp") == "ddp" and k.get("world_size", 1) > 1,
     lambda k: k.get("sharding") == "fsdp"),
    ("reshard_after_forward", "reshard_after_forward=True",
     lambda k: k.get("sharding") == "fsdp" and k.get("reshard_after_forward") is False,
     lambda k: k.get("reshard_after_forward", True) is True),
)  # fmt: skip
_EXPECTED = {
    "grad_accum": "a half batch over twice the micro-batches trains the same effective batch "
    "with about half the activation memory",
    "activation_checkpointing": "keeps only each block's input: activation memory falls to "
    "about one block's worth plus the block inputs, for about a third more compute",
    "precision": "bf16 autocast halves most activations; parameters, gradients and optimizer "
    "state stay fp32",
    "alloc_conf": "expandable_segments:True cuts fragmentation on CUDA, the part of the "
    "reserved-but-unused share (fragmentation_pct) that cannot serve the next request",
    "optimizer_impl": "fused updates in one kernel, without foreach's temporary copies",
    "sharding": "FSDP2 keeps 1/world_size of the parameters, gradients and optimizer state on "
    "each rank (with fp32 AdamW, 12 of the 16 bytes a parameter costs at rest are gradient and "
    "state), plus the one block it gathers while that block runs; activations do not shrink",
    "reshard_after_forward": "frees each block's gathered parameters after its forward and "
    "gathers them again for its backward: the unsharded blocks no longer wait in memory "
    "between forward and backward, for one more all-gather a block",
}
_IGNORED = {"nccl"}


def explain(result: Any, history: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``oom_report`` of an OOM ``result`` from ``history`` (stored burst dicts)."""
    knobs = result.knobs.to_dict()
    here = [r for r in history if r.get("workload") == result.workload
            and r.get("device") == result.device and r.get("status") == "ok"]  # fmt: skip
    report = {
        "tried": {"workload": result.workload, "device": result.device,
                  "batch_size": knobs["batch_size"], "knobs": result.knobs.changes()},
        "largest_fitting_batch": largest_fitting(knobs, here),
        "breakdown": result.memory_breakdown,
        "sharded_over": result.knobs.world_size if shards(result.knobs) else 1,
        "frees": measured_savings(knobs, here, str(result.device).startswith("cuda")),
    }  # fmt: skip
    report["summary"] = _summary(report)
    return report


def largest_fitting(knobs: Mapping[str, Any], rows: list[Mapping[str, Any]]):
    """The largest ok batch with every other knob equal, or None."""
    fits = [r for r in rows if _same_but(r["knobs"], knobs, {"batch_size"})]
    if not fits:
        return None
    best = max(fits, key=lambda r: r["knobs"]["batch_size"])
    return {"batch_size": best["knobs"]["batch_size"], "peak_mem_mib": _peak(best),
            "burst_id": best.get("id")}  # fmt: skip


def measured_savings(
    knobs: Mapping[str, Any], rows: list[Mapping[str, Any]], cuda: bool = True
) -> list[dict]:
    """Each change that applies to ``knobs``, measured ones first by MiB saved."""
    measured, untried = [], []
    for name, words, is_before, is_after in _CHANGES:
        if not is_before(knobs) or (name == "alloc_conf" and not cuda):
            continue  # already on: it cannot free more; or the CUDA allocator is not in play
        pairs = _pairs(rows, {name}, lambda a, b, f=is_before, g=is_after: f(a) and g(b))
        _place(name, words, pairs, measured, untried)
    pairs = _pairs(rows, {"batch_size", "grad_accum"}, _accumulates)
    _place("grad_accum", "batch_size/2 with grad_accum x2", pairs, measured, untried)
    measured.sort(key=lambda f: -f["saved_mib"])
    return measured + untried


def _place(name: str, words: str, pairs: list[tuple[float, float]], measured, untried) -> None:
    if not pairs:
        untried.append({"knob": name, "change": words, "measured": False,
                        "expected": _EXPECTED[name], "measure_with": _how(name)})  # fmt: skip
        return
    saved = [before - after for before, after in pairs]
    pct = [100.0 * (before - after) / before for before, after in pairs if before]
    median_saved = statistics.median(saved)
    if median_saved <= 0:
        untried.append({"knob": name, "change": words, "measured": True, "pairs": len(pairs),
                        "saved_mib": median_saved,
                        "expected": "measured here, it freed nothing"})  # fmt: skip
        return
    measured.append({"knob": name, "change": words, "measured": True, "pairs": len(pairs),
                     "saved_mib": round(median_saved, 1),
                     "saved_pct": round(statistics.median(pct), 1) if pct else None})  # fmt: skip


def _how(name: str) -> str:
    if name == "grad_accum":
        return "wb.run_burst(wl, k.replace(batch_size=k.batch_size // 2, grad_accum=2))"
    values = {"activation_checkpointing": "[False, True]", "precision": '["default", "bf16"]',
              "alloc_conf": '["", "expandable_segments:True"]',
              "optimizer_impl": '["foreach", "fused"]', "sharding": '["ddp", "fsdp"]',
              "reshard_after_forward": "[False, True]"}[name]  # fmt: skip
    return f'wb.sweep(wl, "{name}", {values}, base=k.replace(batch_size=<one that fits>))'


def _accumulates(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """b trains a's effective batch in more, smaller micro-batches."""
    same_batch = a["batch_size"] * a["grad_accum"] == b["batch_size"] * b["grad_accum"]
    return same_batch and b["grad_accum"] > a["grad_accum"]


def _pairs(rows, differing: set[str], ordered) -> list[tuple[float, float]]:
    out = []
    for a in rows:
        for b in rows:
            if a is b or not ordered(a["knobs"], b["knobs"]):
                continue
            if _same_but(a["knobs"], b["knobs"], differing):
                pa, pb = _peak(a), _peak(b)
                if pa is not None and pb is not None:
                    out.append((pa, pb))
    return out


def _same_but(a: Mapping[str, Any], b: Mapping[str, Any], differing: set[str]) -> bool:
    keys = (set(a) | set(b)) - differing - _IGNORED
    return all(a.get(k) == b.get(k) for k in keys)


def _peak(row: Mapping[str, Any]) -> float | None:
    """Reserved memory on CUDA (an allocation must fit in what is reserved or free), else the
    peak the burst reports."""
    return row.get("peak_reserved_mib") or row.get("peak_mem_mib")


def _summary(report: Mapping[str, Any]) -> str:
    tried = report["tried"]
    others = {k: v for k, v in tried["knobs"].items() if k != "batch_size"}
    lines = [
        f"out of memory at batch_size={tried['batch_size']} (other knobs: {others or 'defaults'})"
    ]
    fit = report["largest_fitting_batch"]
    if fit:
        lines.append(f"largest batch that fitted with these knobs: {fit['batch_size']} "
                     f"(peak {fit['peak_mem_mib']:,.0f} MiB)")  # fmt: skip
    else:
        lines.append("no batch with these knobs has fitted yet in the history")
    parts = report["breakdown"] or {}
    if parts:
        shown = [f"{k[:-4]} {_mib(v)}" for k, v in parts.items() if v is not None]
        over = report.get("sharded_over", 1)
        where = f" on one rank of {over}, its shards (sharding=fsdp)" if over > 1 else ""
        lines.append(f"memory{where} (MiB): " + ", ".join(shown))
    for f in report["frees"]:
        if f.get("measured") and f.get("saved_mib", 0) > 0:
            lines.append(f"  {f['change']}: saved {f['saved_mib']:,.0f} MiB "
                         f"({f['saved_pct']}%) in {f['pairs']} measured pair(s)")  # fmt: skip
        else:
            lines.append(f"  {f['change']}: not measured here; {f['expected']}")
    return "\n".join(lines)


def _mib(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.2g}"


def explain_from_store(result: Any, store: object, limit: int = 2000) -> dict[str, Any]:
    """``explain`` against the newest ``limit`` bursts of this workload in the history."""
    try:
        history = open_store(store).records(workload=result.workload, limit=limit)
    except Exception:  # an unreadable history explains less; the OOM result stands
        history = []
    return explain(result, history)
