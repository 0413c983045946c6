"""A GPU-shaped proving ground: simulated training jobs on one CUDA device, over the space
``tuner.default_space`` gives there.

The CPU-shaped landscapes (``landscapes.py``) have three knobs and a loader that shares the
model's cores. A GPU job is shaped otherwise: precision and layout change the model's speed
several-fold, and a faster model turns a fed loop into a starved one; JPEG decoding in loader
workers caps image workloads; pinned memory and the data path (decode on the device, a
predecoded copy, DALI) move that cap; the device's memory edge moves with precision; bursts
drift. This module draws such landscapes and answers a burst of any config with a noisy
BurstResult (``Bursts`` in ``landscapes.py``), so the tuner and any other search can be judged
on hundreds of them in seconds. A pick is judged by ``true_sps``, the noiseless throughput.

**Calibration** (this project's H200 run, ``benchmarks/results/gpu-20261204-nvidia-h200-
unrecorded.json``, resnet50 at batch 128, channels_last): IEEE fp32 926, TF32 3,028, bf16
4,325 images/s; peak memory 11,394 MiB in fp32, 5,782 in bf16 (activations about 82 and 38
MiB a sample over about 900 MiB of weights, gradients and optimizer state); real JPEGs with
8 workers 699 images/s (87 a worker); four bursts of one config drifting 11% (4,306 ->
3,816). PyTorch's default precision lets cuDNN convolutions use TF32 (``training.
backend_flags``), so a convnet's start runs near its TF32 speed and bf16 with channels_last
gains 1.4-3x over it; a matmul-bound model's start is IEEE fp32, and bf16 gains 3-5x (the
published tensor-core ratios). Published shapes: JPEG decode and augmentation of ImageNet-
sized images at 40-250 images/s a worker, one core each, the main process keeping one;
pageable host-to-device copies of float32 batches at 5-14 GB/s, pinned ones 1.8-3x faster,
both partly overlapped with training (the pinning thread's own copy caps the loader); nvJPEG
on the device at 2,500-9,000 images/s, partly overlapped with training; 16-141 GiB devices,
the caching allocator reserving 3-15% above what is allocated.

**The families** (``GPU_KINDS``, cycling with the seed):

- ``gpu-loader-capped``: an image convnet whose JPEGs decode in loader workers; no other
  data path here (a transform the device pipeline does not mirror). The issue's trap: the
  workers sized for the default precision starve the bf16 model.
- ``gpu-data-path``: the same, with ``decode=gpu`` available and, on some, a predecoded or
  sharded copy built and DALI installed: the loader cap can be lifted, not only raised.
- ``gpu-compute-bound``: a token model (the loader reads tokens: fast); IEEE fp32 at the
  start, so precision is the big move, then the batch against the memory edge.
- ``gpu-memory-edge``: a large image model on a 16-48 GiB device, the edge inside the
  listed batch sizes at the default precision and further out in bf16.

**Noise and drift.** One burst is off its config's truth by a heavy-tailed relative error
(Student's t with 3 degrees of freedom, scaled to a 1-8% SD) and, now and then, a stall
(0-6% of bursts, 10-40% slow). Readings drift with the burst's place in the tune: a level
that settles from 1 towards ``exp(-drift_amp)`` (up to 12% down, or a little up) over
``drift_tau`` bursts, plus a random walk. A reading is a function of (landscape, config,
how many times that config ran, which burst of the tune it is): every method that runs the
same config at the same point sees the same reading.

**Seed protocol.** ``DEV_SEEDS`` (0-399) are the seeds the tuner was developed on: every
change to the search was tried on 0-199 and checked on 200-399. ``HELD_OUT_SEEDS``
(10,000-10,399) were never run while developing; the goals are judged on them
(``benchmarks/tuner_landscapes.py --held-out``), once the search was fixed. A landscape's
stream is ``random.Random("gpu|<seed>")``, apart from the CPU families'
``random.Random(seed)``, so GPU seed 5 and CPU seed 5 share nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import random
from dataclasses import dataclass
from typing import Any, NamedTuple

from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult

GPU_KINDS = ("gpu-loader-capped", "gpu-data-path", "gpu-compute-bound", "gpu-memory-edge")
DEV_SEEDS = range(0, 400)
"""The seeds the tuner's search was developed on (tuned on 0-199, checked on 200-399)."""
HELD_OUT_SEEDS = range(10_000, 10_400)
"""The judging seeds: never run while the search was developed."""
DEVICES_GIB = (16, 24, 40, 48, 80, 94, 141)
"""Device memory of the drawn GPUs (RTX 4080/A4000, L4/A10, A100 40 GB, L40S, A100/H100,
H100 NVL, H200)."""
CORES = (8, 12, 16, 24, 32)
LIMIT_SHARE = 0.9
"""The tuner's default memory margin: what a config may reserve of the device."""
FLOAT_IMAGE_MB = 0.602
"""A 224 x 224 RGB float32 sample, the bytes a CPU-decoded image batch copies per sample."""
_READ_GAIN = {"predecoded": 3.0, "shards": 1.6, "lmdb": 1.2}
"""Bytes-only workers (decode=gpu) per format, over reading single files."""
_DECODE_GAIN = {"shards": 1.1, "lmdb": 1.05}
"""CPU-decoding workers per format: the decode dominates, the read is a little cheaper."""
_MAX_T = 256  # bursts the drift's random walk is drawn for (a tune's budget is far below)


