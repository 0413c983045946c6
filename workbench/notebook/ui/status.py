"""The panel's words: a burst's phase with an honest estimate of the time left, and results.

A burst's window ends at the first step boundary where both ``window_s`` have passed and
``min_steps`` steps were measured, so slow steps stretch it past ``window_s``: an estimate
that only counts seconds is wrong exactly when the wait is longest. The estimate here comes
from the step times seen so far. In warm-up it uses the latest step (the first one carries
compilation and worker start-up, and would overstate the rest).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.engine.burst import BurstProgress


@dataclass
class BurstEstimate:
    """Follows one burst's progress events (one burst at a time runs in a process)."""

    warmup_steps: int
    min_steps: int
    _warmup_elapsed_s: float = 0.0
    _warmup_step_s: float | None = None

    def update(self, p: BurstProgress) -> None:
        """Call with every event of the setup and warm-up phases (they are few)."""
        if p.phase == "setup":
            self._warmup_elapsed_s, self._warmup_step_s = 0.0, None
        elif p.phase == "warmup":
            self._warmup_step_s = max(0.0, p.elapsed_s - self._warmup_elapsed_s)
            self._warmup_elapsed_s = p.elapsed_s

    def left_s(self, p: BurstProgress) -> float | None:
        """Seconds until the burst ends, or None before a step has been timed."""
        if p.phase == "warmup" and self._warmup_step_s is not None:
            steps_left = max(0, self.warmup_steps - p.steps)
            return steps_left * self._warmup_step_s + self._window_s(p, self._warmup_step_s)
        if p.phase == "measuring" and p.steps > 0:
            step_s = p.elapsed_s / p.steps
            return max(0.0, p.window_s - p.elapsed_s, (self.min_steps - p.steps) * step_s)
        return None

    def fraction(self, p: BurstProgress) -> float:
        """How far the measured window is, for the progress bar (0 before it starts)."""
        left = self.left_s(p) if p.phase == "measuring" else None
        if left is None:
            return 1.0 if p.phase == "done" else 0.0
        total = p.elapsed_s + left
        return min(1.0, p.elapsed_s / total) if total > 0 else 1.0

    def text(self, p: BurstProgress) -> str:
        if p.phase == "setup":
            return "setting up: dataset, loader, model ... (time left: after the first step)"
        if p.phase == "warmup":
            planned = max(self.warmup_steps, p.steps)
            head = f"warm-up: step {p.steps} of {planned} ({p.elapsed_s:.1f} s)"
            return f"{head}; {self._left_words(p)}"
        if p.phase == "measuring":
            head = f"measuring: {p.elapsed_s:.1f} s, {p.steps} step{'s' * (p.steps != 1)}"
            return f"{head}; {self._left_words(p)}"
        return "finishing ..."

    def _window_s(self, p: BurstProgress, step_s: float) -> float:
        return max(p.window_s, self.min_steps * step_s)

    def _stretched(self, p: BurstProgress) -> bool:
        step_s = p.elapsed_s / p.steps if p.phase == "measuring" else self._warmup_step_s
        return step_s is not None and self.min_steps * step_s > p.window_s

    def _left_words(self, p: BurstProgress) -> str:
        left = self.left_s(p)
        if left is None:
            return "time left unknown"
        if left < 0.05:
            return "ending at the next step"
        words = f"about {left:.1f} s left"
        if self._stretched(p):
            return f"{words} (min_steps={self.min_steps} outlasts the {p.window_s:g} s window)"
        return f"{words} (a {p.window_s:g} s window)"


def knobs_summary(knobs: Knobs) -> str:
    """batch_size and num_workers always, then every knob that is not at its default."""
    shown = {"batch_size": knobs.batch_size, "num_workers": knobs.num_workers}
    shown |= knobs.changes()
    return ", ".join(f"{k}={v}" for k, v in shown.items())


def result_status(r: BurstResult) -> str:
    if r.ok:
        return f"done: burst #{r.id}, {r.samples_per_s:,.1f} samples/s"
    return f"{r.status}: burst #{r.id}" + (f", {r.error}" if r.error else "")


