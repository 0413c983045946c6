"""A benchmark's kept runs: the command line of a benchmark of interleaved pairs, the run's
JSON document printed and written to ``--out``, the spread of its per-pair ratios, and the
published Markdown table read back from kept runs (every figure read from the JSON, none
typed)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path


def pairs_parser(doc: str, pairs: int, seconds: float) -> argparse.ArgumentParser:
    """A parser described by the script's docstring's first line, with the options every
    benchmark of interleaved pairs on the JPEG sample set takes; the script adds its own."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=pairs, help="even: each side first as often")
    ap.add_argument("--seconds", type=float, default=seconds, help="length of each run")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--data", type=Path, default=None, help="an ImageFolder (default: samples)")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON document here")
    return ap


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max, rounded to 4 places as the kept documents hold them."""
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def keep(doc: dict, out: Path | None) -> None:
    """Print the run's document, and write it to ``out`` when one was given."""
    text = json.dumps(doc, indent=1)
    if out:
        out.write_text(text + "\n")
    print(text)


def markdown_table(
    paths: list[Path],
    columns: list[tuple[str, str]],
    run_name: Callable[[Path, dict], str],
    cells: Callable[[dict], list[str]],
) -> str:
    """A Markdown table of kept runs, in the order given: ``columns`` as (title, alignment),
    then a line per row of each run's ``rows``, its ``run_name`` first, then its ``cells``."""
    lines = [_line([title for title, _ in columns]), _line([align for _, align in columns])]
    for path in paths:
        doc = json.loads(path.read_text())
        name = run_name(path, doc)
        lines += [_line([name, *cells(row)]) for row in doc["rows"]]
    return "\n".join(lines)


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def print_table_if_asked(table: Callable[[list[Path]], str]) -> bool:
    """``SCRIPT --table RUN.json ...``: print the table of those kept runs and say so (the
    script then stops there, measuring nothing)."""
    if sys.argv[1:2] != ["--table"]:
        return False
    print(table([Path(p) for p in sys.argv[2:]]))
    return True
