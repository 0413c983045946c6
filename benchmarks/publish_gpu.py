"""Every published GPU figure, written from the kept runs: README.md, docs/, the lessons and
the instructor guide's GPU minutes.

    python benchmarks/publish_gpu.py           # rewrite the generated blocks and the reference file
    python benchmarks/publish_gpu.py --check   # exit 1, naming each difference, if any is stale

A GPU figure is published only from a kept run (``benchmarks/results/gpu-*.json``, written by
the GPU session as it measured: ``gpu_record``). Markdown tables live between
``<!-- gpu-table: NAME -->`` and ``<!-- /gpu-table -->``; each row is taken from the newest
kept run that holds its burst, and the block names each run it used with the command that
produced it, or says that the command was not recorded. ``notebooks/reference/gpu_runs.json``
(the lessons' own GPU figures, beside the published ones) is generated whole, each entry with
its run file and that run's command. The guide's GPU minutes per lesson (``notebooks/README.md``,
block ``lessons``) come from the lessons steps' records, each lesson from the newest kept run
that ran it, or say that they wait for it. ``tests/test_publish_gpu.py`` fails when a
published figure differs from its source.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_fidelity
import gpu_record
import gpu_transformer

if TYPE_CHECKING:
    from workbench.workshop.transformer_lesson import Anchor

ROOT = gpu_record.ROOT
REFERENCE = ROOT / "notebooks" / "reference" / "gpu_runs.json"
BLOCK = re.compile(r"(<!-- gpu-table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /gpu-table -->)",
                   re.S)  # fmt: skip
Where = tuple[tuple[str, str], ...]
"""(step, burst label) alternatives: a new run names a burst one way, an older one another."""

PRECISION = "precisions default/fp32-strict/tf32/bf16/fp16"
OLD_PRECISION = "precisions fp32/tf32/bf16/fp16"
"""How runs before issue 28 named the row; their "fp32" burst is fp32-strict (IEEE everywhere)."""


def _precision(p: str) -> Where:
    old = "fp32" if p == "fp32-strict" else p
    return (("check", f"{PRECISION}: {p}"), ("check", f"{OLD_PRECISION}: {old}"))


JPEG_8: Where = (("loader", "jpeg, 8 workers"), ("check", "NVML, real data: real data, 8 workers"))
COMPILE_DEFAULT: Where = gpu_transformer.TINY_GPT_COMPILE["default"]
COMPILE_RO: Where = gpu_transformer.TINY_GPT_COMPILE["reduce-overhead"]


@dataclass(frozen=True)
class Row:
    text: str
    where: Where


@dataclass(frozen=True)
class Table:
    name: str
    first: str  # the first column's header
    columns: tuple[tuple[str, str], ...]  # (header, burst field)
    rows: tuple[Row, ...]
    published: tuple[str, ...] = ()
    """Reference entries (``notebooks/reference``) shown under the kept rows, for scale: each
    figure in the column of the table's first field, with its source and hardware."""


FORMATS: dict[str, str] = {"samples_per_s": "{:,.0f}", "tokens_per_s": "{:,.0f}",
                           "step_ms_p50": "{:.1f}",
                           "step_ms_mean": "{:.1f}", "peak_mem_mib": "{:,.0f}",
                           "mfu_pct": "{:.1f}", "compile_s": "{:.1f}",
                           "gpu_util_pct": "{:.0f}", "sm_clock_mhz": "{:,.0f}"}  # fmt: skip

TABLES: tuple[Table, ...] = (
    Table("readme", "burst (resnet50, batch 128, channels_last)",
          (("samples/s", "samples_per_s"), ("step ms p50", "step_ms_p50"),
           ("step ms mean", "step_ms_mean"), ("peak MiB", "peak_mem_mib")),
          (Row("fp32-strict (IEEE everywhere, cuDNN too)", _precision("fp32-strict")),
           Row("tf32", _precision("tf32")), Row("bf16", _precision("bf16")),
           Row("fp16", _precision("fp16")),
           Row("bf16 on JPEGs, 8 decode workers", JPEG_8)),
          published=("mlperf-train-v3.0-r50-8xh100", "mlperf-train-v4.0-r50-8xh200")),
    Table("readme-compile", "gpt, batch 32, TF32",
          (("samples/s", "samples_per_s"), ("compile s", "compile_s")),
          (Row("compile=default", COMPILE_DEFAULT), Row("compile=reduce-overhead", COMPILE_RO))),
)  # fmt: skip


# -- finding figures ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    path: Path
    run: dict[str, Any]
    burst: dict[str, Any]


def load_runs(results_dir: Path = gpu_record.RESULTS) -> list[tuple[Path, dict[str, Any]]]:
    """Kept runs, newest first."""
    return gpu_record.load_kept(results_dir)


def find(runs: Sequence[tuple[Path, dict[str, Any]]], where: Where) -> Found | None:
    """The burst in the newest run that holds one of ``where``."""
    for path, run in runs:
        for step, label in where:
            try:
                return Found(path, run, gpu_record.find_burst(run, step, label))
            except KeyError:
                continue
    return None


def provenance(path: Path, run: dict[str, Any]) -> str:
    """Where a figure comes from, in one line: the file, and the command that wrote it or
    why there is none."""
    name = f"`{kept_name(path)}`"
    if not run.get("recorded"):
        note = run.get("command_note") or "unrecorded: the command was not kept"
        return f"{name}: {note}; measured on {run['device']}"
    commit = (run.get("git_commit") or "unknown")[:7]
    commit += " (+ changes)" if run.get("git_dirty") else ""
    versions = (run.get("environment") or {}).get("versions") or {}
    return (
        f"{name}: `{run['command']}`, commit {commit}, {run['device']}, "
        f"torch {versions.get('torch')}, {run['started_at'][:10]}"
    )


def short_epochs(burst: dict[str, Any]) -> bool:
    """The burst's window held epoch restarts: its ``short_epochs`` says it measured them (or
    an unrecorded run's note says so)."""
    measured = (burst.get("short_epochs") or {}).get("handling") == "measured"
    return measured or bool(burst.get("short_epochs_note"))


def kept_name(path: Path) -> str:
    """A kept run as the repository names it (kept runs live in benchmarks/results/)."""
    return f"benchmarks/results/{path.name}"


def cell(value: Any, field: str) -> str:
    if value is None:
        return "-"
    return FORMATS.get(field, "{}").format(value)


