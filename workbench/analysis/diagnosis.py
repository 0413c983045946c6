"""``diagnose``: which link of the chain holds training back, the data pipeline or the model.

Three measurements with the same knobs (DESIGN.md, "Measurement method"):

- **full**: a normal burst, loader and model together;
- **loader alone**: the loader iterated with no model (``run_loader_burst``): what the data
  pipeline can deliver;
- **compute alone**: a burst with ``loader="synthetic"``: one real batch resident on the
  device, replayed, so nothing is loaded: what the model and optimizer can consume.

The slower of the two ceilings is the bottleneck. Within ``BALANCE_BAND`` of each other they
are "balanced": speeding up either side alone then buys little. The comparison of ceilings,
not the full burst's ``data_wait_pct``, decides: with ``num_workers=0`` the loading happens in
the training loop, so the wait is large even when the model is the slower side.

A verdict of "compute-bound" or "balanced" beside a full pipeline that waited for data
``WAIT_EXPLAINED_PCT`` or more of its window is not left bare: the reason says why the model
still waited. With ``num_workers=0``, loading and compute run one after the other (the full
rate is then about 1 / (1/loader + 1/compute)) and workers would overlap them; with workers on
a CPU, the two ceilings were measured apart but the full pipeline shares the cores between the
model and the workers; with workers beside a GPU, batches arrive unevenly or the workers lack
cores. The advice follows the same reading (workers first when loading runs between steps).

What to try next follows the verdict and the device (workbench/analysis/advice.py). A
data-bound verdict is followed by a measurement of the ways out (``path_ranking``): the loader
alone on each data path available here (the workers at the current and the maximal count, GPU
decode, predecoded data if built, DALI if installed), against the compute-only ceiling; the
advice then names the path that reaches the model, with its numbers, and rules that guessed at
those knobs give way to it.

A diagnosis checks itself as a burst does (``suspect``): the full pipeline does all the work of
the compute-only burst and loads its data too, so a full pipeline faster than that ceiling,
beyond the bursts' noise (``ceiling_problems``), means a number is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from workbench.analysis.advice import WAIT_EXPLAINED_PCT, Suggestion, advise, preprocessing
from workbench.analysis.loader_ceiling import LoaderResult, run_loader_burst
from workbench.analysis.path_ranking import PathRanking, measure_paths
from workbench.analysis.storage_ceiling import (
    StorageCeiling,
    decode_advice,
    storage_advice,
    storage_bound,
    storage_ceiling,
    storage_reason,
)
from workbench.core.knobs import KnobError, Knobs
from workbench.core.results import BurstResult
from workbench.core.results import readable as _num
from workbench.distributed.dispatch import run_burst
from workbench.engine import hardware
from workbench.engine.burst import BurstProgress
from workbench.engine.slot import exclusive
from workbench.engine.window import BurstOptions, BurstSetup
from workbench.engine.workloads import Workload, WorkloadArg, resolve_target

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11; hints only

VERDICTS = ("data-bound", "storage-bound", "compute-bound", "balanced", "unknown")
BALANCE_BAND = 0.15
"""Ceilings closer than 15% count as balanced: two bursts of the same config on a quiet
machine differ by a few percent, so a smaller band would call noise a bottleneck."""
ABOVE_CEILING_FLOOR = 0.10
"""The least a full pipeline must beat its compute-only ceiling by to be suspect (10%), however
steady the two bursts' steps were (``noise_margin``)."""


