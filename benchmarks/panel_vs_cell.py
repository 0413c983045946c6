"""Does the panel disturb what it measures? A panel burst against a cell burst, interleaved.

Each pair runs the same workload, knobs and window twice in one process: once as the panel
runs it (``Bench.run`` with the widgets built: progress callbacks, status and progress-bar
updates, the chart redraw afterwards) and once as a notebook cell does (``workbench.run_burst``,
no callbacks). The order alternates from pair to pair, so a drift of the shared machine falls
on both sides; one unmeasured pair runs first (the first burst of a process reads low: page
cache, oneDNN's kernel cache). The figure is the median of the per-pair ratios panel/cell,
with the widget messages the panel sent inside its measured windows (``Widget._send`` calls
between the last warm-up step and the end of the window).

The machine is shared, and other people's processes need not be visible to ``ps``: each burst
also records how many cores the rest of the machine kept busy meanwhile (``/proc/stat``'s busy
time less this process's own), and the figure is given again over the quiet pairs only
(others below ``--quiet-cores`` on both sides).

``--kernel`` runs the same inside a real IPython kernel started with jupyter_client: every
widget update is then a real comm message, serialized and sent on IOPub to a client that
drains it (what JupyterLab's server does), with no browser. ``--cell-window`` gives the cell
burst ``run_burst``'s own defaults (3 s window, 3 warm-up steps, 5 minimum) as a user's cell
would have, against the panel's (2 s, 2, 3): the window-length question. ``--no-ui`` puts a
bare ``BurstRunner`` (a burst on a fresh thread, no callbacks, no widgets) in the panel's place:
what running on a background thread costs by itself, with no UI at all. ``--cell-thread`` runs
the cell's burst on a fresh thread too, so both sides meet the same OpenMP conditions and the
ratio is the panel's own cost (with ``--no-ui`` as well: the noise of identical bursts).

Why the thread matters on a CPU (see workbench/runner.py): GNU OpenMP (libgomp, which PyTorch's
CPU build uses) lets idle workers spin 300,000 times before sleeping, but only 100 times when it
manages more threads than there are CPUs. A kernel's main thread has one OpenMP team (2 threads
on 2 cores: full spin); a burst on another thread adds a second (oversubscribed: short spin).
With the cores free the two read within a few per cent; with other processes on the cores the
main thread's spinning worker fights them and its burst reads 2-4x lower. So the panel's own
cost is read with ``--cell-thread``, on quiet pairs; ``OMP_WAIT_POLICY=passive`` (set before the
process starts) takes most of the main thread's collapse away.

Usage: python benchmarks/panel_vs_cell.py [--pairs N] [--seconds S] [--batch B] [--kernel]
       [--cell-window]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_PANEL_WINDOW = {"warmup_steps": 2, "min_steps": 3}  # Bench's defaults
_CELL_DEFAULTS = {"seconds": 3.0, "warmup_steps": 3, "min_steps": 5}  # run_burst's defaults


class _WindowMessages:
    """Counts widget messages sent while a panel burst is inside its measured window."""

    def __init__(self, bench: Any):
        import ipywidgets as w

        self.sent_s: list[float] = []
        self.windows: list[tuple[float, float]] = []
        self._start_s: float | None = None
        original_send = w.Widget._send

        def send(widget: Any, msg: Any, buffers: Any = None) -> None:
            self.sent_s.append(time.perf_counter())
            original_send(widget, msg, buffers)

        w.Widget._send = send
        deliver = bench._runner._on_progress

        def progress(p: Any) -> None:
            if p.phase == "done" and self._start_s is not None:  # the window has just ended
                self.windows.append((self._start_s, time.perf_counter()))
            deliver(p)
            if p.phase == "warmup":  # the window starts after the last warm-up step's update
                self._start_s = time.perf_counter()

        bench._runner._on_progress = progress

    def in_last_window(self) -> int:
        start_s, end_s = self.windows[-1]
        return sum(start_s <= t <= end_s for t in self.sent_s)


def _cpu_marks() -> tuple[float, float, float]:
    """(wall s, the machine's busy CPU s, this process's CPU s): what others' load is read from."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    busy_s = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle, iowait
    t = os.times()
    own_s = t.user + t.system + t.children_user + t.children_system
    return time.perf_counter(), busy_s, own_s


def _timed(burst: Any) -> tuple[float, float]:
    """(samples/s, cores the rest of the machine kept busy during the burst)."""
    wall0, busy0, own0 = _cpu_marks()
    sps = burst()
    wall1, busy1, own1 = _cpu_marks()
    return sps, max(0.0, (busy1 - busy0) - (own1 - own0)) / (wall1 - wall0)


