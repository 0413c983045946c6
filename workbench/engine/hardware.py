"""Device facts, peak FLOP/s and MFU.

MFU (model FLOPs utilization) here is

    MFU % = 100 * (model FLOPs per sample, forward + backward) * (samples per second) / peak

The numerator counts the FLOPs the model needs (a workload's FLOPs per sample, fwd + bwd, the
usual 3x forward for a training step), not what the hardware happened to execute, so
recomputation, padding or a slow kernel lower MFU instead of inflating it.

The denominator is the device's **dense** peak for the precision the burst used: tensor-core
throughput without 2:4 structured sparsity. Datasheets print the sparse figure first (twice the
dense one), but training runs dense matmuls, so dividing by the sparse figure would halve every
MFU. Where a datasheet does not give a precision, or a GPU lacks it (bf16 and tf32 before
Ampere), the peak is None and so is MFU: never a made-up number. `measure_matmul_flops` gives a
measured ceiling instead, for any device, a CPU included.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import math
import os
import platform
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

import workbench
from workbench.core.errors import InputError
from workbench.engine import mig
from workbench.engine.telemetry import nvml_handle, nvml_status

__all__ = [
    "DeviceInfo",
    "device_info",
    "estimate_mfu",
    "measure_matmul_flops",
    "mig_slice",
    "peak_flops",
    "resolve_device",
    "versions",
    "workbench_version",
]

_MIB = 1024 * 1024
_T = 1e12
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
"""The datasheet's columns: the math unit a peak is for ("fp32": CUDA-core IEEE fp32)."""
_PEAK_COLUMNS = {
    "fp32": ("fp32",), "fp32-strict": ("fp32",), "tf32": ("tf32",), "bf16": ("bf16",),
    "fp16": ("fp16",), "default": ("tf32", "fp32"),
}  # fmt: skip
"""Which column each ``precision`` knob is measured against, first known wins. ``default`` is
PyTorch's own math: fp32 matmuls IEEE on CUDA cores, but cuDNN convolutions allowed TF32 tensor
cores, so its ceiling on a GPU with TF32 is the TF32 peak (a convnet's FLOPs are mostly
convolutions and can reach it; against the fp32 peak its MFU could pass 100%). A model whose
FLOPs are matmuls reads low against it, and rightly: those matmuls leave the TF32 tensor cores
idle (``precision=tf32`` would use them). Where the GPU has no TF32 (Volta, Turing) everything
runs IEEE fp32 and the fp32 peak applies."""
_DEVICE_FORMS = "'auto', 'cpu', 'cuda' or 'cuda:N'"


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """Facts about the device a burst runs on. Unknown values are None."""

    kind: str
    """Either "cuda" or "cpu"."""
    name: str
    """torch.cuda.get_device_name, or the CPU model."""
    index: int | None
    """CUDA device index (as torch numbers it), None on CPU."""
    total_mem_mib: float | None
    """CUDA: device memory; CPU: system RAM."""
    capability: tuple[int, int] | None
    """CUDA compute capability."""
    driver_version: str | None
    """NVIDIA driver version, from NVML."""
    cuda_version: str | None
    """CUDA version torch was built with (torch.version.cuda)."""
    cpu_count: int
    """CPU cores this process may run on (its affinity mask), not the machine's total."""
    mig: mig.MigSlice | None = None
    """The MIG slice this device is (``name`` is then the slice's: "... MIG 3g.40gb"), with its
    share of the GPU's SMs; None for a whole GPU or a CPU."""


