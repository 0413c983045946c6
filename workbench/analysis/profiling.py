"""``profile_burst``: where the time of a training step goes, measured by torch.profiler.

The burst is the engine's own (``run_burst``'s loop: same loader, model, optimizer and
warm-up), and the profiled window is exactly its measured window: every step of it, from the
opening synchronize to the closing one (set-up, warm-up and the FLOP count are outside it).

The profiler's start-up is not. Its first start initialises Kineto and, on a GPU, CUPTI, and
the first steps traced after it run slower while the tracer warms up (Kineto's own comment
says so, ``GenericActivityProfiler::configure``); before any training step has run, it also
imports ``torch._inductor`` (``prepare_trace``; 1.9-4.3 s on our CPU test box). So the
profiler is prepared (torch.profiler's *warmup* action: CUPTI on, nothing kept) before the
burst's last warm-up step, and only switched to recording where the window opens. Three
things come out:

- **Top operators by self time** (``torch.profiler``'s own ``key_averages``): host self time
  of each operator, and on CUDA the device time of the kernels it launched, which is what the
  table is sorted by there. User annotations (the DataLoader's, the optimizer's) are not
  operators and are left out of the table.
- **Time shares of the window** (``workbench.analysis.profile_tables``): on the host, loading data,
  waiting for the device, running operators and other, adding up to 100; on the device, busy.
- A **Chrome / Perfetto trace** (open it at https://ui.perfetto.dev or chrome://tracing) with
  the window and every step marked (``workbench.window``, ``workbench.step#N``), and the
  ``nsys profile`` line that runs the same burst under Nsight Systems for a full-system view
  (OS runtime, cuDNN/cuBLAS, other processes), which the in-process profiler cannot give.

Profiling costs time (each operator is recorded), so the burst's own numbers are somewhat
lower than an unprofiled burst's; it is not written to the history unless ``record=True``.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from workbench.analysis.profile_tables import (
    DRAIN_MARK,
    STEP_MARK,
    WINDOW_MARK,
    TimeShares,
    empty_operators,
    empty_shares,
    sort_column,
    time_shares,
    top_operators,
)
from workbench.core import ambient
from workbench.core.errors import InputError
from workbench.core.knobs import KnobError, Knobs
from workbench.core.private import private_output, workbench_home
from workbench.core.results import BurstResult
from workbench.engine.burst import (
    BurstInterrupted,
    BurstPlan,
    BurstProgress,
    measure_here,
    superseded,
)
from workbench.engine.coordinator import Solo
from workbench.engine.signals import graceful_sigint
from workbench.engine.slot import exclusive
from workbench.engine.window import BurstOptions, BurstSetup, BurstWindow
from workbench.engine.workloads import Workload, WorkloadArg, resolve_target
from workbench.history.store import Store, record_result

if TYPE_CHECKING:
    import altair as alt
    from typing_extensions import Unpack  # typing's own from Python 3.11; hints only

NSYS_TRACE = "cuda,nvtx,osrt,cudnn,cublas"
PROFILE_WINDOW = BurstWindow(seconds=1.0, min_steps=6)
"""A short window: the trace grows with every step it holds."""


@dataclass(kw_only=True)
class ProfileResult:
    """What ``profile_burst`` found; ``summary()`` to read, ``chart()`` to look at."""

    status: str
    error: str | None
    workload: str
    device: str
    knobs: Knobs
    burst: BurstResult
    shares: TimeShares | None
    operators: pd.DataFrame
    trace_path: Path | None
    nsys_command: str
    notes: list[str] = field(default_factory=list)
    profiler_start_ms: float | None = None
    """The profiler's one-off start (Kineto, CUPTI on a GPU), paid before the window."""

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.shares is not None

    @property
    def top_operator(self) -> str | None:
        return str(self.operators["operator"].iloc[0]) if len(self.operators) else None

    def shares_frame(self) -> pd.DataFrame:
        return self.shares.frame() if self.shares is not None else empty_shares()

    def chart(self, top: int = 10) -> alt.VConcatChart:
        """Time shares and the top operators (``notebook.plots.profile``; needs altair)."""
        from workbench.notebook import plots  # Altair: only when a chart is asked for

        return plots.profile(self.operators, self.shares_frame(), top=top)

    def summary(self, top: int = 8) -> str:
        if not self.ok:
            return f"{self.workload} {self.status}: {self.error}\nnsys: {self.nsys_command}"
        s = self.shares
        assert s is not None
        lines = [
            f"{self.workload} on {self.device}: {s.steps} steps profiled in {s.window_ms:.0f} ms "
            f"({_num(s.step_ms)} ms/step under the profiler)",
            f"  host: loading data {_pct(s.data_pct)} (burst timer: "
            f"{_pct(self.burst.data_wait_pct)}), waiting for the device "
            f"{_pct(s.device_wait_pct)}, running operators {_pct(s.ops_pct)}, other "
            f"{_pct(s.other_pct)}",
            f"  device busy {_pct(s.device_busy_pct)}"
            + ("" if s.device_type == "cuda" else " (on a CPU the host is the device)"),
            f"  top operators by {sort_column(self.operators).replace('_ms', ' time')}:",
        ]
        for row in self.operators.head(top).itertuples():
            dev = "" if pd.isna(row.device_ms) else f", device {row.device_ms:.1f} ms"
            lines.append(
                f"    {row.operator:<40} {row.self_ms:9.1f} ms self ({row.self_pct:4.1f}%)"
                f"{dev}, {row.calls} calls"
            )
        lines.append(f"  profiler start-up {_num(self.profiler_start_ms)} ms, before the window")
        lines += [f"  note: {n}" for n in self.notes]
        lines.append(f"trace: {self.trace_path}  (open in https://ui.perfetto.dev)")
        lines.append(f"nsys:  {self.nsys_command}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        ops = self.operators.astype(object).where(self.operators.notna(), None)
        shares = None
        if self.shares is not None:
            shares = {
                name: getattr(self.shares, name)
                for name in TimeShares.__dataclass_fields__  # type: ignore[attr-defined]
            }
            shares["host_wait_pct"] = self.shares.host_wait_pct
        return {
            "status": self.status,
            "error": self.error,
            "workload": self.workload,
            "device": self.device,
            "knobs": self.knobs.to_dict(),
            "shares": shares,
            "operators": ops.to_dict(orient="records"),
            "trace_path": str(self.trace_path) if self.trace_path else None,
            "nsys_command": self.nsys_command,
            "notes": list(self.notes),
            "profiler_start_ms": self.profiler_start_ms,
            "burst": self.burst.to_dict(),
        }


def profile_burst(
    workload: WorkloadArg = None,
    knobs: Knobs | None = None,
    *,
    trace: str | Path | None = None,
    top: int = 15,
    script: str | None = None,
    progress: Callable[[BurstProgress], None] | None = None,
    **options: Unpack[BurstOptions],
) -> ProfileResult:
    """Run one burst with torch.profiler on during its window; return the ProfileResult.

    ``trace``: the Chrome/Perfetto JSON file to write (a ``.json`` path, or a folder for a
    dated name; default ``$WORKBENCH_HOME/traces/``). ``top``: operators kept in the table.
    ``script``: for a workload that is not registered by name, the script (or command) the
    ``nsys profile`` line should run. Bad input raises a KnobError naming it, before any work.
    """
    setup = BurstSetup.of("profile_burst", options, PROFILE_WINDOW, record=False)
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise InputError.not_allowed("top", top, "an integer >= 1 (operators kept in the table)")
    knobs = Knobs() if knobs is None else knobs
    _check_single_process(knobs, setup.device)
    _check_trace(trace)
    wl, dev = resolve_target(workload, setup.device, setup.data_dir)
    trace_path = _trace_path(trace, wl.name)
    by_name = workload if isinstance(workload, str) else wl.name if workload is None else None
    nsys = nsys_command(by_name, knobs, window=setup.window, device=options.get("device"),
                        data_dir=setup.data_dir, script=script,
                        output=trace_path.with_suffix(""))  # fmt: skip
    recorder = _Recorder(dev, setup.window, progress)
    plan = BurstPlan(setup.window, setup.cancel, recorder, time.perf_counter,
                     _WindowEdges(recorder))  # fmt: skip
    try:
        burst = _run_profiled(wl, knobs, dev, plan, setup.store)
    finally:
        recorder.finish()
    return _result(wl, knobs, dev, burst, recorder, trace_path, top, nsys)


def _run_profiled(
    wl: Workload, knobs: Knobs, dev: torch.device, plan: BurstPlan, store: Store | None
) -> BurstResult:
    """``run_in_process`` with ``plan``'s coordinator telling the profiler where the window
    opens and closes: the same loop (``measure_here``), burst slot, Ctrl-C handling and
    history (``store`` None: not recorded). (A progress callback hears of a step only after it
    ran: too late to profile the window's first step, or to keep the profiler's start out of
    the window.)"""
    with exclusive(plan.stop) as got, graceful_sigint(plan.stop) as sigint:
        if got:
            burst = measure_here(wl, knobs, dev, plan)
        else:  # superseded while it waited for the slot: said and recorded as a burst is
            burst = superseded(wl, knobs, dev, plan.window)
    ambient.stamp(burst, knobs, dev.type)  # the kernel's own environment, as for a burst
    record_result(burst, store is not None, store)
    if sigint.fired:
        raise BurstInterrupted(burst)
    return burst


def _check_single_process(knobs: Knobs, dev: torch.device) -> None:
    """The profiler sees this process only: a torchrun job's ranks are other processes."""
    if knobs.world_size > 1:
        raise KnobError(
            "world_size",
            knobs.world_size,
            "1: profile_burst profiles this process; profile a multi-process job with the "
            "nsys line (nsys_command) or torch.profiler inside the training script",
        )
    if knobs.nccl and dev.type == "cuda":
        raise KnobError(
            "nccl",
            dict(knobs.nccl),
            "empty: NCCL variables run the burst in fresh torchrun processes, which this "
            "profiler cannot see",
        )


def _check_trace(trace: str | Path | None) -> None:
    if trace is None:
        return
    path = Path(trace).expanduser()
    if not path.is_dir() and path.suffix.lower() != ".json":
        raise InputError.not_allowed(
            "trace", str(trace), "a .json file (Chrome/Perfetto trace) or a folder"
        )


def _trace_path(trace: str | Path | None, workload: str) -> Path:
    """Where the trace goes: the given file, a dated file in the given folder, or in
    ``$WORKBENCH_HOME/traces`` (missing folders are made when it is written)."""
    name = f"profile-{workload}-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    if trace is None:
        return workbench_home() / "traces" / name
    path = Path(trace).expanduser()
    return path / name if path.is_dir() else path


class _Recorder:
    """The burst's progress callback that prepares the profiler and marks the window's steps.

    Prepared (Kineto/CUPTI started, nothing kept) where the burst's last warm-up step begins,
    so that step runs under the warm tracer; before the burst's set-up when it has at most one
    warm-up step. Recording starts at the window's opening edge (``window_edge``, from the
    coordinator's barrier, after the opening synchronize), where step mark 0 opens; each
    ``measuring`` report, sent after a step, closes its mark and opens the next. The step that
    meets the burst's stop rule (``seconds`` elapsed and ``min_steps`` done) is the last, so
    what follows it is marked as the window's end (the closing synchronize), up to the closing
    edge. ``done``, sent after the burst has read its clock, stops the profiler.
    """

    def __init__(self, dev: torch.device, window: BurstWindow, inner: Any) -> None:
        self.cuda = dev.type == "cuda"
        self.seconds, self.min_steps = window.seconds, window.min_steps
        self.warmup_steps = window.warmup_steps
        self.inner = inner
        self.prof: torch.profiler.profile | None = None
        self.start_ms: float | None = None  # the profiler's one-off start (prepare)
        self.steps = 0
        self.window = "before"  # before -> open -> closed
        self._marks: list[Any] = []  # open record_function contexts, innermost last
        self._thread: int | None = None  # the thread that started the profiler
        self.stopped = False

    def __call__(self, p: BurstProgress) -> None:
        if self.inner is not None:
            self.inner(p)
        if self.stopped:
            return
        before_last_warmup = p.steps == self.warmup_steps - 1
        if (p.phase == "warmup" and before_last_warmup) or (
            p.phase == "setup" and self.warmup_steps <= 1
        ):
            self._prepare()
        elif p.phase == "measuring" and self.window == "open":
            self._close_mark()
            self.steps += 1
            last = p.elapsed_s >= self.seconds and p.steps >= self.min_steps
            self._open_mark(DRAIN_MARK if last else f"{STEP_MARK}{self.steps}")
        elif p.phase == "done":
            self.finish()

    def window_edge(self) -> None:
        """The window opens (first call) or closes (second): marks only, no clock is read."""
        if self.window == "before" and not self.stopped:
            self._prepare()
            assert self.prof is not None
            self.prof.step()  # warm-up -> record: torch.profiler's start_trace
            self._open_mark(WINDOW_MARK)
            self._open_mark(f"{STEP_MARK}0")
            self.window = "open"
        elif self.window == "open":
            while self._marks:
                self._close_mark()
            self.window = "closed"

    def _prepare(self) -> None:
        if self.prof is not None:
            return
        _quiet_kineto(self.cuda)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.prof = torch.profiler.profile(activities=activities, schedule=_warm_then_record)
        self._thread = threading.get_ident()
        t0 = time.perf_counter()
        self.prof.start()  # schedule step 0 is WARMUP: prepare_trace, the expensive part
        self.start_ms = (time.perf_counter() - t0) * 1e3

    def _open_mark(self, name: str) -> None:
        mark = torch.profiler.record_function(name)
        mark.__enter__()
        self._marks.append(mark)

    def _close_mark(self) -> None:
        if self._marks:
            self._marks.pop().__exit__(None, None, None)

    def finish(self) -> None:
        """Close the marks and stop the profiler (idempotent; also after a failed burst).

        torch keeps a profiler's state per thread: stopped from another thread than the one
        that started it (the burst's own thread, when a failed burst sent no ``done``), it
        finds nothing to stop and leaves Kineto's session, CUPTI tracing included, running
        into every later burst. A short profile on this thread then ends it: starting a
        session resets Kineto's, stopping it switches CUPTI off.
        """
        if self.stopped:
            return
        self.stopped = True
        while self._marks:
            self._close_mark()
        if self.prof is None:
            return
        if self._thread == threading.get_ident():
            self.prof.stop()
        else:
            _end_stray_session(self.cuda)


class _WindowEdges(Solo):
    """One process (nothing to agree on), whose two barriers, where the burst's window opens
    (after its opening synchronize, before its clock starts) and closes (after the closing
    synchronize, before its clock stops), switch the profiled window on and off."""

    def __init__(self, recorder: _Recorder) -> None:
        self.recorder = recorder

    def barrier(self) -> None:
        self.recorder.window_edge()


def _end_stray_session(cuda: bool) -> None:
    """Start and stop an empty profile here, ending a session another thread left open."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities):
        pass


def _warm_then_record(step: int) -> torch.profiler.ProfilerAction:
    """torch.profiler's schedule: ``start()`` (step 0) only warms up; ``step()`` records."""
    action = torch.profiler.ProfilerAction
    return action.WARMUP if step == 0 else action.RECORD


def _quiet_kineto(cuda: bool) -> None:
    """On a CPU, keep kineto's start/stop lines (and, on a CUDA build without a driver, its
    'gpuGetDeviceCount failed' error) out of the notebook. Read once, at the profiler's first
    use; a value the user exported wins. On a GPU its warnings matter (CUPTI permissions)."""
    if not cuda:
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")


def _result(
    wl: Workload,
    knobs: Knobs,
    dev: torch.device,
    burst: BurstResult,
    rec: _Recorder,
    trace_path: Path,
    top: int,
    nsys: str,
) -> ProfileResult:
    result = ProfileResult(
        status=burst.status,
        error=burst.error,
        workload=wl.name,
        device=str(dev),
        knobs=knobs,
        burst=burst,
        shares=None,
        operators=empty_operators(),
        trace_path=None,
        nsys_command=nsys,
        profiler_start_ms=rec.start_ms,
    )
    if burst.status != "ok" or rec.prof is None or rec.steps == 0:
        if burst.status == "ok":  # cancelled before a whole step was profiled
            result.status, result.error = "cancelled", "no complete step in the window"
        return result
    with private_output(trace_path) as out:  # 0600: a trace names the user's code paths
        rec.prof.export_chrome_trace(str(out))
    result.trace_path = trace_path.resolve()
    events = json.loads(trace_path.read_text())["traceEvents"]
    result.shares = time_shares(events, dev.type)
    result.operators = top_operators(
        rec.prof.key_averages(), cuda=dev.type == "cuda", window_ms=result.shares.window_ms
    ).head(top)
    result.notes = _notes(knobs, burst, result.shares)
    return result


def _notes(knobs: Knobs, burst: BurstResult, shares: TimeShares) -> list[str]:
    notes = []
    if knobs.loader == "dali":
        notes.append("DALI's iterator writes no annotation: its loading counts as 'other'")
    elif knobs.loader == "torch" and knobs.num_workers == 0:
        notes.append("num_workers=0: batches are read and decoded in the training thread")
    if shares.device_type == "cuda" and shares.device_busy_pct is None:
        notes.append(
            "the trace holds no GPU activity: CUPTI recorded nothing (no permission to profile "
            "the GPU, or another profiler active); device shares and device_ms are unknown"
        )
    if burst.loader_epochs and knobs.num_workers > 0 and shares.other_pct > 10:
        notes.append("starting a new epoch (forking workers) counts as 'other'")
    return notes


def compare_shares(profiles: Mapping[str, ProfileResult]) -> pd.DataFrame:
    """Time shares side by side: one row per part, one column per named profile (percent)."""
    columns = {
        name: p.shares_frame().set_index(["timeline", "part"])["pct"]
        for name, p in profiles.items()
    }
    return pd.concat(columns, axis=1).astype(float).round(1)


# -- the nsys line -----------------------------------------------------------------------------


def nsys_command(
    workload: str | None,
    knobs: Knobs,
    *,
    window: BurstWindow = BurstWindow(),  # noqa: B008 (frozen: one shared default is safe)
    device: str | torch.device | None = None,
    data_dir: str | Path | None = None,
    script: str | None = None,
    output: str | Path = "workbench-profile",
) -> str:
    """The ``nsys profile`` line for a full-system look at the same burst.

    A registered workload runs through the CLI (``python -m workbench burst ...`` with the same
    knobs); otherwise ``script`` (a ``.py`` file, or a whole command) is what nsys launches.
    Nsight Systems records the whole process, set-up and warm-up included, plus OS runtime
    calls, cuDNN/cuBLAS and NVTX ranges (NCCL writes some): look for the steady part.
    """
    if script is not None:
        words = shlex.split(script)
        target = ["python", *words] if words and words[0].endswith(".py") else words
    elif workload is not None:
        target = ["python", "-m", "workbench", "burst", "--workload", workload]
        target += [w for name, value in _changed_knobs(knobs) for w in ("--set", f"{name}={value}")]
        target += ["--seconds", f"{window.seconds:g}", "--min-steps", str(window.min_steps)]
        target += ["--warmup-steps", str(window.warmup_steps), "--no-record"]
        if device is not None:
            target += ["--device", str(device)]
        if data_dir is not None:
            target += ["--data", str(data_dir)]
    else:
        target = ["python", "YOUR_TRAINING_SCRIPT.py"]
    nsys = ["nsys", "profile", f"--trace={NSYS_TRACE}", "--sample=process-tree",
            "--force-overwrite=true", f"--output={output}"]  # fmt: skip
    return shlex.join(nsys + target)


def _changed_knobs(knobs: Knobs) -> list[tuple[str, str]]:
    """Knobs that differ from the defaults, as ``--set`` would read them."""
    default = Knobs().to_dict()
    out = []
    for name, value in knobs.to_dict().items():
        if name == "nccl":
            out += [(k, str(v)) for k, v in value.items()]
        elif value != default[name]:
            out.append((name, str(value).lower() if isinstance(value, bool) else str(value)))
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}%"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


__all__ = [
    "ProfileResult",
    "TimeShares",
    "compare_shares",
    "nsys_command",
    "profile_burst",
    "time_shares",
    "top_operators",
]
