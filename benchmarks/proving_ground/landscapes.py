"""A proving ground for the tuner: deterministic, simulated throughput landscapes.

Judging a tuner on a handful of real runs of one CPU landscape says little: there, configs
differ by less than their own noise, and a GPU's landscape is steeper and shaped otherwise.
This module draws landscapes over batch size x loader workers x prefetch depth, each of one
of five shapes, and answers a "burst" of any config with a noisy BurstResult, so that a tuner
(``tuner.tune_on``) or any other search can run on hundreds of them in seconds.

The shapes, and where they come from:

- **compute-bound** (a GPU with a fast loader): throughput rises with batch size and
  saturates, ``peak * b / (b + b_half)``, the shape of every published GPU batch-size
  scan; past a size it may fall a little (caches, allocator). One worker is enough.
- **data-bound** (a GPU starved by JPEG decoding): the loader's rate, ``decode rate x
  workers``, is the ceiling until the workers run out of cores; 0 workers decode in the
  training loop (time adds up, it does not overlap); deeper prefetch absorbs decode jitter.
- **memory-limited**: compute-bound with an OOM edge inside the listed batch sizes (peak
  memory grows linearly with the batch and with workers x prefetch), so the best fitting
  batch sits at the edge and the next size fails.
- **cpu-contended**: after this project's own measured 2-4 core CPU figures (cnn on 2 cores:
  0 workers 293, 1 worker 248, 2 workers with prefetch 8 up to 333 samples/s): each worker
  takes a share of the training loop's cores and a shallow queue loses to decode jitter, so
  more workers and deeper queues pull in opposite directions (the dip at one worker is
  reproduced on some of these landscapes, not all).
- **flat**: every config within a few % of the others (a tune has nothing to find).

Each pipeline's rate is a smooth minimum of compute and loader rates (a pipeline runs at its
slower stage, a little below it where the two are close). Noise: each landscape draws a
relative noise of 2-30% per burst (log-normal); a reading is a function of (landscape,
config, how many times that config ran), so every method sees the same readings for the same
bursts. ``true_sps`` is the noiseless throughput: the truth a pick is judged against.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult

KINDS = ("compute-bound", "data-bound", "memory-limited", "cpu-contended", "flat")
BATCH_SIZES = [16, 32, 64, 128, 256, 512]
WORKERS = [0, 1, 2, 4, 8, 16]
PREFETCH = [2, 4, 8]
NOISE_RANGE = (0.02, 0.30)
LIMIT_SHARE = 0.9
"""The tuner's default memory margin: a config peaking above 90% of the device does not fit."""