@dataclass(kw_only=True)
class Diagnosis:
    """The verdict, the three measurements behind it and what to try next."""

    verdict: str
    reason: str
    workload: str
    device: str
    knobs: Knobs
    full: BurstResult
    loader: LoaderResult | None
    compute: BurstResult | None
    suggestions: list[Suggestion] = field(default_factory=list)
    storage: StorageCeiling | None = None
    """The dataset in its format read raw and cold (image workloads): the disk's ceiling."""
    suspect: list[str] = field(default_factory=list)
    """Self-checks the diagnosis failed, each a sentence (``ceiling_problems``): its numbers,
    and so its verdict, are not to be trusted. Empty when every check passed."""
    paths: PathRanking | None = None
    """Data-bound: each data path's loader alone against the compute-only ceiling
    (``path_ranking``); None for another verdict, or when stopped before."""

    @property
    def full_sps(self) -> float | None:
        return self.full.samples_per_s if self.full.ok else None

    @property
    def loader_sps(self) -> float | None:
        return self.loader.samples_per_s if self.loader and self.loader.ok else None

    @property
    def compute_sps(self) -> float | None:
        return self.compute.samples_per_s if self.compute and self.compute.ok else None

    @property
    def storage_sps(self) -> float | None:
        return self.storage.samples_per_s if self.storage and self.storage.ok else None

    def summary(self) -> str:
        """The verdict in plain words, the numbers, and the knobs most likely to help next."""
        lines = [f"{self.verdict}: {self.reason}"]
        wait = self.full.data_wait_pct if self.full.ok else None
        rows = [
            ("full pipeline", self.full_sps, f"data wait {_num(wait)}% of the window"),
            ("loader alone", self.loader_sps, "no model"),
            ("compute alone", self.compute_sps, f"one batch resident on {self.device}"),
        ]
        if self.storage is not None:
            fmt = self.storage.data_format
            rows.append(("storage", self.storage_sps, f"{fmt} read raw and cold, no decode"))
        lines += [f"  {name:<14} {_num(sps):>10} samples/s  ({note})" for name, sps, note in rows]
        if self.paths is not None:
            lines += self.paths.lines()
        if self.suggestions:
            lines.append("Next, most likely to help:")
            lines += [f"  - {s.text()}" for s in self.suggestions]
        lines += [f"SUSPECT (do not trust this diagnosis): {s}" for s in self.suspect]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "workload": self.workload,
            "device": self.device,
            "knobs": self.knobs.to_dict(),
            "full_samples_per_s": self.full_sps,
            "loader_samples_per_s": self.loader_sps,
            "compute_samples_per_s": self.compute_sps,
            "storage_samples_per_s": self.storage_sps,
            "storage": self.storage.to_dict() if self.storage else None,
            "paths": self.paths.to_dict() if self.paths else None,
            "suggestions": [
                {"knob": s.knob, "value": s.value, "why": s.why} for s in self.suggestions
            ],
            "suspect": list(self.suspect),
            "full": self.full.to_dict(),
            "loader": self.loader.to_dict() if self.loader else None,
            "compute": self.compute.to_dict() if self.compute else None,
        }


