"""Telemetry during a burst: an NVML sampler thread, with CPU figures always and as the fallback.

A `Sampler` runs beside a burst on a daemon thread and takes one sample every `interval_s`
(50 ms by default): NVML device utilization, the share of time device memory was busy, device
memory in use, power, temperature, SM clock and clock-limiting ("throttle") reasons, plus the CPU
time and RSS of this process and its children (DataLoader workers). The burst marks its measured
window with `mark_window()`; `stop()` summarizes, and `telemetry_problems()` lists the figures
that are out of their physical range (a number not to trust).

Why a thread and these statistics:
- NVML is polled, not event driven: the driver refreshes utilization over its own sample period
  (1/6 s to 1 s, by product) and, on recent datacenter parts, reports power as a ~1 s average.
  Polling at 50 ms oversamples those counters; a window mean is still the right summary, but a
  window much shorter than a second mostly sees values that started before it.
- Window statistics (util, power, temperature, clock, throttle, CPU %) use only samples whose
  timestamp falls inside the measured window, so warm-up does not dilute them. Memory peaks use
  every sample, because an allocation made during warm-up still has to fit.
- CPU % comes from CPU-time deltas of the process tree (user + system, every thread, this
  sampler included) over wall time; 100 = one core. A worker that appears mid-burst is counted
  from its first CPU second; one that exits between two samples loses only its last interval.
- RSS is summed over the tree. Forked workers share copy-on-write pages with the parent, so
  the sum over-counts shared memory: read it as an upper bound of what the burst holds.
- `gpu_mem_used_mib` is NVML's device view (every process on the GPU plus the CUDA context), not
  this process's allocator: the allocator's own peaks belong to `torch.cuda.max_memory_*`.

Cost (measured on the 2-core x86_64 development box, no GPU, torch imported, two idle worker
children): the sampler thread used 0.9 % of one core at the default 50 ms interval (4.3 % at
10 ms), about 0.45 ms of CPU per sample including the wake-up (0.1 ms when caches are warm);
see `Sampler.overhead_pct`. That is after two choices: process figures are read straight from
/proc/<pid>/stat on Linux (one read per process, a third of psutil's cost; psutil elsewhere),
and children are rediscovered at most every 0.5 s from /proc/<pid>/task/<tid>/children (0.2 ms)
instead of psutil's scan of every process (3 ms for 78 processes here, more on a busy server).
NVML adds six queries per sample; not measured here (no GPU): read `overhead_pct` on one.

NVML is imported lazily (`pynvml`, from nvidia-ml-py) and initialized once per process.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    import torch

__all__ = ["Sampler", "TelemetrySummary", "nvml_status", "telemetry_problems"]

_LOG = logging.getLogger("workbench")
_MIB = 1024 * 1024
_CHILD_REFRESH_S = 0.5
_START_WAIT_S = 10.0
_JOIN_TIMEOUT_S = 5.0

# Clock event ("throttle") reason bits, as nvml.h / pynvml name them
# (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*).
_THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
_NOT_LIMITING = frozenset({"gpu_idle"})


@dataclass(frozen=True, slots=True)
class TelemetrySummary:
    """What the sampler saw during one burst. Unknown values are None, never 0."""

    source: str
    """Where GPU figures came from: "nvml", or "cpu" when there are none."""
    gpu_util_pct: float | None
    """NVML utilization.gpu (time a kernel was running), mean over the measured window."""
    mem_busy_pct: float | None
    """NVML utilization.memory, window mean: the share of *time* device memory was being read or
    written, not the share of its bandwidth used (light but steady traffic can read high)."""
    gpu_mem_used_mib: float | None
    """NVML device memory in use (all processes), max over the whole burst."""
    power_w: float | None
    """Board power draw, window mean."""
    temp_c: float | None
    """GPU temperature, window max."""
    sm_clock_mhz: float | None
    """SM clock, window median."""
    throttle_reasons: tuple[str, ...]
    """Clock-limiting reasons seen in the window (gpu_idle left out)."""
    cpu_util_pct: float | None
    """CPU of this process and its children, window mean; 100 = one core."""
    rss_peak_mib: float | None
    """Peak RSS summed over this process and its children, whole burst."""
    samples: int
    """Samples taken inside the measured window."""
    note: str | None
    """Why something is missing (NVML unavailable, a query that failed), else None."""
    power_limit_w: float | None = None
    """The board's enforced power limit (NVML), read once at start; None if unknown."""


