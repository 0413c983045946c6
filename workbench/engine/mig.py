"""MIG slices: which slice of a GPU a CUDA device is, and what that changes in its figures.

A MIG slice (a GPU instance with its compute instance) is a fixed share of one GPU's SMs and
memory, and CUDA shows it as a device of its own. Three figures change meaning on one:

- **Its name.** CUDA and NVML call it after its GPU and profile ("NVIDIA H100 80GB HBM3 MIG
  3g.40gb"): a lookup by name that ignores the profile finds the whole GPU. Results name the
  slice, and ``split_name`` takes the GPU's name and the profile apart.
- **MFU's denominator.** A slice's peak is the whole GPU's datasheet peak scaled by its share
  of the SMs: ``peak * slice SMs / GPU SMs`` (``hardware.peak_flops(..., sms=...)``). The
  slice's SMs are what CUDA reports inside it (``torch.cuda.get_device_properties(i)
  .multi_processor_count``); the whole GPU's come from ``GPU_SMS`` by name, because a process
  on a slice cannot see the rest of its GPU. Divided by the whole GPU's peak, a 1g slice's MFU
  would read about 7x too low; where the GPU's SM count is not in the table, the peak (and so
  MFU) is None, never the whole GPU's.
- **Utilisation.** NVML does not report utilisation per slice: ``nvmlDeviceGetUtilizationRates``
  on a MIG device handle is not supported (NVML API reference, nvmlDeviceQueries: "On
  MIG-enabled GPUs, querying device utilization rates is not currently supported",
  https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html), and the parent GPU's
  figure would count every slice's work. A burst on a slice reports ``gpu_util_pct`` and
  ``mem_busy_pct`` as None with ``UTILISATION_UNAVAILABLE`` in its notes: unknown, not 0 and
  not the whole GPU's. Memory in use (``nvmlDeviceGetMemoryInfo``) is read from the slice's
  own handle.

Which NVML handle is the slice: ``CUDA_VISIBLE_DEVICES=MIG-<uuid>`` names it directly; in a
container given one slice (``NVIDIA_VISIBLE_DEVICES``, a Kubernetes ``nvidia.com/mig-*``
resource) CUDA shows ``cuda:0`` and NVML finds the parent GPU by its PCI address, so
``slice_handle`` goes down from a parent in MIG mode to its MIG device whose UUID is CUDA's,
or to the only one this process can open.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

__all__ = [
    "GPU_SMS",
    "UTILISATION_UNAVAILABLE",
    "MigSlice",
    "gpu_sms",
    "is_mig_handle",
    "nvml_names",
    "slice_handle",
    "slice_of",
    "split_name",
]

UTILISATION_UNAVAILABLE = (
    "gpu_util_pct and mem_busy_pct are unavailable on a MIG slice: NVML reports no utilisation "
    "per slice (nvmlDeviceGetUtilizationRates is not supported on MIG devices), and the whole "
    "GPU's figure would count the other slices' work"
)

_NAME = re.compile(r"^(?P<gpu>.+?)\s+MIG\s+(?P<profile>(?:\d+c\.)?\d+g\.\d+gb(?:\+me)?)\s*$",
                   re.IGNORECASE)  # fmt: skip

GPU_SMS: tuple[tuple[str, int | None, str], ...] = (
    (r"\bGH200\b", 132, "NVIDIA Grace Hopper Superchip Architecture whitepaper: H100, 132 SMs"),
    (r"\bH200\b.*\bNVL\b", None, "not published per SM: a slice's peak stays unknown"),
    (r"\bH200\b", 132, "GH100 as in H100 SXM5 (the same 67 TFLOPS FP32 datasheet peak); "
                       "tests/engine/test_mig.py checks it on a whole GPU"),
    (r"\bH100\b.*\bNVL\b", None, "not published per SM: a slice's peak stays unknown"),
    (r"\bH100\b.*\bPCIe\b", 114, "NVIDIA H100 Tensor Core GPU Architecture whitepaper"),
    (r"\bH100\b.*(SXM|HBM3)", 132, "NVIDIA H100 Tensor Core GPU Architecture whitepaper"),
    (r"\bA100\b", 108, "NVIDIA A100 Tensor Core GPU Architecture whitepaper"),
)  # fmt: skip
"""SMs of the whole GPU, by its name (first match wins), for the MIG-capable GPUs that
``hardware``'s peak table knows: (pattern, SMs or None, source). A 7g slice has fewer (98 of an
A100's 108): the peak per SM is the whole GPU's peak over all of its SMs."""
_GPU_SMS = tuple((re.compile(p, re.IGNORECASE), sms) for p, sms, _ in GPU_SMS)


@dataclass(frozen=True, slots=True)
class MigSlice:
    """One MIG slice: its GPU, its profile and its share of the GPU's SMs."""

    gpu_name: str
    """The whole GPU's name ("NVIDIA H100 80GB HBM3")."""
    profile: str | None
    """The MIG profile ("3g.40gb"); None where neither CUDA nor NVML named one."""
    sms: int | None
    """SMs of the slice, as CUDA reports them inside it."""
    gpu_sms: int | None
    """SMs of the whole GPU (``GPU_SMS``); None where the table does not know the GPU."""

    @property
    def name(self) -> str:
        """The slice as results name it: "NVIDIA H100 80GB HBM3 MIG 3g.40gb"."""
        return f"{self.gpu_name} MIG {self.profile or 'slice'}"

    @property
    def sm_share(self) -> float | None:
        """The slice's share of the GPU's SMs; None where either count is unknown."""
        if not self.sms or not self.gpu_sms or self.sms > self.gpu_sms:
            return None
        return self.sms / self.gpu_sms

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gpu_name": self.gpu_name, "profile": self.profile,
                "sms": self.sms, "gpu_sms": self.gpu_sms, "sm_share": self.sm_share}  # fmt: skip


