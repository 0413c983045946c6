"""The data paths a data-bound loop could take here, and why each can or cannot be taken.

A data-bound pipeline's loader is the slower link. The ways out are other *paths* for the same
samples, each a few knobs (issue 29):

- ``cpu``: the torch loader decoding in its workers, at the worker count the knobs have now;
- ``cpu-all-cores``: the same, one worker per core this process may use (its affinity mask
  capped by a cgroup quota: ``hardware.device_info(...).cpu_count``);
- ``gpu-decode``: ``decode=gpu``: the workers read bytes only, the device decodes them
  (nvJPEG) and crops, flips and normalizes there. CUDA only, image workloads whose transform
  the device pipeline mirrors: ``decode_no_effect`` decides, the function that reports the
  knob in a burst's ``no_effect``;
- ``predecoded``: ``data_format=predecoded`` (uint8 pixels stored at training resolution, no
  decoder), with ``decode=gpu`` where it can act (the crop and normalization on the device,
  uint8 copied) and ``decode=cpu`` elsewhere. Only where a converted copy is already built and
  current: building one takes minutes and disk, the person's call (``workbench data
  --format predecoded``), never done implicitly here;
- ``dali``: ``loader=dali`` (mixed decode on CUDA, its CPU threads elsewhere), only where DALI
  is installed (``dali_available``, which never imports it).

``cpu-all-cores`` runs one worker per usable core: CPU decode measured at its ceiling on this
machine. The paths whose workers only read bytes (``gpu-decode``, ``predecoded`` on the device)
and DALI's threads run ``min(cores, BYTE_READERS)``: reading a stored sample costs tens of
microseconds, so a few workers keep even slow storage busy, and a box with 200 cores is not
told to start 200 processes to read files. The list is ordered from the least change to
the most (a knob, a knob and a converted copy, another loader); the ranking prefers the
earliest path that reaches the model. ``available_paths`` gives every path with the reason it
is or is not available, so that the diagnosis lists the unavailable ones instead of silently
dropping them, and ``path_space`` gives the tuner the same choices as knob values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from workbench.analysis.advice import images
from workbench.core.errors import InputError
from workbench.core.knobs import DALI_FORMATS, Knobs
from workbench.engine import hardware
from workbench.engine.formats import CONVERTED, located
from workbench.engine.loaders.dali import (  # none of these import DALI
    augment_from_transform,
    dali_available,
    refuse_collate,
)
from workbench.engine.loaders.device_batches import decode_no_effect
from workbench.engine.loaders.stream import LoaderUnavailable
from workbench.engine.workloads import Workload

PATH_NAMES = ("cpu", "cpu-all-cores", "gpu-decode", "predecoded", "dali")
BYTE_READERS = 8
"""Workers (DALI: threads) of the paths that decode on the device, at most (see above)."""
JPEG_FORMATS = ("files", "shards", "lmdb")
"""Formats that store JPEG bytes: decoded on the CPU or on the device alike."""


@dataclass(frozen=True, slots=True)
class DataPath:
    """One way to feed the model: the knobs it sets and whether it can run here."""

    name: str
    """One of ``PATH_NAMES``: stable, for code and JSON."""
    label: str
    """What a person reads: "CPU decode, 8 workers (now)"."""
    changes: dict[str, Any]
    """The knobs this path sets, its defining knob first."""
    available: bool
    why: str
    """What the path does when available; why it cannot run here otherwise."""

    def knobs(self, base: Knobs) -> Knobs:
        """``base`` on this path (valid: an invalid combination is an unavailable path)."""
        return base.replace(**self.changes)

    def changed(self, base: Knobs) -> dict[str, Any]:
        """The knobs this path sets to another value than ``base`` has, in its order."""
        return {k: v for k, v in self.changes.items() if getattr(base, k) != v}

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "changes": dict(self.changes),
                "available": self.available, "why": self.why}  # fmt: skip


def usable_cores() -> int:
    """Cores this process may run on (the loader's workers are processes on this host, so
    the count is the host's whatever the training device)."""
    return hardware.device_info(torch.device("cpu")).cpu_count or 1


def available_paths(
    workload: Workload, knobs: Knobs, device: torch.device, *, cores: int | None = None
) -> list[DataPath]:
    """Every path of ``PATH_NAMES``, in that order, each available or with the reason not.

    Cheap: nothing is measured or built; the workload's dataset is listed (to check a
    converted copy against it and read its transform). ``cores``: the most workers a path
    runs (default ``usable_cores()``)."""
    cores = cores or usable_cores()
    fmt = knobs.data_format if knobs.data_format in JPEG_FORMATS else "files"
    cpu = {"loader": "torch", "decode": "cpu", "data_format": fmt}
    paths = [
        _cpu_path(workload, knobs.num_workers, cpu, now=True),
        _all_cores(workload, knobs.num_workers, cores, cpu),
        _gpu_decode(workload, knobs, device, cores, fmt),
        _predecoded(workload, knobs, device, cores),
        _dali(workload, cores, fmt),
    ]
    return [_valid(p, knobs) for p in paths]


def built_formats(workload: Workload) -> list[str]:
    """``files`` and each converted format whose copy of this workload's images is built and
    current (``located`` checks it against the folder); none is built here."""
    if not images(workload):
        return ["files"]
    dataset = workload.dataset()
    return ["files", *(f for f in CONVERTED if _copy_missing(workload, f, dataset) is None)]


def path_space(workload: Workload, knobs: Knobs, device: torch.device) -> dict[str, list[Any]]:
    """The data-path knobs worth a tuner's search here, from ``available_paths``: ``decode``
    where the device can decode, ``data_format`` over the built copies (files always; only
    when one is built), ``loader`` with dali where installed. Empty for a workload that
    reads no image folder."""
    if not images(workload):
        return {}
    paths = {p.name: p for p in available_paths(workload, knobs, device)}
    space: dict[str, list[Any]] = {}
    if paths["gpu-decode"].available:
        space["decode"] = ["cpu", "gpu"]
    formats = built_formats(workload)
    if len(formats) > 1:
        space["data_format"] = formats
    if paths["dali"].available:
        space["loader"] = ["torch", "dali"]
    return space


# -- one path each ----------------------------------------------------------------------------


def _work(workload: Workload) -> str:
    return "CPU decode" if images(workload) else "loader"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _unless(
    reason: str | None, name: str, label: str, changes: dict[str, Any], does: str
) -> DataPath:
    """A path available unless ``reason`` says why it cannot run here; ``does`` says what it
    does when it can."""
    return DataPath(name, label, changes, available=reason is None, why=reason or does)


def _cpu_path(workload: Workload, workers: int, cpu: dict[str, Any], *, now: bool) -> DataPath:
    what = "decode and augment" if images(workload) else "run __getitem__ and collate"
    where = {0: "in the training loop", 1: "in 1 worker process"}.get(
        workers, f"in {workers} worker processes"
    )
    return DataPath(
        name="cpu",
        label=f"{_work(workload)}, {_count(workers, 'worker')} (now)",
        changes={"num_workers": workers, **cpu},
        available=True,
        why=f"the torch loader as configured: {what} {where}",
    )


def _all_cores(workload: Workload, workers: int, cores: int, cpu: dict[str, Any]) -> DataPath:
    same = workers == cores
    why = (f"num_workers={workers} already is one worker per core this process may use"
           if same else f"one worker per core this process may use ({cores})")  # fmt: skip
    return DataPath(
        name="cpu-all-cores",
        label=f"{_work(workload)}, {_count(cores, 'worker')} (all cores)",
        changes={"num_workers": cores, **cpu},
        available=not same,
        why=why,
    )


def _gpu_decode(
    workload: Workload, knobs: Knobs, device: torch.device, cores: int, fmt: str
) -> DataPath:
    readers = min(cores, BYTE_READERS)
    changes = {"decode": "gpu", "loader": "torch", "data_format": fmt, "num_workers": readers}
    reason = _no_image_folder(workload) or _decode_refused(workload, knobs, device, changes)
    does = ("the workers read JPEG bytes; the device decodes them (nvJPEG) and crops, flips "
            "and normalizes there")  # fmt: skip
    label = f"decode=gpu ({fmt}), {_count(readers, 'worker')} reading bytes"
    return _unless(reason, "gpu-decode", label, changes, does)


def _predecoded(workload: Workload, knobs: Knobs, device: torch.device, cores: int) -> DataPath:
    changes = {"data_format": "predecoded", "decode": "gpu", "loader": "torch",
               "num_workers": cores}  # fmt: skip
    reason = _no_image_folder(workload) or _copy_missing(workload, "predecoded")
    on_device = _decode_refused(workload, knobs, device, changes) is None  # built or not
    if not on_device:
        changes["decode"] = "cpu"
    else:
        changes["num_workers"] = min(cores, BYTE_READERS)
    where = "the device" if on_device else "the workers, in float32"
    does = f"uint8 pixels decoded once, ahead of time; cropped and normalized on {where}"
    label = (f"data_format=predecoded, decode={changes['decode']}, "
             f"{_count(changes['num_workers'], 'worker')}")  # fmt: skip
    return _unless(reason, "predecoded", label, changes, does)


def _dali(workload: Workload, cores: int, fmt: str) -> DataPath:
    fmt = fmt if fmt in DALI_FORMATS else "files"
    threads = min(cores, BYTE_READERS)
    changes = {"loader": "dali", "data_format": fmt, "dali_decode": "auto", "decode": "cpu",
               "num_workers": threads}  # fmt: skip
    reason = _no_image_folder(workload) or dali_available() or _dali_refused(workload)
    does = ("DALI decodes (nvJPEG with mixed decode on CUDA, its C++ threads elsewhere) and "
            "crops only each JPEG's window")  # fmt: skip
    return _unless(
        reason, "dali", f"loader=dali ({fmt}), {_count(threads, 'thread')}", changes, does
    )


# -- the reasons ------------------------------------------------------------------------------


def _no_image_folder(workload: Workload) -> str | None:
    if images(workload):
        return None
    return f"workload {workload.name!r} reads no image folder: there is nothing to decode"


def _decode_refused(
    workload: Workload, knobs: Knobs, device: torch.device, changes: dict[str, Any]
) -> str | None:
    """Why ``decode=gpu`` cannot act for these knobs on this device (None: it can)."""
    try:
        wanted = knobs.replace(**changes)
    except InputError as exc:
        return str(exc)
    return decode_no_effect(wanted, device, workload).get("decode")


def _copy_missing(workload: Workload, fmt: str, dataset: Any = None) -> str | None:
    """None when the ``fmt`` copy of the workload's folder is built and current, else why not
    (the message names the command that builds it)."""
    try:
        located(workload, Knobs(data_format=fmt), dataset)
    except InputError as exc:  # FormatMissing, a stale copy, no crop size to predecode at
        return exc.allowed or str(exc)  # FormatMissing's: where it looked, the command
    return None


def _dali_refused(workload: Workload) -> str | None:
    """Why DALI cannot mirror this workload (its own collate_fn, a transform it cannot run)."""
    try:
        refuse_collate(workload, Knobs(loader="dali"))
        augment_from_transform(getattr(workload.dataset(), "transform", None))
    except (InputError, LoaderUnavailable) as exc:
        return str(exc)
    return None


def _valid(path: DataPath, base: Knobs) -> DataPath:
    """An available path whose knobs cannot combine with ``base``'s is unavailable, with the
    refusal (never a run that fails on its knobs)."""
    if not path.available:
        return path
    try:
        path.knobs(base)
    except InputError as exc:
        return DataPath(path.name, path.label, path.changes, False, str(exc))
    return path


__all__ = [
    "JPEG_FORMATS",
    "PATH_NAMES",
    "DataPath",
    "available_paths",
    "built_formats",
    "path_space",
    "usable_cores",
]
