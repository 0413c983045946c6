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

Why the thread matters on a CPU (see workbench/notebook/runner.py): GNU OpenMP (libgomp, which
PyTorch's CPU build uses) lets idle workers spin 300,000 times before sleeping, but only 100
times when it manages more threads than there are CPUs. A kernel's main thread has one OpenMP
team (2 threads on 2 cores: full spin); a burst on another thread adds a second (oversubscribed:
short spin). With the cores free the two read within a few per cent; with other processes on the
cores the main thread's spinning worker fights them and its burst reads 2-4x lower. So the
panel's own cost is read with ``--cell-thread``, on quiet pairs; ``OMP_WAIT_POLICY=passive``
(set before the process starts) takes most of the main thread's collapse away.

``--browser`` measures what a person sees: a private JupyterLab in headless Chromium
(tests/jupyterlab_driver.py) runs a notebook whose cells run a warm-up burst, a cell burst of the
panel's knobs and window, then show the panel (its first burst starts by itself); then knob
moves (the batch-size slider, by keyboard) alternate with cell bursts sent to the kernel
outside any cell, in interleaved pairs. Each burst's measured window is stamped in the kernel
(epoch seconds) and a sampler here reads, every 0.1 s, the CPU time of Chromium's processes, of
everything this run started (server, kernel, browser, driver) and of the machine: so each
window gets Chromium's cores and the cores others kept busy. Each run is a fresh server,
kernel and page (``--runs``); the first burst's row also says when the charts showed, how
much CPU Chromium spent from the panel showing to the window, and what let the burst go.
The kernel imports workbench from this script's tree, so a copy of another revision can be
measured with the same installed packages (before/after).

Usage: python benchmarks/panel_vs_cell.py [--pairs N] [--seconds S] [--batch B] [--kernel]
       [--cell-window] [--browser [--runs N] [--data DIR]]
"""

from __future__ import annotations

import argparse
import itertools
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
    from workbench.notebook.runner import BurstRunner
    from workbench.notebook.ui import Bench

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


# --- --browser: the kernel's side, called from the measurement notebook's cells ------------

_PROBE: dict[str, Any] = {}


def probe_setup(out: str, workload: str, seconds: float, workers: int) -> None:
    """Where the kernel writes its records (one JSON line per burst), and the bursts' knobs."""
    _PROBE.update(out=out, workload=workload, seconds=seconds, workers=workers)


def _record(kind: str, result: Any, window_start: list[float], extra: Any = None) -> None:
    """One burst, with its measured window in epoch seconds (the driver's clock too)."""
    import json

    start = window_start[0] if window_start else None
    end = start + result.measured_s if start is not None and result.measured_s else None
    row = {"kind": kind, "batch": result.knobs.batch_size, "ok": result.ok,
           "sps": result.samples_per_s, "start": start, "end": end, "id": result.id,
           **(extra or {})}  # fmt: skip
    with open(_PROBE["out"], "a") as f:
        f.write(json.dumps(row) + "\n")


def _window_marker(window_start: list[float]) -> Any:
    """A progress callback that notes when the measured window began (epoch seconds)."""

    def progress(p: Any) -> None:
        if p.phase == "warmup":
            window_start.clear()
        elif p.phase == "measuring" and not window_start:
            window_start.append(time.time() - p.elapsed_s)

    return progress


def probe_cell(batch: int, keep: bool = True) -> float:
    """A cell's burst of the panel's knobs and window; recorded unless ``keep`` is False."""
    import workbench as wb

    knobs = wb.Knobs(batch_size=batch, num_workers=_PROBE["workers"])
    start: list[float] = []
    r = wb.run_burst(_PROBE["workload"], knobs, seconds=_PROBE["seconds"],
                     progress=_window_marker(start), **_PANEL_WINDOW)  # fmt: skip
    if keep:
        _record("cell", r, start)
    return r.samples_per_s


def probe_panel(batch: int) -> Any:
    """The panel as a notebook shows it, its bursts' windows and results recorded."""
    import workbench as wb

    knobs = wb.Knobs(batch_size=batch, num_workers=_PROBE["workers"])
    bench = wb.Bench(_PROBE["workload"], knobs, seconds=_PROBE["seconds"], **_PANEL_WINDOW)
    runner, start = bench._runner, []
    mark, shown, deliver = _window_marker(start), runner._on_result, runner._on_progress

    def progress(p: Any) -> None:
        mark(p)
        deliver(p)

    def result(r: Any) -> None:
        first = getattr(bench, "first_draw", None)  # what let the first burst go (after the fix)
        held = (
            {
                "how": first.how,
                "frontend_s": first.frontend_s,
                "held_s": first.waited_s,
                "browser_ms": first.browser_ms,
            }
            if first
            else {}
        )
        _record("panel", r, start, held)
        shown(r)

    runner._on_progress, runner._on_result = progress, result
    _PROBE["bench"] = bench
    return bench.panel()


# --- --browser: the driver (this process): JupyterLab, Chromium, CPU accounting -------------


class _CpuSampler(threading.Thread):
    """Every 0.1 s: the machine's busy CPU seconds, Chromium's, and all of ours (this process
    and its children, the JupyterLab server, its kernel and workers). A process's time is kept
    after it exits, so each series only grows."""

    def __init__(self, server: Any):
        super().__init__(name="cpu-sampler", daemon=True)
        self.server, self.samples = server, []  # (epoch s, machine busy s, chromium s, ours s)
        self._last: dict[int, tuple[bool, float]] = {}  # pid -> (is chromium, CPU s)
        self._halt = threading.Event()

    def _procs(self) -> list[Any]:
        import psutil

        me = psutil.Process()
        return [me, *me.children(recursive=True), *self.server.processes()]

    def run(self) -> None:
        import psutil

        procs, listed_at = self._procs(), time.time()
        while not self._halt.wait(0.1):
            if time.time() - listed_at > 1.0:
                procs, listed_at = self._procs(), time.time()
            for p in procs:
                try:
                    t = p.cpu_times()
                    self._last[p.pid] = ("chrom" in p.name(), t.user + t.system)
                except psutil.Error:
                    pass
            chromium = sum(s for is_c, s in self._last.values() if is_c)
            ours = sum(s for _, s in self._last.values())
            self.samples.append((time.time(), _cpu_marks()[1], chromium, ours))

    def stop(self) -> None:
        self._halt.set()
        self.join(5)

    def cores(self, start: float, end: float) -> tuple[float, float]:
        """(Chromium's cores, others' cores) over [start, end], interpolated between samples."""
        a, b = self._at(start), self._at(end)
        wall = end - start
        chromium = (b[2] - a[2]) / wall
        others = max(0.0, (b[1] - a[1]) - (b[3] - a[3])) / wall
        return chromium, others

    def _at(self, t: float) -> tuple[float, ...]:
        s = self.samples
        for prev, nxt in itertools.pairwise(s):
            if prev[0] <= t <= nxt[0]:
                f = (t - prev[0]) / (nxt[0] - prev[0])
                return tuple(p + f * (n - p) for p, n in zip(prev, nxt, strict=True))
        return s[-1] if t > s[-1][0] else s[0]


def _measurement_notebook(args: argparse.Namespace, out: Path) -> Any:
    import nbformat

    here = Path(__file__).resolve().parent  # this tree's workbench, not the installed one
    cells = [
        f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]\n"
        "import panel_vs_cell as pvc, workbench; print(workbench.__file__)\n"
        f"pvc.probe_setup({str(out)!r}, {args.workload!r}, {args.seconds!r}, {args.workers!r})",
        f"pvc.probe_cell({args.batch}, keep=False)  # the quickstart's first cell: warm-up",
        f"pvc.probe_cell({args.batch})  # the cell burst just before the panel",
        f"pvc.probe_panel({args.batch})",
    ]
    spec = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells],
                                    metadata=spec)  # fmt: skip


