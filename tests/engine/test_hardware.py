"""Tests for workbench.engine.hardware: the peak table, MFU, device resolution and facts, versions,
and the measured matmul ceiling."""

from __future__ import annotations

import dataclasses
import platform
import sys
from collections.abc import Iterator
from typing import ClassVar

import pytest
import torch

from workbench.engine import hardware
from workbench.engine.hardware import (
    device_info,
    estimate_mfu,
    measure_matmul_flops,
    peak_flops,
    resolve_device,
    versions,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

# --------------------------------------------------------------------------- peak FLOP/s


@pytest.mark.parametrize(
    ("name", "precision", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.5e12),
        ("NVIDIA H100 PCIe", "bf16", 756.5e12),
        ("NVIDIA H100 NVL", "bf16", 835.5e12),
        ("NVIDIA H100 SXM5 80GB", "bf16", 989.5e12),
        ("NVIDIA H100 80GB HBM3", "fp32", 67e12),
        ("NVIDIA H200", "bf16", 989.5e12),
        ("NVIDIA H200 NVL", "bf16", 835.5e12),
        ("NVIDIA GH200 480GB", "bf16", 990e12),
        ("NVIDIA B200", "bf16", 2.25e15),
        ("NVIDIA A100-SXM4-80GB", "tf32", 156e12),
        ("NVIDIA A100-PCIE-40GB", "tf32", 156e12),
        ("NVIDIA A100 80GB PCIe", "bf16", 312e12),
        ("NVIDIA A10", "bf16", 125e12),
        ("NVIDIA A10G", "bf16", 70e12),
        ("NVIDIA A40", "fp16", 149.7e12),
        ("NVIDIA L40S", "bf16", 362.05e12),
        ("NVIDIA L40", "bf16", 181.05e12),
        ("NVIDIA L4", "bf16", 121e12),
        ("Tesla V100-SXM2-16GB", "fp16", 125e12),
        ("Tesla V100-PCIE-32GB", "fp16", 112e12),
        ("Tesla V100S-PCIE-32GB", "fp16", 130e12),
        ("Tesla T4", "fp16", 65e12),
        ("NVIDIA GeForce RTX 4090", "bf16", 165.2e12),
        ("NVIDIA GeForce RTX 3090", "tf32", 35.6e12),
        ("NVIDIA RTX 6000 Ada Generation", "fp32", 91.1e12),
    ],
)
def test_peak_flops_by_name(name: str, precision: str, expected: float) -> None:
    assert peak_flops(name, precision) == pytest.approx(expected, rel=1e-6)


def test_each_precision_knob_has_the_peak_its_math_can_reach() -> None:
    a100 = "NVIDIA A100-SXM4-80GB"
    assert peak_flops(a100, "fp32-strict") == peak_flops(a100, "fp32") == 19.5e12
    # default: PyTorch's cuDNN convolutions run on TF32 tensor cores, so the TF32 ceiling
    assert peak_flops(a100, "default") == peak_flops(a100, "tf32") == 156e12
    # a GPU without TF32 runs default as IEEE fp32 everywhere
    assert peak_flops("Tesla V100-SXM2-16GB", "default") == 15.7e12
    assert peak_flops("Tesla V100-SXM2-16GB", "tf32") is None


def test_h100_variants_differ() -> None:
    sxm = peak_flops("NVIDIA H100 80GB HBM3", "bf16")
    pcie = peak_flops("NVIDIA H100 PCIe", "bf16")
    nvl = peak_flops("NVIDIA H100 NVL", "bf16")
    assert sxm is not None and pcie is not None and nvl is not None
    assert sxm > nvl > pcie


