"""Telemetry during a burst: an NVML sampler thread, with CPU figures always and as the fallback.

A `Sampler` runs beside a burst on a daemon thread and takes one sample every `interval_s`
(50 ms by default): NVML device utilization, the share of time device memory was busy, device
memory in use, power, temperature, SM and memory clocks and clock-limiting ("throttle") reasons,
plus the CPU time and RSS of this process and its children (DataLoader workers). The burst marks
its measured window with `mark_window()`; `stop()` summarizes, and `telemetry_problems()` lists
the figures that are out of their physical range (a number not to trust). Beside the summary,
the burst keeps NVML's clocks, temperature, power and reasons at the window's edges and over it
(`nvml_record`), so a slow-down inside the window can be seen and checked.

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
- Host memory is the tree's proportional set size (PSS) on Linux: each page counts once, split
  among the processes that map it. Forked DataLoader workers share the parent's copy-on-write
  pages (torch's libraries, the model, the dataset object), so summed RSS counts those pages
  once per process: 1,673-1,927 MiB summed RSS against 591-668 MiB PSS for cnn bursts with 2
  workers here (`rss_peak_mib` keeps the sum beside it). PSS is read from
  /proc/<pid>/smaps_rollup (smaps on kernels before 4.14); where it cannot be read (not Linux,
  another user's process) the figure is summed RSS, an upper bound, and `host_mem_kind` says
  "rss". Pages shared with processes outside the tree (a library that
  another Python has loaded too) are charged to the tree only in part: that is what PSS means.
- `gpu_mem_used_mib` is NVML's device view (every process on the GPU plus the CUDA context), not
  this process's allocator: the allocator's own peaks belong to `torch.cuda.max_memory_*`.

Cost (measured on the 2-core x86_64 development box, no GPU, torch imported, two idle worker
children): the sampler thread used 0.9 % of one core at the default 50 ms interval (4.3 % at
10 ms), about 0.45 ms of CPU per sample including the wake-up (0.1 ms when caches are warm);
see `Sampler.overhead_pct`. That is after two choices: process figures are read straight from
/proc/<pid>/stat on Linux (one read per process, a third of psutil's cost; psutil elsewhere),
and children are rediscovered at most every 0.5 s from /proc/<pid>/task/<tid>/children (0.2 ms)
instead of psutil's scan of every process (3 ms for 78 processes here, more on a busy server).
NVML adds seven queries per sample; not measured here (no GPU): read `overhead_pct` on one.

PSS is the expensive figure: the kernel walks every resident page to split the shared ones,
8-25 ms of CPU for a cnn burst's three processes (about 1.7 GiB summed RSS) against 0.007 ms
for a stat. Read every 50 ms it would take a third of a core. So the period stays 50 ms for
everything else, and PSS is read when summed RSS reaches a new high (a spike is caught in the
sample that sees it) and otherwise at most every 0.25 s and no more often than keeps those
reads under 2 % of one core (`_pss_due`). Measured in real cnn bursts with 2 workers, per
sample on the sampler thread: 0.17-0.18 ms of CPU on average before PSS, 1.33-1.40 ms after
(the median sample is unchanged at 0.15-0.18 ms; one with a PSS read costs the 8-25 ms); in the
measured window 0.32-0.37 % of one core before, 2.07-2.34 % after. None of it runs on the
training thread, and the reads release the GIL (plain file reads); the kernel's walk does take
the process's mmap lock for reading, so a training thread's mmap/munmap can wait for it (recent
kernels pause smaps_rollup's walk when a writer waits). A throughput A/B, PSS on and off, was
drowned here in the other load of a shared 2-core box (25-260 samples/s either way).

NVML is imported lazily (`pynvml`, from nvidia-ml-py) and initialized once per process.
"""

from __future__ import annotations

import logging
import math
import os
import re
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

import psutil

from workbench.engine.mig import UTILISATION_UNAVAILABLE, is_mig_handle, slice_handle
from workbench.engine.nvml_record import nvml_record, throttle_names

