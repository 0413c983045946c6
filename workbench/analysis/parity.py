"""``parity``: does the faster config still train the same? Loss parity, measured.

Both configs train ``steps`` optimizer steps from the same initial weights on the same batches
in the same order, with the same augmentation draws (``workbench.engine.parity``: a seeded
sampler, each sample's draws seeded from its index, whatever the loader's workers); the loss
and the gradient norm of every step are kept. The reference trains twice, to measure what
noise alone does, and the candidate is judged against that band:

- ``identical``: every loss and gradient norm bit for bit the reference's;
- ``within-noise``: at every step the relative deviation of the loss stays inside the band;
- ``drifting``: past the band at some step (``growth`` says how the deviation grew: its mean
  over the second half of the steps over its mean over the first);
- ``diverged``: a non-finite loss where the reference's is finite, or a deviation past
  ``DIVERGED_BOUND`` (a quarter of the loss).

The band, and why it is built so. A CPU is deterministic: the same run twice is bit for bit
the same and measures nothing. So the second reference run sums each batch's samples in
reverse order: the same math with other roundings, which is what a GPU's nondeterministic
reductions do to a run (on a GPU it carries that nondeterminism too). Training is chaotic: a
rounding difference of 1e-7 at the first step grows by orders of magnitude in tens of steps,
and a change of precision starts its difference higher (bf16 rounds at 2^-8), so it runs ahead
of the reference's own curve by a lag, not by a different fate. The band at step k is
therefore the reference-against-itself deviation up to step k times ``BAND_FACTOR`` (one order
of magnitude of lag), and never below the rounding floor: the unit roundoff u of the lowest
precision the two configs compute in (``UNIT_ROUNDOFF``: a loss computed in bf16 is not defined
more finely than 2^-8) times the square root of k (each step adds its own rounding, and
independent errors of k steps add up like a random walk, to about u times sqrt(k)).
Knobs that must leave the math bit-identical get no such floor: their second reference run is
a plain repeat, and where it repeats bit for bit the candidate must too, or the knob is
reported as a defect by name (``defects``).

What each knob may change is its numeric class (``workbench.core.numerics``). A change of
batch size, accumulation or ranks (``optimisation``) or of the data path (``data``) is a
different training by design: it is compared per sample seen and marked ``informational``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from workbench.core import numerics
from workbench.core.errors import InputError
from workbench.core.knobs import Knobs
from workbench.engine.parity import SEEDED, LossTrace, trace_losses
from workbench.engine.slot import exclusive
from workbench.engine.workloads import WorkloadArg, resolve_target

VERDICTS = ("identical", "within-noise", "drifting", "diverged")
DEFAULT_STEPS = 50
MAX_STEPS = 100_000
BAND_FACTOR = 10.0
"""The band is the reference-against-itself deviation times this (module docstring)."""
DIVERGED_BOUND = 0.25
"""A relative deviation of the loss past this (25%) at any step is ``diverged``."""
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "tf32": 2.0**-11, "fp16": 2.0**-11, "bf16": 2.0**-8}
"""Half the gap between 1 and the next number of each format: how finely it can say a value."""
_TINY = 1e-12


@dataclass(kw_only=True)
class ParityResult:
    """The candidate's loss against the reference's, step by step, with the verdict."""

    workload: str
    device: str
    reference: Knobs
    candidate: Knobs
    steps: int
    """Optimizer steps of the reference (the candidate's cover as many samples)."""
    verdict: str
    reason: str
    """The verdict in one sentence, with its numbers."""
    numeric_class: str
    """The loosest numeric class among the knobs that differ (``core.numerics``)."""
    changed: dict[str, str]
    """Each knob that differs, with its numeric class."""
    informational: bool
    """True for ``optimisation`` and ``data`` changes: another training by design."""
    compared_on: str
    """``step`` or ``samples seen`` (a different batch per optimizer step)."""
    max_rel_dev: float | None
    mean_rel_dev: float | None
    max_at_step: int | None
    grad_norm_max_rel_dev: float | None
    band: float | None
    """The band at the last step (the widest it got)."""
    band_measured: float | None
    """The reference against itself: its largest relative deviation."""
    band_factor: float
    rounding_floor: float
    band_from: str
    growth: float | None
    reference_losses: list[float]
    reference2_losses: list[float]
    candidate_losses: list[float]
    reference_grad_norms: list[float]
    candidate_grad_norms: list[float]
    deviations: list[float]
    """The candidate's relative deviation at each compared point."""
    bands: list[float]
    """The band at each compared point."""
    samples_seen: list[int]
    """Samples seen at each compared point."""
    same_data: bool | None
    """Whether the candidate trained on the reference's batches (None: not comparable)."""
    defects: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    no_effect: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Identical or within noise, and no defect."""
        return self.verdict in ("identical", "within-noise") and not self.defects

    def evidence(self) -> dict[str, Any]:
        """What a saved config keeps: steps, deviation, band, verdict (``provenance.parity``)."""
        return {
            "steps": self.steps,
            "verdict": self.verdict,
            "max_rel_dev": _round(self.max_rel_dev),
            "mean_rel_dev": _round(self.mean_rel_dev),
            "band": _round(self.band),
            "reference": _changes(self.reference),
        }

    def summary(self) -> str:
        """A few lines for a person: verdict and reason, defects, notes."""
        lines = [f"parity {self.verdict}: {self.reason}"]
        lines += [f"defect: {d}" for d in self.defects]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"ParityResult({self.verdict}: {self.reason})"

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["reference"], out["candidate"] = self.reference.to_dict(), self.candidate.to_dict()
        return {k: _finite(v) for k, v in out.items()}


def parity(
    workload: WorkloadArg = None,
    reference: Knobs | None = None,
    candidate: Knobs | list[Knobs] | None = None,
    *,
    steps: int = DEFAULT_STEPS,
    device: str | torch.device | None = None,
    data_dir: str | Path | None = None,
    seed: int = 0,
    scaler: bool | list[bool] = True,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """Train ``reference`` (default: ``Knobs()``) twice and ``candidate`` once, ``steps``
    optimizer steps each, from the same weights on the same batches, and judge the
    candidate's loss against the band (module docstring): a ParityResult. ``scaler=False``
    trains an fp16 candidate without its GradScaler (what loss scaling prevents).

    A list of candidates (and, if wanted, a list of ``scaler`` flags, one each) shares the
    reference's two runs and returns a list of ParityResults, one a candidate. Bad input
    raises an InputError naming it before anything trains."""
    reference = Knobs() if reference is None else reference
    _check_knobs("reference", reference)
    many = isinstance(candidate, (list, tuple))
    candidates = list(candidate) if many else [candidate]  # type: ignore[list-item]
    if not candidates:
        raise InputError.not_allowed("candidate", candidate, "a Knobs, or a list of them")
    for each in candidates:
        _check_knobs("candidate", each)
    scalers = _scalers(scaler, len(candidates))
    check_steps(steps)
    wl, dev = resolve_target(workload, device, data_dir)
    say = progress or (lambda _: None)
    kinds = [changed_knobs(reference, c).values() for c in candidates]
    strict = all(numerics.loosest(list(k)) == "bit-identical" for k in kinds)
    results = []
    with exclusive(threading.Event()):
        say("reference")
        first = trace_losses(wl, reference, steps, dev, seed=seed)
        say("reference, again")
        second = trace_losses(wl, reference, steps, dev, seed=seed, reverse_samples=not strict)
        for each, scaled in zip(candidates, scalers, strict=True):
            say("candidate")
            cand_steps = _candidate_steps(steps, first.samples_per_step, each)
            third = trace_losses(wl, each, cand_steps, dev, seed=seed, scaler=scaled)
            results.append(compare(first, second, third, workload=wl.name))
    return results if many else results[0]


def _scalers(scaler: Any, n: int) -> list[bool]:
    """One GradScaler flag per candidate: a bool for all, or a list as long as theirs."""
    flags = scaler if isinstance(scaler, (list, tuple)) else [scaler] * n
    if len(flags) != n or not all(isinstance(f, bool) for f in flags):
        allowed = f"true or false, or a list of {n} of them (one per candidate)"
        raise InputError.not_allowed("scaler", scaler, allowed)
    return list(flags)


def check_steps(steps: Any) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or not 2 <= steps <= MAX_STEPS:
        raise InputError.not_allowed(
            "steps", steps, f"an integer from 2 to {MAX_STEPS:,} (optimizer steps per config)"
        )


def _check_knobs(name: str, knobs: Any) -> None:
    if not isinstance(knobs, Knobs):
        raise InputError.not_allowed(name, knobs, "a Knobs, e.g. Knobs(precision='bf16')")


def changed_knobs(reference: Knobs, candidate: Knobs) -> dict[str, str]:
    """Each knob that differs between the two, with the numeric class of the change."""
    ref, cand = reference.to_dict(), candidate.to_dict()
    return {name: numerics.change_class(name, ref[name], cand[name])
            for name in ref if ref[name] != cand.get(name)}  # fmt: skip


def _candidate_steps(steps: int, ref_per_step: int, candidate: Knobs) -> int:
    """As many candidate steps as cover the reference's samples (batch and accumulation
    may differ)."""
    per_step = candidate.batch_size * candidate.grad_accum
    return max(2, round(steps * ref_per_step / per_step)) if ref_per_step else steps


def unit_roundoff(knobs: Knobs, device: str) -> float:
    """The unit roundoff of the lowest precision ``knobs`` compute in on ``device``: bf16 and
    fp8 (whose float8 layers are scaled to keep bf16's accuracy) 2^-8; fp16 and TF32 2^-11
    (``default`` on a GPU: cuDNN's convolutions may use TF32); fp32 2^-24."""
    if knobs.precision == "bf16" or knobs.fp8 != "off":
        return UNIT_ROUNDOFF["bf16"]
    if knobs.precision in ("fp16", "tf32"):
        return UNIT_ROUNDOFF[knobs.precision]
    if knobs.precision == "default" and device.startswith("cuda"):
        return UNIT_ROUNDOFF["tf32"]
    return UNIT_ROUNDOFF["fp32"]


def compare(
    first: LossTrace, second: LossTrace, cand: LossTrace, *, workload: str = ""
) -> ParityResult:
    """The verdict on ``cand`` against the reference's two traces (module docstring)."""
    changed = changed_knobs(first.knobs, cand.knobs)
    kind = numerics.loosest(list(changed.values()))
    informational = kind in ("optimisation", "data")
    floor = 0.0
    if kind != "bit-identical":
        floor = max(unit_roundoff(first.knobs, first.device),
                    unit_roundoff(cand.knobs, cand.device))  # fmt: skip
    noise = [_rel(c, r) for c, r in zip(second.losses, first.losses, strict=False)]
    seen, ref, cand_losses, envelope = _aligned(first, cand, _running_max(noise))
    devs = [_rel(c, r) for c, r in zip(cand_losses, ref, strict=True)]
    bands = [max(BAND_FACTOR * e, floor * math.sqrt(i + 1)) for i, e in enumerate(envelope)]
    same_step = first.samples_per_step == cand.samples_per_step
    same_data = (
        first.fingerprints == cand.fingerprints[: len(first.fingerprints)] if same_step else None
    )
    result = ParityResult(
        workload=workload, device=cand.device, reference=first.knobs, candidate=cand.knobs,
        steps=len(first.losses), verdict="", reason="", numeric_class=kind, changed=changed,
        informational=informational,
        compared_on="step" if same_step else "samples seen",
        max_rel_dev=_max(devs), mean_rel_dev=_mean(devs),
        max_at_step=_argmax(devs),
        grad_norm_max_rel_dev=_grad_dev(first, cand) if same_step else None,
        band=bands[-1] if bands else None, band_measured=_max(noise),
        band_factor=BAND_FACTOR, rounding_floor=floor,
        band_from=_band_from(second),
        growth=_growth(devs),
        reference_losses=list(first.losses), reference2_losses=list(second.losses),
        candidate_losses=list(cand.losses), reference_grad_norms=list(first.grad_norms),
        candidate_grad_norms=list(cand.grad_norms), deviations=devs, bands=bands,
        samples_seen=seen, same_data=same_data,
        no_effect={**first.no_effect, **cand.no_effect},
        seconds=first.seconds + second.seconds + cand.seconds,
    )  # fmt: skip
    result.verdict, result.reason = _verdict(first, cand, devs, bands, same_step)
    result.defects = _defects(result, first, second, cand)
    result.notes = _notes(result, first, cand)
    return result


def _aligned(
    ref: LossTrace, other: LossTrace, envelope: list[float]
) -> tuple[list[int], list[float], list[float], list[float]]:
    """(samples seen, the reference's losses, ``other``'s, the reference's noise envelope) at
    the compared points: every step for the same samples per step, else the coarser run's
    step ends within both runs' range, the finer curve interpolated there (linearly in
    samples seen; exact where a step ends on the point)."""
    rs, os_ = ref.samples_per_step or 1, other.samples_per_step or 1
    if rs == os_:
        n = min(len(ref.losses), len(other.losses), len(envelope))
        seen = [rs * (i + 1) for i in range(n)]
        return seen, list(ref.losses[:n]), list(other.losses[:n]), envelope[:n]
    rx = [rs * (i + 1) for i in range(len(ref.losses))]
    ox = [os_ * (i + 1) for i in range(len(other.losses))]
    low, high = max(rx[0], ox[0]), min(rx[-1], ox[-1])
    seen = [x for x in (ox if os_ > rs else rx) if low <= x <= high]
    return (seen, [_interp(x, rx, ref.losses) for x in seen],
            [_interp(x, ox, other.losses) for x in seen],
            [_interp(x, rx, envelope) for x in seen])  # fmt: skip


def _interp(x: float, xs: list[int], ys: list[float]) -> float:
    for i in range(1, len(xs)):
        if x <= xs[i]:
            t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            return ys[i - 1] + t * (ys[i] - ys[i - 1])
    return ys[-1]


def _verdict(
    first: LossTrace, cand: LossTrace, devs: list[float], bands: list[float], same_step: bool
) -> tuple[str, str]:
    if not devs:
        return "diverged", "no step to compare: the candidate covered none of the reference's"
    bad = next((i for i, d in enumerate(devs) if not math.isfinite(d)), None)
    if bad is not None:
        return "diverged", f"a non-finite loss at step {bad + 1} where the reference's is finite"
    if same_step and cand.losses == first.losses and cand.grad_norms == first.grad_norms:
        return "identical", f"all {len(devs)} losses and gradient norms bit for bit the reference's"
    worst = max(range(len(devs)), key=devs.__getitem__)
    numbers = (f"largest relative deviation {devs[worst]:.2e} at step {worst + 1}, mean "
               f"{_mean(devs):.2e}; band there {bands[worst]:.2e}")  # fmt: skip
    if devs[worst] > DIVERGED_BOUND:
        return "diverged", f"{numbers}: past the bound of {DIVERGED_BOUND:.0%}"
    over = [i for i, (d, b) in enumerate(zip(devs, bands, strict=True)) if d > b]
    if not over:
        return "within-noise", f"{numbers}: inside the band at every step"
    growth = _growth(devs)
    grew = f", the deviation grew {growth:.1f}x from the first half to the second" if growth else ""
    return "drifting", f"{numbers}: past the band at {len(over)} of {len(devs)} steps{grew}"


def _defects(r: ParityResult, first: LossTrace, second: LossTrace, cand: LossTrace) -> list[str]:
    found = []
    if first.fingerprints != second.fingerprints:
        step = _first_difference(first.fingerprints, second.fingerprints)
        found.append(f"the reference's own batches differ between two runs from step {step}: "
                     "its data draws from a generator the workbench cannot seed (an "
                     "augmentation with a random generator of its own?), so no two runs train "
                     "on the same data")  # fmt: skip
    strict = [n for n, kind in r.changed.items() if kind in ("bit-identical", "rounding")]
    if r.same_data is False and strict and first.fingerprints == second.fingerprints:
        step = _first_difference(first.fingerprints, cand.fingerprints)
        found.append(f"{_named(r.candidate, strict)} changed the batches from step {step}: the "
                     "same samples with other augmentation draws (a worker's random generator "
                     "not seeded per sample?)")  # fmt: skip
    if r.numeric_class == "bit-identical" and r.verdict != "identical":
        # a reversed second run says nothing of repeatability: held to bit-identical then
        repeatable = first.losses == second.losses or second.reversed_samples
        if repeatable or r.verdict in ("drifting", "diverged"):
            found.append(f"{_named(r.candidate, list(r.changed))} must leave the math "
                         f"bit-identical, yet the loss moved: {r.reason}")  # fmt: skip
    return found


def _notes(r: ParityResult, first: LossTrace, cand: LossTrace) -> list[str]:
    notes = []
    if r.informational:
        notes.append(f"{', '.join(r.changed)} change the {r.numeric_class} "
                     f"({numerics.CLASS_MEANING[r.numeric_class]}): the verdict is information, "
                     f"compared per {r.compared_on}")  # fmt: skip
    if r.numeric_class == "bit-identical" and r.band_measured and "as it is" in r.band_from:
        notes.append(f"the reference is not bit-for-bit repeatable here (its two runs differ "
                     f"by up to {r.band_measured:.2e}): nondeterministic kernels; the "
                     "candidate is held to the band")  # fmt: skip
    for trace in (first, cand):
        if trace.data_seeding != SEEDED and trace.data_seeding not in notes:
            notes.append(trace.data_seeding)
    if not r.changed:
        notes.append("the candidate is the reference: nothing changed")
    if cand.knobs.precision == "fp16" and not cand.scaler:
        notes.append("the fp16 candidate trained without its GradScaler (scaler=False)")
    return notes


def _band_from(second: LossTrace) -> str:
    if second.reversed_samples:
        return ("the reference run twice, the second summing each batch's samples in reverse "
                f"order; x{BAND_FACTOR:g}, never below the lower precision's unit "
                "roundoff")  # fmt: skip
    return f"the reference run twice, as it is; x{BAND_FACTOR:g}"


def _named(knobs: Knobs, names: list[str]) -> str:
    values = knobs.to_dict()
    return ", ".join(f"{n}={values[n]!r}" for n in names)


def _first_difference(a: list[str], b: list[str]) -> int:
    pairs = enumerate(zip(a, b, strict=False))
    return next((i + 1 for i, (x, y) in pairs if x != y), min(len(a), len(b)) + 1)


def _grad_dev(first: LossTrace, cand: LossTrace) -> float | None:
    pairs = zip(cand.grad_norms, first.grad_norms, strict=False)
    return _max([_rel(c, r) for c, r in pairs])


def _rel(value: float, ref: float) -> float:
    if not math.isfinite(value) and math.isfinite(ref):
        return math.inf
    if not math.isfinite(ref):
        return 0.0 if value == ref else math.inf
    return abs(value - ref) / max(abs(ref), _TINY)


def _running_max(values: list[float]) -> list[float]:
    out, top = [], 0.0
    for v in values:
        top = max(top, v) if math.isfinite(v) else top
        out.append(top)
    return out


def _growth(devs: list[float]) -> float | None:
    half = len(devs) // 2
    if half < 1 or not all(math.isfinite(d) for d in devs):
        return None
    early, late = _mean(devs[:half]), _mean(devs[half:])
    return late / early if early and late is not None else None


def _max(values: list[float]) -> float | None:
    return max(values) if values else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _argmax(values: list[float]) -> int | None:
    return max(range(len(values)), key=values.__getitem__) + 1 if values else None


def _round(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(f"{x:.3g}")


def _finite(value: Any) -> Any:
    """JSON has no inf or NaN: a non-finite number reads as null (unknown)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _changes(knobs: Knobs) -> dict[str, Any]:
    return {k: (dict(v) if k == "nccl" else v) for k, v in knobs.changes().items()}


__all__ = ["DEFAULT_STEPS", "VERDICTS", "ParityResult", "check_steps", "compare", "parity"]