def _pairs(args: argparse.Namespace) -> list[tuple[float, float, int, float]]:
    import workbench as wb
    from workbench.runner import BurstRunner
    from workbench.ui import Bench

    knobs = wb.Knobs(batch_size=args.batch, num_workers=args.workers)
    cell_window = _CELL_DEFAULTS if args.cell_window else {"seconds": args.seconds, **_PANEL_WINDOW}
    with tempfile.TemporaryDirectory() as tmp:
        store = f"{tmp}/h.sqlite"
        bench = Bench(args.workload, knobs, seconds=args.seconds, store=store, **_PANEL_WINDOW)
        bench.panel(autorun=False)
        spy = _WindowMessages(bench)
        bare: list[Any] = []

        runner = BurstRunner(args.workload, on_result=bare.append, seconds=args.seconds,
                             store=store, **_PANEL_WINDOW)  # fmt: skip

        def panel() -> float:  # the panel's own burst, as a knob move or Run starts it
            if args.no_ui:
                runner.submit(knobs)
                assert runner.wait(300), "the thread's burst did not finish"
                result = bare[-1]
            else:
                bench.run(knobs)
                assert bench.wait(300), "the panel burst did not finish"
                result = bench.last_result
            assert result.ok, result.error
            return result.samples_per_s

        def cell() -> float:
            def burst() -> None:
                out.append(wb.run_burst(args.workload, knobs, store=store, **cell_window))

            out: list[Any] = []
            if args.cell_thread:  # a fresh thread, as the panel's: the same OpenMP conditions
                thread = threading.Thread(target=burst, name="cell-burst")
                thread.start()
                thread.join()
            else:  # the main thread, as a notebook cell runs it
                burst()
            assert out[0].ok, out[0].error
            return out[0].samples_per_s

        panel(), cell()  # unmeasured: the first bursts of a process read low
        rows = []
        for i in range(args.pairs):
            first, second = (panel, cell) if i % 2 == 0 else (cell, panel)
            a, b = _timed(first), _timed(second)
            (panel_sps, panel_others), (cell_sps, cell_others) = (a, b) if i % 2 == 0 else (b, a)
            others = max(panel_others, cell_others)
            messages = 0 if args.no_ui else spy.in_last_window()
            rows.append((panel_sps, cell_sps, messages, others))
            print(f"pair {i + 1}: panel {panel_sps:7.1f}  cell {cell_sps:7.1f}  "
                  f"ratio {panel_sps / cell_sps:.3f}  widget messages in window "
                  f"{rows[-1][2]:3d}  others' cores {panel_others:.2f} / {cell_others:.2f}",
                  flush=True)  # fmt: skip
    return rows


def run_here(args: argparse.Namespace) -> None:
    where = "a real IPython kernel (comm messages on IOPub)" if args.kernel_child else "in-process"
    cell = "run_burst defaults (3 s, 3, 5)" if args.cell_window else "the same window"
    where += "; NO UI: a bare BurstRunner thread in the panel's place" if args.no_ui else ""
    where += "; the cell's burst on a fresh thread" if args.cell_thread else ""
    print(f"## Panel vs cell, {args.workload}, batch {args.batch}, workers {args.workers}, "
          f"{args.seconds:g} s panel window; cell: {cell}; {where}", flush=True)  # fmt: skip
    rows = _pairs(args)
    _summary("all pairs", rows)
    quiet = [row for row in rows if row[3] < args.quiet_cores]
    _summary(f"quiet pairs (others < {args.quiet_cores:g} cores)", quiet)
    print(f"widget messages per window: median {statistics.median(r[2] for r in rows):g}")


def _summary(name: str, rows: list[tuple[float, float, int, float]]) -> None:
    if not rows:
        print(f"{name}: none")
        return
    ratios = [p / c for p, c, *_ in rows]
    print(f"{name}: median ratio panel/cell {statistics.median(ratios):.3f} over {len(rows)} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}); medians panel "
          f"{statistics.median(r[0] for r in rows):.1f}, cell "
          f"{statistics.median(r[1] for r in rows):.1f} samples/s")  # fmt: skip


def run_in_kernel(argv: list[str]) -> None:
    """Start a kernel, run this script's measurement in it, print what it prints."""
    from jupyter_client.manager import start_new_kernel

    # a neutral working directory: a kernel puts its cwd first on sys.path, PYTHONPATH after it
    km, kc = start_new_kernel(kernel_name="python3", cwd=tempfile.gettempdir())
    try:
        code = (f"import sys; sys.argv = {[__file__, *argv, '--kernel-child']!r}\n"
                f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                "import workbench; print('workbench from', workbench.__file__)\n"
                "import panel_vs_cell; panel_vs_cell.main()")  # fmt: skip
        comm_msgs = 0

        def show(msg: dict[str, Any]) -> None:
            nonlocal comm_msgs
            kind = msg["header"]["msg_type"]
            comm_msgs += kind.startswith("comm_")
            if kind == "stream":
                sys.stdout.write(msg["content"]["text"])
                sys.stdout.flush()
            elif kind == "error":
                sys.stdout.write("\n".join(msg["content"]["traceback"]) + "\n")

        reply = kc.execute_interactive(code, timeout=3600, output_hook=show)
        print(f"(kernel: {reply['content']['status']}, {comm_msgs} comm messages on IOPub)")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--workload", default="cnn")
    ap.add_argument("--kernel", action="store_true")
    ap.add_argument("--cell-window", action="store_true")
    ap.add_argument("--no-ui", action="store_true")
    ap.add_argument("--cell-thread", action="store_true")
    ap.add_argument("--quiet-cores", type=float, default=0.25)
    ap.add_argument("--kernel-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.kernel and not args.kernel_child:
        run_in_kernel([a for a in sys.argv[1:] if a != "--kernel"])
    else:
        run_here(args)


if __name__ == "__main__":
    main()
