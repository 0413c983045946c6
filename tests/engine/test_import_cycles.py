"""No two modules of the package import each other, directly or round a longer circle.

A circle between files means neither can be read, tested or moved without the other (the
engine had one: ``burst`` <-> ``lightning_fit`` through the loop's settings, and the launchers
another: ``launchers`` <-> ``slurm``). The graph is read from the source with ``ast``, every
import counted: at the top, inside functions (the lazy ones), under ``TYPE_CHECKING`` and
``importlib.import_module("workbench....")`` with a literal name. ``from a import b`` is an
edge to ``a.b`` where that is a module, else to ``a``; the parent packages a dotted import
runs first are not edges (they are what the package is made of, not what a module needs), and
neither is an import of the root package ``workbench`` itself (``engine.hardware`` reads its
``__version__``): Python runs the root before any module under it, so such an import loads
nothing and orders nothing, while the root's own lazy exports name half the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

from import_graph import cycles, package_modules

import workbench

ROOT = Path(workbench.__file__).resolve().parent

KNOWN_CYCLES: list[set[str]] = []
"""Circles that other work in progress owns and will break; each with who owns it. Empty: a
new circle anywhere in the package fails this test."""


def _imported(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> set[str]:
    here = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):  # fmt: skip
            found.add(node.args[0].value)
    return {m for m in found if m in known and m not in (name, ROOT.name)}


def import_graph() -> dict[str, set[str]]:
    """Each module of the package, and the modules of the package it imports."""
    modules = package_modules(ROOT)
    known = set(modules)
    return {
        name: _imported(ast.parse(path.read_text()), name, path.name == "__init__.py", known)
        for name, path in modules.items()
    }


def test_the_graph_sees_imports_inside_functions_and_by_name():
    graph = import_graph()
    assert "workbench.engine.burst" in graph["workbench.distributed.dispatch"]
    # pick_launcher imports the SLURM launcher by name, only when asked for
    assert "workbench.distributed.slurm" in graph["workbench.distributed.launchers"]


def test_the_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]


def test_no_module_of_the_package_is_in_an_import_circle():
    found = [group for group in cycles(import_graph()) if group not in KNOWN_CYCLES]
    assert found == [], "import circles: " + "; ".join(
        " <-> ".join(sorted(group)) for group in found
    )
