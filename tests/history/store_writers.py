"""The writer of the concurrency tests, in a module of its own: each of the 30 spawned
processes imports only this and the store, not a test module with pytest behind it."""

from __future__ import annotations

from typing import Any

from workbench.history.store import open_store


def write_rows(where: str, tag: int, count: int, ready: Any) -> list[int]:
    """Wait until every writer is ready (a barrier), then open the store (all at once: a new
    store's schema is created by one of them) and append ``count`` bursts; their ids."""
    ready.wait(timeout=240)
    store = open_store(where)
    return [
        store.append({"workload": "cnn", "status": "ok", "writer": tag, "i": i})
        for i in range(count)
    ]


def run_writers(where: str, writers: int, per_writer: int) -> list[int]:
    """``writers`` spawned processes appending to ``where`` at once; all the ids they got."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # what a kernel on macOS or Python 3.14 does
    with ctx.Manager() as manager:
        ready = manager.Barrier(writers)
        with ctx.Pool(writers) as pool:
            jobs = [
                pool.apply_async(write_rows, (where, tag, per_writer, ready))
                for tag in range(writers)
            ]
            return [i for job in jobs for i in job.get(timeout=300)]
