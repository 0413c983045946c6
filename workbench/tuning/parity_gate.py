"""The tuner keeps the numbers: a pick that changes rounding is checked for loss parity first.

A tune ranks configs by measured throughput; a faster config that no longer trains the same
is no answer. Before a pick whose knobs change rounding against the start (``core.numerics``:
precision, compile, attention, channels_last, fused optimizers, fp8, ...) is reported as the
best, its loss parity is measured (``workbench.analysis.parity``) against a reference that
isolates those knobs: the pick itself with every rounding knob put back to the start's value
(the pick's batch, workers and data path, the start's numerics). A ``drifting`` or
``diverged`` pick is refused, with the reason, and the next fitting candidate is taken, up to
``MAX_CHECKS`` checks. The accepted pick's evidence (steps, deviation, band, verdict) goes into
the result and the saved config.

The cost is bounded. The steps of a check are sized from what the tune measured: the pick's and
its reference's step times and set-up, so that the three traces take about ``SHARE`` of the
tune's wall time so far, between ``MIN_STEPS`` and ``MAX_STEPS`` steps. Reference traces are
shared by picks with the same reference.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workbench.analysis.parity import ParityResult, changed_knobs, compare
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.engine.failures import describe_error
from workbench.engine.parity import LossTrace, trace_losses
from workbench.engine.slot import exclusive

SHARE = 0.15
"""The share of the tune's wall time the parity checks are sized to (the issue allows 20%)."""
MIN_STEPS = 4
MAX_STEPS = 50
MAX_CHECKS = 3
"""Picks checked at most; past them the start is kept (no pick)."""
REFUSED = ("drifting", "diverged")

Check = Callable[[Knobs, Knobs], ParityResult]
"""``check(reference, candidate)``: a parity result (the tune's real one, or a planted one)."""


@dataclass
class Gate:
    """What the gate decided: the pick it let through (None: the start stays), its evidence,
    each refused pick with its reason, and the time the checks took."""

    pick: Knobs | None = None
    evidence: ParityResult | None = None
    refused: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    checks: int = 0
    notes: list[str] = field(default_factory=list)
    """A check that could not run (the pick then stands unchecked, and says so)."""


def rounding_changes(start: Knobs, pick: Knobs) -> list[str]:
    """The knobs of ``pick`` that change rounding against ``start``."""
    return [n for n, kind in changed_knobs(start, pick).items() if kind == "rounding"]


def reference_for(start: Knobs, pick: Knobs) -> Knobs:
    """``pick`` with its rounding knobs put back to the start's values."""
    values = start.to_dict()
    return pick.replace(**{n: values[n] for n in rounding_changes(start, pick)})


def choose(ranked: list[Knobs], start: Knobs, check: Check) -> Gate:
    """Walk ``ranked`` (fitting configs, fastest first) and let through the first that changes
    no rounding, or whose parity is neither drifting nor diverged (module docstring)."""
    gate = Gate()
    began = time.perf_counter()
    for knobs in ranked:
        if knobs == start:
            break  # the start itself: nothing to check, no pick
        if not rounding_changes(start, knobs):
            gate.pick = knobs
            break
        if gate.checks >= MAX_CHECKS:
            break
        gate.checks += 1
        try:
            result = check(reference_for(start, knobs), knobs)
        except Exception as exc:  # a check that cannot run here is said, not a lost tune
            gate.pick = knobs
            gate.notes.append(f"the loss parity of the pick could not be measured "
                              f"({describe_error(exc)}): its numerics are unchecked")  # fmt: skip
            break
        if result.verdict in REFUSED:
            gate.refused.append({"knobs": _plain(knobs.changes()), "verdict": result.verdict,
                                 "reason": result.reason})  # fmt: skip
            continue
        gate.pick, gate.evidence = knobs, result
        break
    gate.seconds = time.perf_counter() - began
    return gate


def _plain(changes: dict[str, Any]) -> dict[str, Any]:
    return {k: dict(v) if isinstance(v, Mapping) else v for k, v in changes.items()}


def steps_for(wall_s: float, reference: BurstResult | None, pick: BurstResult | None) -> int:
    """Steps of a check sized to ``SHARE`` of the tune's wall time so far (module docstring)."""
    step_s = [r.step_ms_p50 / 1e3 for r in (reference, pick) if r and r.step_ms_p50]
    setup_s = [r.setup_s or 0.0 for r in (reference, pick) if r]
    if not step_s:
        return MIN_STEPS
    per_step = 2 * step_s[0] + step_s[-1]  # the reference twice, the candidate once
    spare = SHARE * wall_s - 3 * max(setup_s or [0.0])
    return max(MIN_STEPS, min(MAX_STEPS, int(spare / per_step + 1e-9)))


class MeasuredCheck:
    """The tune's check: real traces on the tune's workload and device, steps sized from its
    bursts (``steps_for``; ``steps`` fixes them), the reference's two traces kept for the next
    pick with the same reference."""

    def __init__(self, workload: Any, device: Any, began: float,
                 results: Callable[[Knobs], BurstResult | None], steps: int | None = None,
                 ) -> None:  # fmt: skip
        self.workload, self.device, self.began = workload, device, began
        self.results, self.steps = results, steps
        self._references: dict[tuple[Knobs, int], tuple[LossTrace, LossTrace]] = {}

    def __call__(self, reference: Knobs, candidate: Knobs) -> ParityResult:
        found = self.results(candidate)
        steps = self.steps or steps_for(time.perf_counter() - self.began,
                                        self.results(reference) or found, found)  # fmt: skip
        with exclusive(threading.Event()):
            key = (reference, steps)
            if key not in self._references:
                self._references[key] = (
                    trace_losses(self.workload, reference, steps, self.device),
                    trace_losses(self.workload, reference, steps, self.device,
                                 reverse_samples=True),
                )  # fmt: skip
            first, second = self._references[key]
            cand = trace_losses(self.workload, candidate, steps, self.device)
        return compare(first, second, cand, workload=self.workload.name)


__all__ = ["Gate", "MeasuredCheck", "choose", "reference_for", "rounding_changes", "steps_for"]
