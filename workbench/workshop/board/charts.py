"""The class board's charts: pure functions from ``figures``' tables to Altair.

No I/O and no widgets (the board in ``widget.py`` shows them in ``PanelChart``s, the
panel's light ``alt.JupyterChart``, and replaces them on refresh). An empty table gives a
chart that says what fills it, never an error.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from workbench.notebook.plots import HEIGHT, WIDTH, waiting

__all__ = ["answers", "best", "correct", "effect", "waiting_chart"]

_BLUE, _ORANGE, _GREEN, _RED, _GREY = "#4c78a8", "#f58518", "#54a24b", "#e45756", "#8c8c8c"


_WAITING = {
    "correct": ("Share correct per exercise", "no answers yet: each checked exercise lands here"),
    "answers": ("One exercise, per learner", "pick an exercise once answers arrive"),
    "best": ("Best config per learner", "no successful burst yet"),
    "effect": ("One knob across machines", "no machine has measured both values yet"),
}


def waiting_chart(name: str) -> alt.LayerChart:
    """The empty chart of one view (``correct``, ``answers``, ``best``, ``effect``)."""
    return waiting(*_WAITING[name])


def _data(frame: pd.DataFrame, columns: list[str]) -> alt.InlineData:
    """Plain JSON rows (None for NaN): a few rows, so no column-wise sanitizing is needed."""
    rows = frame[columns].astype(object).where(frame[columns].notna(), None)
    return alt.InlineData(values=rows.to_dict("records"))


def correct(summary: pd.DataFrame) -> alt.Chart | alt.LayerChart:
    """Share of the room whose latest answer the server found right, one bar per exercise;
    stacked after it in grey, the share whose latest answer claims to be right with no
    server's verdict (``unverified``): shown, never counted as correct."""
    title = "Share correct per exercise"
    if summary.empty:
        return waiting(title, "no answers yet: each checked exercise lands here")
    unverified = summary["unverified"] if "unverified" in summary else 0 * summary["learners"]
    data = summary.assign(
        unverified=unverified,
        wrong=summary["learners"] - summary["correct"] - unverified,
        unverified_pct=[_share(n, of) for n, of in zip(unverified, summary["learners"],
                                                        strict=True)],
        measured=summary["measured"].map(_label),
    )  # fmt: skip
    columns = ["exercise", "correct_pct", "unverified_pct", "learners", "correct", "unverified",
               "wrong", "measured"]  # fmt: skip
    if "device" in data.columns:  # one bar per exercise and device: the seats grouped
        data = data.assign(exercise=[e if d is None or d != d else f"{e} ({d})"
                                     for e, d in zip(data["exercise"], data["device"],
                                                     strict=True)])  # fmt: skip
    legend = alt.Legend(labelExpr="datum.label == 'correct_pct' ? 'correct (server)'"
                                  " : 'claims correct, unverified'")  # fmt: skip
    return (
        alt.Chart(_data(data, columns), title=alt.TitleParams(title, anchor="start"))
        .transform_fold(["correct_pct", "unverified_pct"], as_=["verdict", "pct"])
        .mark_bar()
        .encode(
            x=alt.X("pct:Q", title="% of learners correct", stack="zero",
                    scale=alt.Scale(domain=[0, 100])),
            y=alt.Y("exercise:N", title=None, sort=None),
            color=alt.Color("verdict:N", title=None, legend=legend,
                            scale=alt.Scale(domain=["correct_pct", "unverified_pct"],
                                            range=[_GREEN, _GREY])),
            tooltip=["exercise:N", alt.Tooltip("correct_pct:Q", title="% correct (server)"),
                     alt.Tooltip("unverified:Q", title="claims correct, unverified"),
                     "learners:Q", "correct:Q", "wrong:Q", "measured:N"],
        )
        .properties(width=WIDTH, height=max(60, 24 * len(data)))
    )  # fmt: skip