def _next_record(out: Path, seen: int, timeout_s: float = 240.0) -> dict[str, Any]:
    import json

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = out.read_text().splitlines() if out.exists() else []
        if len(lines) > seen:
            return json.loads(lines[seen])
        time.sleep(0.2)
    raise AssertionError(f"no burst record #{seen + 1} in {timeout_s:.0f} s")


def _charts_drawn(page: Any) -> int:
    """How many of the panel's charts show an <svg> or <canvas> (Vega has drawn them)."""
    return page.evaluate(
        """() => [...document.querySelectorAll('.wb-panel [class*="wb-chart-"]')]
            .filter(c => c.querySelector('svg, canvas')).length"""
    )


def _browser_run(args: argparse.Namespace, chromium: str, data_dir: str) -> dict[str, Any]:
    """One fresh server, kernel and page: the panel's first burst, then interleaved pairs."""
    import jupyterlab_driver as lab

    with tempfile.TemporaryDirectory() as tmp:
        base, root = Path(tmp), Path(tmp) / "root"
        root.mkdir()
        out = base / "records.jsonl"
        import nbformat

        nbformat.write(_measurement_notebook(args, out), root / "pvc.ipynb")
        env = {"WORKBENCH_DATA": data_dir, "WORKBENCH_HOME": str(base / "wbhome")}
        with lab.lab_server(root, base, env) as srv, lab.chromium_page(chromium, base) as page:
            sampler = _CpuSampler(srv)
            sampler.start()
            try:
                return _drive(args, page, out, sampler)
            finally:
                sampler.stop()


