"""The import rules beside the layers (which ``lint-imports`` checks; README, "Layout").

Read from the source, as a reviewer would: no circles between the package's modules, no
``from x import _private`` across modules of different sub-packages, and an import inside a
function only for a heavy or optional dependency, with a one-line reason next to it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from import_graph import cycles, package_modules

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"

# Imported inside functions, never at the top of a module: heavy, optional, or loaded only
# where a light path must not pay for them.
HEAVY = (
    "nvidia.dali",
    "altair",
    "ipywidgets",
    "anywidget",
    "vl_convert",
    "torch.profiler",
    "IPython",
    "torch",
    "torchvision",
    "pynvml",
    "pandas",
    "fcntl",
    "lmdb",
    "webdataset",
    "lightning",
    "pytorch_lightning",
    "psycopg",
    "torchcodec",
    "transformers",
    "torchao",
)  # fmt: skip  (psycopg: the class extra's driver, absent without it; torchcodec: decode's;
#                transformers: the hf extra's, for Hugging Face workloads; torchao: the fp8
#                extra's, for float8 training)
# Modules whose own function-level imports of the package keep a light path light: what the
# CLI's commands share (the dispatcher loads it: no torch for `--version`, `--help`) and
# ``import workbench``, the production side's ``workbench.config`` (no torch until a method
# needs it). A command's own module has its imports at its top: only that command loads it.
# ... and distributed/dispatch.py: a burst in this process must not load a torchrun job's
# launchers and stores (tests/engine/test_import_cost.py counts the modules).
LIGHT_PATHS = ("workbench/__init__.py", "workbench/cli/common.py", "workbench/config/",
               "workbench/distributed/dispatch.py")  # fmt: skip
# The package's own modules that are heavy to import, allowed inside a function anywhere
# (with the reason): the sample datasets (PIL, numpy) and the charts (Altair).
HEAVY_OWN = ("workbench.engine.datasets", "workbench.engine", "workbench.notebook.plots",
             "workbench.notebook")  # fmt: skip


def _imports(path: Path) -> list[tuple[ast.stmt, bool]]:
    """Every import statement (outside ``if TYPE_CHECKING:``), and whether it is in a function."""
    found: list[tuple[ast.stmt, bool]] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, in_function))
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            walk(child, inner)

    walk(ast.parse(path.read_text()), False)
    return found


def _targets(node: ast.stmt, modules: dict[str, Path]) -> list[str]:
    """The package's modules an import statement loads (a ``from pkg import submodule`` too)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in modules]
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
    return subs or ([base] if base in modules else [])


def _graph() -> dict[str, set[str]]:
    modules = package_modules(PACKAGE)
    return {name: {t for node, _ in _imports(path) for t in _targets(node, modules)} - {name}
            for name, path in modules.items()}  # fmt: skip


def _package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_module_imports_itself_back():
    assert cycles(_graph()) == []


def test_no_private_name_is_imported_across_sub_packages():
    modules = package_modules(PACKAGE)
    bad = []
    for name, path in modules.items():
        for node, _ in _imports(path):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if module is None or not module.startswith("workbench"):
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and _package_of(module) != _package_of(name):
                    bad.append(f"{path.name}:{node.lineno} from {module} import {alias.name}")
    assert bad == []


def test_imports_inside_functions_are_for_heavy_dependencies_and_say_why():
    bad = []
    for path in package_modules(PACKAGE).values():
        lines = path.read_text().splitlines()
        where = path.relative_to(PACKAGE.parent).as_posix()
        for node, in_function in _imports(path):
            if not in_function:
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            own = any((n or "").startswith("workbench") for n in names)
            heavy = all((n or "").split(".")[0] in {h.split(".")[0] for h in HEAVY} for n in names)
            allowed = (own and where.startswith(LIGHT_PATHS)) or (not own and heavy)
            if own and all(n in HEAVY_OWN for n in names):
                heavy_own = {a.name for a in node.names} <= {"datasets", "plots", "ImageFiles"}
                allowed = allowed or heavy_own
            said = _said(lines, node.lineno)
            if not (allowed and said):
                bad.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    assert bad == []


def _said(lines: list[str], lineno: int) -> bool:
    """A comment on the import's line, or on the line above it or above the block of imports
    it belongs to (one reason for a command's few imports)."""
    if "#" in lines[lineno - 1]:
        return True
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith(("import ", "from ")):
        i -= 1
    return i >= 0 and lines[i].strip().startswith("#")