class Config(NamedTuple):
    """A config of the space as plain values (the grid's cheap stand-in for Knobs: the
    model reads the same attribute names from either)."""

    batch_size: int
    num_workers: int
    prefetch_factor: int | None
    pin_memory: bool
    precision: str
    channels_last: bool
    decode: str = "cpu"
    data_format: str = "files"
    loader: str = "torch"

    def knobs(self) -> Knobs:
        return Knobs(**self._asdict())


@dataclass(frozen=True, slots=True)
class GpuLandscape:
    """One simulated GPU job: its hardware, its model, its loader, its data paths, its noise."""

    kind: str
    seed: int
    start: Knobs
    """What the user runs today: PyTorch's defaults at their batch size (the tune's base)."""
    cores: int
    device_mem_mib: float
    image: bool
    conv: bool
    # -- the model ------------------------------------------------------------------------
    peak: float
    """Samples/s of the model alone at a large batch, bf16 (channels_last for images)."""
    step_overhead_s: float
    """Fixed time per step (launches, optimizer, Python): a small batch pays it per sample."""
    batch_best: int
    large_batch_drop: float
    """Share lost per doubling past ``batch_best`` (caches, allocator)."""
    speed_default: float
    speed_tf32: float
    """Per-sample speed relative to bf16 (channels_last for images)."""
    layout_gain_bf16: float
    """bf16 with channels_last over bf16 NCHW (image models)."""
    layout_gain_fp32: float
    """channels_last under fp32 math (default, tf32): about neutral, either way."""
    # -- memory ---------------------------------------------------------------------------
    mem_base_mib: float
    act_mib: float
    """Activation memory a sample under fp32 math."""
    bf16_act_share: float
    reserved_over: float
    """What the caching allocator reserves above the peak allocated, as a share."""
    # -- the loader -----------------------------------------------------------------------
    decode_per_worker: float
    """Samples/s one worker prepares on the default path (JPEG decode; tokens: a read)."""
    worker_scaling: float
    """Exponent of the workers' scaling up to the cores (memory bandwidth, shared caches)."""
    jitter: float
    sample_mb: float
    """Bytes a sample copies to the device on the default path, in MB."""
    pageable_mb_s: float
    pinned_gain: float
    """A copy from pinned memory over one from pageable memory (DMA straight from the page)."""
    copy_exposed: float
    """Share of a host-to-device copy the training loop waits for (the rest overlaps)."""
    pin_mb_s: float
    """The pinning thread's copy rate: the loader's cap with pin_memory."""
    # -- the data paths -------------------------------------------------------------------
    gpu_decode: bool
    device_decode_per_s: float
    decode_exposed: float
    reader_per_worker: float
    formats: tuple[str, ...]
    predecoded_per_worker: float
    dali: bool
    dali_per_thread: float
    dali_decode_per_s: float
    # -- noise and drift ------------------------------------------------------------------
    noise: float
    """Relative SD of one burst (Student's t, 3 degrees of freedom)."""
    stall_share: float
    drift_amp: float
    drift_tau: float
    walk: tuple[float, ...]
    wait_bias: float
    """How far the reported data wait is off the truth (a host clock over async kernels)."""

    # -- the space ------------------------------------------------------------------------
    def space(self) -> dict[str, list[Any]]:
        """``tuner.default_space`` on this machine: batch around the start, workers up to the
        cores, prefetch, pinned memory, precision, channels_last (images), the data path."""
        b = self.start.batch_size
        sizes = sorted({s for s in (max(1, b // 2), b, b * 2, b * 4, b * 8) if s <= 65536})
        workers = sorted({w for w in (0, 1, 2, 4, 8, 16) if w <= self.cores}
                         | {min(self.cores, 16)})  # fmt: skip
        space: dict[str, list[Any]] = {
            "batch_size": sizes,
            "num_workers": workers,
            "prefetch_factor": [2, 4],
            "pin_memory": [False, True],
            "precision": ["default", "tf32", "bf16"],
        }
        if self.image:
            space["channels_last"] = [False, True]
            if self.gpu_decode:
                space["decode"] = ["cpu", "gpu"]
            if len(self.formats) > 1:
                space["data_format"] = list(self.formats)
            if self.dali:
                space["loader"] = ["torch", "dali"]
        return space

    def configs(self) -> list[Config]:
        """Every valid config of the space (DALI reads files and shards only)."""
        s = self.space()
        out = []
        for b, w, pin, prec, cl, dec, fmt, ld in itertools.product(
            s["batch_size"], s["num_workers"], s["pin_memory"], s["precision"],
            s.get("channels_last", [False]), s.get("decode", ["cpu"]),
            s.get("data_format", ["files"]), s.get("loader", ["torch"]),
        ):  # fmt: skip
            if ld == "dali" and fmt not in ("files", "shards"):
                continue
            for p in s["prefetch_factor"] if w else [None]:
                out.append(Config(b, w, p, pin, prec, cl, dec, fmt, ld))
        return out

    @property
    def limit_mib(self) -> float:
        return self.device_mem_mib * LIMIT_SHARE

    @property
    def device(self) -> str:
        """The kind of device the bursts stand for (``tuner.tune_on``'s ``device``)."""
        return "cuda"

    # -- the truth ------------------------------------------------------------------------
    def peak_mem_mib(self, k: Any) -> float:
        """Peak allocated: weights and optimizer, activations, the device path's buffers."""
        low = k.precision in ("bf16", "fp16")
        act = self.act_mib * (self.bf16_act_share if low else 1.0) * k.batch_size
        return self.mem_base_mib + act + self._path_mem_mib(k)

    def reserved_mib(self, k: Any) -> float:
        return self.peak_mem_mib(k) * (1.0 + self.reserved_over)

    def compute_sps(self, k: Any) -> float:
        """Samples/s of the training loop with its batch always ready: the model at this
        batch and precision, the copy it waits for, the decoding it does on the device."""
        b = k.batch_size
        per_sample = 1.0 / (self.peak * self._precision_speed(k))
        if b > self.batch_best:
            per_sample *= (1.0 + self.large_batch_drop) ** math.log2(b / self.batch_best)
        rate = self.pageable_mb_s * (self.pinned_gain if k.pin_memory else 1.0)
        copy = self.copy_exposed * self._copy_mb(k) / rate
        return 1.0 / (self.step_overhead_s / b + per_sample + copy + self._device_decode_s(k))

    def loader_sps(self, k: Any) -> float:
        """Samples/s the loader delivers (its workers, or DALI's threads)."""
        if self._dali(k):
            return self.dali_per_thread * self._usable(max(1, k.num_workers))
        per = self._per_worker(k)
        rate = per * 1.05 if k.num_workers == 0 else per * self._usable(k.num_workers)
        mb = self._copy_mb(k)
        if k.pin_memory and mb:
            rate = min(rate, self.pin_mb_s / mb)
        return rate

    def true_sps(self, k: Any) -> float | None:
        """Noiseless samples/s; None when the config runs out of device memory."""
        if self.reserved_mib(k) > self.device_mem_mib:
            return None
        c, load = self.compute_sps(k), self.loader_sps(k)
        if k.num_workers == 0 and not self._dali(k):
            return 1.0 / (1.0 / c + 1.0 / load)  # the loop loads, then trains: turns
        rate = (c**-4 + load**-4) ** -0.25  # the slower stage, a little below it when close
        depth = 8 if self._dali(k) else k.num_workers * (k.prefetch_factor or 2)
        return rate * (1.0 - self.jitter * math.exp(-depth / 4))

    def fits(self, k: Any) -> bool:
        return self.true_sps(k) is not None and self.reserved_mib(k) <= self.limit_mib

    def best_sps(self, also: Any = ()) -> float:
        """The true best fitting throughput over the space and any ``also`` configs."""
        extra = [v for k in also if self.fits(k) and (v := self.true_sps(k)) is not None]
        return max([_grid_best(self), *extra])

    def drift(self, t: int) -> float:
        """The level of burst number ``t`` (0-based) of a tune, relative to the first."""
        settle = -self.drift_amp * (1.0 - math.exp(-t / self.drift_tau))
        return math.exp(settle + self.walk[min(t, _MAX_T - 1)])

    # -- a burst --------------------------------------------------------------------------
    def burst(self, k: Knobs, nth: int, t: int) -> BurstResult:
        """The ``nth`` run of ``k``, as burst ``t`` of a tune."""
        true = self.true_sps(k)
        if true is None:
            return BurstResult(status="oom", error="simulated CUDA OOM", workload="simulated",
                               device="sim-cuda", knobs=k)  # fmt: skip
        key = f"gpu|{self.seed}|{sorted(k.changes().items())}|{nth}".encode()
        rng = random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big"))
        t3 = rng.gauss(0.0, 1.0) / math.sqrt(sum(rng.gauss(0.0, 1.0) ** 2 for _ in range(3)) / 3)
        sps = true * self.drift(t) * math.exp(self.noise * t3 / math.sqrt(3))
        if rng.random() < self.stall_share:
            sps *= rng.uniform(0.6, 0.9)
        wait = max(0.0, 1.0 - true / self.compute_sps(k)) + self.wait_bias
        wait_pct = 100.0 * min(0.99, max(0.0, wait + rng.gauss(0.0, 0.02)))
        return BurstResult(workload="simulated", device="sim-cuda", knobs=k, samples_per_s=sps,
                           peak_mem_mib=self.peak_mem_mib(k),
                           peak_reserved_mib=self.reserved_mib(k), data_wait_pct=wait_pct,
                           step_ms_p50=1000.0 * k.batch_size / sps)  # fmt: skip

    # -- parts of the model ---------------------------------------------------------------
    def _dali(self, k: Any) -> bool:
        return self.dali and k.loader == "dali"

    def _on_device(self, k: Any) -> bool:
        return self.gpu_decode and k.decode == "gpu" and not self._dali(k)

    def _precision_speed(self, k: Any) -> float:
        low = k.precision in ("bf16", "fp16")
        speed = 1.0 if low else (self.speed_tf32 if k.precision == "tf32" else self.speed_default)
        if not self.image:
            return speed
        if low:
            return speed if k.channels_last else speed / self.layout_gain_bf16
        return speed * self.layout_gain_fp32 if k.channels_last else speed

    def _copy_mb(self, k: Any) -> float:
        """MB a sample copies host -> device: float32 pixels, uint8 pixels, JPEG bytes."""
        if self._dali(k):
            return 0.0  # DALI's own pinned buffers and copies
        if not self._on_device(k):
            return self.sample_mb
        return self.sample_mb / 4 if k.data_format == "predecoded" else self.sample_mb / 6

    def _device_decode_s(self, k: Any) -> float:
        """Device time a sample's decoding and augmenting takes from training."""
        if self._dali(k):
            return self.decode_exposed / self.dali_decode_per_s
        if not self._on_device(k):
            return 0.0
        if k.data_format == "predecoded":
            return self.decode_exposed / (self.device_decode_per_s * 8)  # a crop, no decoder
        return self.decode_exposed / self.device_decode_per_s

    def _per_worker(self, k: Any) -> float:
        fmt = k.data_format if k.data_format in self.formats else "files"
        if self._on_device(k):
            return self.reader_per_worker * _READ_GAIN.get(fmt, 1.0)
        if fmt == "predecoded":
            return self.predecoded_per_worker
        return self.decode_per_worker * _DECODE_GAIN.get(fmt, 1.0)

    def _usable(self, workers: int) -> float:
        """Workers' worth of decoding: one core each up to the cores the main process leaves,
        a little more past them (hyperthreads), sublinear with ``worker_scaling``."""
        spare = self.cores - 1
        return min(workers, spare) ** self.worker_scaling + 0.15 * max(0, workers - spare)

    def _path_mem_mib(self, k: Any) -> float:
        b = k.batch_size
        if self._dali(k):
            return 800.0 + 2 * b * FLOAT_IMAGE_MB
        if self._on_device(k):
            return (0.0 if k.data_format == "predecoded" else 300.0) + 2 * b * FLOAT_IMAGE_MB
        return 0.0


_BEST: dict[tuple[str, int], float] = {}


def _grid_best(ls: GpuLandscape) -> float:
    """The best fitting throughput over the space (cached: the space is ~10^4 configs)."""
    key = (ls.kind, ls.seed)
    if key not in _BEST:
        _BEST[key] = max(v for k in ls.configs() if ls.fits(k) and (v := ls.true_sps(k)))
    return _BEST[key]


def draw_gpu(seed: int, kind: str | None = None) -> GpuLandscape:
    """GPU landscape number ``seed`` (its kind cycles through GPU_KINDS unless given)."""
    rng = random.Random(f"gpu|{seed}")
    kind = kind or GPU_KINDS[seed % len(GPU_KINDS)]
    p = _common(rng) | {"kind": kind, "seed": seed}
    if kind == "gpu-compute-bound":
        p |= _token_model(rng)
        p["mem_base_mib"] *= p["device_mem_mib"]  # weights and optimizer: a share of it
    else:
        p |= _image_model(rng, big=kind == "gpu-memory-edge")
    if kind == "gpu-data-path":
        p |= _data_paths(rng)
    ls = _fitting_start(GpuLandscape(**p))
    return _edge_inside(ls) if kind == "gpu-memory-edge" else ls


def _fitting_start(ls: GpuLandscape) -> GpuLandscape:
    """The user's batch size halved until their job runs: what they run today fits."""
    b = ls.start.batch_size
    while b > 1 and not ls.fits(ls.start.replace(batch_size=b)):
        b //= 2
    return dataclasses.replace(ls, start=ls.start.replace(batch_size=b))


def _edge_inside(ls: GpuLandscape) -> GpuLandscape:
    """The user's batch size doubled while the largest listed size (8x) still fits: the
    memory-edge family's edge lies inside the listed sizes at the default precision."""
    b, fits = ls.start.batch_size, lambda size: ls.fits(ls.start.replace(batch_size=size))
    while fits(8 * b) and fits(2 * b):
        b *= 2
    return dataclasses.replace(ls, start=ls.start.replace(batch_size=b))


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _common(rng: random.Random) -> dict[str, Any]:
    steps = [rng.gauss(0.0, 1.0) for _ in range(_MAX_T)]
    walk_sd = rng.uniform(0.0, 0.008)
    return {
        "cores": rng.choice(CORES),
        "device_mem_mib": 143771.0 if (g := rng.choice(DEVICES_GIB)) == 141 else g * 1024.0,
        "step_overhead_s": rng.uniform(0.004, 0.02),
        "batch_best": rng.choice([128, 256, 512]),
        "large_batch_drop": rng.uniform(0.0, 0.04),
        "reserved_over": rng.uniform(0.03, 0.15),
        "worker_scaling": rng.uniform(0.85, 1.0),
        "jitter": rng.uniform(0.02, 0.15),
        "pageable_mb_s": rng.uniform(5000, 14000),
        "pinned_gain": rng.uniform(1.8, 3.0),
        "copy_exposed": rng.uniform(0.3, 0.8),
        "pin_mb_s": rng.uniform(8000, 25000),
        "noise": _log_uniform(rng, 0.01, 0.08),
        "stall_share": rng.uniform(0.0, 0.06),
        "drift_amp": rng.uniform(-0.03, 0.12),
        "drift_tau": rng.uniform(1.0, 6.0),
        "walk": tuple(itertools.accumulate([0.0, *(walk_sd * s for s in steps[1:])])),
        "wait_bias": rng.uniform(-0.03, 0.08),
        # no data path unless drawn (``_data_paths``)
        "gpu_decode": False, "device_decode_per_s": 1.0, "decode_exposed": 0.0,
        "reader_per_worker": 1.0, "formats": ("files",), "predecoded_per_worker": 1.0,
        "dali": False, "dali_per_thread": 1.0, "dali_decode_per_s": 1.0,
    }  # fmt: skip


def _image_model(rng: random.Random, *, big: bool) -> dict[str, Any]:
    """A convnet on JPEGs: resnet50 (scale 1) and its smaller and larger kin; ``big``: a
    large model or high resolution on a small device (the memory edge family)."""
    scale = _log_uniform(rng, 2.0, 5.0) if big else _log_uniform(rng, 0.6, 1.8)
    tf32 = rng.uniform(0.45, 0.8)  # resnet50 on the H200: 3,028 / 4,325 = 0.70
    p = {
        "image": True, "conv": True,
        "peak": _log_uniform(rng, 1500, 5500) / scale,
        "speed_tf32": tf32, "speed_default": tf32 * rng.uniform(0.93, 1.0),
        "layout_gain_bf16": rng.uniform(1.05, 1.4), "layout_gain_fp32": rng.uniform(0.95, 1.08),
        "mem_base_mib": 500 + 400 * scale, "act_mib": 82 * scale * rng.uniform(0.85, 1.15),
        "bf16_act_share": rng.uniform(0.45, 0.6),
        "decode_per_worker": _log_uniform(rng, 40, 250), "sample_mb": FLOAT_IMAGE_MB,
        "start": Knobs(batch_size=rng.choice([32, 64, 128, 256])),
    }  # fmt: skip
    if big:
        p["device_mem_mib"] = rng.choice([16, 24, 40, 48]) * 1024.0
        p["cores"] = rng.choice([16, 24, 32])
        p["decode_per_worker"] = _log_uniform(rng, 100, 300)
        p["start"] = Knobs(batch_size=rng.choice([16, 32, 64]))
    return p


def _token_model(rng: random.Random) -> dict[str, Any]:
    """A transformer on tokens: IEEE fp32 matmuls by default (3-5x below bf16), a loader that
    reads token ids (thousands of samples/s a worker, a few KB each)."""
    speed_default = rng.uniform(0.2, 0.33)
    return {
        "image": False, "conv": False,
        "peak": _log_uniform(rng, 150, 3000),
        "speed_default": speed_default, "speed_tf32": rng.uniform(0.55, 0.85),
        "layout_gain_bf16": 1.0, "layout_gain_fp32": 1.0,
        "mem_base_mib": _log_uniform(rng, 0.05, 0.4), "act_mib": _log_uniform(rng, 20, 300),
        "bf16_act_share": rng.uniform(0.5, 0.65),
        "decode_per_worker": _log_uniform(rng, 3000, 30000), "sample_mb": 0.008,
        "start": Knobs(batch_size=rng.choice([8, 16, 32, 64])),
    }  # fmt: skip


def _data_paths(rng: random.Random) -> dict[str, Any]:
    """decode=gpu, and on some machines a converted copy built and DALI installed."""
    formats = ["files"]
    if rng.random() < 0.25:
        formats.append("shards")
    if rng.random() < 0.5:
        formats.append("predecoded")
    return {
        "gpu_decode": True,
        "device_decode_per_s": rng.uniform(2500, 9000),
        "decode_exposed": rng.uniform(0.2, 0.7),
        "reader_per_worker": rng.uniform(600, 3000),
        "formats": tuple(formats),
        "predecoded_per_worker": rng.uniform(600, 2500),
        "dali": rng.random() < 0.35,
        "dali_per_thread": rng.uniform(400, 1500),
        "dali_decode_per_s": rng.uniform(3000, 10000),
    }


__all__ = ["DEV_SEEDS", "GPU_KINDS", "HELD_OUT_SEEDS", "Config", "GpuLandscape", "draw_gpu"]
