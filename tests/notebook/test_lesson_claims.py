"""Every figure the lessons state is registered with its source, and its source agrees.

The prose is read as a learner reads it: each lesson's markdown cells and the comments of its
code cells, and the whole instructor guide but for the tables generated from the kept runs
(``<!-- gpu-table -->``) and product names ("H100 80GB"). A number with a performance unit there
(x, %, images/s, samples/s, tokens/s, GB/s, Gb/s, TFLOP/s, MiB, GiB, GB, MB, KiB) must be a
claim of ``lesson_claims.CLAIMS``; each claim must still be stated, its source must give the
same figure at the precision it is written with, and it is marked measured here, published,
expected or a setting (``lesson_claims.mark``).
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from dataclasses import dataclass

import pytest
from lesson_claims import CLAIMS, MARKS, ROOT, Claim, Given, Published, Written, mark

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
GUIDE = ROOT / "notebooks" / "README.md"
GENERATED = re.compile(r"<!-- gpu-table: [\w-]+ -->.*?<!-- /gpu-table -->", re.DOTALL)
"""The guide's tables ``publish_gpu.py`` writes from the kept runs: their figures are the runs'."""
PRODUCT = re.compile(r"\d+GB")
"""A product's name ("H100 80GB", "A100 40GB"): a memory size is written with a space."""
NUMBER = r"\d[\d,]*(?:\.\d+)?"
UNIT = (r"x\b|%|\s?(?:images|img|samples|tokens)/s\b|\s?[GMT]B/s\b|\s?Gb/s\b|\s?TFLOP/s\b|"
        r"\s?(?:MiB|GiB|KiB|GB|MB)\b")  # fmt: skip
FIGURE = re.compile(rf"(?<![\w.\-/]){NUMBER}(?:\s*-\s*{NUMBER})?(?:{UNIT})")
"""A number or a range with a unit right after it: "4.7x", "15-30%", "12.5 GB/s". Not a
product written with spaces ("64 x 3"), a variable ("n x S") or a name ("x86")."""


@dataclass(frozen=True)
class Stated:
    where: str
    text: str
    sentence: str
    cell: str


def prose_of(cell: dict) -> str:
    """What a learner reads in a cell: markdown whole, code by its comments."""
    source = "".join(cell["source"])
    if cell["cell_type"] != "code":
        return source
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return "\n".join(t.string for t in tokens if t.type == tokenize.COMMENT)


def figures(text: str, where: str, cell: str = "") -> list[Stated]:
    found = []
    for m in FIGURE.finditer(text):
        start, end = text.rfind(".", 0, m.start()) + 1, text.find(". ", m.end())
        sentence = " ".join(text[start : None if end < 0 else end].split())
        found.append(Stated(where, m.group(0), sentence, cell))
    return found


def stated() -> list[Stated]:
    out = []
    for path in NOTEBOOKS:
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            out += figures(prose_of(cell), path.name[:2], f"{path.name} cell {i}")
    guide = GENERATED.sub("", GUIDE.read_text())
    out += [s for s in figures(guide, "guide", "README.md") if not PRODUCT.fullmatch(s.text)]
    return out


def claim_for(s: Stated) -> Claim | None:
    same = [c for c in CLAIMS if (c.where, c.text) == (s.where, s.text)]
    if len(same) > 1:
        same = [c for c in same if c.near and c.near in s.sentence]
    return same[0] if len(same) == 1 else None


def numbers(text: str) -> list[tuple[float, int]]:
    """Each number of a claim's text with its decimals: "1.2-1.3x" -> [(1.2, 1), (1.3, 1)]."""
    return [(float(n.replace(",", "")), len(n.split(".")[1]) if "." in n else 0)
            for n in re.findall(NUMBER, text)]  # fmt: skip


def disagreement(claim: Claim) -> str | None:
    """Why the claim's source does not give its figure, or None when it does."""
    source = claim.source
    if isinstance(source, Given):
        return None if source.why else "a given value needs its why"
    if isinstance(source, Published):
        return None if source.url.startswith("https://") and source.what else "no url"
    if isinstance(source, Written):
        text = (ROOT / source.path).read_text()
        return None if source.phrase in text else f"{source.path} no longer says {source.phrase!r}"
    got = source.value()
    got = got if isinstance(got, tuple) else (got,)
    stated_numbers = numbers(claim.text)
    if len(got) != len(stated_numbers):
        return f"{source} gives {got}, the text states {claim.text}"
    for value, (number, decimals) in zip(got, stated_numbers, strict=True):
        tol = getattr(source, "tol", None)
        ok = abs(value - number) <= tol if tol else round(value, decimals) == number
        if not ok:
            return f"{source} gives {value:.4g}, the text states {claim.text}"
    return None


def test_every_figure_in_the_lessons_prose_is_registered_with_its_source():
    missing = [f"{s.cell}: {s.text!r} in {s.sentence[:140]!r}" for s in stated()
               if claim_for(s) is None]  # fmt: skip
    assert not missing, (
        "figures stated without a registered source (add each to tests/notebook/"
        "lesson_claims.py with where it comes from, or compute it in a code cell):\n"
        + "\n".join(missing)
    )


def test_every_registered_claim_is_still_stated():
    used = {claim_for(s) for s in stated()}
    stale = [f"{c.where} {c.text!r} ({c.source})" for c in CLAIMS if c not in used]
    assert not stale, "claims no lesson states any more (remove them):\n" + "\n".join(stale)


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: f"{c.where}-{c.text}-{c.near}")
def test_each_claims_source_agrees_with_it(claim):
    assert disagreement(claim) is None, disagreement(claim)


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: f"{c.where}-{c.text}-{c.near}")
def test_each_claim_is_marked_measured_here_published_expected_or_a_setting(claim):
    assert mark(claim.source) in MARKS


def test_the_reader_finds_figures_and_nothing_else():
    text = (
        "bf16 ran 4.7x fp32, 1.2-1.3x with channels_last, 12.5 GB/s a port, 15-30% of it, "
        "2,470 images/s and 25 MiB; not 64 x 3 x 224, n x S bytes, x86 or 2(n-1)/n x S."
    )
    assert [s.text for s in figures(text, "t")] == [
        "4.7x", "1.2-1.3x", "12.5 GB/s", "15-30%", "2,470 images/s", "25 MiB"]  # fmt: skip
    code = {"cell_type": "code", "source": ["x = '9x faster'  # about 2x here\n"]}
    assert [s.text for s in figures(prose_of(code), "t")] == ["2x"]  # a comment, not a string


def test_a_new_uncited_figure_would_fail_and_a_wrong_source_is_named():
    typed = figures("On the H200 bf16 ran 9.9x faster.", "03")[0]
    assert claim_for(typed) is None
    moved = Claim("09", "1.8x", Written("docs/figures.md", "256 px would be 170 MiB, 2.0x"))
    assert "no longer says" in disagreement(moved)
    bf16 = next(c for c in CLAIMS if c.where == "guide" and c.text == "4.7x")
    assert disagreement(bf16) is None
    assert "gives 4.67" in disagreement(Claim("guide", "4.9x", bf16.source))
    two = [c for c in CLAIMS if (c.where, c.text) == ("11", "5%")]
    assert {claim_for(Stated("11", "5%", s, "")) for s in ("within 5%", "at 5% MFU")} == set(two)