@pytest.mark.parametrize(
    ("name", "precision"),
    [
        ("Tesla V100-SXM2-16GB", "bf16"),  # Volta: no BF16
        ("Tesla V100-SXM2-16GB", "tf32"),  # ... and no TF32
        ("Tesla T4", "bf16"),
        ("Tesla T4", "tf32"),
        ("NVIDIA RTX 6000 Ada Generation", "bf16"),  # not on its datasheet
        ("NVIDIA H100", "bf16"),  # SXM or PCIe? unknown
        ("NVIDIA H100 96GB HBM2e", "bf16"),  # torchtitan's 500 W part: between SXM and NVL
        ("NVIDIA GB200", "bf16"),  # not a B200
        ("NVIDIA H20", "bf16"),  # not an H200
        ("NVIDIA GeForce RTX 4090 D", "bf16"),
        ("NVIDIA GeForce RTX 3090 Ti", "bf16"),
        ("NVIDIA GeForce GTX 1080", "fp32"),
        ("AMD EPYC", "fp32"),
        ("Intel(R) Xeon(R) Platinum 8480+", "bf16"),
        ("NVIDIA H100 80GB HBM3", "fp8"),  # precision not in the table
    ],
)
def test_peak_flops_unknown_is_none(name: str, precision: str) -> None:
    assert peak_flops(name, precision) is None


def test_peak_table_is_dense_and_consistent() -> None:
    for pattern, fp32, tf32, bf16, fp16 in hardware._PEAKS:
        assert fp32 is not None, pattern
        if bf16 is not None:
            assert fp16 == bf16, pattern  # same tensor rate, FP32 accumulate
            assert tf32 is not None and fp32 <= tf32 <= bf16, pattern
        for value in (fp32, tf32, bf16, fp16):
            assert value is None or value < 3e15, pattern  # dense: a B200 is 2.25e15 bf16


# --------------------------------------------------------------------------- MFU


def test_estimate_mfu_arithmetic() -> None:
    # 1 GFLOP per sample at 100 samples/s on a 1 TFLOP/s device: 10 %.
    assert estimate_mfu(1e9, 100.0, 1e12) == pytest.approx(10.0)
    assert estimate_mfu(6e9, 1000.0, peak_flops("NVIDIA A100-SXM4-80GB", "bf16")) == (
        pytest.approx(100.0 * 6e12 / 312e12)
    )


@pytest.mark.parametrize(
    "args",
    [
        (None, 100.0, 1e12),
        (1e9, None, 1e12),
        (1e9, 100.0, None),
        (0.0, 100.0, 1e12),
        (1e9, -1.0, 1e12),
        (1e9, 100.0, 0.0),
        (float("nan"), 100.0, 1e12),
        (1e9, float("inf"), 1e12),
    ],
)
def test_estimate_mfu_unknown_is_none(args: tuple[float | None, ...]) -> None:
    assert estimate_mfu(*args) is None


# --------------------------------------------------------------------------- devices


def test_resolve_device_auto() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device().type == expected
    assert resolve_device("auto").type == expected
    assert resolve_device(" AUTO ").type == expected


@pytest.mark.parametrize("spec", ["cpu", "CPU", "cpu:0", torch.device("cpu")])
def test_resolve_device_cpu(spec: str | torch.device) -> None:
    assert resolve_device(spec) == torch.device("cpu")


@pytest.mark.parametrize("spec", ["gpu:0", "cuda:x", "", "cuda0", 3, 1.5])
def test_resolve_device_bad_forms_list_allowed_forms(spec: object) -> None:
    with pytest.raises(ValueError, match=r"'auto', 'cpu', 'cuda' or 'cuda:N'") as err:
        resolve_device(spec)  # type: ignore[arg-type]
    assert repr(spec) in str(err.value)


def test_resolve_device_unsupported_type() -> None:
    with pytest.raises(ValueError, match=r"'mps' is not supported"):
        resolve_device("mps")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", torch.device("cuda", 1)])
def test_resolve_device_cuda_without_cuda(spec: str | torch.device) -> None:
    with pytest.raises(ValueError, match="CUDA is not available") as err:
        resolve_device(spec)
    assert repr(spec) in str(err.value)


def test_device_info_cpu() -> None:
    info = device_info("cpu")
    assert info.kind == "cpu"
    assert info.name and isinstance(info.name, str)
    assert info.index is None and info.capability is None
    assert info.total_mem_mib is not None and info.total_mem_mib > 100
    assert info.cpu_count >= 1
    assert info.cuda_version == torch.version.cuda


