"""Lesson 10's helpers ("Memory and money"): a table of what each memory knob freed, and the
checks of its two exercises.

Which memory counts: on a GPU, the burst's peak allocated memory (what has to fit on the card).
On a CPU the process's peak also holds Python, torch's libraries and whatever glibc kept from
earlier bursts (the same knobs read 950-1,530 MiB PSS in five bursts in a row here), so the
lesson compares what training itself holds: parameters + gradients + optimizer state +
activations saved for backward (``memory_breakdown``), exact tensor bytes on any device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from workbench.core.cost import tune_saving
from workbench.workshop.checks import Check, _judge_first, _never_raises, _no_answer

if TYPE_CHECKING:
    from workbench.core.results import BurstResult

__all__ = [
    "FREES_MOST",
    "check_frees_most",
    "check_monthly_saving",
    "held_mib",
    "memory_table",
]

_TENSOR_PARTS = ("params_mib", "grads_mib", "optimizer_mib", "activations_mib")


def held_mib(result: BurstResult) -> float | None:
    """The memory a lesson compares (module docstring): peak allocated on CUDA, the training
    tensors' bytes elsewhere; None when the burst did not measure it."""
    if str(result.device).startswith("cuda"):
        return result.peak_mem_mib
    parts = result.memory_breakdown or {}
    values = [parts.get(k) for k in _TENSOR_PARTS]
    return None if any(v is None for v in values) else float(sum(values))


def memory_table(results: Mapping[str, BurstResult], baseline: str = "baseline") -> pd.DataFrame:
    """One row per burst (named by its key): throughput, the breakdown, what it holds and what
    it freed against ``baseline``, most freed first."""
    base = held_mib(results[baseline])
    rows = []
    for name, r in results.items():
        parts = r.memory_breakdown or {}
        held = held_mib(r)
        rows.append({
            "change": name, "status": r.status, "samples_per_s": r.samples_per_s,
            **{k: parts.get(k) for k in _TENSOR_PARTS}, "held_mib": held,
            "freed_mib": None if held is None or base is None else base - held,
        })  # fmt: skip
    frame = pd.DataFrame(rows)
    return frame.sort_values("freed_mib", ascending=False, na_position="last", ignore_index=True)


@_never_raises(exercise="10-frees-most")
def check_frees_most(
    prediction: str | None, table: pd.DataFrame, *, answer: str | None = None,
    tolerance: float = 0.05, exercise: str = "10-frees-most",
) -> Check:  # fmt: skip
    """Is the predicted change the one that freed the most memory in ``table``
    (``memory_table``)? A change within ``tolerance`` of the baseline's memory of the best
    counts too. The prediction judged is the first one committed before the measurement
    (``workshop.commit_prediction``); ``answer``, read off the table, gets a sentence of its own.
    ``exercise``: another lesson's question of the same kind (lesson 12's "12-memory").
    """
    changes = [c for c in table["change"] if c != "baseline"]
    freed = dict(zip(table["change"], table["freed_mib"], strict=True))
    held = dict(zip(table["change"], table["held_mib"], strict=True))
    measured = [c for c in changes if freed[c] is not None and not pd.isna(freed[c])]
    if not measured:
        raise ValueError("no change measured a memory breakdown: run the measuring cell again")
    best = max(measured, key=freed.__getitem__)

    def judge(guess: Any) -> Check:
        if guess not in changes:
            return Check(False, f"{guess!r} is not one of the changes measured: "
                                f"{', '.join(changes)}", measured=best)  # fmt: skip
        if guess not in measured:
            raise ValueError(f"the burst of {guess!r} measured no memory breakdown")
        words = f"{guess} freed {freed[guess]:,.1f} MiB of {held['baseline']:,.1f}"
        if guess == best:
            return Check(True, f"{words}, the most of the changes measured", measured=best)
        if freed[best] - freed[guess] <= tolerance * held["baseline"]:
            return Check(True, f"{words}; {best} freed {freed[best]:,.1f}, as good within "
                               f"{tolerance:.0%}", measured=best)  # fmt: skip
        hint = "compare the freed_mib column (and activations_mib: what grows with the batch)"
        return Check(False, f"{words}, but {best} freed {freed[best]:,.1f} MiB: {hint}",
                     measured=best)  # fmt: skip

    return _judge_first(judge, prediction, exercise=exercise,
                        what="the change you predict frees the most memory, e.g. 'grad_accum'",
                        answer=answer, read=judge)  # fmt: skip


FREES_MOST = "10-frees-most"
"""Exercise 1's name on the class board (and in ``commit_prediction``)."""


@_never_raises(exercise="10-monthly-saving")
def check_monthly_saving(
    answer: float | None,
    start: BurstResult,
    tuned: BurstResult,
    price_per_hour: float,
    hours_per_month: float,
    *,
    rel_tol: float = 0.02,
) -> Check:
    """Is ``answer`` what ``tuned`` saves a month against ``start`` for the same work, at
    ``price_per_hour`` for ``hours_per_month`` device hours of the start's training?"""
    if answer is None:
        return _no_answer("the money saved per month, a number")
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        return Check(False, f"the answer is an amount of money (a number), not {answer!r}")
    if not start.samples_per_s or not tuned.samples_per_s:
        raise ValueError("both bursts need a measured throughput (status ok)")
    saving = tune_saving(start.samples_per_s, tuned.samples_per_s, price_per_hour, 1,
                         hours_per_month=hours_per_month)  # fmt: skip
    month: dict[str, Any] = saving["per_month"] if saving else {}
    saved = month["saved"]
    words = (f"{hours_per_month:g} h at {price_per_hour:g}/h cost {month['start']:,.2f} with the "
             f"start; the tuned config does the same work in {month['tuned'] / price_per_hour:,.1f}"
             f" h ({start.samples_per_s:,.1f} -> {tuned.samples_per_s:,.1f} samples/s), "
             f"{month['tuned']:,.2f}: it saves {saved:,.2f}")  # fmt: skip
    if abs(answer - saved) <= rel_tol * max(abs(saved), 1e-9):
        return Check(True, words)
    return Check(False, f"{answer:g} is off: {words}")
