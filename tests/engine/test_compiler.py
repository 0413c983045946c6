"""What torch.compile did in a burst, read from Dynamo's own counters."""

from __future__ import annotations

import torch

from workbench.engine.compiler import DynamoCounts, clean_compiler, read_counts, report


def test_report_counts_graphs_breaks_and_window_recompiles():
    start, warm, end = DynamoCounts(3, 1, 0), DynamoCounts(5, 2, 0), DynamoCounts(6, 2, 0)
    r = report(start, warm, end)
    assert (r.graphs, r.graph_breaks, r.window_graphs, r.fallback) == (3, 1, 1, None)


def test_no_graph_or_the_recompile_limit_means_it_ran_eagerly():
    assert "no graph" in report(DynamoCounts(4, 0, 0), DynamoCounts(4, 0, 0),
                                DynamoCounts(4, 0, 0)).fallback  # fmt: skip
    assert "recompile limit" in report(DynamoCounts(0, 0, 0), DynamoCounts(8, 0, 0),
                                       DynamoCounts(8, 0, 1)).fallback  # fmt: skip


def test_real_counters_see_a_compile_and_the_recompile_limit():
    # backend="eager": Dynamo's capture without Inductor's code generation (fast on a CPU)
    with clean_compiler(True), torch._dynamo.config.patch(recompile_limit=2):
        before = read_counts()
        f = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
        for n in (1, 2, 3, 4):  # a new static shape each time: the third goes past the limit
            f(torch.ones(n))
        after = read_counts()
    assert after.graphs - before.graphs == 2
    assert after.limit_hits > before.limit_hits


def test_a_clean_compiler_forgets_compiled_code():
    calls = []

    def backend(gm, example_inputs):
        calls.append(1)
        return gm

    def f(x):
        return x + 1

    compiled = torch.compile(f, backend=backend)
    with clean_compiler(True):
        compiled(torch.ones(2))
    with clean_compiler(True):
        compiled(torch.ones(2))  # cached code would skip the backend here
    assert len(calls) == 2
