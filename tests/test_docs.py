"""The documentation site's generated pages: every knob and every command, from the code."""

import importlib.util
import re
from pathlib import Path

import pytest

from workbench.cli import build_parser
from workbench.core import nccl
from workbench.core.knobs import knob_specs

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hooks():
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_knob_has_a_section_with_its_name_as_anchor(hooks):
    page = hooks.knobs_markdown()
    for spec in knob_specs():
        section = page.split(f"### `{spec.name}` {{#{spec.name}}}\n", 1)
        assert len(section) == 2, f"{spec.name} has no section"
        body = section[1].split("\n### ", 1)[0]
        assert spec.doc in body and f"- allowed: {spec.allowed()}" in body
    for name in nccl.VARIABLES:
        assert f"| `{name}` |" in page


def test_every_command_and_option_is_in_the_cli_reference(hooks):
    page = hooks.cli_markdown()
    parser = build_parser()
    (commands,) = [a for a in parser._actions if hasattr(a, "choices") and a.dest == "command"]
    for name, sub in commands.choices.items():
        assert f"## `workbench {name}` {{#{name}}}" in page
        chapter = page.split(f"{{#{name}}}", 1)[1].split("\n## ", 1)[0]
        for action in sub._actions:
            for option in action.option_strings:
                assert re.search(rf"`{re.escape(option)}[ `]", chapter), (name, option)


def test_the_pages_link_knobs_that_exist(hooks):
    """A link to knobs.md#NAME must name a knob; the strict build checks it too, this says which."""
    names = {s.name for s in knob_specs()} | {"nccl-variables"}
    for page in (REPO / "docs").glob("*.md"):
        for anchor in re.findall(r"knobs\.md#([\w-]+)", page.read_text()):
            assert anchor in names, f"{page.name} links to knobs.md#{anchor}"
