"""torch.compile's process-wide state around a burst: a clean compiler for every compile burst,
and what Dynamo really did in it.

Why a reset: Dynamo caches compiled code on the model's code objects, for the whole process.
Without one, a second compile burst reuses the first one's code (``compile_s`` near 0), a new
batch size marks dimensions dynamic (a different program than a fresh run compiles), and past
``torch._dynamo.config.recompile_limit`` Dynamo quietly runs the frame eagerly: the "compile"
row would then measure eager. So every compile burst starts and ends with
``torch._dynamo.reset()`` (the end also frees compiled graphs and CUDA-graph pools), and
Dynamo's own counters, read before and after, say whether it compiled, how often the graph
broke, whether it gave up, and whether it recompiled inside the measured window.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DynamoCounts:
    """Dynamo's process-wide counters at one moment (they only grow; a reset keeps them)."""

    graphs: int
    graph_breaks: int
    limit_hits: int


@dataclass(frozen=True, slots=True)
class CompileReport:
    """What torch.compile did in one burst."""

    graphs: int
    """Graphs compiled over the warm-up and the window."""
    graph_breaks: int
    window_graphs: int
    """Graphs compiled inside the measured window: compile time counted as training time."""
    fallback: str | None
    """Why the model ran eagerly after all, or None when it ran compiled."""


def read_counts() -> DynamoCounts:
    from torch._dynamo.utils import counters

    unimplemented = counters.get("unimplemented", {})
    limit_hits = sum(n for reason, n in unimplemented.items() if _is_limit(reason))
    return DynamoCounts(
        graphs=int(counters.get("stats", {}).get("unique_graphs", 0)),
        graph_breaks=int(sum(counters.get("graph_break", {}).values())),
        limit_hits=int(limit_hits),
    )


def _is_limit(reason: str) -> bool:
    text = reason.lower()
    return any(k in text for k in ("recompile limit", "recompile_limit", "cache_size_limit"))


@contextlib.contextmanager
def clean_compiler(enabled: bool) -> Iterator[None]:
    """Reset Dynamo before and after a compile burst; nothing at all when compile is off (the
    import of torch._dynamo alone costs seconds)."""
    if not enabled:
        yield
        return
    import torch._dynamo

    torch._dynamo.reset()
    try:
        yield
    finally:
        torch._dynamo.reset()


def report(start: DynamoCounts, warm: DynamoCounts, end: DynamoCounts) -> CompileReport:
    """Compare the counters read before the warm-up, after it, and after the window."""
    graphs = end.graphs - start.graphs
    fallback = None
    if end.limit_hits > start.limit_hits:
        fallback = "it hit torch._dynamo's recompile limit and ran the rest eagerly"
    elif graphs == 0:
        fallback = "Dynamo captured no graph, so the model ran eagerly"
    return CompileReport(
        graphs=graphs,
        graph_breaks=end.graph_breaks - start.graph_breaks,
        window_graphs=end.graphs - warm.graphs,
        fallback=fallback,
    )
