"""The class board's figures: what a room of learners answered and measured, read from the store.

Pure functions over what the store returns (the answers as dicts, the bursts as
``records_frame``), so the instructor's board (``widget.py`` beside it) only draws.

Why the figures are what they are:

- **One answer per learner and exercise.** A learner may run a check several times (a wrong
  answer, then a right one); the room's share correct counts each learner's *latest* verdict,
  so a learner who retried is neither counted twice nor held to a first attempt. The verdict
  itself judges the prediction committed before the burst (``workshop.commit_prediction``), so
  a retry cannot swap in a number copied from the table.
- **Correct means the server said so.** In a class store set up by ``workbench class init``
  the server computes an answer's verdict from the exercise's rule and marks it ``verified``
  (``history/exercise_rules.py``); a verdict only the learner's kernel gave (an exercise the
  server cannot judge, a store without a server's verdicts) is counted as ``unverified``, never
  as correct, so an ``ok = true`` typed by hand cannot pass as a verdict.
- **First predictions only.** Each learner's prediction on the board is the *first* one
  committed for the exercise, across kernels: the earliest row that holds one (a commit row,
  written when the burst started, or a check that judged it). It is *late* when it was
  committed after a burst of the exercise had run without one (the row says so, or an earlier
  commit row without a prediction shows it after a kernel restart), and *edited* when a later
  row holds a different value. Late predictions are listed but left out of the room's typical
  prediction and of ``close_pct``: they were made after the numbers.
- **Measurements have a spread, not an answer.** Each learner's machine measured its own value;
  the board shows the room's median and its range (and, for choices such as a verdict, the most
  common value and its share), so the instructor sees at once whether the room agrees.
- **A prediction is close** when it lands within ``PREDICTION_BAND`` of the learner's own
  measurement (numbers) or names the same choice: the same band ``check_prediction`` uses. A
  learner whose check has not run yet has no measurement here, and is left out of the share.
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
    "first_predictions",
    "knob_effect",
    "latest_answers",
    "seat_devices",
    "since_resets",
]

ANSWER_COLUMNS = ("id", "created_at", "learner", "host", "exercise", "ok", "message",
                  "prediction", "measured", "kind", "late", "changed_to", "verified")  # fmt: skip
"""A row is a check's verdict (``kind`` "check"; rows from before the kinds read as checks) or a
prediction committed as its burst started (``kind`` "prediction", ``ok`` None). ``verified``:
the class store's server computed ``ok`` by the exercise's rule (False or unknown: the
learner's kernel's claim, which the board never counts as correct)."""
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
    frame["verified"] = frame["verified"].map(_true).astype(bool)
    frame["kind"] = frame["kind"].map(lambda k: "check" if _null(k) else str(k))
    return frame


def since_resets(answers: pd.DataFrame, resets: Mapping[str, int]) -> pd.DataFrame:
    """``answers`` without the rows of an exercise the instructor started over (``resets``:
    exercise -> the newest id at the reset): only the rows after it count."""
    if not resets or answers.empty:
        return answers
    cut = answers["exercise"].map(lambda e: resets.get(e, -1))
    return answers[answers["id"].astype(float) > cut.astype(float)].reset_index(drop=True)


def latest_answers(answers: pd.DataFrame) -> pd.DataFrame:
    """Each learner's newest check per exercise (by id: the store's order of arrival); commit
    rows (``kind`` "prediction") are not verdicts and are left out."""
    if answers.empty:
        return answers
    ordered = answers[answers["kind"] == "check"].sort_values("id", kind="stable")
    return ordered.drop_duplicates(["exercise", "learner"], keep="last").reset_index(drop=True)


FIRST_COLUMNS = ["exercise", "learner", "host", "prediction", "late", "edited", "changed_to",
                 "reset"]  # fmt: skip


def first_predictions(answers: pd.DataFrame) -> pd.DataFrame:
    """Each learner's first prediction per exercise (module docstring): ``exercise, learner,
    host, prediction`` (None: none committed), ``late``, ``edited``, ``changed_to`` (the
    newest value that differs from the first) and ``reset`` (the learner started the exercise
    over, ``workshop.reset_exercise``: only what came after the latest reset counts)."""
    rows = []
    for (exercise, learner), group in answers.groupby(["exercise", "learner"], sort=False):
        ordered = group.sort_values("id", kind="stable").to_dict("records")
        rows.append({"exercise": exercise, "learner": learner, **_first(ordered)})
    return pd.DataFrame(rows, columns=FIRST_COLUMNS)


def _first(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The first prediction of one learner's rows of one exercise (oldest first), counted from
    the latest reset row on: a reset starts the exercise over on the board as in the book."""
    resets = [i for i, row in enumerate(rows) if row["kind"] == "reset"]
    host, reset = rows[-1]["host"], bool(resets)
    rows = rows[resets[-1] + 1 :] if resets else rows
    at = next((i for i, row in enumerate(rows) if not _null(row["prediction"])), None)
    if at is None:
        return {"host": host, "prediction": None, "late": False, "edited": False,
                "changed_to": None, "reset": reset}  # fmt: skip
    first = rows[at]
    before = rows[:at]  # a burst that started with no prediction, before the first one
    late = _true(first["late"]) or any(row["kind"] == "prediction" for row in before)
    later = [value for row in rows[at:] for value in (row["prediction"], row["changed_to"])
             if not _null(value) and not _same(value, first["prediction"])]  # fmt: skip
    return {"host": first["host"], "prediction": _plain(first["prediction"]), "late": late,
            "edited": bool(later), "changed_to": _plain(later[-1]) if later else None,
            "reset": reset}  # fmt: skip