@dataclass(frozen=True, slots=True)
class Landscape:
    """One simulated machine x workload: its shape's parameters, its noise, its memory."""

    kind: str
    seed: int
    noise: float
    """Relative SD of one burst (log-normal), 0.02-0.30."""
    cores: int
    compute_peak: float
    """Samples/s the model reaches at a large batch with no data stall."""
    batch_half: float
    """Batch size at which compute reaches half its peak."""
    large_batch_drop: float
    """Share lost per doubling past ``batch_best`` (caches, allocator)."""
    batch_best: float
    decode_per_worker: float
    """Samples/s one loader worker decodes."""
    steal: float
    """Share of the training loop's speed each worker beyond the spare cores takes."""
    jitter: float
    """Share lost to decode jitter with a shallow queue; deep prefetch absorbs it."""
    mem_base_mib: float
    mem_per_sample_mib: float
    mem_per_batch_in_flight_mib: float
    device_mem_mib: float

    # -- the truth --------------------------------------------------------------------------
    def space(self) -> dict[str, list[Any]]:
        """What a tune searches here: the default space's shape (workers up to the cores)."""
        return {
            "batch_size": list(BATCH_SIZES),
            "num_workers": [w for w in WORKERS if w <= self.cores],
            "prefetch_factor": list(PREFETCH),
        }

    @property
    def limit_mib(self) -> float:
        return self.device_mem_mib * LIMIT_SHARE

    def peak_mem_mib(self, k: Knobs) -> float:
        in_flight = k.num_workers * (k.prefetch_factor or 2) if k.num_workers else 1
        return (self.mem_base_mib + self.mem_per_sample_mib * k.batch_size
                + self.mem_per_batch_in_flight_mib * in_flight * k.batch_size / 32)  # fmt: skip

    def compute_sps(self, k: Knobs) -> float:
        b = k.batch_size
        rate = self.compute_peak * b / (b + self.batch_half)
        if b > self.batch_best:
            rate *= (1 - self.large_batch_drop) ** math.log2(b / self.batch_best)
        busy = max(0, k.num_workers - max(0, self.cores - 1))  # workers without a spare core
        share = 0 if k.num_workers == 0 else min(k.num_workers, self.cores)
        return rate / (1 + self.steal * (share + 2 * busy))

    def loader_sps(self, k: Knobs) -> float:
        w = k.num_workers
        if w == 0:
            return self.decode_per_worker * 1.1  # no IPC, but in the training loop (serial)
        usable = min(w, self.cores) + 0.1 * max(0, w - self.cores)  # oversubscribed: little more
        return self.decode_per_worker * usable

    def true_sps(self, k: Knobs) -> float | None:
        """Noiseless samples/s; None when the config runs out of device memory."""
        if self.peak_mem_mib(k) > self.device_mem_mib:
            return None
        c, load = self.compute_sps(k), self.loader_sps(k)
        if k.num_workers == 0:
            return 1.0 / (1.0 / c + 1.0 / load)  # decoding and training take turns
        rate = (c**-4 + load**-4) ** -0.25  # the slower stage, a little below it when close
        depth = k.num_workers * (k.prefetch_factor or 2)
        return rate * (1 - self.jitter * math.exp(-depth / 4))

    def fits(self, k: Knobs) -> bool:
        return self.true_sps(k) is not None and self.peak_mem_mib(k) <= self.limit_mib

    def best_sps(self, also: Sequence[Knobs] = ()) -> float:
        """The true best fitting throughput over the space's grid and any ``also`` configs."""
        values = [self.true_sps(k) for k in [*grid(self.space()), *also] if self.fits(k)]
        return max(v for v in values if v is not None)

    @property
    def start(self) -> Knobs:
        """Where every method starts: the default knobs."""
        return Knobs()

    @property
    def device(self) -> str:
        """The kind of device the bursts stand for (``tuner.tune_on``'s ``device``)."""
        return "cpu"

    def configs(self) -> list[Knobs]:
        return grid(self.space())

    # -- a burst ----------------------------------------------------------------------------
    def reading(self, k: Knobs, nth: int) -> float | None:
        """The ``nth`` (0-based) noisy reading of ``k``: the same for every method."""
        true = self.true_sps(k)
        if true is None:
            return None
        key = f"{self.seed}|{sorted(k.changes().items())}|{nth}".encode()
        rng = random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big"))
        return true * math.exp(rng.gauss(0.0, self.noise))

    def burst(self, k: Knobs, nth: int, t: int) -> BurstResult:
        """The ``nth`` run of ``k`` (burst ``t`` of a tune: these landscapes do not drift)."""
        sps = self.reading(k, nth)
        if sps is None:
            return BurstResult(status="oom", error="simulated OOM", workload="simulated",
                               device="sim", knobs=k)  # fmt: skip
        wait = max(0.0, 1 - (self.true_sps(k) or 0) / self.compute_sps(k)) * 100
        return BurstResult(workload="simulated", device="sim", knobs=k, samples_per_s=sps,
                           peak_mem_mib=self.peak_mem_mib(k), data_wait_pct=wait,
                           step_ms_p50=1000.0 * k.batch_size / sps)  # fmt: skip