# -- markdown ----------------------------------------------------------------------------------


def render(table: Table, runs: Sequence[tuple[Path, dict[str, Any]]]) -> str:
    """The block's body: the table, each row marked with its source, then the sources."""
    sources: list[Path] = []
    by_path: dict[Path, dict[str, Any]] = {}
    head = [table.first, *(h for h, _ in table.columns), "run"]
    lines = ["| " + " | ".join(head) + " |",
             "| --- | " + " | ".join("---:" for _ in table.columns) + " | --- |"]  # fmt: skip
    for row in table.rows:
        found = find(runs, row.where)
        if found is None:
            values, mark = ["-" for _ in table.columns], "not measured yet"
        else:
            if found.path not in sources:
                sources.append(found.path)
                by_path[found.path] = found.run
            values = [cell(found.burst.get(f), f) for _, f in table.columns]
            mark = f"[{sources.index(found.path) + 1}]"
        text = row.text + (" (short epochs: loader restarts in the window)"
                           if found and short_epochs(found.burst) else "")  # fmt: skip
        lines.append("| " + " | ".join([text, *values, mark]) + " |")
    cited = _published_rows(table, lines)
    lines.append("")
    lines += [f"[{i + 1}] {provenance(p, by_path[p])}" for i, p in enumerate(sources)]
    lines += cited
    return "\n".join(lines) + "\n"


def _published_rows(table: Table, lines: list[str]) -> list[str]:
    """The table's published entries as rows under the kept ones (their figure in the column
    of the table's first field, the rest "-"), and their citation lines ([a], [b], ...)."""
    from workbench.workshop import reference

    refs = reference.load(gpu_transformer.REFERENCE) if table.published else []
    cited = []
    for i, ref_id in enumerate(table.published):
        r = reference.find(ref_id, refs)
        mark = chr(ord("a") + i)
        values = [f"{r.value:,.0f}" if n == 0 else "-" for n in range(len(table.columns))]
        lines.append(f"| published, for scale: {r.what}; {r.hardware} | "
                     + " | ".join(values) + f" | [{mark}] |")  # fmt: skip
        cited.append(f"[{mark}] published, not measured here ({r.units}; {ref_id}): {r.cited()}")
    return cited