def result_html(r: BurstResult) -> str:
    knobs = knobs_summary(r.knobs)
    if not r.ok:
        return html.escape(f"burst #{r.id}: {knobs} -> {r.status}") + ambient_html(r.ambient_notes)
    tail = f"{r.samples_per_s:,.1f} samples/s, step {r.step_ms_p50:.1f} ms, "
    tail += f"data wait {r.data_wait_pct:.0f}%, peak {r.peak_mem_mib or 0:,.0f} MiB"
    return (
        html.escape(f"burst #{r.id}: {knobs} -> {tail}")
        + nodes_html(r.nodes)
        + ambient_html(r.ambient_notes)
    )


def nodes_html(nodes: list[dict[str, Any]]) -> str:
    """A row per node under a multi-node burst's line, the slowest node marked: one slow node
    holds every rank back at each all-reduce, and the total alone does not show which."""
    if len(nodes) < 2:
        return ""
    steps = [n.get("step_ms_p50") for n in nodes if n.get("step_ms_p50") is not None]
    slowest = max(steps) if steps else None
    cells = ["node", "ranks", "samples/s", "step p50 ms", "data wait %", "peak MiB"]
    head = "".join(f"<th style='{_CELL}'>{c}</th>" for c in cells)
    body = "".join(_node_row(n, n.get("step_ms_p50") == slowest) for n in nodes)
    return (f"<table class='wb-nodes' style='border-collapse:collapse;font-size:90%'>"
            f"<tr>{head}</tr>{body}</table>")  # fmt: skip


def _node_row(node: dict[str, Any], slowest: bool) -> str:
    def num(key: str, fmt: str) -> str:
        value = node.get(key)
        return "-" if value is None else format(value, fmt)

    name = html.escape(str(node.get("node", "?"))) + (" &#8592; slowest" if slowest else "")
    ranks = html.escape(",".join(str(r) for r in node.get("ranks", [])))
    cells = [name, ranks, num("samples_per_s", ",.1f"), num("step_ms_p50", ".1f"),
             num("data_wait_pct", ".0f"), num("peak_mem_mib", ",.0f")]  # fmt: skip
    return "<tr>" + "".join(f"<td style='{_CELL}'>{c}</td>" for c in cells) + "</tr>"


_CELL = "padding:1px 8px;text-align:right;border-bottom:1px solid #ddd"


def ambient_html(notes: list[str]) -> str:
    """The kernel's environment variables that shaped the burst without being knobs
    (``BurstResult.ambient_notes``): shown under the result, never left out of it."""
    if not notes:
        return ""
    items = "".join(f"<li>{html.escape(note)}</li>" for note in notes)
    return f'<div style="color:#7a4b00"><b>environment, not knobs:</b><ul>{items}</ul></div>'


def suspect_html(what: str, checks: list[str]) -> str:
    """A loud box when a measurement's own self-checks failed, naming each one; empty when
    all passed. A suspect number looks like any other in the charts, so the warning must not
    be quiet: it stands on its own line, below the message, until a newer measurement.
    ``what``: "burst #12", "the comm benchmark"."""
    if not checks:
        return ""
    items = "".join(f"<li>{html.escape(str(check))}</li>" for check in checks)
    head = f"&#9888; do not trust {html.escape(what)}: {len(checks)} self-check"
    head += "s failed" if len(checks) != 1 else " failed"
    return (f'<div style="{_SUSPECT_STYLE}"><b>{head}</b>'
            f'<ul style="margin:2px 0 0 0">{items}</ul></div>')  # fmt: skip


_SUSPECT_STYLE = ("color:#7a0000;background:#fff3cd;border-left:5px solid #b00020;"
                  "padding:4px 8px;margin:2px 0")  # fmt: skip


def comm_label(res: Any) -> str:
    settings = ", ".join(f"{k}={v}" for k, v in res.nccl.items()) or "defaults"
    return f"{res.world_size} rank(s), {settings}"


def comm_summary(res: Any) -> str:
    if res.world_size == 1:
        return "comm: one rank, so nothing crosses a link (busbw 0); set world_size to 2+"
    scopes = sorted({r.get("scope", "intra") for r in res.rows})
    parts = []
    for scope in scopes:  # within a node and across nodes: which link limits
        rows = [r for r in res.rows if r.get("scope", "intra") == scope]
        best = max(rows, key=lambda r: r["busbw_gbps"])
        where = f" {scope}-node" if len(scopes) > 1 else ""
        parts.append(f"peak{where} busbw {best['busbw_gbps']:.2f} GB/s at "
                     f"{best['size_bytes']:,} bytes")  # fmt: skip
    return f"comm: {'; '.join(parts)} over {res.world_size} ranks ({res.backend})"
