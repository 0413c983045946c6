"""The class board's figures: what a room of learners answered and measured, read from the store.

Pure functions over what the store returns (the answers as dicts, the bursts as
``records_frame``), so the instructor's board (``workbench/notebook/board.py``) only draws.

Why the figures are what they are:

- **One answer per learner and exercise.** A learner may run a check several times (a wrong
  answer, then a right one); the room's share correct counts each learner's *latest* verdict,
  so a learner who retried is neither counted twice nor held to a first attempt.
- **Measurements have a spread, not an answer.** Each learner's machine measured its own value;
  the board shows the room's median and its range (and, for choices such as a verdict, the most
  common value and its share), so the instructor sees at once whether the room agrees.
- **A prediction is close** when it lands within ``PREDICTION_BAND`` of the learner's own
  measurement (numbers) or names the same choice: the same band ``check_prediction`` uses.
- **A knob's effect is a ratio of medians on one machine, other knobs held.** Machines differ
  by far more than any knob, so comparing a bf16 burst on one GPU with a default one on another
  says nothing; each row pairs bursts of one learner on one host that differ only in the knob.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from workbench.core.knobs import Knobs, knob_specs

__all__ = [
    "ANSWER_COLUMNS",
    "PREDICTION_BAND",
    "EffectSpread",
    "answers_frame",
    "best_configs",
    "effect_spread",
    "exercise_answers",
    "exercise_summary",
    "knob_effect",
    "latest_answers",
]

ANSWER_COLUMNS = ("id", "created_at", "learner", "host", "exercise", "ok", "message",
                  "prediction", "measured")  # fmt: skip
PREDICTION_BAND = 0.25
"""A numeric prediction within 25% of the measurement is close (``check_prediction``'s band)."""
MACHINE = ("learner", "host")
"""What one machine is in a room: a learner's GPU (or MIG slice, or laptop) on a host. Learners
sharing a JupyterHub host each have their own slice, so the host alone is not enough."""


# -- answers ---------------------------------------------------------------------------------


def answers_frame(answers: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """The store's answers (``store.answers()``) as a frame with exactly ``ANSWER_COLUMNS``."""
    rows = [{column: answer.get(column) for column in ANSWER_COLUMNS} for answer in answers]
    frame = pd.DataFrame(rows, columns=list(ANSWER_COLUMNS))
    frame["ok"] = frame["ok"].map(bool).astype(bool)
    return frame


def latest_answers(answers: pd.DataFrame) -> pd.DataFrame:
    """Each learner's newest answer per exercise (by id: the store's order of arrival)."""
    if answers.empty:
        return answers
    ordered = answers.sort_values("id", kind="stable")
    return ordered.drop_duplicates(["exercise", "learner"], keep="last").reset_index(drop=True)


def exercise_summary(answers: pd.DataFrame) -> pd.DataFrame:
    """One row per exercise, in the order exercises were first answered.

    Columns: ``exercise``, ``answers`` (all attempts), ``learners`` (who answered),
    ``correct`` and ``correct_pct`` (latest verdicts), ``measured`` (median of numbers, else the
    most common value), ``measured_min``/``measured_max`` and ``spread_pct`` (range over median,
    numbers only), ``predicted`` (learners who committed to a prediction), ``prediction``
    (median or most common) and ``close_pct`` (share of those predictions close to the
    learner's own measurement). Unknown figures are None.
    """
    columns = ["exercise", "answers", "learners", "correct", "correct_pct", "measured",
               "measured_min", "measured_max", "spread_pct", "predicted", "prediction",
               "close_pct"]  # fmt: skip
    latest = latest_answers(answers)
    rows = []
    for exercise in pd.unique(answers["exercise"]):
        mine = latest[latest["exercise"] == exercise]
        rows.append({"exercise": exercise,
                     "answers": int((answers["exercise"] == exercise).sum()),
                     "learners": len(mine), "correct": int(mine["ok"].sum()),
                     "correct_pct": _pct(int(mine["ok"].sum()), len(mine)),
                     **_measured(list(mine["measured"])),
                     **_predictions(list(mine["prediction"]), list(mine["measured"]))})  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def exercise_answers(answers: pd.DataFrame, exercise: str) -> pd.DataFrame:
    """The room's latest answers to one exercise, one row per learner (sorted by name):
    ``learner, host, ok, prediction, measured, off_pct`` (prediction over measurement, in
    percent: +20 is 20% above; None where either is not a number), ``close``, ``message``."""
    mine = latest_answers(answers)
    mine = mine[mine["exercise"] == exercise].sort_values("learner", kind="stable")
    rows = []
    for row in mine.to_dict("records"):
        off = _off(row["prediction"], row["measured"])
        close = None if row["prediction"] is None else _close(row["prediction"], row["measured"])
        rows.append({"learner": row["learner"], "host": row["host"], "ok": bool(row["ok"]),
                     "prediction": row["prediction"], "measured": row["measured"],
                     "off_pct": None if off is None else round(100 * off, 1), "close": close,
                     "message": row["message"]})  # fmt: skip
    columns = ["learner", "host", "ok", "prediction", "measured", "off_pct", "close", "message"]
    return pd.DataFrame(rows, columns=columns)


def _measured(values: list[Any]) -> dict[str, Any]:
    known = [v for v in values if not _null(v)]
    numbers = [float(v) for v in known if _is_number(v)]
    if known and len(numbers) == len(known):
        middle = _median(numbers)
        spread = (max(numbers) - min(numbers)) / abs(middle) * 100 if middle else None
        return {"measured": middle, "measured_min": min(numbers), "measured_max": max(numbers),
                "spread_pct": None if spread is None else round(spread, 1)}  # fmt: skip
    return {"measured": _most_common(known), "measured_min": None, "measured_max": None,
            "spread_pct": None}  # fmt: skip


def _predictions(predictions: list[Any], measured: list[Any]) -> dict[str, Any]:
    pairs = [(p, m) for p, m in zip(predictions, measured, strict=True) if not _null(p)]
    made = [p for p, _ in pairs]
    numbers = [float(p) for p in made if _is_number(p)]
    typical = _median(numbers) if made and len(numbers) == len(made) else _most_common(made)
    close = sum(_close(p, m) for p, m in pairs)
    return {"predicted": len(made), "prediction": typical, "close_pct": _pct(close, len(pairs))}


def _close(prediction: Any, measured: Any) -> bool:
    if _null(measured) or _null(prediction):
        return False
    if _is_number(prediction) and _is_number(measured):
        return abs(float(prediction) - float(measured)) <= PREDICTION_BAND * abs(float(measured))
    return _text(prediction).lower() == _text(measured).lower()


def _off(prediction: Any, measured: Any) -> float | None:
    if _is_number(prediction) and _is_number(measured) and float(measured) != 0:
        return float(prediction) / float(measured) - 1
    return None


# -- bursts ----------------------------------------------------------------------------------


def best_configs(bursts: pd.DataFrame, metric: str = "samples_per_s") -> pd.DataFrame:
    """Each learner's best ok burst per workload: the highest ``metric`` and its knobs.

    Columns: ``learner, host, workload, device_name, <metric>, peak_mem_mib, id, knobs`` (the
    knobs that differ from their defaults, as text) and ``bursts`` (the learner's ok bursts of
    that workload). Sorted by workload, then best first.
    """
    columns = ["learner", "host", "workload", "device_name", metric, "peak_mem_mib", "id",
               "knobs", "bursts"]  # fmt: skip
    ok = _ok_bursts(bursts, metric)
    rows = []
    for (learner, workload), group in ok.groupby(["learner", "workload"], sort=True):
        best = group.loc[group[metric].idxmax()]
        rows.append({"learner": learner, "host": best["host"], "workload": workload,
                     "device_name": _clean(best.get("device_name")), metric: float(best[metric]),
                     "peak_mem_mib": _clean(best.get("peak_mem_mib")), "id": _clean(best["id"]),
                     "knobs": _changed_text(_row_knobs(best)), "bursts": len(group)})  # fmt: skip
    table = pd.DataFrame(rows, columns=columns)
    return table.sort_values(["workload", metric], ascending=[True, False]).reset_index(drop=True)


def knob_effect(
    bursts: pd.DataFrame, knob: str, new: Any, old: Any, *, metric: str = "samples_per_s"
) -> pd.DataFrame:
    """``metric`` at ``knob=new`` over ``knob=old``, per machine (learner and host), workload
    and set of other knobs: only ok bursts that differ in ``knob`` alone are paired.

    Columns: ``learner, host, workload, device_name, held`` (the other knobs that differ from
    their defaults), ``new_per_s, old_per_s`` (medians), ``ratio``, ``bursts_new, bursts_old``.
    """
    if knob not in {s.name for s in knob_specs()}:
        known = ", ".join(s.name for s in knob_specs())
        raise ValueError(f"knob {knob!r} is not a knob; known: {known}")
    columns = ["learner", "host", "workload", "device_name", "held", "new_per_s", "old_per_s",
               "ratio", "bursts_new", "bursts_old"]  # fmt: skip
    ok = _ok_bursts(bursts, metric)
    pairs: dict[tuple[Any, ...], dict[str, list[float]]] = {}
    names: dict[tuple[Any, ...], Any] = {}
    for row in ok.to_dict("records"):
        knobs = _row_knobs(row)
        side = "new" if _same(knobs[knob], new) else "old" if _same(knobs[knob], old) else None
        if side is None:
            continue
        held = {k: v for k, v in knobs.items() if k != knob}
        key = (row["learner"], row["host"], row["workload"], json.dumps(held, sort_keys=True))
        pairs.setdefault(key, {"new": [], "old": []})[side].append(float(row[metric]))
        names.setdefault(key, _clean(row.get("device_name")))
    rows = []
    for key, sides in pairs.items():
        if not sides["new"] or not sides["old"]:
            continue
        learner, host, workload, held = key
        a, b = _median(sides["new"]), _median(sides["old"])
        rows.append({"learner": learner, "host": host, "workload": workload,
                     "device_name": names[key], "held": _changed_text(json.loads(held)),
                     "new_per_s": a, "old_per_s": b, "ratio": a / b if b else None,
                     "bursts_new": len(sides["new"]), "bursts_old": len(sides["old"])})  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


@dataclass(frozen=True, slots=True)
class EffectSpread:
    """How one knob's effect varies across the room's machines."""

    machines: int
    ratio_median: float | None
    ratio_min: float | None
    ratio_max: float | None
    faster: int
    """Machines where ``new`` beat ``old`` (ratio above 1)."""

    def sentence(self, knob: str, new: Any, old: Any) -> str:
        """One line for the board."""
        if not self.machines:
            return (f"no machine has measured both {knob}={new} and {knob}={old} with the other "
                    "knobs held: nothing to compare yet")  # fmt: skip
        return (f"{knob}={new} over {knob}={old} on {self.machines} machine(s): median "
                f"{self.ratio_median:.2f}x, from {self.ratio_min:.2f}x to {self.ratio_max:.2f}x; "
                f"faster on {self.faster} of {self.machines}")  # fmt: skip


def effect_spread(effects: pd.DataFrame) -> EffectSpread:
    """The spread of :func:`knob_effect`'s ratios, one per machine (where a machine has several
    held-knob sets, their median ratio: one vote per machine)."""
    if effects.empty:
        return EffectSpread(0, None, None, None, 0)
    per_machine = effects.dropna(subset=["ratio"]).groupby(list(MACHINE))["ratio"].median()
    ratios = [float(r) for r in per_machine]
    if not ratios:
        return EffectSpread(0, None, None, None, 0)
    return EffectSpread(len(ratios), _median(ratios), min(ratios), max(ratios),
                        sum(r > 1 for r in ratios))  # fmt: skip


def _ok_bursts(bursts: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Ok bursts that measured ``metric``, with ``learner`` and ``host`` columns (empty text
    where the store predates them)."""
    frame = bursts.copy()
    for column in (*MACHINE, "workload", "status", metric, "id"):
        if column not in frame.columns:
            frame[column] = None
    for column in MACHINE:
        frame[column] = frame[column].map(lambda v: "" if _null(v) else str(v))
    values = pd.to_numeric(frame[metric], errors="coerce")
    return frame[(frame["status"] == "ok") & values.notna()].assign(**{metric: values})


def _row_knobs(row: Mapping[str, Any]) -> dict[str, Any]:
    """A burst row's knobs, every one (nulls as defaults; NCCL variables flat by name)."""
    stored = row.get("knobs")
    values = dict(stored) if isinstance(stored, Mapping) else {}
    out: dict[str, Any] = {}
    for spec in knob_specs():
        if spec.kind == "mapping":
            continue
        value = values.get(spec.name, row.get(f"knob_{spec.name}", row.get(spec.name)))
        out[spec.name] = spec.default if _null(value) else _plain(value)
    nccl = values.get("nccl") if isinstance(values.get("nccl"), Mapping) else {}
    out.update({k: str(v) for k, v in sorted(nccl.items()) if not _null(v)})
    return out


def _changed_text(knobs: Mapping[str, Any]) -> str:
    """``batch_size=64, precision=bf16``: the knobs away from their defaults ("defaults")."""
    defaults = Knobs().to_dict()
    changed = [f"{k}={v}" for k, v in knobs.items() if k not in defaults or defaults[k] != v]
    return ", ".join(changed) or "defaults"


# -- small helpers ---------------------------------------------------------------------------


def _null(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _is_number(value: Any) -> bool:
    value = _plain(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _plain(value: Any) -> Any:
    """numpy scalars as Python values."""
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, (str, bytes)) else value


def _clean(value: Any) -> Any:
    return None if _null(value) else _plain(value)


def _same(a: Any, b: Any) -> bool:
    return a == b or _text(a).lower() == _text(b).lower()


def _text(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value).strip()


def _median(numbers: list[float]) -> float:
    return float(pd.Series(numbers, dtype=float).median())


def _most_common(values: list[Any]) -> Any:
    if not values:
        return None
    counts = pd.Series([_text(v) for v in values]).value_counts(sort=True)
    return counts.index[0]


def _pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 1) if whole else None
