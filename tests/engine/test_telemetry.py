"""Tests for workbench.engine.telemetry: CPU fallback on a real burst, window statistics, a scripted
fake pynvml for the NVML path, the one-time warning, and a fast, clean stop."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any, ClassVar

import psutil
import pytest
import torch
from nvml_errors import LibraryNotFound, NotSupported, NVMLError

from workbench import Knobs, Workload, run_burst
from workbench.engine import burst, telemetry
from workbench.engine.nvml_record import throttle_names
from workbench.engine.telemetry import (
    Sampler,
    TelemetrySummary,
    _Sample,
    _summarize,
    telemetry_problems,
)

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def fresh_nvml() -> Iterator[None]:
    """Each test starts with NVML unchecked and no warning given, and leaves it so."""
    telemetry._NVML.reset()
    yield
    telemetry._NVML.reset()


# --------------------------------------------------------------------------- a fake pynvml


class FakeNvml(types.ModuleType):
    """A pynvml stand-in: each query returns the next scripted value (the last one repeats).

    A scripted value that is an exception instance is raised instead of returned.
    """

    NVMLError = NVMLError
    NVMLError_NotSupported = NotSupported
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(
        self,
        init_error: Exception | None = None,
        util_by_handle: dict[str, tuple[int, int]] | None = None,
        **scripts: list[Any],
    ) -> None:
        super().__init__("pynvml")
        self.init_error = init_error
        self.util_by_handle = util_by_handle or {}
        self.scripts = {k: list(v) for k, v in scripts.items()}
        self.calls: list[tuple[str, Any]] = []

    def _next(self, name: str) -> Any:
        self.calls.append((name, None))
        values = self.scripts[name]
        value = values.pop(0) if len(values) > 1 else values[0]
        if isinstance(value, BaseException):
            raise value
        return value

    def nvmlInit(self) -> None:
        self.calls.append(("init", None))
        if self.init_error is not None:
            raise self.init_error

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> str:
        self.calls.append(("by_pci", bus_id))
        if "pci_error" in self.scripts:
            raise NVMLError("Not Found")
        return f"handle:{bus_id}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self.calls.append(("by_uuid", uuid))
        return f"handle:{uuid}"

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self.calls.append(("by_index", index))
        return f"handle:{index}"

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        if h in self.util_by_handle:  # which GPU was read: each handle has its own figures
            gpu, memory = self.util_by_handle[h]
            return types.SimpleNamespace(gpu=gpu, memory=memory)
        gpu, memory = self._next("util")
        return types.SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        return types.SimpleNamespace(used=self._next("mem_mib") * MIB)

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return self._next("power_mw")

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._next("temp")

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        names = {self.NVML_CLOCK_SM: "sm_clock", self.NVML_CLOCK_MEM: "mem_clock"}
        return self._next(names[clock])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        return self._next("reasons")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: str) -> int:
        return self._next("power_limit_mw")


def fake_nvml(**overrides: Any) -> FakeNvml:
    scripts: dict[str, Any] = {
        "util": [(50, 20)],
        "mem_mib": [1000],
        "power_mw": [300_000],
        "temp": [60],
        "sm_clock": [1980],
        "mem_clock": [3201],
        "reasons": [0],
        "power_limit_mw": [700_000],
    }
    scripts.update(overrides)
    return FakeNvml(**scripts)


@pytest.fixture
def no_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(telemetry, "_pci_bus_id", lambda index: None)
    monkeypatch.setattr(telemetry, "_cuda_props", lambda index: None)


def scripted_burst(device: str = "cuda:0", manual: int = 3) -> Sampler:
    """Initial sample, `manual` samples inside a marked window, then the final one at stop.

    A one-hour interval keeps the thread asleep between them, so the count is exact.
    """
    s = Sampler(device, interval_s=3600).start()
    t0 = time.perf_counter()
    for _ in range(manual):
        s._take()
    s.mark_window(t0, time.perf_counter())
    return s


# --------------------------------------------------------------------------- NVML path


@pytest.mark.usefixtures("no_visible_devices")
def test_nvml_summary_uses_window_for_rates_and_whole_burst_for_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = fake_nvml(
        util=[(5, 1), (50, 20), (60, 30), (70, 40), (0, 0)],
        mem_mib=[9000, 2000, 3000, 2500, 500],
        power_mw=[100_000, 300_000, 310_000, 320_000, 90_000],
        temp=[90, 61, 65, 63, 95],
        sm_clock=[300, 1980, 1755, 1900, 210],
        reasons=[0x1, 0x4, 0x4 | 0x1, 0x40, 0x8],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    summary = scripted_burst().stop()

    assert summary.source == "nvml"
    assert summary.samples == 3
    assert summary.gpu_util_pct == pytest.approx(60.0)
    assert summary.mem_busy_pct == pytest.approx(30.0)
    assert summary.power_w == pytest.approx(310.0)
    assert summary.power_limit_w == pytest.approx(700.0)  # read once, at start
    assert summary.temp_c == 65.0  # window max: the 90/95 C outside the window do not count
    assert summary.sm_clock_mhz == 1900.0  # window median
    assert summary.throttle_reasons == ("sw_power_cap", "hw_thermal_slowdown")  # no gpu_idle
    assert summary.gpu_mem_used_mib == pytest.approx(9000.0)  # whole-burst max, warm-up included
    assert summary.rss_peak_mib is not None and summary.rss_peak_mib > 0
    assert summary.note is None
    assert ("by_index", 0) in fake.calls
    assert [c for c in fake.calls if c[0] == "power_limit_mw"] == [("power_limit_mw", None)]
    assert telemetry_problems(summary) == []


@pytest.mark.usefixtures("no_visible_devices")
def test_not_supported_metric_is_none_and_not_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_nvml(power_mw=[NotSupported()])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    summary = scripted_burst().stop()

    assert summary.power_w is None
    assert summary.gpu_util_pct == pytest.approx(50.0)
    assert summary.sm_clock_mhz == 1980.0
    assert [c for c in fake.calls if c[0] == "power_mw"] == [("power_mw", None)]
    assert summary.note is not None and "power: Not Supported" in summary.note


@pytest.mark.usefixtures("no_visible_devices")
def test_transient_nvml_error_yields_none_for_that_sample_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = fake_nvml(temp=[60, NVMLError("Unknown Error"), 70, 65])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    summary = scripted_burst().stop()

    assert summary.temp_c == 70.0
    assert summary.note is not None and "temperature: Unknown Error" in summary.note


@pytest.mark.usefixtures("no_visible_devices")
def test_errors_in_the_thread_end_up_in_note(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_nvml(sm_clock=[RuntimeError("boom")])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    summary = scripted_burst().stop()

    assert summary.source == "nvml"
    assert summary.note is not None and "boom" in summary.note
    assert summary.samples == 3


def test_handle_lookup_prefers_pci_bus_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "_pci_bus_id", lambda index: f"0000:{index + 0x3B:02x}:00.0")
    fake = fake_nvml()
    assert telemetry._nvml_handle(fake, 0) == "handle:0000:3b:00.0"


def test_handle_lookup_maps_index_through_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(telemetry, "_pci_bus_id", lambda index: "0000:3b:00.0")
    monkeypatch.setattr(telemetry, "_cuda_props", lambda index: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    fake = fake_nvml(pci_error=[True])  # PCI lookup fails: fall back to the mapped index
    assert telemetry._nvml_handle(fake, 1) == "handle:3"

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234,GPU-5678")
    assert telemetry._nvml_handle(fake, 1) == "handle:GPU-5678"


PCI_BY_TORCH_INDEX = {0: "0000:3b:00.0", 1: "0000:5e:00.0"}  # cuda:0, cuda:1 as torch numbers them


def test_sampler_for_cuda_1_reads_the_gpu_torch_calls_cuda_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CUDA_VISIBLE_DEVICES=2,3: torch's cuda:1 is physical GPU 3, and NVML's index 1 is another
    GPU. The sampler must read the GPU at cuda:1's PCI address, not NVML's GPU 1."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setattr(telemetry, "_pci_bus_id", PCI_BY_TORCH_INDEX.get)
    monkeypatch.setattr(telemetry, "_cuda_props", lambda index: None)
    fake = fake_nvml()
    fake.util_by_handle = {
        "handle:0000:5e:00.0": (91, 44),  # the GPU at cuda:1's address
        "handle:1": (3, 1),  # NVML's index 1: some other GPU
        "handle:0000:3b:00.0": (5, 2),  # cuda:0
    }
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    summary = scripted_burst("cuda:1").stop()

    assert summary.gpu_util_pct == pytest.approx(91.0)
    assert summary.mem_busy_pct == pytest.approx(44.0)
    assert ("by_pci", "0000:5e:00.0") in fake.calls
    assert not [c for c in fake.calls if c[0] == "by_index"]


def test_handle_lookup_takes_the_mig_instance_not_its_parent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A MIG slice shares its parent GPU's PCI address; the parent's handle would report every
    tenant's memory. The instance's UUID from CUDA_VISIBLE_DEVICES names the slice itself."""
    mig = "MIG-4f1c2d3e-aaaa-bbbb-cccc-0123456789ab"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mig)
    monkeypatch.setattr(telemetry, "_pci_bus_id", PCI_BY_TORCH_INDEX.get)
    fake = fake_nvml()
    assert telemetry._nvml_handle(fake, 0) == f"handle:{mig}"
    assert not [c for c in fake.calls if c[0] == "by_pci"]