if TYPE_CHECKING:
    # torch only for a GPU: provenance reads NVML through here without it
    import torch

__all__ = ["Sampler", "TelemetrySummary", "nvml_handle", "nvml_status", "telemetry_problems"]

_LOG = logging.getLogger("workbench")
_MIB = 1024 * 1024
_CHILD_REFRESH_S = 0.1
"""How often the process tree is looked up again: loader workers start in a burst's set-up and a
short burst's window can be a quarter of a second, so a slower look-up missed them (~0.1 ms)."""
_START_WAIT_S = 10.0
_JOIN_TIMEOUT_S = 5.0


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
    """Peak RSS summed over this process and its children, whole burst: counts pages the
    processes share once per process, so an upper bound (see host_mem_peak_mib)."""
    samples: int
    """Samples taken inside the measured window."""
    note: str | None
    """Why something is missing (NVML unavailable, a query that failed), else None."""
    power_limit_w: float | None = None
    """The board's enforced power limit (NVML), read once at start; None if unknown."""
    host_mem_peak_mib: float | None = None
    """Peak host memory of this process and its children, whole burst, each page counted once:
    PSS summed over the tree where it could be read, else summed RSS (``host_mem_kind``)."""
    host_mem_kind: str | None = None
    """What ``host_mem_peak_mib`` is: "pss" or "rss" (the fallback); None when unknown."""
    host_mem_timeline: tuple[tuple[float, float], ...] = ()
    """``(seconds since the first sample, MiB)`` of the same figure over the whole burst, thinned
    to at most ``TIMELINE_POINTS`` points (each the highest of its stretch, so the peak stays)."""
    mem_clock_mhz: float | None = None
    """Memory clock (NVML_CLOCK_MEM), window median."""
    clock_drop_pct: float | None = None
    """How far the sustained SM clock fell inside the window, in % of its high
    (``nvml_record.clock_drop``); 0.0 when it held, None with too few readings or no NVML."""
    nvml: dict[str, Any] | None = None
    """NVML at the window's edges and over it (``nvml_record.nvml_record``: ``start``, ``end``,
    ``window`` columns, ``clock_drop``); None where NVML gave nothing (a CPU burst)."""


@dataclass(slots=True)
class _Sample:
    t: float
    gpu_util: float | None = None
    mem_util: float | None = None
    mem_used_mib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    sm_clock: float | None = None
    mem_clock: float | None = None
    throttle: int | None = None
    cpu_s: float | None = None
    rss_mib: float | None = None
    pss_mib: float | None = None  # read, or the last read plus RSS growth since (_ProcTree)


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
        # NVML is optional: absent without an NVIDIA driver
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
        # torch only for a GPU: provenance reads NVML through here without it
        import torch

        return torch.cuda.current_device() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def _cuda_props(index: int) -> Any | None:
    try:
        # torch only for a GPU: provenance reads NVML through here without it
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


def nvml_handle(index: int | None) -> tuple[ModuleType, Any] | None:
    """``(pynvml, the NVML handle of torch's cuda:index)``, or None where NVML is not usable or
    has no handle for it (a MIG slice's own handle where it is one: ``mig.slice_handle``)."""
    if nvml_status() is not None:
        return None
    # NVML is optional: absent without an NVIDIA driver
    import pynvml

    try:
        return pynvml, _nvml_handle(pynvml, index)
    except Exception:
        return None


def _nvml_handle(nvml: ModuleType, index: int | None) -> Any:
    """The NVML handle of torch's cuda:index: on a MIG slice, the slice's own.

    torch numbers devices after CUDA_VISIBLE_DEVICES (and CUDA_DEVICE_ORDER, which defaults to
    fastest-first), NVML numbers every GPU in PCI order: the same index can name two different
    GPUs. The PCI bus id (then the UUID) is the same in both worlds, so it is tried first; the
    index, mapped through CUDA_VISIBLE_DEVICES, is the last resort. A slice shares its parent's
    PCI address: a parent in MIG mode gives way to the slice CUDA runs on (``mig.slice_handle``;
    LookupError where it cannot tell which).
    """
    idx = _torch_index(index)
    uuid = getattr(_cuda_props(idx), "uuid", None)
    return slice_handle(nvml, _device_handle(nvml, idx), None if uuid is None else str(uuid))