def runs_table(path: Path, run: dict[str, Any]) -> str:
    """Every burst of one kept run (docs/development.md): nothing left out, nothing added."""
    lines = [f"#### {path.name}", "", provenance(path, run), "",
             "| step | burst | status | samples/s | step ms p50 | step ms mean | peak MiB | "
             "MFU % | SM MHz | throttle |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for step in run["steps"]:
        for b in step.get("bursts", []):
            throttle = ", ".join(b.get("throttle_reasons") or []) or "-"
            label = b["label"] + (f" ({b['knobs_note']})" if b.get("knobs_note") else "")
            lines.append(
                f"| {step['name']} | {label} | {b.get('status', '-')} | "
                + " | ".join(cell(b.get(f), f) for f in ("samples_per_s", "step_ms_p50",
                                                         "step_ms_mean", "peak_mem_mib",
                                                         "mfu_pct")) + " | "
                + f"{cell(b.get('sm_clock_mhz'), 'sm_clock_mhz')} | {throttle} |"
            )  # fmt: skip
        if not step.get("bursts"):
            what = _lessons_said(step) or step.get("reason") or "no bursts"
            lines.append(f"| {step['name']} | ({what}) | {step['status']} | | | | | | | |")
    return "\n".join(lines) + "\n"


def _lessons_said(step: dict[str, Any]) -> str | None:
    """A lessons step in one line: each lesson and how it ended (the guide tables them)."""
    records = ((step.get("facts") or {}).get("lessons") or {}).get("lessons") or []
    if not records:
        return None
    ended = ", ".join(f"{gpu_record.lesson_key(r['lesson'])} {r['outcome']}" for r in records)
    return f"lessons: {ended}; their minutes: notebooks/README.md"


DATA_PATHS_WAITING = (
    "Waiting for the first GPU session: no kept run has the data-path rows yet (the `loader` "
    "step of `bash benchmarks/gpu_session.sh` measures them: each path's loader alone, then "
    "resnet50 bf16 training through it beside the resident-batch ceiling)."
)


@dataclass(frozen=True)
class PathRun:
    """The newest kept run with the data-path rows: its file, the run, its loader step and
    ``gpu_record.data_paths`` of that step."""

    path: Path
    run: dict[str, Any]
    step: dict[str, Any]
    paths: dict[str, Any]


def data_path_run(runs: Sequence[tuple[Path, dict[str, Any]]]) -> PathRun | None:
    """Every figure of the data-path table comes from one run: a path's share of the ceiling
    is read against the ceiling measured beside it, never against another session's."""
    for path, run in runs:
        for step in run["steps"]:
            paths = gpu_record.data_paths(step) if step["name"] == "loader" else None
            if paths and paths["ceiling"]:
                return PathRun(path, run, step, paths)
    return None


def render_data_paths(runs: Sequence[tuple[Path, dict[str, Any]]]) -> str:
    """The data-path table (issue 29): per path the loader alone and training beside the
    resident-batch ceiling, or the sentence that says it is still waiting."""
    found = data_path_run(runs)
    if found is None:
        return DATA_PATHS_WAITING + "\n"
    rows, ceiling = found.paths["rows"], found.paths["ceiling"]
    lines = [f"| data path ({_setting(found.step)}) | loader alone images/s | per worker or GPU "
             "| training images/s | of the ceiling | decoded on | H2D bytes/sample |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: |",
             f"| resident batch (loader=synthetic): the ceiling | - | - | "
             f"{cell(ceiling['samples_per_s'], 'samples_per_s')} | - | - | - |"]  # fmt: skip
    lines += [_path_line(r) for r in rows]
    lines += ["", _ceiling_sentence(ceiling), _goal_sentence(found.paths), "",
              f"[1] {provenance(found.path, found.run)}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _setting(step: dict[str, Any]) -> str:
    """What every row shares, read from the ceiling burst and the set it read."""
    b = next(b for b in step["bursts"] if b.get("data_path") == gpu_record.CEILING)
    k = b.get("knobs") or {}
    images = ((step.get("facts") or {}).get("big_set") or {}).get("images")
    return (f"{b.get('workload')} {k.get('precision')}, batch {k.get('batch_size')}"
            + (", channels_last" if k.get("channels_last") else "")
            + (f", {images:,} JPEGs" if images else ""))  # fmt: skip


def _path_line(r: dict[str, Any]) -> str:
    text = r["text"]
    if r.get("not_run"):
        text += f" ({r['not_run']})"
    elif r.get("failed"):
        text += f" (failed: {r['failed'][:120]})"
    per = "-" if r["loader_per"] is None else f"{r['loader_per']:,.0f} a {r['per']}"
    share = "-" if r["over_ceiling"] is None else f"{r['over_ceiling']:.0%}"
    h2d = "-" if r["h2d_bytes_per_sample"] is None else f"{r['h2d_bytes_per_sample']:,.0f}"
    return (f"| {text} | {cell(r['loader_alone'], 'samples_per_s')} | {per} | "
            f"{cell(r['training'], 'samples_per_s')} | {share} | {r['decode'] or '-'} | "
            f"{h2d} |")  # fmt: skip


def _ceiling_sentence(ceiling: dict[str, Any]) -> str:
    said = " and ".join(cell(x, "samples_per_s") for x in ceiling["bursts"])
    drift = ceiling.get("after_over_before")
    said += f" images/s: after/before {drift}" if drift else " images/s"
    return (
        f"The ceiling is the mean of the resident-batch bursts before and after the paths ({said})."
    )


def _goal_sentence(paths: dict[str, Any]) -> str:
    goal = f"one path at {paths['goal']:.0%} of the ceiling or more"
    best = paths["best"]
    if best is None:
        return f"Goal ({goal}): no path trained."
    text = next(r["text"] for r in paths["rows"] if r["path"] == best["path"])
    verdict = "met by" if paths["goal_met"] else "not met: the best was"
    return f"Goal ({goal}): {verdict} {text} ({best['over_ceiling']:.0%})."


TRANSFORMER_CALL = "bash benchmarks/gpu_session.sh --steps transformer --budget-s 570"
CALL_MD = f"`{TRANSFORMER_CALL}`"
TRANSFORMER_WAITING = (
    f"Waiting for the first GPU run: no kept run has the `gpt:124m` rows yet (`{TRANSFORMER_CALL}`"
    " measures them: bf16 eager, compiled, compiled with CUDA graphs, and each attention backend)."
)
TRANSFORMER_COLUMNS = (("tokens/s", "tokens_per_s"), ("MFU %", "mfu_pct"),
                       ("step ms p50", "step_ms_p50"), ("peak MiB", "peak_mem_mib"),
                       ("compile s", "compile_s"), ("pad %", "pad_share_pct"))  # fmt: skip


def render_transformer(runs: Sequence[tuple[Path, dict[str, Any]]],
                       anchor: Anchor | None = None) -> str:  # fmt: skip
    """The transformer block (issue 32): llm.c's published run as the anchor, each row of
    ``gpu_transformer.ROWS`` from the newest kept run that ran it (or the sentence that says
    it waits), and the goal judged from the kept runs (``gpu_transformer.goal``)."""
    a = gpu_transformer.anchor() if anchor is None else anchor
    lines = [_anchor_text(a), ""]
    found = {row.key: _tx_row(runs, row.key) for row in gpu_transformer.ROWS}
    sources: list[Path] = []
    by_path: dict[Path, dict[str, Any]] = {}
    if not any(found.values()):
        lines += [TRANSFORMER_WAITING, ""]
    else:
        lines += [f"| {gpu_transformer.WORKLOAD}, bf16, batch {gpu_transformer.BATCH} x 1,024 "
                  "tokens, one resident batch | " + " | ".join(h for h, _ in TRANSFORMER_COLUMNS)
                  + " | attention kernel | over eager | run |",
                  "| --- | " + "---: | " * len(TRANSFORMER_COLUMNS)
                  + "--- | ---: | --- |"]  # fmt: skip
        for row in gpu_transformer.ROWS:
            hit = found[row.key]
            if hit is None:
                lines.append(f"| {row.label} | " + "- | " * len(TRANSFORMER_COLUMNS)
                             + "- | - | not measured yet |")  # fmt: skip
                continue
            path, run, res = hit
            if path not in sources:
                sources.append(path)
                by_path[path] = run
            lines.append(_tx_line(row, res, sources.index(path) + 1))
        lines.append("")
    fp8 = _fp8_text(runs, sources, by_path)
    if fp8:
        lines += [fp8, ""]
    g = gpu_transformer.goal(runs, a.per_gpu)
    if g.run is not None and g.run not in sources:
        sources.append(g.run)
        by_path[g.run] = dict(next(r for p, r in runs if p == g.run))
    lines += [_goal_text(g, a, sources), ""]
    lines += [f"[{i + 1}] {provenance(p, by_path[p])}" for i, p in enumerate(sources)]
    return "\n".join(lines).rstrip("\n") + "\n"


FP8_WAITING = (
    "float8 (`fp8`): waiting for the first GPU run of the `fp8` step (`bash "
    "benchmarks/gpu_session.sh --steps fp8`: gpt:124m compiled in bf16, then each float8 "
    "recipe, then bf16 again)."
)


def _fp8_text(runs: Sequence[tuple[Path, dict[str, Any]]], sources: list[Path],
              by_path: dict[Path, dict[str, Any]]) -> str:  # fmt: skip
    """The ``fp8`` step's figures (``gpu_fp8.fp8_facts``) from the newest kept run that ran
    it, as one sentence under the table; the sentence that says it waits where none has."""
    for path, run in runs:
        step = next((s for s in reversed(run.get("steps") or []) if s.get("name") == "fp8"
                     and (s.get("facts") or {}).get("fp8", {}).get("bf16_tokens_per_s")),
                    None)  # fmt: skip
        if step is None:
            continue
        if path not in sources:
            sources.append(path)
            by_path[path] = run
        f = step["facts"]["fp8"]
        said = [f"{name} {cell(r.get('tokens_per_s'), 'tokens_per_s')} tokens/s ("
                + (f"{r['vs_bf16']:.2f}x bf16" if r.get("vs_bf16") else "no ratio")
                + (f", {r['fp8_linears']} Linear layers in float8" if r.get("fp8_linears")
                   else f", did not act: {_escape(r.get('no_effect') or '')}") + ")"
                for name, r in (f.get("recipes") or {}).items()]  # fmt: skip
        spread = f.get("bf16_spread_pct")
        return (f"float8 (`fp8`, the `fp8` step: {f.get('workload')}, batch "
                f"{f.get('batch_size')}, compiled, bf16 before and after): bf16 "
                f"{cell(f['bf16_tokens_per_s'], 'tokens_per_s')} tokens/s (the two bf16 "
                f"bursts {spread if spread is not None else '-'}% apart); "
                + ("; ".join(said) or "no float8 recipe ran")
                + f" [{sources.index(path) + 1}].")  # fmt: skip
    return FP8_WAITING


def _tx_row(runs: Sequence[tuple[Path, dict[str, Any]]],
            key: str) -> tuple[Path, dict[str, Any], dict[str, Any]] | None:  # fmt: skip
    """The newest kept run that ran row ``key`` (ok, or refused with the reason)."""
    for path, run in runs:
        step = gpu_transformer.step_of(run)
        if step is None:
            continue
        res = gpu_transformer.row_results(step)[key]
        if res["status"] in ("ok", "refused"):
            return path, run, res
    return None


def _tx_line(row: gpu_transformer.Row, res: dict[str, Any], source: int) -> str:
    text = row.label
    if res["status"] == "refused":
        text += f" (refused: {_escape(res['note'] or '')[:240]})"
    values = [cell(res.get(f), f) for _, f in TRANSFORMER_COLUMNS]
    over = "-" if res.get("over_eager") is None else f"{res['over_eager']:.2f}x"
    return (f"| {text} | " + " | ".join(values)
            + f" | {res.get('attention_backend') or '-'} | {over} | [{source}] |")  # fmt: skip


def _anchor_text(a: Anchor) -> str:
    """llm.c's run and what follows from it, every figure computed from the reference files."""
    peak = a.peaks
    return (
        f"The anchor, published (not measured here): llm.c's GPT-2 (124M) reproduction trained "
        f"{a.tokens:,.0f} tokens in about {a.minutes:.0f} minutes on {a.hardware} "
        f"([llm.c discussion #481]({a.url}), Andrej Karpathy, {a.published}; read {a.read_on}): "
        f"**{a.per_gpu:,.0f} tokens/s per GPU** (tokens / ({a.minutes:.0f} x 60 s) / {a.gpus}). "
        f"By this workbench's FLOP count for `{gpu_transformer.WORKLOAD}` (6N + attention: "
        f"{a.flops_per_token / 1e6:,.0f} MFLOP a token) that is {a.mfu_pct:.0f}% MFU of the "
        f"A100's {peak['a100']:,.0f} TFLOP/s dense bf16 (llm.c said ~{a.mfu_said:.0f}% by its "
        f"own count). An H100 SXM and an H200 SXM have the same dense bf16 peak, "
        f"{peak['h200']:,.1f} TFLOP/s ({peak['h200'] / peak['a100']:.1f}x the A100's); the "
        f"H200's memory is the faster, {a.bandwidth['h200']:,.0f} GB/s against the H100's "
        f"{a.bandwidth['h100']:,.0f} and the A100's {a.bandwidth['a100']:,.0f} (NVIDIA's "
        f"datasheets: `notebooks/reference/datasheets.json`). One H200 or H100 matches llm.c's "
        f"per-GPU rate at {a.mfu_needed_pct('h200'):.0f}% MFU."
    ) + _h100_text(a)  # fmt: skip


def _h100_text(a: Anchor) -> str:
    """llm.c's same run on 8x H100 and torchtitan's Llama 3.1 8B on 8x H100, published, every
    figure computed from the reference entries (lesson 12's helpers)."""
    from workbench.workshop import reference
    from workbench.workshop.transformer_lesson import LLMC_H100, torchtitan_published

    said = ""
    if a.h100 is not None:
        h = a.h100
        said += (f" On {h.hardware}, the same llm.c run took a median {h.step_ms:.0f} ms a step "
                 f"of {h.tokens_per_step:,.0f} tokens ([modded-nanogpt's llm.c record]({h.url}), "
                 f"{h.published}; read {h.read_on}; `{LLMC_H100[0]}`): **{h.per_gpu:,.0f} tokens/s "
                 f"per H100**, {a.h100_mfu_pct:.0f}% MFU of the H100 SXM's dense bf16 peak by "
                 "this workbench's count.")  # fmt: skip
    refs = reference.load(gpu_transformer.REFERENCE)
    try:
        tt = torchtitan_published(refs).set_index("id")
    except KeyError:
        return said
    over = next(c for c in tt.columns if c.startswith("x "))
    bf16, comp, fp8 = (tt.iloc[i] for i in range(3))
    url = reference.find(tt.index[0], refs).url
    return said + (
        f" A larger model on H100s, for scale: torchtitan's Llama 3.1 8B on {bf16['hardware']} "
        f"(FSDP, batch 2 a GPU; [torchtitan's H100 benchmarks]({url})) ran "
        f"{bf16['value']:,.0f} tokens/s per GPU in bf16, {comp['value']:,.0f} compiled "
        f"({comp[over]:.2f}x) and {fp8['value']:,.0f} compiled with float8 ({fp8[over]:.2f}x)."
    )  # fmt: skip


def _goal_text(g: gpu_transformer.Goal, a: Anchor, sources: list[Path]) -> str:
    gpus = gpu_transformer.GOAL_GPUS
    goal = (f"Goal: `{gpu_transformer.WORKLOAD}` on one {gpus} at or above llm.c's per-GPU rate "
            f"({a.per_gpu:,.0f} tokens/s) in bf16 with compile")  # fmt: skip
    if g.verdict == "waiting":
        return f"{goal}: **waiting** for a kept run of these rows on an {gpus} ({CALL_MD})."
    mark = f"[{sources.index(g.run) + 1}]" if g.run in sources else ""
    if g.key is None:
        return f"{goal}: **not met**: {g.note} {mark}."
    label = next(r.label for r in gpu_transformer.ROWS if r.key == g.key)
    said = (f"{label}, {g.tokens_per_s:,.0f} tokens/s, {g.over_anchor:.2f}x the anchor on "
            f"{g.device} ({_on_its_peak(a, g)})")  # fmt: skip
    if g.verdict == "met":
        return f"{goal}: **met** by {said} {mark}."
    return f"{goal}: **not met**: the best compiled row was {said} {mark}."


def _on_its_peak(a: Anchor, g: gpu_transformer.Goal) -> str:
    """The verdict's rate as MFU of the measured device's own dense bf16 peak (read from its
    name: an H100 PCIe's is not an SXM's), and beside llm.c's H100 rate."""
    from workbench.engine import hardware

    peak = hardware.peak_flops(g.device or "", "bf16")
    mfu = a.mfu_at(peak, g.tokens_per_s)
    said = (f"{mfu:.0f}% MFU of its {peak / 1e12:,.1f} TFLOP/s dense bf16 peak" if mfu is not None
            else "its dense bf16 peak is not in the workbench's table: no MFU")  # fmt: skip
    if a.h100 is not None and g.tokens_per_s:
        said += f"; {g.tokens_per_s / a.h100.per_gpu:.2f}x llm.c's H100 rate"
    return said


FIDELITY_CALL = "bash benchmarks/gpu_session.sh --steps fidelity"
FIDELITY_WAITING = (
    "Waiting for the next GPU window: no kept run has the `fidelity` step yet (it runs resnet50 "
    "bf16 channels_last on JPEGs and gpt:124m bf16 both ways, a burst and a hand-written loop on "
    "the main thread, in ABBA pairs; the goal: burst / hand loop between "
    f"{gpu_fidelity.GOAL[0]} and {gpu_fidelity.GOAL[1]}, the median of the pairs, every row)."
)


def render_fidelity(runs: Sequence[tuple[Path, dict[str, Any]]]) -> str:
    """The fidelity table (``gpu_fidelity``): per row, from the newest kept run that measured
    it, the device, the pairs, each side's median samples/s, the median ratio burst / hand loop
    with its range and spread and each order's median, and the goal; the sentence that says it
    waits where no kept run has the step."""
    found = {row.key: _fidelity_row(runs, row.key) for row in gpu_fidelity.ROWS}
    if not any(found.values()):
        return FIDELITY_WAITING + "\n"
    lo, hi = gpu_fidelity.GOAL
    lines = [
        "| recipe | device | pairs | burst samples/s | hand loop samples/s | burst / hand, "
        "median | range | spread % | burst first / hand first | goal | run |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    sources: list[Path] = []
    by_path: dict[Path, dict[str, Any]] = {}
    verdicts = []
    for row in gpu_fidelity.ROWS:
        hit = found[row.key]
        if hit is None:
            lines.append(f"| {row.workload} | - | - | - | - | - | - | - | - | waiting | "
                         "not measured yet |")  # fmt: skip
            verdicts.append(None)
            continue
        path, run, rec = hit
        if path not in sources:
            sources.append(path)
            by_path[path] = run
        verdicts.append(rec.get("in_goal"))
        lines.append(_fidelity_line(rec, run["device"], sources.index(path) + 1))
    goal = f"Goal: a burst reads what the hand loop reads, burst / hand {lo}-{hi} (median of pairs)"
    if None in verdicts:
        said = "**waiting** for every row on a GPU"
    else:
        said = "**met**" if all(verdicts) else "**not met**"
    lines += ["", f"{goal}, every row: {said}.", ""]
    lines += [f"[{i + 1}] {provenance(p, by_path[p])}" for i, p in enumerate(sources)]
    return "\n".join(lines) + "\n"


def _fidelity_row(runs: Sequence[tuple[Path, dict[str, Any]]],
                  key: str) -> tuple[Path, dict[str, Any], dict[str, Any]] | None:  # fmt: skip
    """The newest kept run whose fidelity step measured row ``key``."""
    for path, run in runs:
        step = gpu_fidelity.step_of(run)
        rec = ((step or {}).get("facts") or {}).get("fidelity", {}).get("rows", {}).get(key)
        if rec and rec.get("pairs_measured"):
            return path, run, rec
    return None


def _fidelity_line(rec: dict[str, Any], device: str, source: int) -> str:
    text = rec["label"] + (f" ({rec['status']}: {_escape(rec['note'])[:160]})"
                           if rec.get("note") else "")  # fmt: skip
    b, h = rec.get("burst_first_median"), rec.get("hand_first_median")
    firsts = f"{b:.3f} / {h:.3f}" if b and h else "-"
    goal = {True: "met", False: "not met", None: "too few pairs"}[rec.get("in_goal")]
    return (f"| {text} | {device} | {rec['pairs_measured']} | "
            f"{cell(rec.get('burst_median'), 'samples_per_s')} | "
            f"{cell(rec.get('hand_median'), 'samples_per_s')} | {rec['ratio_median']:.3f} | "
            f"{rec['ratio_min']:.3f}-{rec['ratio_max']:.3f} | {rec['spread_pct']:.1f} | "
            f"{firsts} | {goal} | [{source}] |")  # fmt: skip


LESSONS_WAITING = "waiting for the first GPU run of the lessons"
LESSONS_HOW = (
    "Generated by `python benchmarks/publish_gpu.py` from the kept runs: each lesson from the "
    "newest one that ran it (`bash benchmarks/gpu_session.sh --steps lessons --budget-s 570`, "
    "then `--steps lessons-optional`; what a call has no time for runs in a later session with "
    "`--lessons unmeasured`). Run All is the notebook from its kernel's start to its last cell, "
    "on the GPU room's data set (3,000 JPEGs); the slowest cells are where its minutes go."
)


def render_lessons(runs: Sequence[tuple[Path, dict[str, Any]]], notebooks: Path) -> str:
    """The guide's GPU minutes: per notebook, its newest kept record (``gpu_record.
    lesson_runs``: lessons run over several sessions), or the sentence that says it waits."""
    import run_lessons

    kept = gpu_record.lesson_runs(runs)
    sources: list[Path] = []
    by_path: dict[Path, dict[str, Any]] = {}
    lines = ["| notebook | part | Run All, one GPU | outcome | slowest cells | measured on | run |",
             "| --- | --- | ---: | --- | --- | --- | --- |"]  # fmt: skip
    for nb in sorted(notebooks.glob("*.ipynb")):
        key = gpu_record.lesson_key(nb.name)
        part = run_lessons.part(key)
        found = kept.get(key)
        if found is None:
            lines.append(f"| `{nb.stem}` | {part} | {LESSONS_WAITING} | - | - | - | - |")
            continue
        if found.path not in sources:
            sources.append(found.path)
            by_path[found.path] = dict(found.run)
        lines.append(f"| `{nb.stem}` | {part} | {_lesson_cells(found.record)} | "
                     f"[{sources.index(found.path) + 1}] |")  # fmt: skip
    lines += ["", LESSONS_HOW, ""]
    lines += [f"[{i + 1}] {provenance(p, by_path[p])}" for i, p in enumerate(sources)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _lesson_cells(rec: Mapping[str, Any]) -> str:
    """A kept lesson record's cells in the table: time, outcome, slowest cells, device."""
    import run_lessons

    wall = rec["wall_s"]
    run_all = f"{wall:.0f} s ({wall / 60:.1f} min)"
    if rec["outcome"] == "timeout":
        run_all = f"over {rec['timeout_s']:.0f} s"
    outcome = rec["outcome"] + (f": {_escape(rec['error'])}" if rec.get("error") else "")
    slow = [f"cell {c['index']} `{_escape(c['source'])}` {c['s']:.0f} s" +
            ("" if c["status"] == "ok" else f" ({c['status']})")
            for c in run_lessons.slowest_cells(rec)]  # fmt: skip
    if rec.get("start_s") is not None:
        slow.append(f"kernel start {rec['start_s']:.0f} s")
    return f"{run_all} | {outcome} | {'; '.join(slow) or '-'} | {rec['device']}"


def _escape(text: str) -> str:
    """Text inside a markdown table cell: a pipe would end the cell, a backtick the code."""
    return text.replace("|", "\\|").replace("`", "'")


def blocks(runs: Sequence[tuple[Path, dict[str, Any]]], root: Path = ROOT) -> dict[str, str]:
    """Every generated block's body, by name: the figure tables, the lessons' GPU minutes, the
    two plans (the session's steps, the check's rows), printed by the code that runs them, and
    the guide's MIG table (each core lesson step's memory from the kept peaks, against each
    slice)."""
    import gpu_check
    import gpu_session

    from workbench.workshop import slices

    out = {t.name: render(t, runs) for t in TABLES}
    out["data-paths"] = render_data_paths(runs)
    out["transformer"] = render_transformer(runs)
    out["fidelity"] = render_fidelity(runs)
    out["lessons"] = render_lessons(runs, root / "notebooks")
    out["development-runs"] = "\n".join(runs_table(p, r) for p, r in runs)
    out["session-plan"] = gpu_session.plan_table() + "\n"
    out["check-plan"] = gpu_check.plan_table(gpu_check.plan()) + "\n"
    out["mig-slices"] = slices.guidance(reference_doc(runs)["entries"])
    return out


def fill(text: str, bodies: dict[str, str], origin: str) -> str:
    """``text`` with each block's body replaced; ValueError naming a block with no body."""

    def swap(m: re.Match[str]) -> str:
        name = m["name"]
        if name not in bodies:
            raise ValueError(f"{origin}: no generator for gpu-table {name!r}; known: "
                             f"{', '.join(bodies)}")  # fmt: skip
        return m.group(1) + bodies[name] + m.group(4)

    return BLOCK.sub(swap, text)


def markdown_files(root: Path = ROOT) -> list[Path]:
    """The pages with generated blocks: the README, the documentation, the instructor guide."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md")),
            root / "notebooks" / "README.md"]  # fmt: skip


# -- the lessons' reference figures ------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    id: str
    lessons: tuple[str, ...]
    workload: str
    what: str
    units: str
    precision: str
    where: Where
    notes: Callable[[dict[str, Any], Callable[[Where], Found | None]], str] = lambda b, f: ""
    field: str = "samples_per_s"
    """The burst's figure the entry publishes (``mfu_pct`` for an MFU entry)."""
    digits: int = 0
    """Decimals kept (a throughput is whole samples/s; a share of the peak has one)."""


def _steps_peak(b: dict[str, Any], _: Any) -> str:
    return f"step {cell(b.get('step_ms_p50'), 'step_ms_p50')} ms p50, peak " \
           f"{cell(b.get('peak_mem_mib'), 'peak_mem_mib')} MiB"  # fmt: skip


def _over_fp32(b: dict[str, Any], find_in: Callable[[Where], Found | None]) -> str:
    fp32 = find_in(_precision("fp32-strict"))
    ratio = ""
    if fp32 and fp32.burst.get("samples_per_s") and b.get("samples_per_s"):
        ratio = f"{b['samples_per_s'] / fp32.burst['samples_per_s']:.1f}x IEEE fp32; "
    return ratio + _steps_peak(b, find_in)


R50_WHAT = ("training throughput, resnet50 on one device-resident batch (loader=synthetic), "
            "channels_last, 2 s window")  # fmt: skip
CUDNN_ROW = "cudnn_benchmark off-on, on-off"
CUDNN_ORDER = (("off-1", "off 1"), ("on-1", "on 1"), ("on-2", "on 2"), ("off-2", "off 2"))
"""The four cudnn_benchmark bursts in the order they ran (gpu_rows.cudnn_both_orders): the
same knobs but one, so lesson 11 can set the knob's effect beside the order's."""
CUDNN_ENTRIES = tuple(
    Entry(f"wb-gpu-r50-cudnn-{key}", ("11",), "resnet50",
          f"training throughput, resnet50 on one device-resident batch (loader=synthetic), "
          f"channels_last, cudnn_benchmark {label.split()[0]}: burst {label.split()[1]} of "
          "its setting, in the order off, on, on, off", "images/s", "bf16 (autocast)",
          (("check", f"{CUDNN_ROW}: cudnn_benchmark {label}"),))
    for key, label in CUDNN_ORDER
)  # fmt: skip
ENTRIES: tuple[Entry, ...] = (
    Entry("wb-gpu-r50-fp32", ("01", "03"), "resnet50", R50_WHAT, "images/s",
          "fp32-strict (IEEE: TF32 off)", _precision("fp32-strict"), _steps_peak),
    Entry("wb-gpu-r50-tf32", ("01", "03", "04", "05"), "resnet50", R50_WHAT, "images/s", "TF32",
          _precision("tf32"), _over_fp32),
    Entry("wb-gpu-r50-bf16", ("01", "03", "04", "05", "07", "11"), "resnet50", R50_WHAT,
          "images/s", "bf16 (autocast)", _precision("bf16"), _over_fp32),
    Entry("wb-gpu-r50-fp16", ("03",), "resnet50", R50_WHAT, "images/s",
          "fp16 (autocast + GradScaler)", _precision("fp16"), _over_fp32),
    Entry("wb-gpu-r50-bf16-mfu", ("07", "11"), "resnet50",
          "MFU of resnet50 training on one device-resident batch (loader=synthetic), "
          "channels_last: model FLOPs achieved / the datasheet's dense bf16 peak", "% of peak",
          "bf16 (autocast)", _precision("bf16"),
          lambda b, f: f"the run's own mfu_pct at {cell(b.get('samples_per_s'), 'samples_per_s')}"
                       " images/s", field="mfu_pct", digits=1),
    *CUDNN_ENTRIES,
    Entry("wb-gpu-r50-jpeg-8workers", ("02", "05"), "resnet50",
          "training throughput, resnet50 on JPEGs, torch DataLoader with 8 decode workers",
          "images/s", "bf16 (autocast)", JPEG_8,
          lambda b, f: f"GPU util {cell(b.get('gpu_util_pct'), 'gpu_util_pct')}%; "
                       f"{b.get('short_epochs_note') or 'epochs of 50+ batches'}"),
    Entry("wb-gpu-gpt-compile-default", ("12",), "gpt",
          "training throughput, gpt (small decoder-only), torch.compile default", "samples/s",
          "TF32", COMPILE_DEFAULT,
          lambda b, f: f"cold compile {cell(b.get('compile_s'), 'compile_s')} s (compile_s)"),
    Entry("wb-gpu-gpt-compile-reduce-overhead", ("12",), "gpt",
          "training throughput, gpt (small decoder-only), torch.compile reduce-overhead "
          "(CUDA graphs)", "samples/s", "TF32", COMPILE_RO,
          lambda b, f: f"cold compile {cell(b.get('compile_s'), 'compile_s')} s"),
)  # fmt: skip


def reference_doc(runs: Sequence[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    entries = []
    for e in ENTRIES:
        found = find(runs, e.where)
        if found is None or found.burst.get(e.field) is None:
            continue
        entries.append(_entry(e, found, lambda w, path=found.path: _same_run(runs, path, w)))
    entries += path_entries(runs)
    return {"about": "This project's own GPU figures, generated by benchmarks/publish_gpu.py "
                     "from the kept runs under benchmarks/results/ (never typed): each entry "
                     "names its run file and the command that wrote it, or says it was not "
                     "recorded. Read beside NVIDIA's published figures in resnet50.json.",
            "entries": entries}  # fmt: skip


def _same_run(
    runs: Sequence[tuple[Path, dict[str, Any]]], path: Path, where: Where
) -> Found | None:
    return find([(p, r) for p, r in runs if p == path], where)


def _entry(e: Entry, found: Found, find_in: Callable[[Where], Found | None]) -> dict[str, Any]:
    b = found.burst
    value = round(b[e.field], e.digits) if e.digits else round(b[e.field])
    return {"id": e.id, "lessons": list(e.lessons), "workload": e.workload, "what": e.what,
            "value": value, "units": e.units, "precision": e.precision,
            "batch_size": (b.get("knobs") or {}).get("batch_size"), "knobs": _knobs(b),
            **({"peak_mem_mib": round(b["peak_mem_mib"])} if b.get("peak_mem_mib") else {}),
            "notes": e.notes(b, find_in), **_measured_on(found.path, found.run)}  # fmt: skip


def _knobs(burst: dict[str, Any]) -> dict[str, Any] | None:
    """The knobs the burst set, under their current names (an old run's ``fp32`` is
    ``fp32-strict``, the one value ``workbench.core.knobs`` renamed): what ``reference.beside``
    matches a learner's setting against."""
    knobs = burst.get("knobs")
    if not knobs:
        return None
    renamed = {"precision": "fp32-strict"} if knobs.get("precision") == "fp32" else {}
    return {**knobs, **renamed}


def _measured_on(path: Path, run: dict[str, Any]) -> dict[str, Any]:
    """An entry's provenance: the GPU, the kept run and the command that wrote it."""
    env = run.get("environment") or {}
    versions = env.get("versions") or {}
    mem = env.get("device_mem_mib")
    hardware = f"1x {run['device']}" + (f" ({mem:,} MiB)" if mem else "") + \
        f", torch {versions.get('torch')}, CUDA {versions.get('cuda')}"  # fmt: skip
    recorded = bool(run.get("recorded"))
    return {"kind": "measured", "hardware": hardware, "gpus": 1, "device_name": run["device"],
            "source": f"workbench GPU run {path.name}" + ("" if recorded else " (unrecorded)"),
            "command": run["command"] if recorded else (run.get("command_note") or "unrecorded"),
            "run": kept_name(path), "url": "docs/development.md#gpu-runs",
            "read_on": run["started_at"][:10]}  # fmt: skip


PATH_LESSONS = ("02", "05")
PATH_TRAINING = "training throughput through one data path: "
PATH_ALONE = "the loader alone (no model) on one data path: "
"""The prefixes of the data-path entries' ``what``; ``workbench.workshop.reference.data_paths``
reads the path after them."""


def path_entries(runs: Sequence[tuple[Path, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The data-path table as the lessons' entries (``wb-gpu-path-*``: training through a path
    and the ceiling; ``wb-gpu-loader-*``: the loader alone), all from the run that tables them."""
    found = data_path_run(runs)
    if found is None:
        return []
    ceiling = found.paths["ceiling"]
    b = next(b for b in found.step["bursts"] if b.get("data_path") == gpu_record.CEILING)
    k = b.get("knobs") or {}
    common = {"lessons": list(PATH_LESSONS), "workload": b.get("workload"), "units": "images/s",
              "precision": k.get("precision"), "batch_size": k.get("batch_size"),
              **_measured_on(found.path, found.run)}  # fmt: skip
    drift = ceiling.get("after_over_before")
    out = [{"id": "wb-gpu-path-ceiling", "what": PATH_TRAINING + "one resident batch "
            "(loader=synthetic): the ceiling", "value": round(ceiling["samples_per_s"]),
            "notes": "mean of the bursts before and after the paths"
            + (f" (after/before {drift})" if drift else ""), **common}]  # fmt: skip
    for r in found.paths["rows"]:
        if r["training"] is not None:
            share = f"{r['over_ceiling']:.0%} of the ceiling in the same run; " \
                if r["over_ceiling"] is not None else ""  # fmt: skip
            out.append({"id": f"wb-gpu-path-{r['path']}", "what": PATH_TRAINING + r["text"],
                        "value": round(r["training"]),
                        "notes": f"{share}decoded on the {r['decode']}", **common})  # fmt: skip
        if r["loader_alone"] is not None:
            out.append({"id": f"wb-gpu-loader-{r['path']}", "what": PATH_ALONE + r["text"],
                        "value": round(r["loader_alone"]),
                        "notes": f"{r['loader_per']:,.0f} images/s a {r['per']}",
                        **common})  # fmt: skip
    return out


# -- the entry point ---------------------------------------------------------------------------


def outputs(results_dir: Path = gpu_record.RESULTS, root: Path = ROOT) -> dict[Path, str]:
    """Every generated file's wanted content, by path."""
    runs = load_runs(results_dir)
    bodies = blocks(runs, root)
    out = {}
    for path in markdown_files(root):
        text = path.read_text()
        if BLOCK.search(text):
            out[path] = fill(text, bodies, path.name)
    out[root / REFERENCE.relative_to(ROOT)] = json.dumps(reference_doc(runs), indent=2) + "\n"
    return out


def stale(results_dir: Path = gpu_record.RESULTS, root: Path = ROOT) -> list[str]:
    """The generated files that differ from what the kept runs give."""
    return [str(p.relative_to(root)) for p, text in outputs(results_dir, root).items()
            if not p.exists() or p.read_text() != text]  # fmt: skip


OUR_GPU = re.compile(r"H100|H200|GB200|B200|GPU session|gpu_session|GPU run")
THROUGHPUT = re.compile(r"\d[\d,.]*\s*(?:samples|images|img|tokens)/s")
RATE_HEADER = re.compile(r"(?:samples|images|img|tokens)/s")
NUMBER_CELL = re.compile(r"\|\s*(\d[\d,]*(?:\.\d+)?)\s*(?=\|)")


def stray_figures(root: Path = ROOT) -> list[str]:
    """Paragraphs outside the generated blocks that put a throughput figure beside one of our
    GPUs or GPU runs (in the paragraph or in the one before it: a table's caption): a figure
    typed by hand, which nothing checks against a kept run. A table counts as a figure when
    its header names a rate (samples/s, images/s, ...) and a cell holds a number. The lessons'
    text (markdown and code cells) is read too."""
    found = []
    texts = [(p, p.read_text()) for p in markdown_files(root)]
    for nb in sorted((root / "notebooks").rglob("*.ipynb")):
        cells = json.loads(nb.read_text()).get("cells", [])
        texts.append((nb, "\n\n".join("".join(c.get("source", [])) for c in cells)))
    for path, text in texts:
        paras = re.split(r"\n\s*\n", BLOCK.sub("", text))
        for before, para in zip(["", *paras], paras, strict=False):
            figure = _figure(para)
            if figure and (OUR_GPU.search(para) or OUR_GPU.search(before)):
                found.append(f"{path.relative_to(root)}: {figure!r} in: {para[:160]!r}")
    return found


def _figure(para: str) -> str | None:
    if m := THROUGHPUT.search(para):
        return m.group(0)
    rows = [line for line in para.splitlines() if line.lstrip().startswith("|")]
    if len(rows) >= 3 and RATE_HEADER.search(rows[0]):
        for row in rows[2:]:
            if m := NUMBER_CELL.search(row):
                return m.group(1)
    return None


def reference_problems(root: Path = ROOT, results_dir: Path = gpu_record.RESULTS) -> list[str]:
    """Measured GPU entries in any reference file that do not name a kept run, or that name a
    command the run did not record."""
    runs = {kept_name(p): r for p, r in load_runs(results_dir)}
    bad = []
    for path in sorted((root / "notebooks" / "reference").glob("*.json")):
        for e in json.loads(path.read_text())["entries"]:
            if e.get("kind") != "measured" or not e.get("device_name"):
                continue
            run = runs.get(e.get("run", ""))
            if run is None:
                bad.append(f"{path.name} {e['id']}: run {e.get('run')!r} is no kept run")
                continue
            said = run["command"] if run.get("recorded") else run.get("command_note")
            if e.get("command") != said:
                bad.append(f"{path.name} {e['id']}: command {e.get('command')!r}, but "
                           f"{e['run']} was written by {said!r}")  # fmt: skip
    return bad


KEPT_RUN_GPU = re.compile(r"\bkept ((?:G?[ABH]\d{2,3}|L40S?|L4)\b)")
"""How the lessons and pages name the GPU of the kept figures in prose ("the kept H200 run")."""


def device_words(results_dir: Path = gpu_record.RESULTS, root: Path = ROOT) -> list[str]:
    """Prose that names the kept figures' GPU ("kept H200 run") where no generated entry was
    measured on that GPU: when a kept run on another GPU (an H100) replaces the figures, every
    such sentence is listed until it names the device the figures now come from."""
    devices = {e.get("device_name", "") for e in reference_doc(load_runs(results_dir))["entries"]}
    if not devices:
        return []
    texts = [(p, p.read_text()) for p in markdown_files(root)]
    for nb in sorted((root / "notebooks").rglob("*.ipynb")):
        cells = json.loads(nb.read_text()).get("cells", [])
        texts.append((nb, "\n".join("".join(c.get("source", [])) for c in cells)))
    found = []
    for path, text in texts:
        for m in KEPT_RUN_GPU.finditer(text):
            if not any(re.search(rf"\b{m[1]}\b", d) for d in devices):
                found.append(f"{path.relative_to(root)}: {m[0]!r}, but the kept figures were "
                             f"measured on {', '.join(sorted(devices))}")  # fmt: skip
    return found


def problems(results_dir: Path = gpu_record.RESULTS, root: Path = ROOT) -> list[str]:
    """Everything ``--check`` reports: stale files, stray figures, unsourced entries, prose that
    names another GPU than the kept figures'."""
    out = [f"{name}: its GPU figures differ from the kept runs: run "
           "python benchmarks/publish_gpu.py" for name in stale(results_dir, root)]  # fmt: skip
    out += [f"a GPU figure typed by hand (generate it from a kept run): {s}"
            for s in stray_figures(root)]  # fmt: skip
    out += [f"a device named by hand: {s}" for s in device_words(results_dir, root)]
    return out + reference_problems(root, results_dir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a published figure is stale")
    args = ap.parse_args(argv)
    if args.check:
        bad = problems()
        for line in bad:
            print(line, file=sys.stderr)
        return 1 if bad else 0
    for path, text in outputs().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
