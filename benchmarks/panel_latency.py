"""Panel latency on cnn (issue: "The notebook workbench"), measured in-process.

1. Knob-to-chart: from a control's value change (what a slider release sends) to the charts
   holding the new point, median of several moves, split into set-up, warm-up, measured window
   and UI overhead (everything else: observer, thread hand-off, history read, chart building,
   widget messages). The browser's own share (chart spec to DOM) is measured by the browser
   test (tests/notebook/test_browser.py) and was 40-60 ms in FIELD-NOTES.
2. Cancel: a newer knob move while a burst runs; time until the old burst has stopped.

Usage: python benchmarks/panel_latency.py [--moves N] [--seconds S] [--workers 0|1|2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

from workbench import Knobs
from workbench.notebook.ui import Bench


def knob_to_chart(bench: Bench, moves: int) -> None:
    bench.panel()
    bench.wait(120)
    slider = bench._ui.controls.controls["batch_size"]
    rows = []
    for i in range(moves):
        slider.value = 16 if i % 2 == 0 else 32
        bench.wait(120)
        event, r = bench.events[-1], bench.last_result
        total = event["chart_s"] - event["submit_s"]
        burst = r.setup_s + r.warmup_s + r.measured_s
        rows.append((total, r.setup_s, r.warmup_s, r.measured_s, total - burst))
    print(f"\n## Knob-to-chart on {bench.workload.name} ({moves} moves, {bench.seconds} s bursts)")
    print(f"{'':<10} {'total':>7} {'set-up':>7} {'warm-up':>7} {'window':>7} {'UI':>7}  (s)")
    for i, row in enumerate(rows):
        print(f"move {i + 1:<5} " + " ".join(f"{x:7.3f}" for x in row))
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    print("median     " + " ".join(f"{x:7.3f}" for x in med))


def cancel_latency(bench: Bench, repeats: int) -> None:
    latencies = []
    for _ in range(repeats):
        measuring, done = threading.Event(), threading.Event()
        bench._runner._on_progress = lambda p, m=measuring: p.phase == "measuring" and m.set()
        bench._runner._on_result = lambda r, d=done: r.status == "cancelled" and d.set()
        bench._runner.submit(Knobs(batch_size=32))
        measuring.wait(120)
        time.sleep(0.5)
        t0 = time.perf_counter()
        bench._runner.submit(Knobs(batch_size=16))  # the newer move
        done.wait(120)
        latencies.append(time.perf_counter() - t0)
        bench._runner.stop()
        bench.wait(120)
    print(f"\n## Cancel latency ({repeats} repeats): {[round(x, 3) for x in latencies]} s, "
          f"median {statistics.median(latencies):.3f} s")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moves", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        knobs = Knobs(num_workers=args.workers)
        bench = Bench("cnn", knobs, seconds=args.seconds, store=f"{tmp}/h.sqlite")
        knob_to_chart(bench, args.moves)
        slow = Bench("cnn", knobs, seconds=60, store=f"{tmp}/h.sqlite")
        cancel_latency(slow, 3)


if __name__ == "__main__":
    main()