class Proving(Protocol):
    """What the proving ground needs of a landscape, CPU- or GPU-shaped
    (``gpu_landscapes.GpuLandscape``)."""

    kind: str
    seed: int

    @property
    def start(self) -> Knobs: ...
    @property
    def limit_mib(self) -> float: ...
    @property
    def device(self) -> str: ...
    def space(self) -> dict[str, list[Any]]: ...
    def configs(self) -> Sequence[Any]: ...
    def true_sps(self, k: Any) -> float | None: ...
    def fits(self, k: Any) -> bool: ...
    def best_sps(self, also: Sequence[Knobs] = ()) -> float: ...
    def burst(self, k: Knobs, nth: int, t: int) -> BurstResult: ...


class Bursts:
    """A landscape as a burst runner: ``bursts(knobs)`` returns a BurstResult as run_burst
    would (status ``oom`` past the device's memory), counting each config's runs and the
    bursts run (a drifting landscape reads burst ``t`` at its level then)."""

    def __init__(self, landscape: Proving) -> None:
        self.landscape = landscape
        self.calls: list[Knobs] = []

    def __call__(self, knobs: Knobs) -> BurstResult:
        r = self.landscape.burst(knobs, self.calls.count(knobs), len(self.calls))
        self.calls.append(knobs)
        return r


def grid(space: dict[str, list[Any]]) -> list[Knobs]:
    """Every distinct valid config of a batch x workers x prefetch space."""
    out: dict[Knobs, None] = {}
    for b in space["batch_size"]:
        for w in space["num_workers"]:
            for p in space["prefetch_factor"] if w else [None]:
                out[Knobs(batch_size=b, num_workers=w, prefetch_factor=p)] = None
    return list(out)


def draw(seed: int, kind: str | None = None) -> Landscape:
    """Landscape number ``seed`` (its kind cycles through KINDS unless given)."""
    rng = random.Random(seed)
    kind = kind or KINDS[seed % len(KINDS)]
    noise = math.exp(rng.uniform(math.log(NOISE_RANGE[0]), math.log(NOISE_RANGE[1])))
    cores = rng.choice([2, 4, 8, 16])
    peak = rng.uniform(300, 5000)
    p: dict[str, Any] = {
        "kind": kind, "seed": seed, "noise": noise, "cores": cores, "compute_peak": peak,
        "batch_half": rng.uniform(8, 96), "large_batch_drop": rng.uniform(0.0, 0.08),
        "batch_best": rng.choice([64, 128, 256]), "steal": rng.uniform(0.0, 0.03),
        "jitter": rng.uniform(0.0, 0.12), "mem_base_mib": rng.uniform(500, 3000),
        "mem_per_sample_mib": rng.uniform(5, 60), "mem_per_batch_in_flight_mib": 2.0,
        "decode_per_worker": peak * rng.uniform(0.5, 2.0), "device_mem_mib": 1e9,
    }  # fmt: skip
    if kind == "data-bound":
        p["decode_per_worker"] = peak / rng.uniform(1.5, cores + 1.0)  # all cores can't catch up
        p["jitter"] = rng.uniform(0.05, 0.2)
    elif kind == "memory-limited":
        edge = rng.choice(BATCH_SIZES[3:]) * rng.uniform(0.7, 0.95)  # below a listed size
        p["batch_half"] = rng.uniform(64, 256)  # still rising at the edge
        p["large_batch_drop"] = 0.0
        p["device_mem_mib"] = p["mem_base_mib"] + p["mem_per_sample_mib"] * edge * 1.2
    elif kind == "cpu-contended":  # 293 / 248 / 333 samples/s at 0 / 1 / 2+prefetch 8 workers
        p["cores"] = rng.choice([2, 4])
        p["steal"] = rng.uniform(0.08, 0.2)
        p["decode_per_worker"] = peak * rng.uniform(0.6, 1.2)
        p["jitter"] = rng.uniform(0.1, 0.25)
    elif kind == "flat":
        p["batch_half"], p["steal"], p["jitter"] = rng.uniform(0.5, 2.0), 0.0, 0.0
        p["decode_per_worker"], p["large_batch_drop"] = peak * 50, rng.uniform(0.0, 0.02)
    return Landscape(**p)


__all__ = ["BATCH_SIZES", "KINDS", "Bursts", "Landscape", "Proving", "draw", "grid"]
