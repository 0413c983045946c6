"""What a tune returns: the best measured config, every candidate with its spread, every burst."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.analysis.sweeps import bursts_frame
from workbench.core.cost import saving_line
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.tuning.speedup import ADVICE

if TYPE_CHECKING:
    import pandas as pd

    from workbench.tuning.search import Search


@dataclass(frozen=True, slots=True)
class Candidate:
    """One config the tune measured: its runs summarized, and whether it fits the limit."""

    knobs: Knobs
    runs: int
    samples_per_s: float | None
    """Median over the runs that finished."""
    sps_min: float | None
    sps_max: float | None
    peak_mem_mib: float | None
    """Highest peak over its runs (reserved memory included on CUDA)."""
    fits: bool
    status: str
    """``ok``, ``over limit`` (ran, peaked above the memory limit), or a failed run's status."""
    representative: BurstResult
    """The run closest to the median (the last run when none finished)."""
    samples_per_s_runs: tuple[float, ...] = ()
    """Samples/s of each run that finished, in the order they ran."""

    @property
    def ok_runs(self) -> int:
        """Runs that finished (what the median rests on)."""
        return len(self.samples_per_s_runs)

    @property
    def spread_pct(self) -> float | None:
        """(max - min) / median over its runs, in %; None with fewer than two runs."""
        if self.runs < 2 or not self.samples_per_s or self.sps_min is None:
            return None
        return 100.0 * ((self.sps_max or 0.0) - self.sps_min) / self.samples_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "knobs": self.knobs.to_dict(),
            "runs": self.runs,
            "samples_per_s": self.samples_per_s,
            "samples_per_s_runs": list(self.samples_per_s_runs),
            "sps_min": self.sps_min,
            "sps_max": self.sps_max,
            "spread_pct": self.spread_pct,
            "peak_mem_mib": self.peak_mem_mib,
            "fits": self.fits,
            "status": self.status,
            "burst_id": self.representative.id,
        }


@dataclass(frozen=True, slots=True)
class TuneProgress:
    """Given to ``tune(progress=...)`` as each burst lands: what the panel redraws from."""

    result: BurstResult
    stage: str
    """What the burst was for: "start", "num_workers=2", "batch_size=96 (bisect)", ..."""
    knob: str | None
    """The knob this burst varied (None for the start and re-measurements): the x axis to
    redraw the charts against, with ``plots.comparable(df, result.knobs, knob)``."""
    bursts: int
    budget: int
    best: Knobs | None
    best_samples_per_s: float | None


