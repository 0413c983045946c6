"""Tests for workbench.engine.mig: a MIG slice's name, its share of the GPU's peak (so MFU), its
NVML handle, and what a burst on one reports (the slice's name, no utilisation, with why)."""

from __future__ import annotations

import re
import sys
import types

import pytest
import torch
from fake_mig_nvml import MINE, PARENT, FakeMigNvml, Slice, cuda_uuid

from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.engine import burst, hardware, mig, telemetry
from workbench.engine.mig import MigSlice, gpu_sms, slice_handle, slice_of, split_name


@pytest.fixture(autouse=True)
def fresh_nvml():
    telemetry._NVML.reset()
    yield
    telemetry._NVML.reset()


# --------------------------------------------------------------------------- names and SMs


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", ("NVIDIA H100 80GB HBM3", "3g.40gb")),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", ("NVIDIA A100-SXM4-40GB", "1g.5gb")),
        ("NVIDIA H200 MIG 1g.18gb+me", ("NVIDIA H200", "1g.18gb+me")),
        ("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", ("NVIDIA A100-SXM4-40GB", "1c.3g.20gb")),
        ("NVIDIA H100 80GB HBM3", None),
        ("NVIDIA H200", None),
        ("MIG 1g.10gb", None),  # a profile without its GPU says nothing of the peak
        ("", None),
    ],
)
def test_split_name(name: str, parts: tuple[str, str] | None) -> None:
    assert split_name(name) == parts


@pytest.mark.parametrize(
    ("gpu", "sms"),
    [
        ("NVIDIA H100 80GB HBM3", 132),
        ("NVIDIA H100 PCIe", 114),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA H200", 132),
        ("NVIDIA H200 NVL", None),
        ("NVIDIA GH200 480GB", 132),
        ("NVIDIA A100-SXM4-80GB", 108),
        ("NVIDIA A100-PCIE-40GB", 108),
        ("NVIDIA A10", None),
    ],
)
def test_gpu_sms_by_name(gpu: str, sms: int | None) -> None:
    assert gpu_sms(gpu) == sms


def test_every_gpu_with_sms_has_a_peak_and_a_source() -> None:
    """An SM count scales a datasheet peak: a GPU in GPU_SMS must be in the peak table too."""
    samples = {r"\bGH200\b": "NVIDIA GH200 480GB", r"\bH200\b": "NVIDIA H200",
               r"\bH100\b.*\bPCIe\b": "NVIDIA H100 PCIe",
               r"\bH100\b.*(SXM|HBM3)": "NVIDIA H100 80GB HBM3",
               r"\bA100\b": "NVIDIA A100-SXM4-80GB"}  # fmt: skip
    for pattern, sms, source in mig.GPU_SMS:
        assert source
        if sms is not None:
            assert re.search(pattern, samples[pattern])
            assert hardware.peak_flops(samples[pattern], "bf16") is not None