def test_the_workbench_version_is_read_from_its_own_distribution(monkeypatch) -> None:
    """Installed as a wheel, workbench's distribution is throughput-workbench: reading the
    distribution "workbench" (another project on the index) gave null, or a stranger's version."""
    import importlib.metadata

    import workbench

    seen = []

    def installed(versions: dict[str, str]):
        def version(name: str) -> str:
            seen.append(name)
            if name not in versions:
                raise importlib.metadata.PackageNotFoundError(name)
            return versions[name]

        return version

    monkeypatch.setattr(importlib.metadata, "version", installed({"throughput-workbench": "7.8.9"}))
    assert hardware.workbench_version() == "7.8.9" and seen == ["throughput-workbench"]
    # the index's other "workbench" is never taken for ours; a checkout gives __version__
    monkeypatch.setattr(importlib.metadata, "version", installed({"workbench": "0.0.1"}))
    assert hardware.workbench_version() == workbench.__version__ != "0.0.1"


def test_versions_keys_and_no_dali_import() -> None:
    dali_loaded = "nvidia.dali" in sys.modules
    v = versions()
    assert set(v) == {
        "python",
        "torch",
        "torchvision",
        "cuda",
        "cudnn",
        "nvidia-ml-py",
        "driver",
        "workbench",
        "nvidia-dali",
        "platform",
    }
    assert v["python"] == platform.python_version()
    assert v["torch"] == torch.__version__
    assert v["nvidia-ml-py"] is not None
    assert v["workbench"] is not None  # this venv installs it (editable) as throughput-workbench
    assert all(x is None or isinstance(x, str) for x in v.values())
    assert ("nvidia.dali" in sys.modules) == dali_loaded


def test_cudnn_version_formatting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91002)
    assert hardware._cudnn_version() == "9.10.2"
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 8902)
    assert hardware._cudnn_version() == "8.9.2"
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: None)
    assert hardware._cudnn_version() is None


# --------------------------------------------------------------------------- measured ceiling


@pytest.fixture
def matmul_flag() -> Iterator[None]:
    """Leave torch's per-backend matmul precision flag as the test found it."""
    before = torch.backends.cuda.matmul.fp32_precision
    yield
    torch.backends.cuda.matmul.fp32_precision = before


def test_measure_matmul_flops_cpu_is_plausible() -> None:
    flops = measure_matmul_flops("cpu", "fp32", seconds=0.1)  # the CPU size: 1024
    assert 1e8 < flops < 1e14  # a CPU core or two: GFLOP/s to a few TFLOP/s
    assert measure_matmul_flops("cpu", "bf16", seconds=0.05, n=64) > 0


@pytest.mark.usefixtures("matmul_flag")
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_measure_matmul_flops_survives_the_new_tf32_api(precision: str) -> None:
    """A user who switched TF32 on the torch >= 2.9 way has a state in which the legacy getter
    raises ("mix of the legacy and new APIs"); the measurement must neither read it nor keep
    its own setting."""
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        torch.get_float32_matmul_precision()  # the trap
    assert measure_matmul_flops("cpu", precision, seconds=0.02, n=32) > 0
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"  # restored as it was


@pytest.mark.usefixtures("matmul_flag")
@pytest.mark.parametrize(
    ("precision", "inside"), [("fp32", "ieee"), ("tf32", "tf32"), ("bf16", "none")]
)
def test_matmul_precision_flag_set_inside_and_restored(precision: str, inside: str) -> None:
    torch.backends.cuda.matmul.fp32_precision = "none"  # follow the generic flag: the default
    with hardware._fp32_matmul_precision(precision):
        assert torch.backends.cuda.matmul.fp32_precision == inside
    assert torch.backends.cuda.matmul.fp32_precision == "none"
    with pytest.raises(KeyError), hardware._fp32_matmul_precision("tf32"):
        raise KeyError("restored on the way out of an error too")
    assert torch.backends.cuda.matmul.fp32_precision == "none"


def test_measure_matmul_flops_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="precision 'fp8'"):
        measure_matmul_flops("cpu", "fp8")
    with pytest.raises(ValueError, match="seconds"):
        measure_matmul_flops("cpu", "fp32", seconds=0)
    with pytest.raises(ValueError, match="n=0"):
        measure_matmul_flops("cpu", "fp32", n=0)