def split_name(name: str | None) -> tuple[str, str] | None:
    """``(GPU name, profile)`` of a MIG device's name ("NVIDIA A100-SXM4-40GB MIG 1g.5gb" ->
    ("NVIDIA A100-SXM4-40GB", "1g.5gb")), None for any other name."""
    match = _NAME.match(name.strip()) if isinstance(name, str) else None
    return (match["gpu"], match["profile"]) if match else None


def gpu_sms(gpu_name: str) -> int | None:
    """SMs of the whole GPU called ``gpu_name`` (``GPU_SMS``), None where unknown."""
    for pattern, sms in _GPU_SMS:
        if pattern.search(gpu_name):
            return sms
    return None


def slice_of(
    cuda_name: str,
    sms: int | None,
    *,
    nvml_name: str | None = None,
    nvml_gpu_name: str | None = None,
    nvml_says_mig: bool = False,
) -> MigSlice | None:
    """The slice a CUDA device is, or None for a whole GPU.

    ``cuda_name`` and ``sms`` are CUDA's (torch's name and ``multi_processor_count``); the
    ``nvml_*`` arguments what NVML said of the same device where it could be read (the MIG
    device's name, its parent GPU's name, and whether the handle is a MIG device at all): NVML
    knows a slice even when a name does not say so."""
    named = split_name(nvml_name) or split_name(cuda_name)
    if named is None and not nvml_says_mig:
        return None
    gpu, profile = named if named else (cuda_name, None)
    gpu = nvml_gpu_name or gpu
    return MigSlice(gpu_name=gpu, profile=profile, sms=sms, gpu_sms=gpu_sms(gpu))


# --------------------------------------------------------------------------- NVML


def _nvml_call(nvml: ModuleType, name: str, *args: Any) -> Any:
    """``nvml.<name>(*args)``, or None where this pynvml lacks it or NVML refuses (a GPU
    without MIG answers NotSupported, a slice another container owns NoPermission)."""
    call = getattr(nvml, name, None)
    if call is None:
        return None
    try:
        return call(*args)
    except nvml.NVMLError:
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def is_mig_handle(nvml: ModuleType, handle: Any) -> bool:
    """Whether ``handle`` is a MIG device (``nvmlDeviceIsMigDeviceHandle``)."""
    value = _nvml_call(nvml, "nvmlDeviceIsMigDeviceHandle", handle)
    return bool(getattr(value, "value", value))  # pynvml returns the ctypes c_uint itself


def _mig_mode_on(nvml: ModuleType, handle: Any) -> bool:
    mode = _nvml_call(nvml, "nvmlDeviceGetMigMode", handle)
    enabled = getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
    return bool(mode) and mode[0] == enabled


def _uuid_hex(uuid: str | None) -> str | None:
    """A UUID without its "GPU-"/"MIG-" prefix, lower case: NVML prints one, CUDA the other."""
    if not uuid:
        return None
    return re.sub(r"^(GPU-|MIG-)", "", uuid.strip(), flags=re.IGNORECASE).lower()


def _children(nvml: ModuleType, parent: Any) -> list[tuple[Any, str | None]]:
    """The MIG devices of ``parent`` this process can open, with their UUIDs."""
    count = _nvml_call(nvml, "nvmlDeviceGetMaxMigDeviceCount", parent) or 0
    found = []
    for i in range(int(count)):
        child = _nvml_call(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", parent, i)
        if child is not None:
            found.append((child, _text(_nvml_call(nvml, "nvmlDeviceGetUUID", child))))
    return found


def slice_handle(nvml: ModuleType, handle: Any, cuda_uuid: str | None = None) -> Any:
    """The handle to read for the CUDA device ``handle`` was found for.

    A MIG device, or a GPU not in MIG mode, is itself. A parent GPU in MIG mode (found by the
    PCI address it shares with its slices) gives way to its MIG device whose UUID is CUDA's
    (``cuda_uuid``), else to the only MIG device this process can open; LookupError when it has
    several and none is CUDA's: reading the parent would report every slice's memory as this
    one's."""
    if is_mig_handle(nvml, handle) or not _mig_mode_on(nvml, handle):
        return handle
    children = _children(nvml, handle)
    wanted = _uuid_hex(cuda_uuid)
    for child, uuid in children:
        if wanted is not None and _uuid_hex(uuid) == wanted:
            return child
    if len(children) == 1:
        return children[0][0]
    raise LookupError(
        f"the GPU is in MIG mode and this process can open {len(children)} of its MIG devices, "
        f"none with CUDA's UUID {cuda_uuid!r}: which slice is this?"
    )


def nvml_names(nvml: ModuleType, handle: Any) -> tuple[str | None, str | None]:
    """``(the device's name, its parent GPU's name)`` as NVML gives them for a MIG device
    handle; the parent's is None for a whole GPU or where NVML refuses."""
    name = _text(_nvml_call(nvml, "nvmlDeviceGetName", handle))
    parent = _nvml_call(nvml, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle)
    gpu = _text(_nvml_call(nvml, "nvmlDeviceGetName", parent)) if parent is not None else None
    return name, gpu
