"""Rows of the store: burst and answer records turned into columns and back, and into frames.

Shared by every store (SQLite and PostgreSQL), so that a burst reads back the same whichever
one kept it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from workbench.core.jsonsafe import jsonable
from workbench.core.knobs import current_values, warn_renamed
from workbench.core.results import RENAMED, BurstResult, utc_now

if TYPE_CHECKING:
    import pandas

__all__ = ["ANSWER_KINDS", "answer_row", "burst_row", "decode_answer", "decode_burst",
           "records_frame", "with_current_knobs"]  # fmt: skip

_REQUIRED = ("workload", "status")
_FRONT = ("id", "created_at", "workload", "device", "status", "learner", "host")
_ANSWER_FIELDS = ("exercise", "ok", "message", "prediction", "measured", "kind", "late",
                  "changed_to")  # fmt: skip
ANSWER_KINDS = ("check", "prediction", "reset")
"""What an answer row is: a check's verdict, a prediction committed as a burst started
(``workshop.commit_prediction``), or an exercise started over (``workshop.reset_exercise``).
Rows written before the kinds existed read as "check"."""


def burst_row(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """Validate a burst record; return ``(created_at, workload, device, status, samples_per_s,
    peak_mem_mib, record_json)``."""
    if not isinstance(record, Mapping):
        raise TypeError(f"a burst record must be a dict, got {type(record).__name__}")
    for key in _REQUIRED:
        if not isinstance(record.get(key), str):
            raise ValueError(f"burst record has no {key!r} (a string is required): {record!r}")
    clean = jsonable(dict(record), "record")
    created = clean.get("created_at")  # the result's own clock, set once when it was made
    return (
        created if isinstance(created, str) and created else utc_now(),
        clean["workload"],
        clean.get("device") if isinstance(clean.get("device"), str) else None,
        clean["status"],
        _number(clean.get("samples_per_s")),
        _number(clean.get("peak_mem_mib")),
        dump(clean),
    )


def answer_row(answer: Mapping[str, Any]) -> tuple[Any, ...]:
    """Validate an exercise answer; return ``(exercise, ok, message, kind, late,
    prediction_json, measured_json, changed_to_json)``."""
    if not isinstance(answer, Mapping):
        raise TypeError(f"an answer must be a dict, got {type(answer).__name__}")
    unknown = sorted(set(answer) - {*_ANSWER_FIELDS, "learner", "host", "id", "created_at"})
    if unknown:
        raise ValueError(f"answer has unknown keys {unknown}; allowed: {list(_ANSWER_FIELDS)}")
    exercise = answer.get("exercise")
    if not isinstance(exercise, str) or not exercise:
        raise ValueError(f"answer has no 'exercise' (a non-empty string is required): {answer!r}")
    ok = answer.get("ok")
    if ok is not None and not isinstance(ok, bool):
        raise ValueError(f"answer 'ok' must be True, False or None, got {ok!r}")
    message = answer.get("message")
    kind = answer.get("kind") or "check"
    if kind not in ANSWER_KINDS:
        raise ValueError(f"answer 'kind' must be one of {list(ANSWER_KINDS)}, got {kind!r}")
    late = answer.get("late")
    if late is not None and not isinstance(late, bool):
        raise ValueError(f"answer 'late' must be True, False or None, got {late!r}")
    return (
        exercise,
        ok,
        None if message is None else str(message),
        kind,
        late,
        dump(jsonable(answer.get("prediction"), "prediction")),
        dump(jsonable(answer.get("measured"), "measured")),
        dump(jsonable(answer.get("changed_to"), "changed_to")),
    )


def dump(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def decode_burst(
    row_id: int, created_at: str, learner: str | None, host: str | None, text: str
) -> dict[str, Any]:
    """A stored burst as appended, plus its row's ``id, created_at, learner, host``."""
    record = _current_names(json.loads(text))
    return {**record, "id": row_id, "created_at": created_at, "learner": learner, "host": host}


def with_current_knobs(records: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """``records`` with old knob values read under their current names (``precision=fp32``
    reads as ``fp32-strict``, what it measured), with one warning for the whole read, not one
    per row. The rows on disk stay as they were written."""
    notes: list[str] = []
    for record in records:
        knobs = record.get("knobs")
        if isinstance(knobs, Mapping):
            record["knobs"], found = current_values(knobs)
            notes += [note for note in found if note not in notes]
    warn_renamed(notes, f"history {source}")
    return records


def decode_answer(row: tuple[Any, ...]) -> dict[str, Any]:
    """An answer row (``id, created_at, learner, host, exercise, ok, message, kind, late,
    prediction, measured, changed_to``, then ``verified`` where the store has it) as a dict. A
    row from before the kinds (null ``kind``) is a check's; its ``late`` and ``changed_to`` are
    unknown (None). ``verified``: None where no server judged the verdict."""
    (row_id, created_at, learner, host, exercise, ok, message, kind, late, prediction, measured,
     changed_to) = row[:12]  # fmt: skip
    verified = row[12] if len(row) > 12 else None
    return {
        "id": row_id,
        "created_at": created_at,
        "learner": learner,
        "host": host,
        "exercise": exercise,
        "ok": None if ok is None else bool(ok),
        "message": message,
        "prediction": _loads(prediction),
        "measured": _loads(measured),
        "kind": kind or "check",
        "late": None if late is None else bool(late),
        "changed_to": _loads(changed_to),
        "verified": None if verified is None else bool(verified),
    }


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def records_frame(records: Iterable[Mapping[str, Any]]) -> pandas.DataFrame:
    """Burst dicts (stored records or ``BurstResult.to_dict()``) as a frame shaped like ``frame()``.

    Sweeps and tunes return their bursts this way, so the same plots read them.
    """
    # pandas (~0.5 s) only for frames: workbench history --json stays light
    import pandas as pd

    rows = [_flatten(record) for record in records]
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=_burst_columns())
    frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True, format="ISO8601")
    return frame


def _burst_columns() -> list[str]:
    """The columns of a frame of bursts, for a frame with none (an empty history, a sweep
    cancelled before its first burst): code that selects columns works on it unchanged.

    Those of a default BurstResult's row, so a result field or knob added later is a column
    here too; NCCL variable columns exist only where a burst set them.
    """
    return list(_flatten(BurstResult().to_dict()))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _current_names(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with renamed fields under their current names, in the same place.

    Where a row has both names (written by a version in between), the current one wins.
    """
    renamed: dict[str, Any] = {}
    for key, value in record.items():
        new = RENAMED.get(key)
        if new is None:
            renamed[key] = value
        elif new not in record:
            renamed[new] = value
    return renamed


def _flatten(record: Mapping[str, Any]) -> dict[str, Any]:
    """One frame row: the front columns, then knobs and NCCL variables, then the rest."""
    record = _current_names(record)  # also for dicts that never went through the store
    head = {column: record.get(column) for column in _FRONT}
    knobs = record.get("knobs")
    flat: dict[str, Any] = {}
    for name, value in (knobs if isinstance(knobs, Mapping) else {}).items():
        if name == "nccl" and isinstance(value, Mapping):
            flat.update(value)
        else:
            flat[f"knob_{name}" if name in record else name] = value
    rest = {key: value for key, value in record.items() if key not in head}
    return {**head, **flat, **rest}