@dataclass(kw_only=True)
class TuneResult:
    """The best measured config (``best``), how it was found, and the speed-up over the start."""

    best: Knobs | None
    best_result: BurstResult | None
    start: Knobs
    start_result: BurstResult | None
    speedup: float | None
    """Median samples/s of the best over the start's; None if the start did not run."""
    candidates: list[Candidate]
    """Every config measured: the fitting ones fastest first, then the rest."""
    bursts: list[BurstResult]
    budget: int
    memory_margin: float
    limit_mib: float | None
    device_mem_mib: float | None
    stopped: str
    """``converged``, ``budget``, ``cancelled`` or ``interrupted``."""
    wall_s: float
    notes: list[str] = field(default_factory=list)
    workload: str = ""
    device: str = ""
    speedup_low: float | None = None
    """Low end of the speed-up's 95% interval: the noise's (``noise.ratio_interval``) widened
    by the drift between the best's runs and the start's (``speedup.speedup_interval``); None
    when nothing ran twice, or the best is the start."""
    speedup_high: float | None = None
    start_runs: int = 0
    """Finished runs of the start the speed-up divides by (2-3 whenever the budget allows)."""
    noise_pct: float | None = None
    """Relative noise of one burst measured in this tune (pooled SD of log samples/s, in %)."""
    saving: dict[str, Any] | None = None
    """With a price: what the best saves against the start for the same work, per million
    samples, per epoch and per month (``workbench.core.cost.tune_saving``); None without one."""
    drift_pct: float | None = None
    """How far the start's runs moved over the tune, in % of its first run (the spread of
    ``workbench.analysis.drift`` factors); None when the start ran fewer than twice."""
    drift_pct_per_burst: float | None = None
    """The start's trend across the tune, in % per burst (negative: the machine slowed); None
    when it could not be estimated (the start finished fewer than two runs), never 0 for
    unknown."""
    speedup_uncertain: bool | None = None
    """True when the runs cannot tell the speed-up (``speedup_doubt`` says why): no interval,
    an interval that holds 1 or spans more than ``speedup.WIDE_FACTOR``, or a drift larger
    than the speed-up. The summary then gives words, not the figures; the JSON keeps them.
    None when there is no speed-up to judge (the start did not run, or the best is the start).
    ``save_config(result, path)`` marks such a file UNCERTAIN in its first lines; the knobs
    alone (``save_config(result.best, path)``) carry no such mark: save the result."""
    speedup_doubt: str = ""
    """Why the runs cannot tell the speed-up, in words (``speedup.doubt``); empty when they can."""
    drift_sentence: str = ""
    """The drift in words (``Drift.sentence``); empty when the start held."""
    parity: Any = None
    """The best's loss parity against the start's numerics (``workbench.analysis.parity``),
    measured when the best changes rounding (``tuning.parity_gate``); None otherwise."""
    parity_refused: list[dict[str, Any]] = field(default_factory=list)
    """Faster picks refused for their numerics: knobs, verdict and reason each."""
    parity_s: float | None = None
    """Wall time of the parity checks (part of ``wall_s``); None when none ran."""

    @property
    def separated(self) -> bool | None:
        """Whether the runs separate the best from the start (interval clear of 1); None
        when there is no interval."""
        if self.speedup_low is None or self.speedup_high is None:
            return None
        return self.speedup_low > 1.0 or self.speedup_high < 1.0

    def summary(self) -> str:
        """A few lines a person can read: the answer, its spread, the cost."""
        failed = sum(r.status in ("oom", "error") for r in self.bursts)
        over = sum(c.status == "over limit" for c in self.candidates)
        cost = (
            f"{len(self.bursts)} of {self.budget} bursts ({failed} failed, {over} configs "
            f"over the memory limit) in {self.wall_s:.0f} s; stopped: {self.stopped}"
        )
        best = next((c for c in self.candidates if c.fits and c.knobs == self.best), None)
        if best is None or self.best is None:
            return f"tune {self.workload} on {self.device}: no config fit.\n  {cost}"
        lines = [
            f"tune {self.workload} on {self.device}: best {changed(self.best)}",
            f"  {_line(best)}",
            f"  {cost}",
        ]
        if self.limit_mib is not None and self.device_mem_mib:
            lines.insert(
                2,
                f"  memory limit {self.limit_mib:,.0f} MiB "
                f"({1 - self.memory_margin:.0%} of {self.device_mem_mib:,.0f})",
            )
        if self.best == self.start:
            lines.insert(2, "  the start was already the fastest config measured")
        elif self.speedup is not None:
            lines.insert(2, self._speedup_line(best))
        drift = self._drift_line()
        if drift:
            lines.append(drift)
        if self.parity is not None:
            lines.append(f"  loss parity against the start's numerics: {self.parity.verdict} "
                         f"({self.parity.reason})")  # fmt: skip
        for refused in self.parity_refused:
            lines.append(f"  refused {changed(Knobs(**refused['knobs']))}: loss parity "
                         f"{refused['verdict']} ({refused['reason']})")  # fmt: skip
        lines.append("  contenders:")
        lines += [f"    {_line(c)}  {changed(c.knobs)}" for c in self.candidates[:5] if c.fits]
        lines += [f"  note: {n}" for n in self.notes]
        money = saving_line(self.saving)
        if money:
            lines.insert(3, f"  {money}")
        return "\n".join(lines)

    def _speedup_line(self, best: Candidate) -> str:
        """The speed-up over the start (known: ``summary`` checks) with its 95% interval and
        the runs it rests on, e.g. "1.31x (1.18-1.45, 95%) the start, 3 and 3 runs"; or, when
        the runs cannot tell (``speedup_uncertain``), why, what was measured and what to do,
        without the figures: a range of 0.02-80.67 read as a finding is worse than none."""
        start = next((c for c in self.candidates if c.knobs == self.start), None)
        start_sps = start.samples_per_s if start else None
        runs = f"({changed(self.start)}: "
        runs += f"{start_sps:,.1f} samples/s)" if start_sps else "n/a)"
        noise = f"; noise {self.noise_pct:.1f}% per burst" if self.noise_pct is not None else ""
        if self.speedup_uncertain:
            why = self.speedup_doubt or "the runs cannot tell the speed-up"
            return (f"  speed-up over the start: {why}. Measured: {_runs(best.ok_runs)} of the "
                    f"best, {_runs(self.start_runs)} of the start {runs}{noise}. To tell: "
                    f"{ADVICE}")  # fmt: skip
        if self.speedup_low is not None and self.speedup_high is not None:
            interval = f" ({self.speedup_low:.2f}-{self.speedup_high:.2f}, 95%)"
        else:
            interval = " (no interval: nothing ran twice)"
        text = f"  {self.speedup:.2f}x{interval} the start, {best.ok_runs} and "
        text += f"{self.start_runs} runs {runs}"
        if self.separated is False:
            text += ": the runs cannot separate the best from the start"
        return text + noise

    def _drift_line(self) -> str:
        """The drift across the tune, or that the start held; when the start finished once,
        that the speed-up's interval has no drift in it (none when no speed-up is claimed)."""
        if self.drift_pct is None:
            if self.speedup_uncertain is None or self.start_runs != 1:
                return ""
            return "  drift: not measured (the start finished one run); the interval is noise alone"
        if self.drift_sentence:
            return f"  drift: {self.drift_sentence}"
        return f"  drift: the start held within {self.drift_pct:.1f}% over the tune"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``workbench tune --json``)."""
        return {
            "best": self.best.to_dict() if self.best else None,
            "best_result": self.best_result.to_dict() if self.best_result else None,
            "start": self.start.to_dict(),
            "start_result": self.start_result.to_dict() if self.start_result else None,
            "speedup": self.speedup,
            "speedup_low": self.speedup_low,
            "speedup_high": self.speedup_high,
            "start_runs": self.start_runs,
            "noise_pct": self.noise_pct,
            "candidates": [c.to_dict() for c in self.candidates],
            "bursts": [r.to_dict() for r in self.bursts],
            "budget": self.budget,
            "memory_margin": self.memory_margin,
            "limit_mib": self.limit_mib,
            "device_mem_mib": self.device_mem_mib,
            "stopped": self.stopped,
            "wall_s": self.wall_s,
            "notes": self.notes,
            "workload": self.workload,
            "device": self.device,
            "saving": self.saving,
            "drift_pct": self.drift_pct,
            "drift_pct_per_burst": self.drift_pct_per_burst,
            "speedup_uncertain": self.speedup_uncertain,
            "speedup_doubt": self.speedup_doubt,
            "drift_sentence": self.drift_sentence,
            "parity": self.parity.to_dict() if self.parity is not None else None,
            "parity_refused": self.parity_refused,
            "parity_s": self.parity_s,
        }

    def frame(self) -> pd.DataFrame:
        """Every burst as a history-shaped frame (``wb.plots`` reads it)."""
        return bursts_frame(self.bursts, workload=self.workload)


def candidates(search: Search) -> list[Candidate]:
    """Every measured config of a search as a Candidate, fitting ones fastest first."""
    found = [_candidate(search, knobs) for knobs in search.runs]
    return sorted(found, key=lambda c: (not c.fits, -(c.samples_per_s or 0.0)))


def _candidate(search: Search, knobs: Knobs) -> Candidate:
    m = search.measured(knobs)
    assert m is not None
    ok = [r for r in m.runs if r.ok and r.samples_per_s]
    sps = [r.samples_per_s or 0.0 for r in ok]
    peaks = [p for r in ok for p in (r.peak_mem_mib, r.peak_reserved_mib) if p is not None]
    failed = [r for r in m.runs if not r.ok]
    status = "ok" if m.fits else (failed[-1].status if failed else "over limit")
    middle = statistics.median(sps) if sps else None
    rep = min(ok, key=lambda r: abs((r.samples_per_s or 0.0) - (middle or 0.0))) if ok else None
    return Candidate(
        knobs=knobs,
        runs=len(m.runs),
        samples_per_s=m.samples_per_s,
        sps_min=min(sps) if sps else None,
        sps_max=max(sps) if sps else None,
        peak_mem_mib=max(peaks) if peaks else None,
        fits=m.fits,
        status=status,
        representative=rep or m.runs[-1],
        samples_per_s_runs=tuple(sps),
    )


def changed(knobs: Knobs) -> str:
    """The knobs that differ from the defaults, as ``a=1, b=2`` (``defaults`` if none)."""
    return ", ".join(f"{k}={v}" for k, v in knobs.changes().items()) or "defaults"


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def _line(c: Candidate) -> str:
    runs = f"{c.runs} runs, spread {c.spread_pct:.1f}%" if c.spread_pct is not None else "1 run"
    peak = f"{c.peak_mem_mib:,.0f}" if c.peak_mem_mib is not None else "n/a"
    return f"{c.samples_per_s or 0.0:,.1f} samples/s ({runs}), peak {peak} MiB"