def _device_handle(nvml: ModuleType, idx: int) -> Any:
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

    def unavailable(self, name: str, reason: str) -> None:
        """Never query ``name``: on this device it has no figure, for ``reason``."""
        self._off.add(name)
        self.errors[name] = reason

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
        mem_clock = self._query(
            "mem_clock", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)
        )
        sample.mem_clock = None if mem_clock is None else float(mem_clock)
        sample.throttle = self._query("throttle", lambda: int(self._reasons(h)))


class _ProcTree:
    """CPU seconds, RSS and PSS of a process and its (recursive) children, cheaply.

    Children are rediscovered at most every `_CHILD_REFRESH_S`; the known ones are read every
    sample, on Linux straight from /proc/<pid>/stat (one read gives CPU ticks and RSS, about a
    third of psutil's cost), elsewhere through psutil. CPU is accumulated as per-process deltas
    so that workers coming and going never make the total run backwards.

    PSS costs far more: the kernel walks every page of the process to split shared ones (2.8 ms
    for one process with torch loaded, 690 MiB resident, against 0.007 ms for its stat), so it
    is read only when due (`_pss_due`), not every sample. `pss_off` says why PSS is not used.
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
        self._pss_file = _pss_file(pid) if self._fast else None
        has_pss = self._pss_file is not None if self._fast else _psutil_has_pss(root)
        self.pss_off = None if has_pss else "PSS needs Linux's /proc/<pid>/smaps_rollup or smaps"
        self._next_pss = 0.0
        self._rss_high = 0
        self.pss_reads = 0
        self._pss_base: dict[int, tuple[int, int]] | None = None  # pid: (PSS, RSS) last read

    def read(self, sample: _Sample) -> None:
        if sample.t >= self._next_refresh:
            self._refresh()
            self._next_refresh = sample.t + _CHILD_REFRESH_S
        rss, rss_by_pid = 0, {}
        for pid, proc in list(self._procs.items()):
            try:
                cpu, rss_bytes = _read_proc_stat(pid) if proc is None else _read_psutil(proc)
            except (OSError, ValueError, IndexError, psutil.Error):
                self._forget(pid)
                continue
            rss += rss_bytes
            rss_by_pid[pid] = rss_bytes
            # At the first sample every process is a baseline; a child found later was born
            # during the burst, so all of its CPU time is new.
            prev = self._last_cpu.get(pid, cpu if self._first else 0.0)
            self._cpu_total += max(0.0, cpu - prev)
            self._last_cpu[pid] = cpu
        self._first = False
        sample.cpu_s = self._cpu_total
        sample.rss_mib = rss / _MIB
        estimate = self._pss_since_read(rss_by_pid)
        if self._pss_due(sample.t, rss) or self._new_processes(rss_by_pid):
            cpu0 = time.thread_time()
            pss = self._read_pss()
            self._pss_base = (
                None
                if pss is None
                else {pid: (p, rss_by_pid.get(pid, 0)) for pid, p in pss.items()}
            )
            total = None if pss is None else sum(pss.values())
            estimate = max(total, estimate or 0) if total is not None else None
            self.pss_reads += 1
            cost_s = time.thread_time() - cpu0
            self._next_pss = sample.t + max(_PSS_EVERY_S, cost_s / _PSS_CORE_SHARE)
        sample.pss_mib = None if estimate is None else estimate / _MIB

    def _pss_since_read(self, rss_by_pid: dict[int, int]) -> int | None:
        """The tree's PSS now, from the last read: each living process's PSS then, plus the
        RSS the training process grew since. Memory a burst allocates there (a forward pass's
        activations) is new and private, so its PSS grows as its RSS does; without this, memory
        held for less than the time between reads would be missed. Workers' RSS is not added:
        a worker's RSS also grows by mapping pages it shares with its parent, which PSS splits,
        so only a read can tell (a process born since is read at once: ``_new_processes``)."""
        if self._pss_base is None or self.pss_off is not None:
            return None
        base = self._pss_base
        then = sum(p for pid, (p, _) in base.items() if pid in rss_by_pid)
        _, root_rss = base.get(self._pid, (0, rss_by_pid.get(self._pid, 0)))
        return then + max(0, rss_by_pid.get(self._pid, 0) - root_rss)

    def _new_processes(self, rss_by_pid: dict[int, int]) -> bool:
        """A process born since the last read (a loader worker) is read at once: its pages are
        mostly shared with its parent, and only a read can tell its share."""
        return (
            self._pss_base is not None
            and self.pss_off is None
            and any(pid not in self._pss_base for pid in rss_by_pid)
        )

    def _pss_due(self, t: float, rss_bytes: int) -> bool:
        """Read PSS now? When summed RSS reaches a new high, else every `_PSS_EVERY_S` or as
        rarely as keeps these periodic reads under `_PSS_CORE_SHARE` of a core.

        A peak of PSS is a peak of new pages, and new pages raise RSS too: the RSS trigger
        catches a short spike in the sample that sees it. What RSS does not show is a worker
        copying a shared page on write (its RSS stays, the tree's PSS grows); the periodic read
        follows that slower drift.
        """
        if self.pss_off is not None:
            return False
        rising = rss_bytes > self._rss_high * (1 + _PSS_RSS_RISE)
        self._rss_high = max(self._rss_high, rss_bytes)
        return rising or t >= self._next_pss

    def _read_pss(self) -> dict[int, int] | None:
        """PSS of each known process, in bytes; None (and PSS off) if one is unreadable.

        A process that exited since it was found is left out; one whose PSS cannot be read
        (another user's, a /proc mounted with hidepid) turns PSS off for the rest of the burst:
        a sum mixing PSS and RSS would be neither.
        """
        found: dict[int, int] = {}
        for pid, proc in list(self._procs.items()):
            try:
                found[pid] = (
                    _pss_psutil(proc) if proc else _read_pss_file(pid, self._pss_file or "")
                )
            except (FileNotFoundError, ProcessLookupError, psutil.NoSuchProcess):
                if pid == self._pid:
                    self.pss_off = f"PSS of pid {pid} is gone"
                    return None
            except (OSError, ValueError, psutil.Error) as exc:
                self.pss_off = f"PSS of pid {pid} unreadable ({exc})"
                return None
        return found

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


_PSS_EVERY_S = 0.25
"""PSS is read at most this often between new RSS highs: every 5th sample at the default 50 ms."""
_PSS_CORE_SHARE = 0.02
"""...and no more often than keeps those reads under 2% of one core (a 15 ms read: every 0.75 s)."""
_PSS_RSS_RISE = 0.01
"""Summed RSS this far (1%) above its highest so far is a new high: PSS is read in that sample."""
_PSS_LINE = re.compile(rb"^Pss:\s+(\d+) kB", re.MULTILINE)


def _pss_file(pid: int) -> str | None:
    """The /proc file PSS is read from: smaps_rollup (Linux 4.14+, one summed line), else smaps
    (a line per mapping, slower); None where neither exists."""
    for name in ("smaps_rollup", "smaps"):
        if os.path.exists(f"/proc/{pid}/{name}"):
            return name
    return None


def _read_pss_file(pid: int, name: str) -> int:
    """PSS bytes of one process from /proc/<pid>/<name>, see proc(5)."""
    with open(f"/proc/{pid}/{name}", "rb") as f:
        data = f.read()
    return 1024 * sum(int(kb) for kb in _PSS_LINE.findall(data))


def _psutil_has_pss(proc: psutil.Process) -> bool:
    try:
        return hasattr(proc.memory_full_info(), "pss")
    except (OSError, psutil.Error):
        return False


def _pss_psutil(proc: psutil.Process) -> int:
    return int(proc.memory_full_info().pss)


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
        pss_off = self._tree.pss_off if self._tree is not None else None
        self._summary = _summarize(
            list(self._samples),
            self._window,
            source,
            notes,
            power_limit_w=self._power_limit_w,
            pss_off=pss_off,
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
        # NVML is optional: absent without an NVIDIA driver
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
        if is_mig_handle(pynvml, handle):  # never asked: no figure per slice (engine/mig.py)
            self._nvml.unavailable("utilization", UTILISATION_UNAVAILABLE)
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


def _summarize(
    samples: list[_Sample],
    window: tuple[float, float] | None,
    source: str,
    notes: list[str],
    *,
    power_limit_w: float | None = None,
    pss_off: str | None = None,
) -> TelemetrySummary:
    """Window statistics and whole-burst peaks. ``pss_off``: why PSS was not (or no longer)
    read; the host memory peak is then summed RSS, and a note says why."""
    notes = list(notes)
    inside = _in_window(samples, window)
    used = inside
    if not inside and samples and window is not None:
        used = _nearest(samples, window)
        notes.append("no sample inside the measured window: used the nearest one")
    clocks = _values(used, "sm_clock")
    mem_clocks = _values(used, "mem_clock")
    record = nvml_record(samples, window)
    drop = record["clock_drop"] if record else None
    mem = _values(samples, "mem_used_mib")
    temps = _values(used, "temp_c")
    rss = _values(samples, "rss_mib")
    host_mib, host_kind = _host_memory(samples, pss_off, notes)
    return TelemetrySummary(
        source=source,
        gpu_util_pct=_mean(_values(used, "gpu_util")),
        mem_busy_pct=_mean(_values(used, "mem_util")),
        gpu_mem_used_mib=max(mem) if mem else None,
        power_w=_mean(_values(used, "power_w")),
        temp_c=max(temps) if temps else None,
        sm_clock_mhz=statistics.median(clocks) if clocks else None,
        throttle_reasons=throttle_names(_values(used, "throttle")),
        cpu_util_pct=_cpu_pct(samples, used),
        rss_peak_mib=max(rss) if rss else None,
        samples=len(inside),
        note="; ".join(notes) if notes else None,
        power_limit_w=power_limit_w,
        host_mem_peak_mib=host_mib,
        host_mem_kind=host_kind,
        host_mem_timeline=_host_timeline(samples, "pss_mib" if host_kind == "pss" else "rss_mib"),
        mem_clock_mhz=statistics.median(mem_clocks) if mem_clocks else None,
        clock_drop_pct=drop["pct"] if drop else None,
        nvml=record,
    )


TIMELINE_POINTS = 100


def _host_timeline(samples: list[_Sample], name: str) -> tuple[tuple[float, float], ...]:
    points = [(s.t, getattr(s, name)) for s in samples if getattr(s, name) is not None]
    if not points:
        return ()
    t0, stride = points[0][0], max(1, -(-len(points) // TIMELINE_POINTS))
    out = []
    for i in range(0, len(points), stride):
        chunk = points[i : i + stride]
        t, mib = max(chunk, key=lambda p: p[1])
        out.append((round(t - t0, 3), round(mib, 1)))
    return tuple(out)


def _host_memory(
    samples: list[_Sample], pss_off: str | None, notes: list[str]
) -> tuple[float | None, str | None]:
    """(peak MiB, "pss" or "rss") of the process tree; appends to ``notes`` when RSS stands in."""
    pss = _values(samples, "pss_mib")
    if pss_off is None and pss:
        return max(pss), "pss"
    rss = _values(samples, "rss_mib")
    if not rss:
        return None, None
    if pss_off is not None:
        notes.append(f"host memory is summed RSS, an upper bound: {pss_off}")
    return max(rss), "rss"


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