def _share(part: Any, whole: Any) -> float | None:
    """``part`` of ``whole`` in percent (None for no one)."""
    return round(100.0 * float(part) / float(whole), 1) if whole else None


def answers(rows: pd.DataFrame, exercise: str) -> alt.Chart | alt.LayerChart:
    """One exercise across the room: each learner's measurement (filled) and first prediction
    (hollow; grey when it was committed late, after a burst had run, and its tooltip says when
    it was changed after the burst). Numbers on a value axis; choices (a verdict, a knob value)
    as counts."""
    title = f"{exercise}: measured and predicted, per learner"
    if rows.empty:
        return waiting(title, "no answers to this exercise yet")
    long = _long(rows)
    if long.empty:
        return waiting(title, "no measurement or prediction to show")
    if pd.api.types.is_numeric_dtype(long["value"]):
        return _answer_points(long, title)
    return _answer_counts(long, title)


_KINDS = ["measured", "prediction", "late prediction"]
_KIND_COLOURS = [_BLUE, _ORANGE, _GREY]


def _long(rows: pd.DataFrame) -> pd.DataFrame:
    records = rows.to_dict("records")
    rows = rows.assign(note=[_note(r) for r in records], verdict=[_verdict(r) for r in records])
    parts = []
    for kind in ("measured", "prediction"):
        part = rows[["learner", "host", "verdict", "note", kind]].rename(columns={kind: "value"})
        part = part.assign(kind=kind).dropna(subset=["value"])
        if kind == "prediction" and "late" in rows.columns:
            late = rows.loc[part.index, "late"].map(_flag)
            part.loc[late, "kind"] = "late prediction"
        parts.append(part)
    long = pd.concat(parts, ignore_index=True)
    numbers = pd.to_numeric(long["value"], errors="coerce")
    if numbers.notna().all():
        return long.assign(value=numbers)
    return long.assign(value=long["value"].map(_label))


def _note(row: dict[str, Any]) -> str:
    """What the board marks on a learner's prediction: late, changed after the burst."""
    notes = []
    if _flag(row.get("late")):
        notes.append("committed after a burst had run")
    if _flag(row.get("edited")):
        notes.append(f"changed after the burst to {_label(row.get('changed_to'))}")
    return "; ".join(notes) or "first prediction, before the burst"


def _verdict(row: dict[str, Any]) -> str:
    """A learner's latest verdict as the board reads it: the server's, or an unverified claim
    (the learner's kernel's, or typed by hand: never counted as correct)."""
    if row.get("ok") is None or (isinstance(row.get("ok"), float) and pd.isna(row["ok"])):
        return "no check yet"
    said = "correct" if _flag(row["ok"]) else "not yet"
    return f"{said} (server)" if _flag(row.get("verified")) else f"{said}, unverified"


def _flag(value: Any) -> bool:
    """A true flag (numpy's too); None and NaN (not known) are not."""
    return value is not None and not (isinstance(value, float) and pd.isna(value)) and bool(value)


