"""What each workshop exercise accepts: one table, read by the checks that grade an answer in
the learner's kernel (``workbench/workshop``) and by ``workbench class init``, which stores it
in the class store's ``checks`` table so that the server computes the same verdict
(``history.roles``: its trigger sets ``ok`` from the row's prediction and measurement and marks
it ``verified``).

It lives here, below both, because the workshop tier is on top and the CLI beside it: neither
imports the other, and the history layer imports neither. A check grades with the rule it
finds here (:func:`rule_for`), so the band a learner is graded with locally is the one the
server holds; a test keeps every exercise the lessons name in exactly one of :data:`RULES` and
:data:`UNVERIFIED`.

The server sees only an answer's row: ``prediction`` (the first one committed before the
burst), ``measured`` (the value the check compared it with), ``late`` and ``kind``. A rule is
therefore "a number within ``rel_tol`` of the measurement, or ``abs_tol``" or "the measured
choice"; an exercise whose grading needs more than that row (a ranking of a sweep's values
within its noise, two neighbouring answers at a band's edge, a profile's table, an object in
the kernel) cannot be reproduced there and stays unverified, with the reason in
:data:`UNVERIFIED`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["RULES", "UNVERIFIED", "Rule", "rule_for"]


@dataclass(frozen=True, slots=True)
class Rule:
    """What one exercise accepts, as the server can judge it from an answer's row."""

    rel_tol: float = 0.0
    """A numeric prediction within this share of the measurement is right (0.25: 25%)."""
    abs_tol: float = 0.0
    """... or within this many of the measurement's own units (shares near zero)."""
    choice: bool = False
    """The prediction is a choice: right when it names the measured one (case and spaces
    aside), even where both are numbers."""

    def accepts(self, prediction: Any, measured: Any) -> bool:
        """The server's verdict on a prediction committed in time (``roles``' trigger, in
        Python): numbers within the band; a choice equal to the measured one; anything else
        (a missing value, a word where a number is asked) is not right."""
        if prediction is None or measured is None:
            return False
        if not self.choice:
            if not (_number(prediction) and _number(measured)):
                return False
            return abs(prediction - measured) <= max(self.rel_tol * abs(measured), self.abs_tol)
        return _text(prediction).strip().lower() == _text(measured).strip().lower()


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value: Any) -> str:
    """A value as the server reads it from JSON (``#>> '{}'``): a string as is, else its JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


BLIND = Rule(rel_tol=0.25)
"""A ratio predicted blind, before the burst: within 25% of the measured one
(``checks.PREDICTION_TOL``)."""

RULES: Mapping[str, Rule] = MappingProxyType({
    "01-data-wait": Rule(rel_tol=0.25, abs_tol=15.0),  # percent of the window: 15 points
    "03-precision": BLIND,  # bf16 / default samples/s
    "08-reproduce": Rule(rel_tol=0.2),  # re-measured / saved samples/s
    "12-bf16": BLIND,
    "12-attention": BLIND,
    "12-packing": BLIND,
    "12-fp8": BLIND,
    "12-memory": Rule(rel_tol=0.25, abs_tol=10.0),  # percent of memory freed: 10 points
})  # fmt: skip
"""Every exercise whose verdict the server computes: the checks grade the first prediction by
this rule, and ``workbench class init`` stores it (``roles.define_check``)."""

_RANKING = ("a ranking: any value within the tolerance, or this seat's noise, of the best "
            "median counts, and the row carries only the best value")  # fmt: skip
_EDGE = ("at a band's edge both neighbouring answers count (the next pair of bursts could "
         "land on either side), and the row carries one measured answer")  # fmt: skip

UNVERIFIED: Mapping[str, str] = MappingProxyType({
    "02-workers": _RANKING,
    "04-knee": _RANKING,
    "06-comm-peak": _RANKING,
    "09-format": _RANKING,
    "10-frees-most": _RANKING,
    "12-compile": _RANKING,
    "05-verdict": _EDGE,
    "06-scale-out": _EDGE,
    "11-channels-last": _EDGE,
    "07-top-operator": "an operator family is matched against the profile's table, which the "
                       "row does not carry",
    "08-loader": "the check reads a DataLoader in the learner's kernel; there is no "
                 "prediction, and the row carries neither the loader nor the config",
    "10-monthly-saving": "an amount worked out from two bursts and a price, none of which the "
                         "row carries (no prediction, no measurement)",
    "11-compile-break-even": "the accepted range comes from the two bursts' noise (the row "
                             "carries only the break-even step)",
    "11-share-of-peak": "right within a factor either side or 5 points: the table holds a "
                        "symmetric band only",
    "03-parity": "no check: the lesson prints the measured deviation beside the prediction, "
                 "and no verdict is recorded",
})  # fmt: skip
"""Every exercise whose verdict stays the learner's kernel's (``verified`` false on the board),
with the reason the server cannot reproduce it."""


def rule_for(exercise: str) -> Rule | None:
    """The rule of ``exercise``, or None where the server cannot judge it."""
    return RULES.get(exercise)