# A recorded fake of one CUDA stream: the host issues work (each launch costs it `launch_s`),
# the GPU runs it in order, a kernel starting once both the GPU and its launch are ready; a CUDA
# event's time is when the GPU reaches it. Enough to see what a timing loop really measures.


class FakeGpu:
    def __init__(self, flops_per_s: float, n: int, *, launch_s: float, first_call_s: float):
        self.kernel_s = 2.0 * n**3 / flops_per_s
        self.launch_s = launch_s
        self.first_call_s = first_call_s  # host work of the first call (cuBLAS handle, heuristics)
        self.host_s = self.gpu_s = self.busy_s = 0.0
        self.calls = 0

    def matmul(self) -> None:
        self.host_s += self.launch_s + (self.first_call_s if self.calls == 0 else 0.0)
        # Clocks still rising from idle for the first 0.1 s of work: kernels at half speed.
        kernel_s = self.kernel_s * (2.0 if self.busy_s < 0.1 else 1.0)
        self.gpu_s = max(self.gpu_s, self.host_s) + kernel_s
        self.busy_s += kernel_s
        self.calls += 1

    def reach(self) -> float:
        self.host_s += 1e-6
        self.gpu_s = max(self.gpu_s, self.host_s)
        return self.gpu_s


@dataclasses.dataclass
class FakeStream:
    device: torch.device
    gpu: FakeGpu


class FakeEvent:
    recorded: ClassVar[list[tuple[FakeStream, float]]] = []
    waited: ClassVar[list[FakeStream]] = []
    elapsed_ms: ClassVar[list[float]] = []

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.stream: FakeStream | None = None
        self.at_s = 0.0

    def record(self, stream: FakeStream | None = None) -> None:
        assert stream is not None, "an event without a stream goes on the current device's"
        self.stream, self.at_s = stream, stream.gpu.reach()
        FakeEvent.recorded.append((stream, self.at_s))

    def synchronize(self) -> None:
        assert self.stream is not None
        self.stream.gpu.host_s = max(self.stream.gpu.host_s, self.stream.gpu.gpu_s)
        FakeEvent.waited.append(self.stream)

    def elapsed_time(self, end: FakeEvent) -> float:
        assert end.stream is self.stream, "events of two streams cannot be compared"
        FakeEvent.elapsed_ms.append((end.at_s - self.at_s) * 1000.0)
        return FakeEvent.elapsed_ms[-1]


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> dict[int, FakeStream]:
    """torch.cuda.current_stream and Event, faked: two GPUs, each with its own stream."""
    streams: dict[int, FakeStream] = {}

    def current_stream(device: torch.device | None = None) -> FakeStream:
        assert device is not None, "the current stream of which GPU?"
        return streams[torch.device(device).index]

    def synchronize(device: torch.device | None = None) -> None:
        assert device is not None, "torch.cuda.synchronize() waits for the current device"
        stream = streams[torch.device(device).index]
        stream.gpu.host_s = max(stream.gpu.host_s, stream.gpu.gpu_s)
        FakeEvent.waited.append(stream)

    FakeEvent.recorded, FakeEvent.waited, FakeEvent.elapsed_ms = [], [], []
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    return streams


B200_BF16 = 2.25e15  # the fastest dense peak in the table: the shortest kernel at a given n


@pytest.mark.parametrize("launch_s", [2e-6, 10e-6, 30e-6])
def test_cuda_ceiling_is_timed_by_events_on_the_devices_stream(
    fake_cuda: dict[int, FakeStream], launch_s: float
) -> None:
    dev = torch.device("cuda", 1)
    n = hardware._matmul_size(dev)
    gpus = {i: FakeGpu(B200_BF16, n, launch_s=launch_s, first_call_s=0.3) for i in (0, 1)}
    fake_cuda.update({i: FakeStream(torch.device("cuda", i), gpus[i]) for i in (0, 1)})

    clock = hardware._clock(dev)
    calls, elapsed_s = hardware._timed_calls(gpus[1].matmul, clock, 1.0)
    measured = 2.0 * n**3 * calls / elapsed_s

    # Launch overhead, the 0.3 s first call and the slow-clock start all stay out of the figure.
    assert measured == pytest.approx(B200_BF16, rel=0.01)
    assert 1.0 <= elapsed_s < 1.1
    assert gpus[1].calls > calls  # warm-up calls ran and were not counted
    assert gpus[1].kernel_s > 15 * launch_s  # each call long next to its launch ...
    timed_chunks_ms = FakeEvent.elapsed_ms[-5:]
    assert min(timed_chunks_ms) > 1000 * 30 * launch_s  # ... and each chunk many launches long
    # Only cuda:1 was timed and waited for: the events sat on its stream.
    assert {s.device for s, _ in FakeEvent.recorded} == {dev}
    assert {s.device for s in FakeEvent.waited} == {dev}
    assert gpus[0].calls == 0 and gpus[0].gpu_s == 0.0