def test_slice_share_and_name() -> None:
    s = slice_of("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 60)
    assert s == MigSlice("NVIDIA H100 80GB HBM3", "3g.40gb", 60, 132)
    assert s.name == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    assert s.sm_share == pytest.approx(60 / 132)
    assert slice_of("NVIDIA H100 80GB HBM3", 132) is None  # a whole GPU
    # NVML knows a slice even when CUDA's name does not say so
    named = slice_of("NVIDIA H100 80GB HBM3", 60, nvml_name="NVIDIA H100 80GB HBM3 MIG 3g.40gb",
                     nvml_gpu_name="NVIDIA H100 80GB HBM3", nvml_says_mig=True)  # fmt: skip
    assert named is not None and named.profile == "3g.40gb" and named.sm_share == 60 / 132
    bare = slice_of("NVIDIA H100 80GB HBM3", 60, nvml_says_mig=True)
    assert bare is not None and bare.profile is None and bare.name.endswith("MIG slice")
    # more SMs than the GPU has: a wrong count, so no share (and no peak) rather than > 1
    assert MigSlice("NVIDIA H100 80GB HBM3", "7g.80gb", 140, 132).sm_share is None


# --------------------------------------------------------------------------- the peak, MFU


def test_a_slice_peak_is_its_share_of_the_gpu_peak() -> None:
    whole = hardware.peak_flops("NVIDIA H100 80GB HBM3", "bf16")
    assert whole is not None
    third = hardware.peak_flops("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "bf16", sms=60)
    assert third == pytest.approx(whole * 60 / 132)
    one = hardware.peak_flops("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "tf32", sms=14)
    assert one == pytest.approx(156e12 * 14 / 108)


def test_a_slice_peak_is_unknown_without_its_sms_never_the_whole_gpus() -> None:
    assert hardware.peak_flops("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bf16") is None
    assert hardware.peak_flops("NVIDIA H100 NVL MIG 1g.12gb", "bf16", sms=16) is None  # GPU SMs?
    assert hardware.peak_flops("NVIDIA A10 MIG 1g.6gb", "bf16", sms=10) is None  # no peak


def test_mfu_on_a_1g_slice_is_about_7x_what_the_whole_gpus_peak_gives() -> None:
    """The issue's case: a 1g.10gb slice of an H100 (16 of 132 SMs) measured against the whole
    GPU's peak reads about 7-8x too low; against its own share it reads right."""
    r = BurstResult(device="cuda:0", device_name="NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                    knobs=Knobs(precision="bf16"), samples_per_s=500.0,
                    mig=slice_of("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 16).to_dict())  # fmt: skip
    burst._fill_flops(r, 24.3e9)
    whole = hardware.estimate_mfu(24.3e9, 500.0, hardware.peak_flops("NVIDIA H100 80GB HBM3",
                                                                      "bf16"))  # fmt: skip
    assert r.mfu_pct is not None and whole is not None
    assert r.mfu_pct == pytest.approx(whole * 132 / 16)
    assert r.peak_tflops == pytest.approx(989.5 * 16 / 132)


# --------------------------------------------------------------------------- NVML handles


def test_slice_handle_goes_down_from_the_parent_to_cudas_slice() -> None:
    nvml = FakeMigNvml()
    assert slice_handle(nvml, PARENT, cuda_uuid(MINE)) == MINE.handle
    assert slice_handle(nvml, MINE.handle, None) == MINE.handle  # already a slice
    # CUDA's UUID unknown: the only slice this process can open (the other is another's)
    assert slice_handle(nvml, PARENT, None) == MINE.handle


def test_slice_handle_refuses_to_guess_between_slices() -> None:
    nvml = FakeMigNvml((MINE, Slice("mig:1", "MIG-11111111-2222-5333-8444-555555555555",
                                    "3g.40gb", 1.0)))  # fmt: skip
    with pytest.raises(LookupError, match="2 of its MIG devices"):
        slice_handle(nvml, PARENT, None)
    assert slice_handle(nvml, PARENT, "11111111-2222-5333-8444-555555555555") == "mig:1"


def test_a_gpu_without_mig_is_itself() -> None:
    class NoMig(FakeMigNvml):
        def nvmlDeviceGetMigMode(self, handle):  # a GPU that cannot do MIG answers so
            raise self.NVMLError_NotSupported()

    assert slice_handle(NoMig(()), PARENT, None) == PARENT
    bare = types.ModuleType("pynvml")  # a pynvml without the MIG calls at all
    bare.NVMLError = Exception  # type: ignore[attr-defined]
    assert slice_handle(bare, "h", None) == "h"
    assert mig.is_mig_handle(bare, "h") is False


def test_nvml_names_of_a_slice_and_its_gpu() -> None:
    nvml = FakeMigNvml()
    assert mig.nvml_names(nvml, MINE.handle) == ("NVIDIA H100 80GB HBM3 MIG 3g.40gb",
                                                 "NVIDIA H100 80GB HBM3")  # fmt: skip
    assert mig.nvml_names(nvml, PARENT) == ("NVIDIA H100 80GB HBM3", None)


# --------------------------------------------------------------------------- device facts


@pytest.fixture
def on_a_slice(monkeypatch: pytest.MonkeyPatch) -> FakeMigNvml:
    """cuda:0 is the 3g.40gb slice MINE of an H100 80GB, given to this container alone (no
    CUDA_VISIBLE_DEVICES): torch as CUDA shows the slice, NVML as FakeMigNvml."""
    props = types.SimpleNamespace(total_memory=40_448 * 2**20, major=9, minor=0,
                                  multi_processor_count=60, uuid=cuda_uuid(MINE),
                                  pci_bus_id=0x3B, pci_device_id=0, pci_domain_id=0)  # fmt: skip
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "NVIDIA H100 80GB HBM3")
    nvml = FakeMigNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return nvml


def test_device_info_names_the_slice(on_a_slice: FakeMigNvml) -> None:
    info = hardware.device_info("cuda:0")
    assert info.name == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"  # not the whole GPU's
    assert info.mig == MigSlice("NVIDIA H100 80GB HBM3", "3g.40gb", 60, 132)
    assert ("by_pci", "0000:3b:00.0") in on_a_slice.calls  # found by PCI, then went down


def test_device_info_of_a_slice_without_nvml(monkeypatch, on_a_slice: FakeMigNvml) -> None:
    """No NVML (a container without the driver's library): CUDA's own name still says MIG."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "NVIDIA H100 80GB HBM3 MIG "
                                                                 "1g.10gb")  # fmt: skip
    monkeypatch.setattr(telemetry, "nvml_status", lambda: "NVML Shared Library Not Found")
    info = hardware.device_info("cuda:0")
    assert info.name == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    assert info.mig is not None and info.mig.sm_share == pytest.approx(60 / 132)


def test_a_burst_on_a_slice_reports_no_utilisation_and_says_why(on_a_slice: FakeMigNvml) -> None:
    """The sampler reads the slice's own handle: memory is the slice's, utilisation is never
    asked (NVML has none per slice) and the parent's 97% never reaches the result."""
    sampler = telemetry.Sampler("cuda:0", interval_s=3600).start()
    sampler._take()
    summary = sampler.stop()
    assert summary.source == "nvml"
    assert summary.gpu_util_pct is None and summary.mem_busy_pct is None
    assert summary.gpu_mem_used_mib == pytest.approx(MINE.mem_used_mib)  # not THEIRS' too
    assert not [c for c in on_a_slice.calls if c[0] == "util"]
    assert summary.note is not None and "no utilisation per slice" in summary.note

    info = hardware.device_info("cuda:0")
    r = BurstResult(device="cuda:0", device_name=info.name, mig=info.mig.to_dict())
    burst._fill_memory_and_telemetry(r, torch.device("cpu"), summary)
    assert r.gpu_util_pct is None and r.mem_busy_pct is None
    assert any("no utilisation per slice" in n and "MIG 3g.40gb" in n for n in r.notes)


def test_a_slice_result_never_carries_the_whole_gpus_utilisation() -> None:
    """Whatever telemetry read (a parent's handle, in a set-up ``slice_handle`` could not
    untangle), a result on a slice reports utilisation as unknown, not the GPU's."""
    whole_gpu = telemetry._summarize([telemetry._Sample(t=0.0, gpu_util=97.0, mem_util=41.0)],
                                     None, "nvml", [])  # fmt: skip
    assert whole_gpu.gpu_util_pct == 97.0
    r = BurstResult(device="cuda:0", mig=slice_of("NVIDIA H100 80GB HBM3 MIG 3g.40gb",
                                                  60).to_dict())  # fmt: skip
    burst._fill_memory_and_telemetry(r, torch.device("cpu"), whole_gpu)
    assert r.gpu_util_pct is None and r.mem_busy_pct is None
    assert r.notes and "unavailable on a MIG slice" in r.notes[0]
    whole = BurstResult(device="cuda:0")  # a whole GPU keeps its figure
    burst._fill_memory_and_telemetry(whole, torch.device("cpu"), whole_gpu)
    assert whole.gpu_util_pct == 97.0 and whole.notes == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_sms_is_what_a_whole_gpu_reports() -> None:
    """GPU_SMS against the device itself, where it is a whole GPU the table knows."""
    info = hardware.device_info("cuda")
    if info.mig is not None or gpu_sms(info.name) is None:
        pytest.skip(f"{info.name}: a MIG slice, or a GPU not in GPU_SMS")
    props = torch.cuda.get_device_properties(info.index)
    assert props.multi_processor_count == gpu_sms(info.name)