@dataclass(slots=True)
class _Sample:
    t: float
    gpu_util: float | None = None
    mem_util: float | None = None
    mem_used_mib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    sm_clock: float | None = None
    throttle: int | None = None
    cpu_s: float | None = None
    rss_mib: float | None = None


# --------------------------------------------------------------------------- NVML, once a process


@dataclass(slots=True)
class _NvmlState:
    checked: bool = False
    error: str | None = None
    warned: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        """Forget the cached result (tests swap pynvml in and out)."""
        with self.lock:
            self.checked, self.error, self.warned = False, None, False


_NVML = _NvmlState()


def nvml_status() -> str | None:
    """None if NVML is usable in this process, else the reason. Initializes NVML once."""
    with _NVML.lock:
        if not _NVML.checked:
            _NVML.error = _nvml_init()
            _NVML.checked = True
        return _NVML.error


def _nvml_init() -> str | None:
    try:
        import pynvml
    except ImportError as exc:
        return f"nvidia-ml-py is not installed ({exc})"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return str(exc) or type(exc).__name__
    return None


def _warn_once(message: str) -> None:
    with _NVML.lock:
        if _NVML.warned:
            return
        _NVML.warned = True
    _LOG.warning(message)


# --------------------------------------------------------------------------- device lookup


def _parse_device(device: torch.device | str) -> tuple[str, int | None]:
    kind, _, index = str(device).strip().lower().partition(":")
    if index and not index.isdigit():
        raise ValueError(f"device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    return kind, (int(index) if index else None)


def _torch_index(index: int | None) -> int:
    if index is not None:
        return index
    try:
        import torch

        return torch.cuda.current_device() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def _cuda_props(index: int) -> Any | None:
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return torch.cuda.get_device_properties(index)
    except Exception:
        return None


def _pci_bus_id(index: int) -> str | None:
    """The device's PCI address as NVML accepts it ("0000:3b:00.0"), from torch; None if unknown."""
    props = _cuda_props(index)
    if props is None or not hasattr(props, "pci_bus_id"):
        return None
    domain = getattr(props, "pci_domain_id", 0)
    return f"{domain:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"


def _nvml_handle(nvml: ModuleType, index: int | None) -> Any:
    """The NVML handle of torch's cuda:index.

    torch numbers devices after CUDA_VISIBLE_DEVICES (and CUDA_DEVICE_ORDER, which defaults to
    fastest-first), NVML numbers every GPU in PCI order: the same index can name two different
    GPUs. The PCI bus id (then the UUID) is the same in both worlds, so it is tried first; the
    index, mapped through CUDA_VISIBLE_DEVICES, is the last resort.
    """
    idx = _torch_index(index)
    entry = _visible_entry(idx)
    if entry is not None and entry.startswith("MIG-"):
        # A MIG instance shares its parent's PCI address: the parent's handle would report the
        # whole GPU's memory (every tenant's). The instance's own UUID names just this slice.
        try:
            return nvml.nvmlDeviceGetHandleByUUID(entry)
        except nvml.NVMLError:
            pass
    bus_id = _pci_bus_id(idx)
    if bus_id is not None:
        try:
            return nvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        except nvml.NVMLError:
            pass
    props = _cuda_props(idx)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except nvml.NVMLError:
            pass
    return _handle_from_visible_devices(nvml, idx)


def _visible_entry(idx: int) -> str | None:
    """The CUDA_VISIBLE_DEVICES entry that torch's cuda:idx is, or None when unset or shorter."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    visible = [v for v in visible if v]
    return visible[idx] if idx < len(visible) else None


def _handle_from_visible_devices(nvml: ModuleType, idx: int) -> Any:
    entry = _visible_entry(idx)
    if entry is not None:
        if entry.isdigit():
            return nvml.nvmlDeviceGetHandleByIndex(int(entry))
        if entry.startswith(("GPU-", "MIG-")):
            return nvml.nvmlDeviceGetHandleByUUID(entry)
    return nvml.nvmlDeviceGetHandleByIndex(idx)


# --------------------------------------------------------------------------- probes


class _NvmlProbe:
    """Reads one GPU. A query that fails yields None for its metric; NotSupported disables it."""

    def __init__(self, nvml: ModuleType, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        self._off: set[str] = set()
        self.errors: dict[str, str] = {}
        events = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = events or nvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def _query(self, name: str, call: Callable[[], Any]) -> Any:
        if name in self._off:
            return None
        try:
            return call()
        except self._nvml.NVMLError as exc:
            not_supported = getattr(self._nvml, "NVMLError_NotSupported", ())
            if isinstance(exc, not_supported):
                self._off.add(name)
            self.errors.setdefault(name, str(exc) or type(exc).__name__)
            return None

    def power_limit_w(self) -> float | None:
        """The board's enforced power limit in W (the lowest of the limits in force), or None."""
        read = getattr(self._nvml, "nvmlDeviceGetEnforcedPowerLimit", None)
        if read is None:
            return None
        limit_mw = self._query("power_limit", lambda: read(self._handle))
        return None if limit_mw is None else limit_mw / 1000.0

    def read(self, sample: _Sample) -> None:
        nvml, h = self._nvml, self._handle
        util = self._query("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(h))
        if util is not None:
            sample.gpu_util, sample.mem_util = float(util.gpu), float(util.memory)
        mem = self._query("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            sample.mem_used_mib = mem.used / _MIB
        power_mw = self._query("power", lambda: nvml.nvmlDeviceGetPowerUsage(h))
        if power_mw is not None:
            sample.power_w = power_mw / 1000.0
        temp = self._query(
            "temperature", lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)
        )
        sample.temp_c = None if temp is None else float(temp)
        clock = self._query("sm_clock", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
        sample.sm_clock = None if clock is None else float(clock)
        sample.throttle = self._query("throttle", lambda: int(self._reasons(h)))


class _ProcTree:
    """CPU seconds and RSS of a process and its (recursive) children, cheaply.

    Children are rediscovered at most every `_CHILD_REFRESH_S`; the known ones are read every
    sample, on Linux straight from /proc/<pid>/stat (one read gives CPU ticks and RSS, about a
    third of psutil's cost), elsewhere through psutil. CPU is accumulated as per-process deltas
    so that workers coming and going never make the total run backwards.
    """

    def __init__(self, pid: int) -> None:
        self._pid = pid
        root = psutil.Process(pid)  # raises NoSuchProcess for a bad pid
        self._fast = os.path.exists(f"/proc/{pid}/stat")
        self._procs: dict[int, psutil.Process | None] = {pid: None if self._fast else root}
        self._last_cpu: dict[int, float] = {}
        self._cpu_total = 0.0
        self._next_refresh = 0.0
        self._first = True
        self._proc_children = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")

    def read(self, sample: _Sample) -> None:
        if sample.t >= self._next_refresh:
            self._refresh()
            self._next_refresh = sample.t + _CHILD_REFRESH_S
        rss = 0
        for pid, proc in list(self._procs.items()):
            try:
                cpu, rss_bytes = _read_proc_stat(pid) if proc is None else _read_psutil(proc)
            except (OSError, ValueError, IndexError, psutil.Error):
                self._forget(pid)
                continue
            rss += rss_bytes
            # At the first sample every process is a baseline; a child found later was born
            # during the burst, so all of its CPU time is new.
            prev = self._last_cpu.get(pid, cpu if self._first else 0.0)
            self._cpu_total += max(0.0, cpu - prev)
            self._last_cpu[pid] = cpu
        self._first = False
        sample.cpu_s = self._cpu_total
        sample.rss_mib = rss / _MIB

    def _forget(self, pid: int) -> None:
        if pid != self._pid:
            self._procs.pop(pid, None)
            self._last_cpu.pop(pid, None)

    def _refresh(self) -> None:
        pids = self._children_proc() if self._proc_children else None
        if pids is None:
            try:
                pids = [c.pid for c in psutil.Process(self._pid).children(recursive=True)]
            except psutil.Error:
                return
        for pid in pids:
            if pid in self._procs:
                continue
            try:
                self._procs[pid] = None if self._fast else psutil.Process(pid)
            except psutil.Error:
                continue

    def _children_proc(self) -> list[int] | None:
        """Descendants from /proc/<pid>/task/<tid>/children (Linux, CONFIG_PROC_CHILDREN)."""
        found: list[int] = []
        todo = [self._pid]
        while todo:
            pid = todo.pop()
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/children") as f:
                        kids = [int(x) for x in f.read().split()]
                except OSError:
                    continue
                found.extend(kids)
                todo.extend(kids)
        return found


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _read_proc_stat(pid: int) -> tuple[float, int]:
    """(user + system CPU seconds, RSS bytes) from /proc/<pid>/stat, see proc(5)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    fields = data[data.rindex(b")") + 2 :].split()  # the name may hold spaces and parentheses
    # fields[0] is field 3 (state): utime is 14, stime 15, rss 24 (pages).
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK, int(fields[21]) * _PAGE


def _read_psutil(proc: psutil.Process) -> tuple[float, int]:
    with proc.oneshot():
        times = proc.cpu_times()
        return times.user + times.system, proc.memory_info().rss


# --------------------------------------------------------------------------- the sampler


class Sampler:
    """Samples telemetry on a daemon thread while a burst runs.

    >>> with Sampler("cuda:0") as s:
    ...     t0 = time.perf_counter(); run_measured_steps(); t1 = time.perf_counter()
    ...     s.mark_window(t0, t1)
    >>> summary = s.stop()

    Nothing raised inside the thread reaches the caller: failures end up in `summary.note`.
    """

    def __init__(
        self, device: torch.device | str, *, interval_s: float = 0.05, pid: int | None = None
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s={interval_s!r}: must be > 0 seconds")
        self._device = str(device)
        self._kind, self._index = _parse_device(device)
        if self._kind == "cuda" and self._index is None:
            # CUDA's current device is per thread: ask here, not on the sampler thread.
            self._index = _torch_index(None)
        self._interval = float(interval_s)
        self._pid = os.getpid() if pid is None else pid
        self._samples: list[_Sample] = []
        self._notes: list[str] = []
        self._window: tuple[float, float] | None = None
        self._stop_event = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._summary: TelemetrySummary | None = None
        self._nvml: _NvmlProbe | None = None
        self._power_limit_w: float | None = None
        self._tree: _ProcTree | None = None
        self._thread_cpu_s = 0.0
        self._thread_wall_s = 0.0

    # -- public

    def start(self) -> Sampler:
        """Start the thread; returns once the first sample is taken (or after 10 s at most)."""
        if self._thread is not None:
            raise RuntimeError("Sampler.start(): already started; use a new Sampler per burst")
        self._thread = threading.Thread(target=self._run, name="workbench-telemetry", daemon=True)
        self._thread.start()
        self._ready.wait(_START_WAIT_S)
        return self

    def mark_window(self, start_s: float, end_s: float) -> None:
        """Set the measured window, in time.perf_counter() seconds."""
        if end_s < start_s:
            raise ValueError(f"mark_window({start_s}, {end_s}): end is before start")
        self._window = (float(start_s), float(end_s))

    def stop(self) -> TelemetrySummary:
        """Stop the thread (wakes it at once), join it and summarize. Safe to call twice."""
        if self._summary is not None:
            return self._summary
        if self._thread is not None:
            self._stop_event.set()
            self._thread.join(_JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                self._notes.append(f"sampler thread still busy after {_JOIN_TIMEOUT_S:.0f} s")
        source = "nvml" if self._nvml is not None else "cpu"
        notes = self._notes + [f"NVML {k}: {v}" for k, v in self._nvml_errors().items()]
        self._summary = _summarize(
            list(self._samples), self._window, source, notes, power_limit_w=self._power_limit_w
        )
        return self._summary

    @property
    def overhead_pct(self) -> float | None:
        """CPU time of the sampler thread over its lifetime, in % of one core (after stop)."""
        if self._thread_wall_s <= 0:
            return None
        return 100.0 * self._thread_cpu_s / self._thread_wall_s

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the thread

    def _run(self) -> None:
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        try:
            self._open()
            self._take()
        except Exception as exc:
            self._notes.append(f"telemetry setup failed: {exc!r}")
        finally:
            self._ready.set()
        try:
            self._loop()
        except Exception as exc:  # never seen; the burst must not pay for it
            self._notes.append(f"sampling stopped early: {exc!r}")
        self._thread_cpu_s = time.thread_time() - cpu0
        self._thread_wall_s = time.perf_counter() - wall0

    def _loop(self) -> None:
        next_t = time.perf_counter() + self._interval
        while not self._stop_event.wait(max(0.0, next_t - time.perf_counter())):
            next_t = max(next_t + self._interval, time.perf_counter())
            self._take()
        self._take()  # the state at stop: memory peaks that grew in the last interval

    def _open(self) -> None:
        try:
            self._tree = _ProcTree(self._pid)
        except psutil.Error as exc:
            self._notes.append(f"no CPU figures for pid {self._pid} ({exc})")
        if self._kind != "cuda":
            return
        reason = nvml_status()
        if reason is not None:
            self._notes.append(f"NVML not available ({reason})")
            _warn_once(f"NVML not available ({reason}): GPU telemetry off, using CPU figures")
            return
        import pynvml

        try:
            handle = _nvml_handle(pynvml, self._index)
        except Exception as exc:
            self._notes.append(f"NVML has no handle for {self._device} ({exc})")
            _warn_once(
                f"NVML has no handle for {self._device} ({exc}): GPU telemetry off, "
                "using CPU figures"
            )
            return
        self._nvml = _NvmlProbe(pynvml, handle)
        self._power_limit_w = self._nvml.power_limit_w()

    def _take(self) -> None:
        sample = _Sample(t=time.perf_counter())
        for probe in (self._nvml, self._tree):
            if probe is None:
                continue
            try:
                probe.read(sample)
            except Exception as exc:
                msg = f"{type(probe).__name__.strip('_')} sample failed: {exc!r}"
                if msg not in self._notes:
                    self._notes.append(msg)
        self._samples.append(sample)

    def _nvml_errors(self) -> dict[str, str]:
        return dict(self._nvml.errors) if self._nvml is not None else {}


# --------------------------------------------------------------------------- summary


def _in_window(samples: list[_Sample], window: tuple[float, float] | None) -> list[_Sample]:
    if window is None:
        return samples
    start, end = window
    return [s for s in samples if start <= s.t <= end]


def _nearest(samples: list[_Sample], window: tuple[float, float]) -> list[_Sample]:
    mid = (window[0] + window[1]) / 2
    return [min(samples, key=lambda s: abs(s.t - mid))] if samples else []


def _values(samples: list[_Sample], name: str) -> list[float]:
    return [v for s in samples if (v := getattr(s, name)) is not None]


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _cpu_pct(all_samples: list[_Sample], used: list[_Sample]) -> float | None:
    """CPU % from the cumulative CPU seconds of the first and last sample used.

    A single sample is paired with the one before it, so a window shorter than the interval
    still gets the rate of the interval that ended inside it.
    """
    pts = [s for s in used if s.cpu_s is not None]
    if len(pts) == 1:
        before = [s for s in all_samples if s.cpu_s is not None and s.t < pts[0].t]
        pts = before[-1:] + pts
    if len(pts) < 2 or pts[-1].t <= pts[0].t:
        return None
    return 100.0 * (pts[-1].cpu_s - pts[0].cpu_s) / (pts[-1].t - pts[0].t)  # type: ignore[operator]


def _throttle_names(masks: list[float]) -> tuple[str, ...]:
    seen = 0
    for m in masks:
        seen |= int(m)
    names = [name for bit, name in _THROTTLE_BITS if seen & bit and name not in _NOT_LIMITING]
    known = 0
    for bit, _ in _THROTTLE_BITS:
        known |= bit
    unknown = seen & ~known
    names += [f"unknown_0x{1 << b:x}" for b in range(unknown.bit_length()) if unknown >> b & 1]
    return tuple(names)


def _summarize(
    samples: list[_Sample],
    window: tuple[float, float] | None,
    source: str,
    notes: list[str],
    *,
    power_limit_w: float | None = None,
) -> TelemetrySummary:
    notes = list(notes)
    inside = _in_window(samples, window)
    used = inside
    if not inside and samples and window is not None:
        used = _nearest(samples, window)
        notes.append("no sample inside the measured window: used the nearest one")
    clocks = _values(used, "sm_clock")
    mem = _values(samples, "mem_used_mib")
    temps = _values(used, "temp_c")
    rss = _values(samples, "rss_mib")
    return TelemetrySummary(
        source=source,
        gpu_util_pct=_mean(_values(used, "gpu_util")),
        mem_busy_pct=_mean(_values(used, "mem_util")),
        gpu_mem_used_mib=max(mem) if mem else None,
        power_w=_mean(_values(used, "power_w")),
        temp_c=max(temps) if temps else None,
        sm_clock_mhz=statistics.median(clocks) if clocks else None,
        throttle_reasons=_throttle_names(_values(used, "throttle")),
        cpu_util_pct=_cpu_pct(samples, used),
        rss_peak_mib=max(rss) if rss else None,
        samples=len(inside),
        note="; ".join(notes) if notes else None,
        power_limit_w=power_limit_w,
    )


# --------------------------------------------------------------------------- plausibility

# nvml.h (nvmlDeviceGetPowerUsage) states +/-5 % accuracy of the draw (for Fermi and Kepler; it
# gives none for newer parts, which report a 1 s average). A window mean more than that above the
# enforced limit is no longer a reading error: the figure is not this board's.
_POWER_READING_TOLERANCE = 0.05
_TEMP_RANGE_C = (0.0, 120.0)


def telemetry_problems(summary: TelemetrySummary) -> list[str]:
    """Readable problems with figures outside their physical range; empty when all are plausible.

    NVML's utilizations are percentages of time (0-100), power draw is positive and held at or
    under the board's enforced limit, and a working GPU reads 0-120 C (they throttle near 90 and
    shut down before 120). A value outside that came from the wrong device, the wrong unit or a
    broken query: the burst reports it as suspect instead of letting it be saved. Unknown (None)
    figures are not problems.
    """
    problems = [
        p
        for p in (
            _out_of_range("gpu_util_pct", summary.gpu_util_pct, 0.0, 100.0, "%"),
            _out_of_range("mem_busy_pct", summary.mem_busy_pct, 0.0, 100.0, "%"),
            _out_of_range("temp_c", summary.temp_c, *_TEMP_RANGE_C, " C"),
        )
        if p is not None
    ]
    problems += _power_problems(summary.power_w, summary.power_limit_w)
    return problems


def _out_of_range(name: str, value: float | None, low: float, high: float, unit: str) -> str | None:
    if value is None or (math.isfinite(value) and low <= value <= high):
        return None
    return f"{name}={value:g}{unit} is outside {low:g}-{high:g}{unit}: NVML figure not trusted"


def _power_problems(power_w: float | None, limit_w: float | None) -> list[str]:
    if power_w is None:
        return []
    if not math.isfinite(power_w) or power_w <= 0:
        return [f"power_w={power_w:g} W is not > 0 W: NVML figure not trusted"]
    if limit_w is not None and limit_w > 0 and power_w > limit_w * (1 + _POWER_READING_TOLERANCE):
        return [
            f"power_w={power_w:g} W is above the board's enforced power limit of {limit_w:g} W "
            f"(+{_POWER_READING_TOLERANCE:.0%} reading tolerance): NVML figure not trusted"
        ]
    return []