def test_handle_lookup_failure_falls_back_to_cpu_figures(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_handle(nvml: Any, index: int | None) -> Any:
        raise NVMLError("GPU is lost")

    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    monkeypatch.setattr(telemetry, "_nvml_handle", no_handle)
    caplog.set_level(logging.WARNING, logger="workbench")
    summary = scripted_burst().stop()

    assert summary.source == "cpu"
    assert summary.gpu_util_pct is None
    assert summary.note is not None and "GPU is lost" in summary.note
    assert summary.rss_peak_mib is not None


# --------------------------------------------------------------------------- NVML missing


@pytest.fixture
def missing_nvml(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> FakeNvml:
    """An NVML whose library is not there; the workbench's warnings captured."""
    fake = FakeNvml(init_error=LibraryNotFound())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    caplog.set_level(logging.WARNING, logger="workbench")
    return fake


def test_missing_nvml_warns_once_per_process(
    missing_nvml: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    fake = missing_nvml
    for _ in range(2):
        summary = Sampler("cuda:0", interval_s=0.01).start().stop()
        assert summary.source == "cpu"
        assert summary.gpu_util_pct is None and summary.power_w is None
        assert summary.note is not None and "NVML Shared Library Not Found" in summary.note
        assert summary.rss_peak_mib is not None

    warnings = [r.getMessage() for r in caplog.records if "NVML" in r.getMessage()]
    assert warnings == [
        "NVML not available (NVML Shared Library Not Found): GPU telemetry off, using CPU figures"
    ]
    assert [c for c in fake.calls if c[0] == "init"] == [("init", None)]  # cached
    assert telemetry.nvml_status() == "NVML Shared Library Not Found"


def test_cpu_device_needs_no_nvml_and_no_warning(
    missing_nvml: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    fake = missing_nvml
    summary = Sampler("cpu", interval_s=0.01).start().stop()

    assert summary.source == "cpu"
    assert summary.note is None
    assert fake.calls == []
    assert [r for r in caplog.records if r.name == "workbench"] == []


# --------------------------------------------------------------------------- CPU figures, real


CHILD = (
    "import time\n"
    "block = b'x' * (100 * 1024 * 1024)  # written, so resident\n"
    "print('ready', flush=True)\n"
    "end = time.monotonic() + 30\n"
    "while time.monotonic() < end:  # busy, like a decoding worker\n"
    "    pass\n"
)


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def _spin(seconds: float) -> int:
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += 1
    return n


def test_cpu_figures_follow_a_child_and_a_busy_loop() -> None:
    base_mib = psutil.Process().memory_info().rss / MIB
    with Sampler("cpu", interval_s=0.02) as sampler:
        # Started after the sampler, like a DataLoader worker.
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            time.sleep(telemetry._CHILD_REFRESH_S + 0.2)  # rediscovered and sampled
            worker = psutil.Process(child.pid)
            c0, w0, t0 = time.process_time(), _cpu_s(worker), time.perf_counter()
            _spin(0.6)
            c1, w1, t1 = time.process_time(), _cpu_s(worker), time.perf_counter()
            sampler.mark_window(t0, t1)
        finally:
            child.kill()
            child.wait()
    summary = sampler.stop()

    assert summary.source == "cpu"
    assert summary.samples >= 5
    assert summary.rss_peak_mib is not None and summary.rss_peak_mib > base_mib + 90
    # What this process and its worker really got (other load on the machine decides how much):
    # the sampler must report the same, within the 10 ms tick resolution of CPU accounting.
    used_pct = 100 * ((c1 - c0) + (w1 - w0)) / (t1 - t0)
    assert summary.cpu_util_pct is not None and summary.cpu_util_pct > 5
    assert summary.cpu_util_pct == pytest.approx(used_pct, abs=15)
    assert summary.gpu_util_pct is None and summary.gpu_mem_used_mib is None
    assert summary.throttle_reasons == ()
    # 20 ms ticks, 2.5x the default rate, the GIL contested by the spinning loop, a PSS read at
    # each new high of the child's RSS: the worst case stays under half a core. Measured 10-16%
    # on the 2-core VMs, 25.2% once inside a full CI run (CPU time grows with a VM's load).
    # The cost at the default rate is the next test's.
    assert sampler.overhead_pct is not None and sampler.overhead_pct < 50


def test_the_sampler_costs_a_few_percent_of_a_core_at_the_default_rate() -> None:
    """The documented cost (module docstring: about 1% of a core at 50 ms) with this process and
    its children quiet: a sampler that re-read PSS every tick or scanned every process would
    take a third of a core and fail here."""
    with Sampler("cpu") as sampler:
        time.sleep(1.5)
    sampler.stop()
    assert sampler.overhead_pct is not None and sampler.overhead_pct < 8


# --------------------------------------------------------------------------- host memory: PSS

HAS_PSS = telemetry._pss_file(os.getpid()) is not None
needs_pss = pytest.mark.skipif(not HAS_PSS, reason="PSS needs /proc/<pid>/smaps_rollup (Linux)")


class _Shared(torch.utils.data.Dataset):
    """A dataset holding 200 MiB, written so resident: forked workers share it with the parent."""

    def __init__(self) -> None:
        self.block = torch.ones(200 * MIB // 4)

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.block[i : i + 4]


class _SharedPairs(_Shared):
    """(input, target) pairs read from the shared 200 MiB block: a training dataset."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        if not getattr(self, "scanned", False):  # once in each process, as a dataset scanning
            self.block[:: 4096 // 4].sum()  # its data would: read a value on every page, so a
            self.scanned = True  # worker maps every page it shares with the burst
        return self.block[i : i + 4], torch.tensor(i % 2)


def shared_workload() -> Workload:
    """A tiny model over a dataset of 200 MiB that forked loader workers share with the burst."""
    return Workload(name="shared", model=lambda: torch.nn.Linear(4, 2), dataset=_SharedPairs)


class KeptSampler(Sampler):
    """A Sampler that keeps its summaries, to compare a burst's figure with both of them."""

    kept: ClassVar[list[TelemetrySummary]] = []

    def stop(self) -> TelemetrySummary:
        summary = super().stop()
        KeptSampler.kept.append(summary)
        return summary


def _tree_pss_mib() -> float:
    """PSS of this process and its children, read independently of the sampler (psutil)."""
    procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
    return sum(p.memory_full_info().pss for p in procs) / MIB


@needs_pss
def test_loader_workers_shared_pages_are_counted_once() -> None:
    loader = torch.utils.data.DataLoader(_Shared(), batch_size=8, num_workers=2)
    with Sampler("cpu", interval_s=0.02) as sampler:
        batches = iter(loader)
        next(batches)  # both workers forked and running
        time.sleep(telemetry._CHILD_REFRESH_S + telemetry._PSS_EVERY_S + 0.3)
        independent = _tree_pss_mib()
        summary = sampler.stop()
        del batches  # workers exit

    assert summary.host_mem_kind == "pss"
    assert summary.host_mem_peak_mib is not None and summary.rss_peak_mib is not None
    # Summed RSS counts the 200 MiB block once in the parent and once more in each worker.
    assert summary.rss_peak_mib - summary.host_mem_peak_mib > 300
    assert summary.host_mem_peak_mib == pytest.approx(independent, rel=0.15)
    assert summary.note is None


@needs_pss
def test_a_cpu_burst_with_workers_reports_pss_as_its_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    KeptSampler.kept = []
    monkeypatch.setattr(burst, "Sampler", KeptSampler)
    r = run_burst(shared_workload(), Knobs(batch_size=8, num_workers=2), seconds=1.0,
                  warmup_steps=2, min_steps=3, device="cpu", record=False)  # fmt: skip
    assert r.ok, r.error
    summary = KeptSampler.kept[-1]
    assert r.peak_mem_kind == "pss" and r.peak_mem_mib == summary.host_mem_peak_mib
    assert summary.rss_peak_mib is not None and r.peak_mem_mib is not None
    assert summary.rss_peak_mib - r.peak_mem_mib > 300  # the block, counted once not three times


def test_unreadable_pss_falls_back_to_summed_rss_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def denied(pid: int, name: str) -> int:
        raise PermissionError(13, "Permission denied", f"/proc/{pid}/{name}")

    monkeypatch.setattr(telemetry, "_pss_file", lambda pid: "smaps_rollup")
    monkeypatch.setattr(telemetry, "_read_pss_file", denied)
    summary = Sampler("cpu", interval_s=0.01).start().stop()

    assert summary.host_mem_kind == "rss"
    assert summary.host_mem_peak_mib == summary.rss_peak_mib is not None
    assert summary.note is not None and "summed RSS" in summary.note
    assert "Permission denied" in summary.note


def test_without_proc_pss_the_figure_is_rss(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "_pss_file", lambda pid: None)  # not Linux, or before 4.14
    summary = Sampler("cpu", interval_s=0.01).start().stop()
    assert summary.host_mem_kind == "rss" and summary.host_mem_peak_mib == summary.rss_peak_mib
    assert summary.note is not None and "PSS needs Linux" in summary.note


@needs_pss
def test_smaps_and_smaps_rollup_give_the_same_pss() -> None:
    pid = os.getpid()
    rollup = telemetry._read_pss_file(pid, "smaps_rollup") / MIB
    per_mapping = telemetry._read_pss_file(pid, "smaps") / MIB  # one Pss: line per mapping
    assert rollup > 10
    assert per_mapping == pytest.approx(rollup, rel=0.05)


def test_pss_is_read_at_new_rss_highs_and_periodically(monkeypatch: pytest.MonkeyPatch) -> None:
    rss = {"bytes": 1000 * MIB}
    reads: list[float] = []
    monkeypatch.setattr(telemetry, "_pss_file", lambda pid: "smaps_rollup")
    monkeypatch.setattr(telemetry, "_read_proc_stat", lambda pid: (1.0, rss["bytes"]))
    monkeypatch.setattr(telemetry, "_read_pss_file", lambda pid, name: 600 * MIB)
    tree = telemetry._ProcTree(os.getpid())
    tree._proc_children = False
    monkeypatch.setattr(tree, "_refresh", lambda: None)  # this process alone
    for i in range(20):  # a sample every 50 ms for 1 s
        t = i * 0.05
        rss["bytes"] = (1100 if i == 7 else 1000) * MIB  # one short spike, 10 % up
        sample = _Sample(t=t)
        before = tree.pss_reads
        tree.read(sample)
        if tree.pss_reads > before:
            reads.append(round(t, 2))
        # between reads PSS is the last read plus the RSS grown since: the spike counts even
        # though this fake's read (600, always) missed it
        assert sample.pss_mib == (700.0 if i == 7 else 600.0)

    # Periodic reads (the reads cost ~0 here, so every _PSS_EVERY_S), plus the spike's sample.
    assert reads == [0.0, 0.25, 0.35, 0.6, 0.85]
    assert tree.pss_reads == 5


def test_summary_takes_the_pss_peak_and_keeps_summed_rss_beside_it() -> None:
    samples = synthetic()
    samples[3].pss_mib, samples[6].pss_mib = 150.0, 120.0
    s = _summarize(samples, None, "cpu", [])
    assert (s.host_mem_peak_mib, s.host_mem_kind, s.rss_peak_mib) == (150.0, "pss", 209.0)
    off = _summarize(samples, None, "cpu", [], pss_off="PSS of pid 7 unreadable (EACCES)")
    assert (off.host_mem_peak_mib, off.host_mem_kind) == (209.0, "rss")  # no PSS/RSS mix
    assert off.note is not None and "EACCES" in off.note
    none = _summarize([], None, "cpu", [])
    assert none.host_mem_peak_mib is None and none.host_mem_kind is None


def test_stop_is_fast_and_leaves_no_thread() -> None:
    sampler = Sampler("cpu", interval_s=10.0).start()
    t0 = time.perf_counter()
    summary = sampler.stop()
    assert time.perf_counter() - t0 < 0.5
    assert summary.samples == 2  # the first one and the one at stop; no window marked
    assert sampler._thread is not None and not sampler._thread.is_alive()
    names = [t.name for t in threading.enumerate()]
    assert "workbench-telemetry" not in names
    assert sampler.stop() is summary  # idempotent


def test_sampler_argument_errors() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        Sampler("cpu", interval_s=0)
    with pytest.raises(ValueError, match="'cuda:x'"):
        Sampler("cuda:x")
    sampler = Sampler("cpu", interval_s=10.0).start()
    try:
        with pytest.raises(ValueError, match="end is before start"):
            sampler.mark_window(2.0, 1.0)
        with pytest.raises(RuntimeError, match="already started"):
            sampler.start()
    finally:
        sampler.stop()


# --------------------------------------------------------------------------- window statistics


def synthetic(n: int = 10) -> list[_Sample]:
    """Samples at t = 0..n-1 s; GPU util 10*t %, CPU at half a core, a memory spike at t=0."""
    return [
        _Sample(
            t=float(i),
            gpu_util=10.0 * i,
            mem_used_mib=5000.0 if i == 0 else 1000.0 + i,
            temp_c=50.0 + i,
            sm_clock=1000.0 + 100 * i,
            throttle=0x1,
            cpu_s=0.5 * i,
            rss_mib=200.0 + i,
        )
        for i in range(n)
    ]


def test_window_selects_samples_by_timestamp() -> None:
    s = _summarize(synthetic(), (2.5, 6.5), "nvml", [])
    assert s.samples == 4  # t = 3, 4, 5, 6
    assert s.gpu_util_pct == pytest.approx(45.0)
    assert s.temp_c == 56.0
    assert s.sm_clock_mhz == pytest.approx(1450.0)
    assert s.cpu_util_pct == pytest.approx(50.0)
    assert s.gpu_mem_used_mib == 5000.0  # peaks: whole burst
    assert s.rss_peak_mib == 209.0
    assert s.throttle_reasons == ()  # gpu_idle is not a limit
    assert s.note is None


def test_window_without_a_sample_uses_the_nearest_one() -> None:
    s = _summarize(synthetic(), (4.2, 4.3), "nvml", [])
    assert s.samples == 0
    assert s.gpu_util_pct == pytest.approx(40.0)
    assert s.cpu_util_pct == pytest.approx(50.0)  # paired with the sample before it
    assert s.note is not None and "nearest" in s.note


def test_no_window_means_every_sample_and_empty_means_unknown() -> None:
    s = _summarize(synthetic(), None, "cpu", ["x"])
    assert s.samples == 10 and s.gpu_util_pct == pytest.approx(45.0) and s.note == "x"
    empty = _summarize([], (0.0, 1.0), "cpu", [])
    assert empty.samples == 0 and empty.cpu_util_pct is None and empty.rss_peak_mib is None


def test_throttle_bits_are_named() -> None:
    assert throttle_names([0x1]) == ()
    assert throttle_names([0x4 | 0x1, 0x80]) == ("sw_power_cap", "hw_power_brake_slowdown")
    assert throttle_names([0x20 | 0x800]) == ("sw_thermal_slowdown", "unknown_0x800")


# --------------------------------------------------------------------------- plausibility


def summary_of(**fields: Any) -> TelemetrySummary:
    """A plausible NVML summary of a busy 700 W board, with `fields` replaced."""
    base: dict[str, Any] = {
        "source": "nvml",
        "gpu_util_pct": 97.0,
        "mem_busy_pct": 41.0,
        "gpu_mem_used_mib": 30_000.0,
        "power_w": 650.0,
        "temp_c": 71.0,
        "sm_clock_mhz": 1980.0,
        "throttle_reasons": (),
        "cpu_util_pct": 180.0,
        "rss_peak_mib": 4000.0,
        "samples": 40,
        "note": None,
        "power_limit_w": 700.0,
    }
    base.update(fields)
    return TelemetrySummary(**base)


def test_plausible_and_unknown_figures_have_no_problems() -> None:
    assert telemetry_problems(summary_of()) == []
    edges = summary_of(gpu_util_pct=100.0, mem_busy_pct=0.0, temp_c=0.0, power_w=700.0)
    assert telemetry_problems(edges) == []
    unknown = summary_of(
        gpu_util_pct=None, mem_busy_pct=None, power_w=None, temp_c=None, power_limit_w=None
    )
    assert telemetry_problems(unknown) == []
    # Within the +/-5 % that NVML documents for its power reading: not a problem.
    assert telemetry_problems(summary_of(power_w=730.0)) == []


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"gpu_util_pct": 101.0}, "gpu_util_pct=101%"),
        ({"gpu_util_pct": -1.0}, "gpu_util_pct=-1%"),
        ({"gpu_util_pct": float("nan")}, "gpu_util_pct=nan%"),
        ({"mem_busy_pct": 255.0}, "mem_busy_pct=255%"),
        ({"temp_c": 121.0}, "temp_c=121 C"),
        ({"temp_c": -5.0}, "temp_c=-5 C"),
        ({"power_w": 0.0}, "power_w=0 W is not > 0 W"),
        ({"power_w": 800.0}, "power_w=800 W is above the board's enforced power limit of 700 W"),
        ({"power_w": 700_000.0, "power_limit_w": None}, None),  # mW read as W, limit unknown
    ],
)
def test_out_of_range_figures_are_named(fields: dict[str, Any], named: str | None) -> None:
    problems = telemetry_problems(summary_of(**fields))
    if named is None:  # no limit known: only the sign of power can be checked
        assert problems == []
        return
    assert len(problems) == 1
    assert named in problems[0] and "not trusted" in problems[0]


def test_several_problems_are_all_listed() -> None:
    problems = telemetry_problems(summary_of(gpu_util_pct=250.0, temp_c=400.0, power_w=-3.0))
    assert [p.split("=")[0] for p in problems] == ["gpu_util_pct", "temp_c", "power_w"]


@pytest.mark.usefixtures("no_visible_devices")
def test_unsupported_power_limit_is_unknown_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_nvml(power_limit_mw=[NotSupported()], power_mw=[250_000])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    summary = scripted_burst().stop()
    assert summary.power_limit_w is None
    assert summary.power_w == pytest.approx(250.0)
    assert telemetry_problems(summary) == []


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_real_nvml_sees_a_busy_gpu() -> None:
    if telemetry.nvml_status() is not None:
        pytest.skip(f"NVML: {telemetry.nvml_status()}")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    with Sampler("cuda") as sampler:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1.5:
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()
        sampler.mark_window(t0, time.perf_counter())
    summary = sampler.stop()
    assert summary.source == "nvml"
    assert summary.gpu_util_pct is not None and summary.gpu_util_pct > 20
    assert summary.gpu_mem_used_mib is not None and summary.gpu_mem_used_mib > 32
    assert summary.sm_clock_mhz is not None and summary.sm_clock_mhz > 100
    assert summary.mem_clock_mhz is None or summary.mem_clock_mhz > 100
    assert summary.power_w is None or summary.power_w > 10
    record = summary.nvml  # the window's NVML record, as a burst keeps it
    assert record is not None and record["samples"] == summary.samples
    assert record["start"]["sm_clock_mhz"] is not None and record["end"]["t_s"] > 1.0
    assert len(record["window"]["sm_clock_mhz"]) == summary.samples
    assert summary.clock_drop_pct is not None and 0 <= summary.clock_drop_pct < 100
    assert summary.samples >= 10
    assert telemetry_problems(summary) == []  # every figure in its physical range