# --------------------------------------------------------------------------- devices


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """The torch.device to run on. None/"auto": CUDA if available, else CPU.

    "cuda" becomes the current CUDA device ("cuda:0" by default) so that results name one GPU.
    Raises ValueError naming the device and what is allowed.
    """
    if device is None or (isinstance(device, str) and device.strip().lower() == "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    dev = _parse_device(device)
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise InputError(f"device {device!r}: {dev.type!r} is not supported; use {_DEVICE_FORMS}")
    if not torch.cuda.is_available():
        raise InputError(
            f"device {device!r}: CUDA is not available here (torch.cuda.is_available() is "
            "False); use 'cpu' or 'auto'"
        )
    index = torch.cuda.current_device() if dev.index is None else dev.index
    count = torch.cuda.device_count()
    if index >= count:
        raise InputError(
            f"device {device!r}: only {count} CUDA device(s) visible, cuda:0 to cuda:{count - 1}"
        )
    return torch.device("cuda", index)


def _parse_device(device: object) -> torch.device:
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise InputError(f"device {device!r}: expected {_DEVICE_FORMS}")
    try:
        return torch.device(device.strip().lower())
    except (RuntimeError, ValueError) as exc:
        raise InputError(f"device {device!r}: expected {_DEVICE_FORMS}") from exc


def device_info(device: str | torch.device | None = None) -> DeviceInfo:
    """Facts about `device` (resolved as in `resolve_device`)."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev.index)
        name = torch.cuda.get_device_name(dev.index)
        slice_ = mig_slice(dev.index, name, getattr(props, "multi_processor_count", None))
        return DeviceInfo(
            kind="cuda",
            name=slice_.name if slice_ else name,
            index=dev.index,
            total_mem_mib=props.total_memory / _MIB,
            capability=(props.major, props.minor),
            driver_version=_driver_version(),
            cuda_version=torch.version.cuda,
            cpu_count=_cpu_count(),
            mig=slice_,
        )
    return DeviceInfo(
        kind="cpu",
        name=cpu_model(),
        index=None,
        total_mem_mib=psutil.virtual_memory().total / _MIB,
        capability=None,
        driver_version=_driver_version(),
        cuda_version=torch.version.cuda,
        cpu_count=_cpu_count(),
    )


def mig_slice(index: int | None, cuda_name: str, sms: int | None) -> mig.MigSlice | None:
    """The MIG slice cuda:index is (``workbench.engine.mig``), None for a whole GPU: from
    NVML where it can read the device (its MIG device handle, its name, its parent GPU's
    name), else from CUDA's name alone."""
    found = nvml_handle(index)
    if found is None:
        return mig.slice_of(cuda_name, sms)
    nvml, handle = found
    if not mig.is_mig_handle(nvml, handle):
        return mig.slice_of(cuda_name, sms)
    name, gpu = mig.nvml_names(nvml, handle)
    return mig.slice_of(cuda_name, sms, nvml_name=name, nvml_gpu_name=gpu, nvml_says_mig=True)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what ``platform`` says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _cpu_count() -> int:
    """Cores this process may use: its affinity mask (taskset, SLURM's cpuset), capped by a
    cgroup CPU quota where one is set (a container given 4 CPUs of a 64-core host sees 64 in
    its mask; loader workers past the quota only queue for it)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs' worth of time the cgroup allows per period (cgroup v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``); None where no quota is set or readable."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def _driver_version() -> str | None:
    if nvml_status() is not None:
        return None
    try:
        # NVML is optional: absent without an NVIDIA driver
        import pynvml

        version = pynvml.nvmlSystemGetDriverVersion()
    except Exception:
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


# --------------------------------------------------------------------------- peak FLOP/s

# Dense peaks in FLOP/s: (name pattern, fp32 CUDA cores, tf32, bf16, fp16 with FP32 accumulate).
# First match wins, so specific variants come before their family. Datasheets print tensor
# figures "with sparsity" (marked *): those are halved here. None: the GPU lacks the precision
# or the source does not give it.
_Row = tuple[str, float | None, float | None, float | None, float | None]
_PEAKS: tuple[_Row, ...] = (
    # NVIDIA GH200 Grace Hopper Superchip datasheet: FP32 67, TF32 494, BF16/FP16 990 (dense).
    (r"\bGH200\b", 67 * _T, 494 * _T, 990 * _T, 990 * _T),
    # NVIDIA H200 datasheet, H200 NVL: FP32 60, TF32 835*, BF16/FP16 1671*.
    (r"\bH200\b.*\bNVL\b", 60 * _T, 835 / 2 * _T, 1671 / 2 * _T, 1671 / 2 * _T),
    # NVIDIA H200 datasheet, H200 SXM ("NVIDIA H200"): FP32 67, TF32 989*, BF16/FP16 1979*.
    (r"\bH200\b", 67 * _T, 989 / 2 * _T, 1979 / 2 * _T, 1979 / 2 * _T),
    # NVIDIA H100 datasheet, H100 NVL: FP32 60, TF32 835*, BF16/FP16 1671*.
    (r"\bH100\b.*\bNVL\b", 60 * _T, 835 / 2 * _T, 1671 / 2 * _T, 1671 / 2 * _T),
    # NVIDIA H100 datasheet, H100 PCIe: FP32 51, TF32 756*, BF16/FP16 1513*.
    (r"\bH100\b.*\bPCIe\b", 51 * _T, 756 / 2 * _T, 1513 / 2 * _T, 1513 / 2 * _T),
    # NVIDIA H100 datasheet, H100 SXM ("NVIDIA H100 80GB HBM3"): FP32 67, TF32 989*, BF16 1979*.
    (r"\bH100\b.*(SXM|HBM3)", 67 * _T, 989 / 2 * _T, 1979 / 2 * _T, 1979 / 2 * _T),
    # NVIDIA HGX B200 specifications, per GPU: FP32 75, TF32 2.2 P*, FP16/BF16 4.5 P*.
    (r"\bB200\b", 75 * _T, 2200 / 2 * _T, 4500 / 2 * _T, 4500 / 2 * _T),
    # NVIDIA A100 datasheet (40/80 GB, SXM and PCIe alike): FP32 19.5, TF32 156, BF16/FP16 312.
    (r"\bA100\b", 19.5 * _T, 156 * _T, 312 * _T, 312 * _T),
    # A10G (AWS G5) has no NVIDIA datasheet; AWS/NVIDIA figures as tabulated by Baseten, "NVIDIA
    # A10 vs A10G for ML model inference" (2023): FP32 35, TF32 35, BF16/FP16 70. Not the A10's.
    (r"\bA10G\b", 35 * _T, 35 * _T, 70 * _T, 70 * _T),
    # NVIDIA A10 datasheet: FP32 31.2, TF32 62.5, BF16/FP16 125.
    (r"\bA10\b", 31.2 * _T, 62.5 * _T, 125 * _T, 125 * _T),
    # NVIDIA A40 datasheet: FP32 37.4, TF32 74.8, BF16/FP16 (FP32 accumulate) 149.7.
    (r"\bA40\b", 37.4 * _T, 74.8 * _T, 149.7 * _T, 149.7 * _T),
    # NVIDIA L40S datasheet: FP32 91.6, TF32 183, BF16/FP16 362.05.
    (r"\bL40S\b", 91.6 * _T, 183 * _T, 362.05 * _T, 362.05 * _T),
    # NVIDIA L40 datasheet: FP32 90.5, TF32 90.5, BF16/FP16 181.05.
    (r"\bL40\b", 90.5 * _T, 90.5 * _T, 181.05 * _T, 181.05 * _T),
    # NVIDIA L4 datasheet: FP32 30.3, TF32 120*, BF16/FP16 242*.
    (r"\bL4\b", 30.3 * _T, 60 * _T, 121 * _T, 121 * _T),
    # NVIDIA V100 datasheet, V100S PCIe: FP32 16.4, tensor (FP16, FP32 accumulate) 130.
    (r"\bV100S\b", 16.4 * _T, None, None, 130 * _T),
    # NVIDIA V100 datasheet, V100 SXM2: FP32 15.7, tensor 125. Volta has no TF32 or BF16.
    (r"\bV100\b.*\bSXM2\b", 15.7 * _T, None, None, 125 * _T),
    # NVIDIA V100 datasheet, V100 PCIe: FP32 14, tensor 112.
    (r"\bV100\b.*\bPCIe\b", 14 * _T, None, None, 112 * _T),
    # NVIDIA T4 datasheet: FP32 8.1, mixed precision (FP16/FP32) 65. Turing has no TF32 or BF16.
    (r"\bT4\b", 8.1 * _T, None, None, 65 * _T),
    # NVIDIA Ada GPU architecture whitepaper, RTX 4090: FP32 82.6, TF32 82.6, BF16 165.2,
    # FP16 with FP32 accumulate 165.2 (330.3 is FP16 accumulate). Not 4090 D or Laptop.
    (r"\bRTX 4090\b(?!\s*(D\b|Ti\b|Laptop))", 82.6 * _T, 82.6 * _T, 165.2 * _T, 165.2 * _T),
    # NVIDIA Ampere GA102 whitepaper, RTX 3090: FP32 35.6, TF32 35.6, BF16 71, FP16 (FP32
    # accumulate) 71. Not 3090 Ti.
    (r"\bRTX 3090\b(?!\s*(Ti\b|Laptop))", 35.6 * _T, 35.6 * _T, 71 * _T, 71 * _T),
    # NVIDIA RTX 6000 Ada Generation datasheet: FP32 91.1. Its tensor figure (1,457 TFLOPS) is
    # FP8 with sparsity; it gives none per precision, so those stay unknown.
    (r"\bRTX 6000 Ada\b", 91.1 * _T, None, None, None),
)
_PEAK_PATTERNS = tuple((re.compile(row[0], re.IGNORECASE), row[1:]) for row in _PEAKS)


def peak_flops(device_name: str, precision: str, *, sms: int | None = None) -> float | None:
    """Dense datasheet peak FLOP/s of a GPU by its name, for a ``precision`` knob value or a
    datasheet column ("fp32", "tf32", "bf16", "fp16").

    None for a CPU, an unknown GPU or variant, a precision the GPU lacks, or an unknown
    precision. "fp32" and "fp32-strict" mean CUDA-core FP32 (TF32 off); "default" the TF32
    peak where the GPU has TF32 (PyTorch's cuDNN convolutions use it; ``_PEAK_COLUMNS`` says
    why), else fp32; "fp16" is tensor-core FP16 with FP32 accumulation, what autocast uses.

    A MIG slice's name ("NVIDIA H100 80GB HBM3 MIG 3g.40gb") gives the slice's share of its
    GPU's peak: the GPU's times ``sms`` (the slice's SMs, as CUDA counts them inside it) over
    the GPU's own (``mig.GPU_SMS``). Without ``sms``, or for a GPU whose SM count is not
    known, a slice's peak is None: the whole GPU's would understate MFU about 7x on a 1g slice.
    """
    if not isinstance(device_name, str) or precision not in _PEAK_COLUMNS:
        return None
    named = mig.split_name(device_name)
    if named is not None:
        whole = _datasheet_peak(named[0], precision)
        share = mig.MigSlice(named[0], named[1], sms, mig.gpu_sms(named[0])).sm_share
        return whole * share if whole is not None and share is not None else None
    return _datasheet_peak(device_name, precision)


def _datasheet_peak(device_name: str, precision: str) -> float | None:
    for pattern, peaks in _PEAK_PATTERNS:
        if pattern.search(device_name):
            known = (peaks[PRECISIONS.index(c)] for c in _PEAK_COLUMNS[precision])
            return next((peak for peak in known if peak is not None), None)
    return None


def estimate_mfu(
    flops_per_sample: float | None,
    samples_per_s: float | None,
    peak_flops_per_s: float | None,
) -> float | None:
    """MFU in percent: model FLOPs (fwd + bwd) per second over the peak; None if any is unknown."""
    values = (flops_per_sample, samples_per_s, peak_flops_per_s)
    if any(v is None or not math.isfinite(v) or v <= 0 for v in values):
        return None
    return 100.0 * flops_per_sample * samples_per_s / peak_flops_per_s  # type: ignore[operator]


# --------------------------------------------------------------------------- measured ceiling

_MATMUL_DTYPES = {
    "fp32": torch.float32,
    "fp32-strict": torch.float32,
    "default": torch.float32,
    "tf32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


_MATMUL_N_CUDA = 8192
"""One CUDA matmul is 2 * 8192**3 = 1.1 TFLOP: 0.5 ms even at a B200's 2.25 PFLOP/s dense bf16,
so a launch from Python (a few to 10 us) is under 2 % of it, and its output tiles fill every SM
many times over. At n=2048 the call is 8-25 us on a Hopper or Blackwell part, as short as its
launch, and with large tiles (256x128) it makes about one wave for 132 SMs: the ceiling reads
low. Three 8192**2 operands take 384 MiB in bf16/fp16, 768 MiB in fp32."""
_MATMUL_N_CPU = 1024
"""2.1 GFLOP a call, tens of ms on a few cores: BLAS reaches its rate (on the 2-core development
box fp32 read 46-55 GFLOP/s at 1024 against 17 at 512) and a measurement stays quick."""
_CHUNK_S = 0.05
"""Device time per timed chunk; the clock is read (and the device waited for) once per chunk."""
_WARMUP_S = 0.2
"""Device time run before the timed chunks: cuBLAS handle and kernel choice, caches, and the
GPU's clocks rising from idle. Never counted."""
_MAX_CHUNK_CALLS = 100_000


def measure_matmul_flops(
    device: str | torch.device | None,
    precision: str,
    *,
    seconds: float = 1.0,
    n: int | None = None,
) -> float:
    """Measured dense-matmul ceiling in FLOP/s: n x n @ n x n repeated for about `seconds`.

    `n` defaults to a size that saturates the device (8192 on CUDA, 1024 on a CPU). The operands
    are in the precision's dtype (bf16/fp16 tensors, FP32 accumulation as cuBLAS does by
    default); "fp32", "fp32-strict" and "default" (PyTorch's matmuls are IEEE) turn TF32 off
    for CUDA matmuls and "tf32" on, restoring the flag after.
    Warm-up (`_WARMUP_S` of device time) comes first and is not counted. The calls are then
    issued back to back in chunks of about 50 ms and each chunk is timed on the device: on
    CUDA by a pair of events on the stream the matmuls run on, so the time is the GPU's, not
    the launches'. Expect 60-90 % of the datasheet peak on a GPU; it is what this device, at
    its clocks and power limit, gives.
    """
    if precision not in _MATMUL_DTYPES:
        allowed = ", ".join(_MATMUL_DTYPES)
        raise InputError(f"precision {precision!r}: expected one of {allowed}")
    if seconds <= 0 or (n is not None and n <= 0):
        raise InputError(
            f"seconds={seconds!r}, n={n!r}: seconds must be > 0 and n > 0 (or None: sized for "
            "the device)"
        )
    dev = resolve_device(device)
    size = _matmul_size(dev) if n is None else n
    dtype = _MATMUL_DTYPES[precision]
    with _fp32_matmul_precision(precision), torch.no_grad():
        a = torch.randn(size, size, device=dev, dtype=dtype)
        b = torch.randn(size, size, device=dev, dtype=dtype)
        out = torch.empty_like(a)
        calls, elapsed_s = _timed_calls(lambda: torch.mm(a, b, out=out), _clock(dev), seconds)
    return 2.0 * size**3 * calls / elapsed_s


def _matmul_size(dev: torch.device) -> int:
    return _MATMUL_N_CUDA if dev.type == "cuda" else _MATMUL_N_CPU


class _Clock:
    """Times work issued between `start()` and `stop()`; `stop()` waits for it to finish.

    On a CPU the kernels run synchronously in the calling thread, so the host clock is the
    device clock.
    """

    def start(self) -> None:
        self._start_s = time.perf_counter()

    def stop(self) -> float:
        """Seconds since `start()`."""
        return time.perf_counter() - self._start_s


class _CudaEventClock(_Clock):
    """Times the work on `dev`'s current stream with a pair of CUDA events.

    The events go on the stream of the device the operands live on, which is where torch
    launches their matmuls: `torch.cuda.Event.record()` without a stream would use the
    *current device's* stream, the wrong GPU for cuda:1 when the current device is cuda:0.
    `stop()` waits for the end event only, so other GPUs and streams do not count.
    """

    def __init__(self, dev: torch.device) -> None:
        self._stream = torch.cuda.current_stream(dev)

    def start(self) -> None:
        self._begin = torch.cuda.Event(enable_timing=True)
        self._begin.record(self._stream)

    def stop(self) -> float:
        end = torch.cuda.Event(enable_timing=True)
        end.record(self._stream)
        end.synchronize()
        return self._begin.elapsed_time(end) / 1000.0  # elapsed_time is in ms


def _clock(dev: torch.device) -> _Clock:
    return _CudaEventClock(dev) if dev.type == "cuda" else _Clock()


def _timed_calls(call: Callable[[], object], clock: _Clock, seconds: float) -> tuple[int, float]:
    """(calls counted, device seconds they took): warm-up first, then chunks until `seconds`."""
    # The first call creates handles and picks kernels on the host while the device waits:
    # its time sizes the first chunk, nothing more.
    per_call_s = _time_chunk(call, clock, 1)
    warm_s = 0.0
    while warm_s < min(_WARMUP_S, seconds):
        count = _chunk_calls(per_call_s)
        chunk_s = _time_chunk(call, clock, count)
        per_call_s, warm_s = chunk_s / count, warm_s + chunk_s
    calls, elapsed_s = 0, 0.0
    while elapsed_s < seconds:
        count = _chunk_calls(per_call_s)
        chunk_s = _time_chunk(call, clock, count)
        per_call_s, calls, elapsed_s = chunk_s / count, calls + count, elapsed_s + chunk_s
    return calls, elapsed_s


def _chunk_calls(per_call_s: float) -> int:
    return max(1, min(_MAX_CHUNK_CALLS, round(_CHUNK_S / max(per_call_s, 1e-9))))


def _time_chunk(call: Callable[[], object], clock: _Clock, count: int) -> float:
    clock.start()
    for _ in range(count):
        call()
    return clock.stop()


@contextlib.contextmanager
def _fp32_matmul_precision(precision: str) -> Iterator[None]:
    """TF32 on for "tf32", off for the IEEE ones ("fp32", "fp32-strict", "default": PyTorch's
    own matmuls are IEEE), for CUDA matmuls; the flag's own value restored after.

    Set and read through the per-backend flag `torch.backends.cuda.matmul.fp32_precision`
    (torch >= 2.9), the one cuBLAS reads. The legacy getters are never called: since 2.9
    `torch.get_float32_matmul_precision()` and `...matmul.allow_tf32` raise ("mix of the legacy
    and new APIs") once a user has set that flag to "tf32" while the legacy setting is at its
    default. Older torch has only `allow_tf32`. bf16/fp16 leave every flag alone.
    """
    if precision not in ("fp32", "fp32-strict", "default", "tf32"):
        yield
        return
    matmul = torch.backends.cuda.matmul
    tf32 = precision == "tf32"
    if hasattr(matmul, "fp32_precision"):
        name, value = "fp32_precision", "tf32" if tf32 else "ieee"
    else:
        name, value = "allow_tf32", tf32
    previous = getattr(matmul, name)  # "none" (follow torch.backends.fp32_precision) included
    setattr(matmul, name, value)
    try:
        yield
    finally:
        setattr(matmul, name, previous)


# --------------------------------------------------------------------------- versions


def versions() -> dict[str, str | None]:
    """Versions of what a measurement depends on; None where absent. DALI is never imported.

    Looked up once per process (finding DALI's wheel can mean a scan of every installed
    distribution, about 0.15 s) and copied on each call.
    """
    return dict(_versions())


@functools.cache
def _versions() -> dict[str, str | None]:
    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "torchvision": _dist_version("torchvision"),
        "cuda": torch.version.cuda,
        "cudnn": _cudnn_version(),
        "nvidia-ml-py": _dist_version("nvidia-ml-py"),
        "driver": _driver_version(),
        "workbench": workbench_version(),
        "nvidia-dali": _dali_version(),
        "platform": platform.platform(),
    }


def workbench_version() -> str:
    """This workbench's version: its installed distribution's (``throughput-workbench``, the
    name on the package index; ``workbench`` there is another project, so never that one),
    else the package's own ``__version__`` (a checkout on the path, not installed)."""
    return _dist_version(workbench.DISTRIBUTION) or workbench.__version__


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cudnn_version() -> str | None:
    try:
        v = torch.backends.cudnn.version()
    except Exception:
        return None
    if not v:
        return None
    if v >= 90000:  # cuDNN 9 encodes major*10000 + minor*100 + patch
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"  # cuDNN <= 8: major*1000 + minor*100


def nccl_version() -> str | None:
    """The NCCL this torch was built with ("2.27.7"), or None without one (a CPU build). Read
    from the library, without creating a communicator or initializing CUDA."""
    try:
        v = torch.cuda.nccl.version()
    except Exception:
        return None
    if isinstance(v, tuple):
        return ".".join(str(part) for part in v)
    return str(v) if v else None


def _dali_version() -> str | None:
    """DALI's wheel is named after its CUDA build (nvidia-dali-cuda120, ...): find any of them."""
    for name in ("nvidia-dali-cuda130", "nvidia-dali-cuda120", "nvidia-dali-cuda110"):
        if (v := _dist_version(name)) is not None:
            return v
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name == "nvidia-dali" or name.startswith("nvidia-dali-cuda"):
            return dist.version
    return None