def diagnose(
    workload: WorkloadArg = None,
    knobs: Knobs | None = None,
    *,
    progress: Callable[[str, BurstResult | LoaderResult], None] | None = None,
    burst_progress: Callable[[BurstProgress], None] | None = None,
    **options: Unpack[BurstOptions],
) -> Diagnosis:
    """Measure full, loader-only and compute-only with the same knobs; return the verdict.

    Data-bound, the loader alone is then measured on each data path available here
    (``path_ranking.measure_paths``: a few short runs, at most about a minute in all).
    ``progress(stage, result)`` is called as each measurement lands (stage: "full", "loader",
    "compute", then "path NAME" for each data path run). The two training bursts go to the
    history store (the compute-only one with ``loader="synthetic"``, so charts keep it apart);
    the loader-only runs train nothing and are not recorded. Setting ``cancel`` stops at the
    next step boundary: the verdict is then "unknown" (or data-bound, with the paths not yet
    run listed as not measured).
    """
    setup = BurstSetup.of("diagnose", options)
    knobs = Knobs() if knobs is None else knobs
    if knobs.loader == "synthetic":
        raise KnobError(
            "loader",
            "synthetic",
            "torch or dali: synthetic is the compute-only ceiling itself, with no data "
            "pipeline to diagnose",
        )
    wl, dev = resolve_target(workload, setup.device, setup.data_dir)
    common = {**setup.burst_args(), "progress": burst_progress}
    stop = setup.cancel
    # The burst slot for all three: the loader-only run is no burst, but a burst beside it
    # would share its cores. A newer burst (a panel's) cancels the diagnosis, as it would a
    # burst; cancelled before it started, the first run_burst says so and nothing else runs.
    with exclusive(stop):
        full = run_burst(wl, knobs, window=setup.window.settled(knobs), **common)
        _tell(progress, "full", full)
        loader = compute = None
        if not stop.is_set():
            loader = run_loader_burst(wl, knobs, window=setup.window, device=dev, cancel=stop)
            _tell(progress, "loader", loader)
        if not stop.is_set():
            compute = run_burst(wl, knobs.replace(loader="synthetic"), window=setup.window,
                                **common)  # fmt: skip
            _tell(progress, "compute", compute)
        storage = None
        if not stop.is_set() and wl.image_dir is not None and not wl.tokens:
            # drops the page cache
            storage = storage_ceiling(wl, knobs, seconds=setup.window.seconds, stop=stop)
        d = judge(wl, knobs, dev, full, loader, compute, storage)
        if d.verdict == "data-bound" and d.compute_sps and not stop.is_set():
            ranking = measure_paths(wl, knobs, dev, d.compute_sps, loader=loader,
                                    window=setup.window, cancel=stop,
                                    progress=progress)  # fmt: skip
            take_paths(d, ranking)
    return d


def _tell(progress: Callable[..., None] | None, stage: str, result: object) -> None:
    if progress is not None:
        progress(stage, result)


def classify(loader_sps: float | None, compute_sps: float | None) -> str:
    """The verdict from the two ceilings alone (pure: the rule, testable on numbers)."""
    if not loader_sps or not compute_sps:
        return "unknown"
    if loader_sps < compute_sps * (1 - BALANCE_BAND):
        return "data-bound"
    if compute_sps < loader_sps * (1 - BALANCE_BAND):
        return "compute-bound"
    return "balanced"