def _drive(args: argparse.Namespace, page: Any, out: Path, sampler: _CpuSampler) -> dict:
    import jupyterlab_driver as lab

    lab.open_notebook(page, sampler.server, "pvc.ipynb")
    lab.run_all_cells(page, ".wb-panel")
    shown_at = time.time()
    drawn_at = None
    while True:  # the charts' drawing, against the first burst's window
        if drawn_at is None and _charts_drawn(page) >= 4:
            drawn_at = time.time()
        lines = out.read_text().splitlines() if out.exists() else []
        if len(lines) >= 2 and (drawn_at is not None or time.time() - shown_at > 60):
            break
        time.sleep(0.1)
    cell, first = _next_record(out, 0), _next_record(out, 1)
    bursts = [cell, first]
    seen = 2
    for i in range(args.pairs):
        batch = 16 if i % 2 == 0 else args.batch
        for side in ("panel", "cell") if i % 2 == 0 else ("cell", "panel"):
            if side == "panel":
                lab.press_slider(page, ".wb-knob-batch_size",
                                 "ArrowLeft" if batch < args.batch else "ArrowRight")  # fmt: skip
            else:
                page.evaluate(
                    """(code) => { window.jupyterapp.shell.currentWidget.sessionContext
                        .session.kernel.requestExecute({code}); }""",
                    f"pvc.probe_cell({batch})",
                )
            rec = _next_record(out, seen)
            seen += 1
            assert rec["kind"] == side and rec["batch"] == batch, rec
            bursts.append(rec)
    for rec in bursts:
        rec["chromium_cores"], rec["others_cores"] = sampler.cores(rec["start"], rec["end"])
    drawing = sampler.cores(shown_at, first["start"])[0] * (first["start"] - shown_at)
    return {"bursts": bursts, "shown_at": shown_at, "drawn_at": drawn_at,
            "chromium_s_before_window": drawing}  # fmt: skip


def run_browser(args: argparse.Namespace) -> None:
    import jupyterlab_driver as lab

    chromium = lab.chromium_path()
    assert chromium, "--browser needs Chromium (apt-get install -y chromium)"
    data_dir = args.data or os.environ.get("WORKBENCH_DATA")
    if not data_dir:
        from workbench.engine.datasets import build_datasets

        data_dir = str(build_datasets(Path(tempfile.gettempdir()) / "pvc_data").root)
    print(f"## Panel vs cell in JupyterLab + headless Chromium, {args.workload}, batch "
          f"{args.batch}, workers {args.workers}, {args.seconds:g} s window (both sides: "
          f"warm-up 2, min 3 steps); {args.runs} runs", flush=True)  # fmt: skip
    firsts, pairs = [], []
    for run in range(args.runs):
        got = _browser_run(args, chromium, data_dir)
        firsts.append(_report_first(run, got))
        pairs.extend(_report_pairs(run, got["bursts"][2:]))
    _browser_summary(args, firsts, pairs)


