"""What to try next, given a verdict: the knobs most likely to help, on this device.

Rules, not measurements: a diagnosis (workbench/analysis/diagnosis.py) says which side is slower,
and each rule here names a knob that speeds up that side, the value to try and why. Two promises:

- a knob that cannot act on this device (pinned memory on a CPU, ...) is never suggested:
  ``no_effect`` decides, the same function that reports such knobs in a burst;
- a data-bound (or balanced) pipeline never gets "raise the batch size": the model already
  waits for data, and a bigger batch only makes each wait longer.

The words fit the workload: JPEG decoding, stored image sizes and DALI are spoken of only for
an image workload (one that reads an ImageFolder, ``Workload.image_dir``); for any other (token
workloads, a user's own dataset) the loader's work is the dataset's ``__getitem__`` and the
collate function: "preprocessing". Memory advice quotes the peak a burst measured, with the
device's capacity named as such, never the capacity in the peak's place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from workbench.core.knobs import FP32_PRECISIONS, KnobError, Knobs
from workbench.engine import hardware
from workbench.engine.loaders.dali import INSTALL_HINT, dali_available  # no DALI import
from workbench.engine.training import no_effect
from workbench.engine.workloads import Workload

SATURATED = 0.85
"""On a CPU, a compute-only burst using this share of all cores leaves none idle for workers."""
OVERLAP_SHARE = 0.2
"""With ``num_workers=0`` loading and compute run one after the other; when loading takes at
least this share of the time, workers (which overlap the two) come first even for a
compute-bound pipeline."""
WAIT_EXPLAINED_PCT = 10.0
"""A full pipeline waiting for data this share of its window (or more) is told why (the
diagnosis's reason) and gets the data rule that answers it, whatever the verdict: a model that
idles a tenth of the time for data is worth a knob, and a step loop fed in time waits a few
percent at most (the queue hand-over)."""


@dataclass(frozen=True, slots=True)
class Suggestion:
    """One knob to try next, with the value and why it should help."""

    knob: str
    value: Any
    why: str

    def text(self) -> str:
        value = str(self.value).lower() if isinstance(self.value, bool) else self.value
        return f"{self.knob}={value}: {self.why}"


def advise(
    verdict: str,
    knobs: Knobs,
    dev: torch.device,
    wl: Workload,
    loader_sps: float,
    compute_sps: float,
    compute_cpu_pct: float | None = None,
    *,
    data_wait_pct: float | None = None,
    peak_mem_mib: float | None = None,
) -> list[Suggestion]:
    """Knobs most likely to help next, for this verdict on this device (best first).

    ``compute_cpu_pct``: CPU use of the compute-only burst (100 = one core), to tell whether
    loader workers would find idle cores or take them from the model. ``data_wait_pct`` and
    ``peak_mem_mib``: what the full pipeline measured (its share of the window spent waiting
    for data; its peak memory, quoted where a bigger batch is suggested).

    A compute-bound pipeline that still waits for data (``WAIT_EXPLAINED_PCT`` or more) gets
    the first data rule too, after the compute ones; with ``num_workers=0`` and loading at
    ``OVERLAP_SHARE`` of the time or more, workers come first: they recover that time for sure.
    """
    data = data_advice(knobs, dev, wl, compute_cpu_pct)
    compute = compute_advice(knobs, dev, wl, peak_mem_mib)
    if verdict == "data-bound":
        chosen = data
    elif verdict == "compute-bound":
        chosen = compute
        share = _load_share(knobs, data_wait_pct, loader_sps, compute_sps)
        if knobs.num_workers == 0 and share >= OVERLAP_SHARE:
            chosen = [*data[:1], *compute]  # loading between steps: overlap it first
        elif share * 100 >= WAIT_EXPLAINED_PCT:
            chosen = [*compute, *data[:1]]
    elif verdict == "balanced":
        chosen = data[:2] + [s for s in compute if s.knob != "batch_size"][:2]
    else:
        chosen = []
    return [s for s in chosen if _acts(s, knobs, dev, wl)]


def _load_share(
    knobs: Knobs, data_wait_pct: float | None, loader_sps: float, compute_sps: float
) -> float:
    """The share of the time spent waiting for data: measured (the full burst's wait) where
    known, else, with ``num_workers=0``, what serial loading makes it (1/L over 1/L + 1/C)."""
    if data_wait_pct is not None:
        return data_wait_pct / 100
    if knobs.num_workers > 0 or loader_sps + compute_sps <= 0:
        return 0.0
    return compute_sps / (loader_sps + compute_sps)


def images(wl: Workload) -> bool:
    """Does this workload decode images from an ImageFolder (the words "decode", "JPEG")?"""
    return wl.image_dir is not None and not wl.tokens


def preprocessing(wl: Workload) -> tuple[str, str]:
    """(what the loader's work is called, how to make it cheaper) for this workload."""
    if images(wl):
        return "decoding", "smaller stored images, pre-decoded data"
    if wl.tokens:
        return "preprocessing", "tokenize once ahead of time and store the token ids"
    return "preprocessing", "do the dataset's per-item work once ahead of time and store it"


def _acts(s: Suggestion, knobs: Knobs, dev: torch.device, wl: Workload) -> bool:
    """Would this knob act here? Suggesting pinned memory on a CPU would be a fake promise."""
    try:
        return s.knob not in no_effect(knobs.replace(**{s.knob: s.value}), dev, wl)
    except KnobError:
        return False


def data_advice(
    knobs: Knobs, dev: torch.device, wl: Workload, compute_cpu_pct: float | None = None
) -> list[Suggestion]:
    """Rules that speed up the data side, most effective first."""
    cores = hardware.device_info(dev).cpu_count or os.cpu_count() or 1
    nw, cuda = knobs.num_workers, dev.type == "cuda"
    target, depth = min(cores, max(2, nw * 2)), (knobs.prefetch_factor or 2) * 2
    units = "DALI threads" if knobs.loader == "dali" else "processes"
    work = "decode" if images(wl) else "run the dataset's __getitem__ and collate"
    workers = f"{work} in {target} {units}, overlapped with compute (now {nw}; {cores} cores)"
    if not cuda and compute_cpu_pct is not None and compute_cpu_pct >= SATURATED * 100 * cores:
        busy = compute_cpu_pct / cores
        noun, cheaper = preprocessing(wl)
        workers += (
            f", but the model alone keeps the cores {busy:.0f}% busy: workers take cores from "
            f"it, so expect less than the loader's ceiling; cheaper {noun} ({cheaper}) "
            "helps more"
        )
    rules = [
        (nw < cores, "num_workers", target, workers),
        (knobs.loader == "torch" and wl.image_dir is not None, "loader", "dali", _dali_why(cuda)),
        (cuda and knobs.loader == "dali" and knobs.dali_decode == "cpu", "dali_decode", "mixed",
         "decode JPEGs on the GPU (nvJPEG and its hardware decoder), freeing the CPU cores"),
        (cuda and not knobs.pin_memory, "pin_memory", True,
         "page-locked batches copy to the GPU faster, without blocking the training loop"),
        (nw > 0, "prefetch_factor", depth,
         "a deeper queue per worker rides out slow batches (uneven batches, not a slow mean)"),
        (nw > 0 and not knobs.persistent_workers, "persistent_workers", True,
         "keep workers across epochs instead of re-forking them at every epoch boundary"),
    ]  # fmt: skip
    return [Suggestion(knob, value, why) for cond, knob, value, why in rules if cond]


def _dali_why(cuda: bool) -> str:
    """Why DALI may help a data-bound image pipeline here, and what it needs."""
    why = (
        "decode JPEGs on the GPU (nvJPEG, mixed decode), freeing the CPU cores"
        if cuda
        else "DALI decodes in C++ threads and only each JPEG's crop window (1.4-1.7x the "
        "torch loader's images/s on a 2-core CPU); compare with a sweep over loader=torch,dali"
    )
    return why + (f" ({INSTALL_HINT} first)" if dali_available() else "")


def compute_advice(
    knobs: Knobs, dev: torch.device, wl: Workload, peak_mem_mib: float | None = None
) -> list[Suggestion]:
    """Rules that make each training step cheaper, most effective first. ``peak_mem_mib``: the
    peak a burst with these knobs measured, quoted beside the bigger batch."""
    cuda, image = dev.type == "cuda", images(wl)
    bf16_why = (
        "autocast matmuls and convolutions run on tensor cores at 2x+ the fp32 rate"
        if cuda
        else "autocast: faster only on CPUs with AMX or AVX-512 BF16; measure it"
    )
    rules = [
        (knobs.precision in FP32_PRECISIONS, "precision", "bf16", bf16_why),
        (True, "batch_size", knobs.batch_size * 2,
         "more work per step amortizes per-step overhead; "
         + _watch_memory(dev, knobs, peak_mem_mib)),
        (knobs.compile == "off", "compile", "default",
         "fuses elementwise ops; compile time is paid once, outside the measured window"),
        (image and not knobs.channels_last, "channels_last", True,
         "NHWC convolutions are faster on tensor cores and in oneDNN"),
        (cuda and image and not knobs.cudnn_benchmark, "cudnn_benchmark", True,
         "cuDNN times its convolution algorithms once and keeps the fastest; measure it off and "
         "on in both orders: this project's H200 run saw no gain past the bursts' own drift"),
    ]  # fmt: skip
    return [Suggestion(knob, value, why) for cond, knob, value, why in rules if cond]


def _watch_memory(dev: torch.device, knobs: Knobs, peak_mem_mib: float | None) -> str:
    """ "watch peak memory: <the measured peak> of <the capacity, named>"; a capacity is never
    printed where the peak belongs."""
    total = hardware.device_info(dev).total_mem_mib
    room = "device memory" if dev.type == "cuda" else "system RAM"
    capacity = f"{room} {total:,.0f} MiB" if total else f"{room} unknown"
    if peak_mem_mib is None:
        return f"watch peak memory (not measured here; {capacity})"
    now = f"{peak_mem_mib:,.0f} MiB at batch_size={knobs.batch_size}"
    return f"watch peak memory: {now} now, of {capacity}"


__all__ = [
    "OVERLAP_SHARE",
    "SATURATED",
    "WAIT_EXPLAINED_PCT",
    "Suggestion",
    "advise",
    "compute_advice",
    "data_advice",
    "images",
    "preprocessing",
]