def seat_devices(bursts: pd.DataFrame) -> dict[str, str]:
    """Each learner's device, from their newest burst: the device's name (a GPU, a MIG slice
    or a CPU), else its kind ("cpu", "cuda:0"). Learners without a burst are not listed."""
    if bursts.empty or "learner" not in bursts.columns:
        return {}
    out: dict[str, str] = {}
    for row in bursts.sort_values("id", kind="stable").to_dict("records"):
        name = _clean(row.get("device_name")) or _clean(row.get("device"))
        if not _null(row.get("learner")) and name:
            out[str(row["learner"])] = str(name)
    return out


UNKNOWN_DEVICE = "device not known yet"
"""A seat's group on the board before it has run a burst."""


def exercise_summary(
    answers: pd.DataFrame, devices: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """One row per exercise, in the order exercises were first answered or predicted; with
    ``devices`` (learner -> device, :func:`seat_devices`), one row per exercise and device, so
    that a CPU seat's measurement never sits in a GPU seat's median (each machine measured its
    own right answer: a room's median over both means neither).

    Columns: ``exercise``, ``device`` (None when not grouped), ``answers`` (all checks run),
    ``learners`` (who ran a check), ``correct`` and ``correct_pct`` (latest verdicts that the
    server computed and found right: a verdict only the learner's kernel gave, or a row typed
    by hand, never counts), ``unverified`` (latest verdicts that say right but no server
    computed), ``measured`` (median of numbers, else the most common value),
    ``measured_min``/``measured_max`` and ``spread_pct`` (range over median, numbers only),
    ``predicted`` (learners with a first prediction), ``late`` and ``edited``
    (of those, committed after a burst had run / changed after it), ``prediction`` (median or
    most common of the first predictions made in time) and ``close_pct`` (share of those close
    to the learner's own measurement, where the learner has one). Unknown figures are None.
    """
    columns = ["exercise", "device", "answers", "learners", "correct", "correct_pct",
               "unverified", "measured",
               "measured_min", "measured_max", "spread_pct", "predicted", "late", "edited",
               "prediction", "close_pct"]  # fmt: skip
    latest = latest_answers(answers)
    firsts = first_predictions(answers)
    checks = answers[answers["kind"] == "check"]

    rows = []
    groups = pd.DataFrame({"exercise": answers["exercise"], "device": _seats(answers, devices)})
    for exercise, device in groups.drop_duplicates().itertuples(index=False):
        mine = latest[_group(latest, exercise, device, devices)]
        guesses = firsts[_group(firsts, exercise, device, devices)]
        right = int((mine["ok"] & mine["verified"]).sum())
        rows.append({"exercise": exercise, "device": device,
                     "answers": int(_group(checks, exercise, device, devices).sum()),
                     "learners": len(mine), "correct": right,
                     "correct_pct": _pct(right, len(mine)),
                     "unverified": int((mine["ok"] & ~mine["verified"]).sum()),
                     **_measured(list(mine["measured"])),
                     **_predictions(guesses, mine)})  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def _seats(frame: pd.DataFrame, devices: Mapping[str, str] | None) -> pd.Series:
    """Each row's seat device (None for every row when the board does not group by device)."""
    if devices is None:
        return pd.Series([None] * len(frame), index=frame.index, dtype=object)
    return frame["learner"].map(lambda who: devices.get(str(who), UNKNOWN_DEVICE))


def _group(
    frame: pd.DataFrame, exercise: Any, device: Any, devices: Mapping[str, str] | None
) -> pd.Series:
    """The rows of ``frame`` in one exercise and, when grouping, one device."""
    same = frame["exercise"] == exercise
    if devices is None:
        return same
    return same & _seats(frame, devices).eq(device)


def exercise_answers(answers: pd.DataFrame, exercise: str) -> pd.DataFrame:
    """The room on one exercise, one row per learner who checked or predicted (sorted by name):
    ``learner, host, ok`` (the latest verdict; None before a check), ``verified`` (the server
    computed that verdict; None before a check), ``prediction`` (the first),
    ``measured, off_pct`` (prediction over measurement, in percent: +20 is 20% above; None
    where either is not a number), ``close``, ``late``, ``edited``, ``changed_to`` and
    ``message`` (the latest verdict's, else the commit's line)."""
    columns = ["learner", "host", "ok", "verified", "prediction", "measured", "off_pct", "close",
               "late", "edited", "changed_to", "message"]  # fmt: skip
    latest = latest_answers(answers)
    latest = latest[latest["exercise"] == exercise].set_index("learner", drop=False)
    firsts = first_predictions(answers[answers["exercise"] == exercise])
    rows = []
    for guess in firsts.sort_values("learner", kind="stable").to_dict("records"):
        check = latest.loc[guess["learner"]].to_dict() if guess["learner"] in latest.index else {}
        measured = _clean(check.get("measured"))
        prediction = guess["prediction"]
        off = _off(prediction, measured)
        close = None if _null(prediction) or not check else _close(prediction, measured)
        message = check.get("message") or _last_message(answers, exercise, guess["learner"])
        rows.append({"learner": guess["learner"], "host": check.get("host", guess["host"]),
                     "ok": bool(check["ok"]) if check else None,
                     "verified": bool(check["verified"]) if check else None,
                     "prediction": prediction,
                     "measured": measured, "off_pct": None if off is None else round(100 * off, 1),
                     "close": close, "late": guess["late"], "edited": guess["edited"],
                     "changed_to": guess["changed_to"], "message": message})  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def _last_message(answers: pd.DataFrame, exercise: str, learner: str) -> Any:
    mine = answers[(answers["exercise"] == exercise) & (answers["learner"] == learner)]
    return mine.sort_values("id", kind="stable")["message"].iloc[-1] if len(mine) else None


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


def _predictions(firsts: pd.DataFrame, latest: pd.DataFrame) -> dict[str, Any]:
    """The first predictions of one exercise against each learner's latest measurement."""
    made = firsts[firsts["prediction"].map(lambda p: not _null(p))]
    in_time = made[~made["late"]]
    values = list(in_time["prediction"])
    numbers = [float(p) for p in values if _is_number(p)]
    typical = _median(numbers) if values and len(numbers) == len(values) else _most_common(values)
    measured = dict(zip(latest["learner"], latest["measured"], strict=True))
    pairs = [(p, measured[learner]) for p, learner in zip(in_time["prediction"],
             in_time["learner"], strict=True) if not _null(measured.get(learner))]  # fmt: skip
    close = sum(_close(p, m) for p, m in pairs)
    return {"predicted": len(made), "late": int(made["late"].sum()),
            "edited": int(made["edited"].sum()), "prediction": typical,
            "close_pct": _pct(close, len(pairs))}  # fmt: skip


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


def _true(value: Any) -> bool:
    """True only for a real true flag (None and NaN, "unknown" in older rows, are not)."""
    return not _null(value) and bool(value)


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
