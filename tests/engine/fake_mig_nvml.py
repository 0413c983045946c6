"""A pynvml stand-in for one GPU in MIG mode, answering as NVML does on a MIG slice.

What it answers, and where that comes from:
- a parent GPU in MIG mode (``nvmlDeviceGetMigMode`` -> [1, 1]) found by PCI address, index or
  its GPU- UUID; its MIG devices by ``nvmlDeviceGetMigDeviceHandleByIndex`` (a slice another
  container owns: NoPermission) and by their MIG- UUID;
- ``nvmlDeviceIsMigDeviceHandle`` returns the ctypes ``c_uint`` itself, as pynvml 13 does;
- ``nvmlDeviceGetName`` of a slice is its GPU's name and profile ("NVIDIA H100 80GB HBM3 MIG
  3g.40gb"), ``nvmlDeviceGetDeviceHandleFromMigDeviceHandle`` its parent (a whole GPU's handle
  is refused with InvalidArgument);
- ``nvmlDeviceGetUtilizationRates`` on a slice raises NotSupported (NVML API reference: "On
  MIG-enabled GPUs, querying device utilization rates is not currently supported"); on the
  parent it returns the whole GPU's figures, the other slices' work included;
- an H100 80GB's 3g.40gb has 60 SMs and 7g.80gb 132 (``nvidia-smi mig -lgip`` on an H100 80GB,
  https://jbarrow.ai/field_notes/nvidia-mig/).
"""

from __future__ import annotations

import ctypes
import types
from dataclasses import dataclass
from typing import Any

from nvml_errors import InvalidArgument, NoPermission, NotFound, NotSupported, NVMLError

MIB = 1024 * 1024
H100 = "NVIDIA H100 80GB HBM3"
PARENT = "gpu:0"
PARENT_UUID = "GPU-5a1c0e7d-0000-4000-8000-00000000a100"
PCI = "0000:3b:00.0"


@dataclass
class Slice:
    handle: str
    uuid: str
    profile: str
    mem_used_mib: float
    foreign: bool = False  # another container's: this process may not open it


MINE = Slice("mig:0", "MIG-0f1e2d3c-4b5a-5968-8776-65544332a211", "3g.40gb", 2_000.0)
THEIRS = Slice("mig:1", "MIG-9a8b7c6d-5e4f-5031-8203-14253647a5b6", "3g.40gb", 30_000.0,
               foreign=True)  # fmt: skip


class FakeMigNvml(types.ModuleType):
    """NVML on an H100 80GB in MIG mode with ``slices``; every call is logged in ``calls``."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NotSupported
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, slices: tuple[Slice, ...] = (MINE, THEIRS)) -> None:
        super().__init__("pynvml")
        self.slices = {s.handle: s for s in slices}
        self.calls: list[tuple[str, Any]] = []

    def _slice(self, handle: Any) -> Slice | None:
        return self.slices.get(handle)

    def nvmlInit(self) -> None:
        self.calls.append(("init", None))

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> str:
        self.calls.append(("by_pci", bus_id))
        return PARENT  # the slices share their GPU's PCI address

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self.calls.append(("by_uuid", uuid))
        if uuid == PARENT_UUID:
            return PARENT
        for s in self.slices.values():
            if s.uuid == uuid:
                return s.handle
        raise NotFound()

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self.calls.append(("by_index", index))
        return PARENT

    def nvmlDeviceIsMigDeviceHandle(self, handle: Any) -> ctypes.c_uint:
        return ctypes.c_uint(1 if self._slice(handle) else 0)

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        if self._slice(handle):
            raise InvalidArgument()
        return [1, 1]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> str:
        slices = list(self.slices.values())
        if index >= len(slices):
            raise NotFound()
        if slices[index].foreign:
            raise NoPermission()
        return slices[index].handle

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        s = self._slice(handle)
        return s.uuid if s else PARENT_UUID

    def nvmlDeviceGetName(self, handle: Any) -> bytes:
        s = self._slice(handle)
        return (f"{H100} MIG {s.profile}" if s else H100).encode()  # bytes, as older pynvml

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any) -> str:
        if not self._slice(handle):
            raise InvalidArgument()
        return PARENT

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        self.calls.append(("util", handle))
        if self._slice(handle):
            raise NotSupported()
        return types.SimpleNamespace(gpu=97, memory=41)  # the whole GPU: every slice's work

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        s = self._slice(handle)
        used = s.mem_used_mib if s else sum(x.mem_used_mib for x in self.slices.values())
        return types.SimpleNamespace(used=used * MIB)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return 350_000

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return 55

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:
        return 1980 if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return 0

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return 700_000


def cuda_uuid(s: Slice) -> str:
    """The slice's UUID as torch prints ``get_device_properties(i).uuid``: no prefix."""
    return s.uuid.removeprefix("MIG-")