def test_the_fake_sees_a_launch_bound_size_read_low(fake_cuda: dict[int, FakeStream]) -> None:
    """The same recorded stream with the old n=2048: a B200-class kernel is shorter than a
    10 us launch, the GPU waits on the host and the ceiling reads low. The fake has teeth."""
    gpu = FakeGpu(B200_BF16, 2048, launch_s=10e-6, first_call_s=0.3)
    fake_cuda[0] = FakeStream(torch.device("cuda", 0), gpu)
    calls, elapsed_s = hardware._timed_calls(
        gpu.matmul, hardware._clock(torch.device("cuda", 0)), 1.0
    )
    assert 2.0 * 2048**3 * calls / elapsed_s < 0.8 * B200_BF16


def test_matmul_size_is_big_on_cuda_and_quick_on_cpu() -> None:
    assert hardware._matmul_size(torch.device("cuda", 0)) == 8192
    assert hardware._matmul_size(torch.device("cpu")) <= 1024
    assert isinstance(hardware._clock(torch.device("cpu")), hardware._Clock)


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@needs_cuda
def test_resolve_and_describe_cuda() -> None:
    dev = resolve_device("cuda")
    assert dev == torch.device("cuda", torch.cuda.current_device())
    with pytest.raises(ValueError, match="CUDA device"):
        resolve_device(f"cuda:{torch.cuda.device_count()}")
    info = device_info(dev)
    assert info.kind == "cuda" and info.index == dev.index
    # a MIG slice is named as the slice (engine/mig.py), whatever CUDA's name says
    assert info.name == torch.cuda.get_device_name(dev.index) or info.mig is not None
    assert info.capability is not None and info.capability >= (3, 0)
    assert info.total_mem_mib is not None and info.total_mem_mib > 1024


@pytest.mark.gpu
@needs_cuda
def test_measured_bf16_ceiling_is_below_the_table_peak() -> None:
    flops = measure_matmul_flops("cuda", "bf16", seconds=1.0)  # n=8192 on CUDA
    assert flops > 1e12
    peak = peak_flops(torch.cuda.get_device_name(), "bf16")
    if peak is not None:
        assert flops < 1.05 * peak  # dense peak: a measurement cannot beat it
        assert flops > 0.5 * peak  # and a healthy GPU gets well into it


@pytest.mark.gpu
@needs_cuda
def test_measured_ceiling_on_the_last_gpu_and_tf32_flag_restored() -> None:
    last = torch.cuda.device_count() - 1
    before = torch.backends.cuda.matmul.fp32_precision
    flops = measure_matmul_flops(f"cuda:{last}", "tf32", seconds=0.5)
    assert flops > 1e12
    assert torch.backends.cuda.matmul.fp32_precision == before


@pytest.mark.parametrize(
    ("files", "quota"),
    [
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "250000 100000\n"}, 2.5),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4.0),
        ({}, None),
    ],
)
def test_a_cgroup_cpu_quota_is_read_in_both_cgroup_versions(tmp_path, files, quota):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert hardware.cgroup_cpu_quota(tmp_path) == quota


def test_the_core_count_is_capped_by_the_cgroup_quota(monkeypatch):
    """A container given 2.5 CPUs of a bigger host may use 3 cores' worth, not its whole mask."""
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(hardware, "cgroup_cpu_quota", lambda: 2.5)
    assert hardware._cpu_count() == 3
    monkeypatch.setattr(hardware, "cgroup_cpu_quota", lambda: None)
    assert hardware._cpu_count() == 64