def judge(
    wl: Workload,
    knobs: Knobs,
    dev: torch.device,
    full: BurstResult,
    loader: LoaderResult | None,
    compute: BurstResult | None,
    storage: StorageCeiling | None = None,
) -> Diagnosis:
    """Build the Diagnosis from the three measurements (no bursts run here), and the storage
    ceiling where there is one."""
    d = Diagnosis(
        verdict="unknown",
        reason="",
        workload=wl.name,
        device=str(dev),
        knobs=knobs,
        full=full,
        loader=loader,
        compute=compute,
        storage=storage,
    )
    failed = _failure(full, loader, compute)
    if failed:
        d.reason = failed
        if "oom" in (full.status, getattr(compute, "status", None)):
            half = max(1, knobs.batch_size // 2)
            d.suggestions = [Suggestion("batch_size", half, "out of memory: halve the batch")]
        return d
    d.suspect = ceiling_problems(full, compute)
    d.verdict = classify(d.loader_sps, d.compute_sps)
    loader_sps, compute_sps = d.loader_sps or 0.0, d.compute_sps or 0.0
    d.reason = _reason(d.verdict, loader_sps, compute_sps)
    if d.verdict in ("compute-bound", "balanced"):
        d.reason += _why_it_waited(wl, knobs, dev, full, loader_sps, compute_sps)
    cpu = compute.cpu_util_pct if compute is not None else None
    d.suggestions = advise(
        d.verdict, knobs, dev, wl, loader_sps, compute_sps, cpu,
        data_wait_pct=full.data_wait_pct, peak_mem_mib=_peak_mib(full),
    )  # fmt: skip
    if storage is not None and storage.ok:
        _judge_storage(d, wl, knobs, loader_sps, compute_sps)
    return d


def take_paths(d: Diagnosis, ranking: PathRanking) -> None:
    """The measured data paths into the diagnosis: the winning (else the fastest) path comes
    first among the suggestions, and rule-based ones on a knob a path run answered (workers,
    decode, data_format, loader) give way: a measurement replaces the guess."""
    d.paths = ranking
    first = ranking.suggestion()
    answered = ranking.measured_knobs() | ({first.knob} if first else set())
    d.suggestions = [*([first] if first else []),
                     *(s for s in d.suggestions if s.knob not in answered)]  # fmt: skip


def ceiling_problems(full: BurstResult, compute: BurstResult | None) -> list[str]:
    """A full pipeline faster than its compute-only ceiling beyond the noise, as a sentence
    that says what it likely means; empty otherwise.

    The full pipeline trains the same model with the same knobs as the compute-only burst and
    loads and copies its data besides, so it cannot be faster. When it is, either the samples
    are miscounted (a count that follows the data, such as a flattened tensor's length, gives
    the pipeline's batches other counts than the one batch the ceiling replays), or the ceiling
    was measured slowed (a throttled GPU, other work on the machine)."""
    if compute is None or not (full.ok and compute.ok):
        return []
    full_sps, ceiling = full.samples_per_s, compute.samples_per_s
    if not full_sps or not ceiling:
        return []
    above, margin = full_sps / ceiling - 1, noise_margin(full, compute)
    if above <= margin:
        return []
    slowed = f" (its throttle reasons: {', '.join(compute.throttle_reasons)})" if (
        compute.throttle_reasons) else ""  # fmt: skip
    return [
        f"the full pipeline ({_num(full_sps)} samples/s) is {above:.0%} faster than its "
        f"compute-only ceiling ({_num(ceiling)}), beyond the bursts' noise ({margin:.0%}), "
        "though it does the ceiling's work and loads data besides. Likely the samples are "
        f"miscounted (counted by {full.samples_from or 'an unknown rule'}; pass "
        "Workload(samples_of=...) to count them yourself), or the compute-only burst ran "
        f"slowed{slowed}: rerun it, and check both bursts' samples_from and suspect."
    ]


def noise_margin(*bursts: BurstResult) -> float:
    """How far two bursts' throughputs may differ by noise alone: the sum of their steps'
    IQR/median, and at least ``ABOVE_CEILING_FLOOR``.

    The sum: relative spreads add when one rate is divided by another, and a window's
    throughput, a mean over many steps, spreads less than one step does, so the sum of the
    step spreads is a generous bound and what exceeds it is no accident. The floor: a burst's
    IQR sees only the noise inside its own window, not the drift between two bursts measured
    one after the other (a shared or warming machine) nor the replayed batch being a little
    cheaper than the pipeline's average one (a shorter padded length); 10% is also where one
    burst's steps already count as noisy (``NOISY_IQR_RATIO``)."""
    spreads = [b.step_ms_iqr / b.step_ms_p50 for b in bursts
               if b.step_ms_iqr is not None and b.step_ms_p50]  # fmt: skip
    return max(ABOVE_CEILING_FLOOR, sum(spreads))


def _judge_storage(
    d: Diagnosis, wl: Workload, knobs: Knobs, loader_sps: float, compute_sps: float
) -> None:
    """The disk's ceiling refines the verdict: storage-bound when it is the slowest link;
    decode-bound advice (predecoded) when it is far faster than the loader."""
    c = d.storage
    assert c is not None
    if storage_bound(c.samples_per_s, loader_sps, compute_sps):
        if d.verdict in ("data-bound", "balanced"):
            d.verdict = "storage-bound"
            d.reason = storage_reason(c, loader_sps, compute_sps, knobs.cache)
            d.suggestions = storage_advice(knobs) + d.suggestions
            return
        d.reason += (
            f" Cold, the disk gives {_num(c.samples_per_s)} samples/s of {c.data_format}, below "
            "the model: a first epoch, or a dataset larger than RAM, would be storage-bound."
        )
    if d.verdict == "data-bound":
        d.suggestions += decode_advice(knobs, wl, c, loader_sps)


def _peak_mib(r: BurstResult) -> float | None:
    """What a bigger batch has to fit under: on CUDA the allocator's reserve counts (the tuner's
    limit reads the same)."""
    peaks = [p for p in (r.peak_mem_mib, r.peak_reserved_mib) if p is not None]
    return max(peaks) if peaks else None


def _why_it_waited(
    wl: Workload,
    knobs: Knobs,
    dev: torch.device,
    full: BurstResult,
    loader_sps: float,
    compute_sps: float,
) -> str:
    """Why the model still waited for data although the loader alone is not the slower side;
    empty when the full pipeline waited less than WAIT_EXPLAINED_PCT."""
    wait = full.data_wait_pct
    if wait is None or wait < WAIT_EXPLAINED_PCT:
        return ""
    said = f" Yet the full pipeline waited for data {wait:.1f}% of its window"
    nw = knobs.num_workers
    if nw == 0:
        serial = 1 / (1 / loader_sps + 1 / compute_sps)
        return (
            f"{said}: with num_workers=0 each batch is loaded in the training loop, after the "
            "step before it, so loading and compute add up instead of overlapping (about "
            f"{_num(serial)} samples/s expected that way, {_num(full.samples_per_s)} measured). "
            "Loader workers overlap the two, toward the slower ceiling's "
            f"{_num(min(loader_sps, compute_sps))} samples/s without a faster model."
        )
    noun, cheaper = preprocessing(wl)
    if dev.type != "cuda":
        cores = hardware.device_info(dev).cpu_count or os.cpu_count() or 1
        return (
            f"{said}: the ceilings were measured apart, but in the full pipeline the model and "
            f"{nw} loader worker(s) share {cores} CPU cores, so the loader delivers less than "
            f"its {_num(loader_sps)} samples/s alone. Cheaper {noun} ({cheaper}) frees cores "
            "for both."
        )
    return (
        f"{said} although the loader alone delivers {_num(loader_sps)} samples/s: its batches "
        f"arrive unevenly or its {nw} worker(s) lack CPU cores beside the training process; a "
        f"deeper prefetch queue rides out slow batches, cheaper {noun} ({cheaper}) frees cores."
    )


def _failure(full: BurstResult, loader: LoaderResult | None, compute: BurstResult | None) -> str:
    parts = [
        ("the full pipeline", full),
        ("the loader alone", loader),
        ("the compute-only burst", compute),
    ]
    for name, r in parts:
        if r is None:
            return f"stopped before {name} was measured"
        if not r.ok:
            return f"{name} did not finish ({r.status}: {r.error})"
    return ""


def _reason(verdict: str, loader_sps: float, compute_sps: float) -> str:
    if verdict == "data-bound":
        return (
            f"the loader delivers {_num(loader_sps)} samples/s but the model could train "
            f"{_num(compute_sps)} ({compute_sps / loader_sps:.1f}x): the model waits for "
            "data, so a bigger batch, another precision or compile would not help."
        )
    if verdict == "compute-bound":
        return (
            f"the model trains {_num(compute_sps)} samples/s while the loader could deliver "
            f"{_num(loader_sps)} alone ({loader_sps / compute_sps:.1f}x): the model is the "
            "slower side, so a faster loader would not raise the ceiling; make each step "
            "cheaper."
        )
    return (
        f"the loader ({_num(loader_sps)} samples/s) and the model ({_num(compute_sps)}) are "
        f"within {BALANCE_BAND:.0%} of each other: speeding up one side alone gains little; "
        "improve both (the tuner searches them jointly)."
    )


__all__ = [
    "ABOVE_CEILING_FLOOR",
    "BALANCE_BAND",
    "VERDICTS",
    "WAIT_EXPLAINED_PCT",
    "Diagnosis",
    "Suggestion",
    "ceiling_problems",
    "classify",
    "diagnose",
    "judge",
    "noise_margin",
    "take_paths",
]
