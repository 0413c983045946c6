"""MkDocs hooks: the pages that are generated from the code, so they cannot drift from it.

- ``knobs.md`` from ``knob_specs()`` and the NCCL table (``workbench.core.nccl.VARIABLES``):
  every knob gets a heading whose anchor is its name, so a page that links to
  ``knobs.md#batch_size`` fails the strict build if that knob ever goes.
- ``cli.md`` from the ``workbench`` command's own argparse parser.
- ``notebooks/``: the lessons and the instructor guide, the repository's own files (the one
  copy; mkdocs-jupyter renders the lessons, it does not run them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
GROUP_TITLES = {  # the order and the words of the Knobs page; a new group still shows
    "data": "Data loading",
    "compute": "Compute and precision",
    "dist": "Distributed",
}


def knobs_markdown() -> str:
    """The Knobs reference: one section per knob, grouped as the panel groups them."""
    from workbench.core import nccl
    from workbench.core.knobs import knob_specs

    specs = knob_specs()
    groups = list(dict.fromkeys([*GROUP_TITLES, *(s.group for s in specs)]))
    lines = [
        "# Knobs",
        "",
        "Generated from `workbench.knob_specs()` when the site is built: this page lists every",
        "field of `wb.Knobs`, with the same names in `--set KNOB=VALUE`, in Python and in saved",
        "configs. The one-line descriptions are the panel's tooltips.",
        "",
    ]
    for group in groups:
        members = [s for s in specs if s.group == group]
        if not members:
            continue
        lines += [f"## {GROUP_TITLES.get(group, group.capitalize())}", ""]
        for spec in members:
            default = "none (unset)" if spec.default is None else f"`{spec.default!r}`"
            lines += [
                f"### `{spec.name}` {{#{spec.name}}}",
                "",
                spec.doc,
                "",
                f"- allowed: {spec.allowed()}",
                f"- numerics: {_numerics(spec.name)}",
                f"- default: {default}",
                f"- command line: `--set {spec.name}=...`",
                "",
            ]
    lines += [
        "## NCCL variables {#nccl-variables}",
        "",
        "Set by their own names: `--set NCCL_ALGO=Ring` on the command line,",
        '`Knobs(nccl={"NCCL_ALGO": "Ring"})` in Python, an `nccl:` mapping in saved configs.',
        "Values are checked against this table (`workbench.core.nccl.VARIABLES`); an unknown",
        "`NCCL_*` name passes with a warning.",
        "",
        "| variable | allowed | changes the sums | debugging only |",
        "| --- | --- | :---: | :---: |",
    ]
    for name, rule in nccl.VARIABLES.items():
        numerics = "yes" if rule.numerics else ""
        debug = "yes" if rule.debug_only else ""
        lines.append(f"| `{name}` | {_cell(rule.allowed)} | {numerics} | {debug} |")
    return "\n".join(lines) + "\n"


def _numerics(name: str) -> str:
    """The knob's numeric class and what it means (``workbench.core.numerics``)."""
    from workbench.core.numerics import CLASS_MEANING, numeric_class

    kind = numeric_class(name)
    return f"{kind}: {CLASS_MEANING[kind]} ([parity](cli.md#parity))"


def cli_markdown() -> str:
    """The CLI reference: every command's usage and options, from the parser itself."""
    from workbench.cli import build_parser

    parser = build_parser()
    parser.formatter_class = _wide
    lines = [
        "# CLI reference",
        "",
        "Generated from the `workbench` command's own parser when the site is built.",
        "`python -m workbench ...` is the same command. Exit codes: `0` a result (`ok`, or",
        "`oom`: running out of memory is a measurement), `1` the burst failed, `2` bad input",
        "(one line on stderr, no traceback), `130` interrupted. With `--json`, stdout holds",
        "exactly one JSON document.",
        "",
        "```text",
        parser.format_usage().strip(),
        "```",
        "",
    ]
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {a.dest: a.help for a in commands._choices_actions}
    for name, sub in commands.choices.items():
        sub.formatter_class = _wide  # the same usage lines whatever the terminal's width
        about = helps.get(name) or ""
        lines += [f"## `workbench {name}` {{#{name}}}", "", f"{about[:1].upper()}{about[1:]}.", ""]
        lines += ["```text", sub.format_usage().strip(), "```", ""]
        options = [a for a in sub._actions if a.help != argparse.SUPPRESS]
        lines += ["| option | default | what |", "| --- | --- | --- |"]
        for action in options:
            what = action.help or ""
            if action.choices and not isinstance(action, argparse._SubParsersAction):
                what += f" (one of {', '.join(map(str, action.choices))})"
            lines.append(f"| {_option(action)} | {_default(action)} | {_cell(what.strip())} |")
        lines.append("")
    return "\n".join(lines)


def _wide(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, width=100)


def _option(action: argparse.Action) -> str:
    names = action.option_strings or [action.dest]
    metavar = ""
    if action.option_strings and action.nargs != 0:
        metavar = " " + (action.metavar or action.dest.upper())
    return ", ".join(f"`{n}{_cell(metavar)}`" for n in names)


def _default(action: argparse.Action) -> str:
    if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
        return ""
    return f"`{action.default}`"


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


@event_priority(100)  # before mkdocs-jupyter's on_files, so it renders the lessons added here
def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "knobs.md", content=knobs_markdown()))
    files.append(File.generated(config, "cli.md", content=cli_markdown()))
    for lesson in sorted([*(REPO / "notebooks").glob("*.ipynb"), REPO / "notebooks" / "README.md"]):
        # the real files, at notebooks/ in the site too (a lesson's links to the others work)
        files.append(
            File(
                f"notebooks/{lesson.name}",
                src_dir=str(REPO),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        )
    return files