def _report_first(run: int, got: dict[str, Any]) -> tuple[float, float, float, float]:
    cell, first = got["bursts"][:2]
    drawn = got["drawn_at"]
    drawn_txt = f"{drawn - first['start']:+.1f} s" if drawn else "never"
    print(f"run {run + 1}: first panel burst {first['sps']:.1f} vs cell just before "
          f"{cell['sps']:.1f} samples/s, ratio {first['sps'] / cell['sps']:.3f}; Chromium "
          f"{first['chromium_cores']:.2f} cores in the panel's window, "
          f"{cell['chromium_cores']:.2f} in the cell's; others {first['others_cores']:.2f} / "
          f"{cell['others_cores']:.2f}; charts drawn at {drawn_txt} from the window's start "
          f"(window {first['end'] - first['start']:.1f} s); Chromium CPU from the panel "
          f"showing to the window: {got['chromium_s_before_window']:.2f} s over "
          f"{first['start'] - got['shown_at']:.1f} s; held: {first.get('how', 'no hold')}, "
          f"frontend after {_s(first.get('frontend_s'))}, let go after "
          f"{_s(first.get('held_s'))}, browser render-to-drawn "
          f"{_s(first.get('browser_ms'), 1e-3)}", flush=True)  # fmt: skip
    others = max(first["others_cores"], cell["others_cores"])
    return first["sps"] / cell["sps"], first["chromium_cores"], cell["chromium_cores"], others


def _s(value: float | None, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:.2f} s"


def _report_pairs(
    run: int, bursts: list[dict[str, Any]]
) -> list[tuple[float, float, float, float]]:
    rows = []
    for a, b in zip(bursts[::2], bursts[1::2], strict=True):
        panel, cell = (a, b) if a["kind"] == "panel" else (b, a)
        ratio = panel["sps"] / cell["sps"]
        others = max(panel["others_cores"], cell["others_cores"])
        rows.append((ratio, panel["chromium_cores"], cell["chromium_cores"], others))
        print(f"  run {run + 1} pair batch {panel['batch']}: panel {panel['sps']:.1f} cell "
              f"{cell['sps']:.1f} ratio {ratio:.3f}; Chromium {panel['chromium_cores']:.2f} / "
              f"{cell['chromium_cores']:.2f} cores; others {panel['others_cores']:.2f} / "
              f"{cell['others_cores']:.2f}", flush=True)  # fmt: skip
    return rows


def _browser_summary(args: argparse.Namespace, firsts: list, pairs: list) -> None:
    for name, rows in (("first panel burst / cell before", firsts),
                       ("later panel / cell pairs", pairs)):  # fmt: skip
        for label, sel in (
            ("all", rows),
            (
                f"quiet (others < {args.quiet_cores:g})",
                [r for r in rows if r[3] < args.quiet_cores],
            ),
        ):
            if not sel:
                print(f"{name}, {label}: none")
                continue
            ratios = [r[0] for r in sel]
            print(f"{name}, {label}: median ratio {statistics.median(ratios):.3f} over "
                  f"{len(sel)} (min {min(ratios):.3f}, max {max(ratios):.3f}); Chromium median "
                  f"{statistics.median(r[1] for r in sel):.2f} cores in the panel's windows, "
                  f"{statistics.median(r[2] for r in sel):.2f} in the cell's")  # fmt: skip


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
    ap.add_argument("--browser", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--data", default=None)
    ap.add_argument("--kernel-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.browser:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        run_browser(args)
    elif args.kernel and not args.kernel_child:
        run_in_kernel([a for a in sys.argv[1:] if a != "--kernel"])
    else:
        run_here(args)


if __name__ == "__main__":
    main()
