"""Loss against step for the current config and the reference, from a parity result
(``workbench.analysis.parity``): the panel draws it, a lesson cell calls it.

Built by pure functions (``loss_frame`` -> DataFrame -> Altair chart), tested on
``chart.to_dict()``, as the other charts are (``workbench.notebook.plots``)."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

SERIES = ("reference", "reference, again", "current")


def loss_frame(result: Any) -> pd.DataFrame:
    """One row per step and run: run, step, samples seen, loss. The reference's second run
    (its noise) is drawn too; a candidate with another batch per step is drawn against
    samples seen (each run's batch x accumulation per step)."""
    rows = []
    runs = (result.reference_losses, result.reference2_losses, result.candidate_losses)
    knobs = (result.reference, result.reference, result.candidate)
    for name, losses, k in zip(SERIES, runs, knobs, strict=True):
        per_step = k.batch_size * k.grad_accum
        rows += [{"run": name, "step": i + 1, "samples_seen": per_step * (i + 1), "loss": loss}
                 for i, loss in enumerate(losses)]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["run", "step", "samples_seen", "loss"])
    return frame[frame["loss"].notna()]


def loss_overlay(result: Any) -> alt.Chart:
    """The loss curves of ``result`` on one chart, the verdict in the title."""
    frame = loss_frame(result)
    by = "step" if result.compared_on == "step" else "samples_seen"
    title = alt.TitleParams(
        f"loss parity: {result.verdict}",
        subtitle=[
            f"largest relative deviation {_sci(result.max_rel_dev)}, band "
            f"{_sci(result.band)}; {result.steps} steps"
        ],
    )
    return (
        alt.Chart(frame, title=title)
        .mark_line(point=True)
        .encode(
            x=alt.X(f"{by}:Q", title="step" if by == "step" else "samples seen"),
            y=alt.Y("loss:Q", scale=alt.Scale(zero=False), title="training loss"),
            color=alt.Color("run:N", sort=list(SERIES), title=None),
            strokeDash=alt.StrokeDash("run:N", sort=list(SERIES), legend=None),
            tooltip=["run", "step", alt.Tooltip("loss:Q", format=".5f")],
        )
        .properties(width=420, height=220)
    )


def _sci(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2e}"


__all__ = ["loss_frame", "loss_overlay"]