def _answer_points(long: pd.DataFrame, title: str) -> alt.Chart:
    columns = ["learner", "host", "verdict", "value", "kind", "note"]
    return (
        alt.Chart(_data(long, columns), title=alt.TitleParams(title, anchor="start"))
        .mark_point(size=90, strokeWidth=2)
        .encode(
            x=alt.X("learner:N", title=None, sort="ascending"),
            y=alt.Y("value:Q", title="value"),
            color=alt.Color("kind:N", scale=alt.Scale(domain=_KINDS, range=_KIND_COLOURS),
                            title=None),
            fill=alt.condition(alt.datum.kind == "measured", alt.value(_BLUE),
                               alt.value("transparent")),
            # an unverified verdict is marked on the chart, not only in its tooltip
            shape=alt.condition(alt.expr.indexof(alt.datum.verdict, "unverified") >= 0,
                                alt.value("triangle-up"), alt.value("circle")),
            tooltip=["learner:N", "host:N", "kind:N", "value:Q", "verdict:N", "note:N"],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )  # fmt: skip


def _answer_counts(long: pd.DataFrame, title: str) -> alt.Chart:
    counts = long.groupby(["value", "kind"], as_index=False).size().rename(
        columns={"size": "learners"})  # fmt: skip
    return (
        alt.Chart(_data(counts, ["value", "kind", "learners"]),
                  title=alt.TitleParams(title, anchor="start"))
        .mark_bar()
        .encode(
            x=alt.X("value:N", title=None),
            xOffset="kind:N",
            y=alt.Y("learners:Q", title="learners", axis=alt.Axis(tickMinStep=1)),
            color=alt.Color("kind:N", scale=alt.Scale(domain=_KINDS, range=_KIND_COLOURS),
                            title=None),
            tooltip=["value:N", "kind:N", "learners:Q"],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )  # fmt: skip


def best(table: pd.DataFrame, workload: str | None = None) -> alt.Chart | alt.LayerChart:
    """Each learner's best samples/s on one workload (the one most learners ran by default)."""
    if table.empty:
        return waiting("Best config per learner", "no successful burst yet")
    workload = workload or str(table["workload"].value_counts().index[0])
    chosen = table[table["workload"] == workload]
    title = f"Best config per learner: {workload}"
    if chosen.empty:
        return waiting(title, f"no successful {workload} burst yet")
    columns = ["learner", "host", "device_name", "samples_per_s", "knobs", "id"]
    return (
        alt.Chart(_data(chosen, columns), title=alt.TitleParams(title, anchor="start"))
        .mark_bar(color=_BLUE)
        .encode(
            x=alt.X("samples_per_s:Q", title="samples/s"),
            y=alt.Y("learner:N", title=None, sort="-x"),
            tooltip=["learner:N", "host:N", "device_name:N",
                     alt.Tooltip("samples_per_s:Q", format=",.1f"), "knobs:N",
                     alt.Tooltip("id:Q", title="burst id")],
        )
        .properties(width=WIDTH, height=max(60, 24 * len(chosen)))
    )  # fmt: skip


def effect(effects: pd.DataFrame, knob: str, new: Any, old: Any) -> alt.Chart | alt.LayerChart:
    """``knob=new`` over ``knob=old`` per machine, on a log axis with a rule at 1 (no change):
    right of it, ``new`` was faster there."""
    title = f"{knob}={new} over {knob}={old}, per machine"
    if effects.empty:
        return waiting(title, f"no machine has measured both {new} and {old} yet")
    data = effects.assign(machine=effects["learner"].astype(str) + " @ " + effects["host"])
    columns = ["machine", "learner", "host", "device_name", "workload", "held", "ratio",
               "new_per_s", "old_per_s"]  # fmt: skip
    points = (
        alt.Chart(_data(data, columns))
        .mark_point(size=100, filled=True)
        .encode(
            x=alt.X("ratio:Q", title=f"samples/s ratio ({new} / {old})",
                    scale=alt.Scale(type="log")),
            y=alt.Y("machine:N", title=None, sort="-x"),
            color=alt.condition(alt.datum.ratio > 1, alt.value(_GREEN), alt.value(_RED)),
            tooltip=["machine:N", "device_name:N", "workload:N", "held:N",
                     alt.Tooltip("ratio:Q", format=".2f"),
                     alt.Tooltip("new_per_s:Q", format=",.1f", title=f"{new} samples/s"),
                     alt.Tooltip("old_per_s:Q", format=",.1f", title=f"{old} samples/s")],
        )
    )  # fmt: skip
    one = alt.Chart(alt.InlineData(values=[{"ratio": 1.0}])).mark_rule(color=_GREY).encode(
        x="ratio:Q")  # fmt: skip
    height = max(60, 24 * data["machine"].nunique())
    return alt.layer(one, points, title=alt.TitleParams(title, anchor="start")).properties(
        width=WIDTH, height=height)  # fmt: skip


def _label(value: Any) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.3g}"
    return str(value)
