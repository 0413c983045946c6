"""The wheelhouse: what the lessons need beyond what a lent GPU box has, as wheels that install
there with ``pip install --no-index`` (the box has no network).

The box (``python3`` is CPython 3.12 on x86_64 Linux) has torch, pandas, numpy, pyyaml, jinja2,
narwhals, attrs... but no kernel, no notebook client and no UI packages. The lessons need those
to run headless: ipykernel (the kernel nbclient starts), nbclient and nbformat, jupyter_client,
ipywidgets, anywidget, altair and vl-convert-python (``workshop.start()`` draws charts as SVG
through it), webdataset and lmdb (the storage lesson), and torchao (the ``fp8`` knob: float8
training; 0.18 is built for torch 2.11+, the box's torch). ``wheelhouse.txt`` beside this file
pins every wheel of their closure that the box lacks, so two builds fetch the same versions.

    make wheelhouse                              # .wheelhouse/, checked and sized
    python benchmarks/wheelhouse.py [--dir D] [--limit-mib N]
    python benchmarks/wheelhouse.py --lock       # print pins from this environment's versions

The build downloads each pin for cp312 manylinux x86_64 (``--only-binary=:all:``, no
dependencies: the pins are the whole list), removes wheels that are not pinned (one version of
each: two stop the install), then walks every wheel's METADATA ``Requires-Dist``: a requirement
that applies on the box (markers evaluated for cp312 Linux x86_64, extras skipped) must be
pinned, with a version it accepts, be one the box has (``BOX_HAS``) or one left out on
purpose (``LEFT_OUT``: debugpy and jedi, 8.5 MiB that no headless lesson uses). Then every
module the lessons can import (each notebook's code cells, the whole workbench package, lazy
imports included, and the script lesson 8 runs) must be the standard library's, the box's,
pinned, or one the lessons do without (``DO_WITHOUT``): a dry check that the box plus the
wheelhouse satisfy every import. It prints the total size and fails above ``--limit-mib``
(48 MiB: a call to the box carries at most 64 MiB, the working tree included). On the box
(benchmarks/run_lessons.py gives the commands; the GPU session's lessons steps run them):
    python3 -m pip install -q --no-index --no-deps --target /tmp/wb-site .wheelhouse/*.whl
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from email.parser import HeaderParser
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCK = Path(__file__).with_name("wheelhouse.txt")
DEFAULT_DIR = REPO / ".wheelhouse"
LIMIT_MIB = 48.0

# What the lessons import beyond the engine (and the kernel that runs them).
ROOTS = (
    "ipykernel",
    "nbclient",
    "nbformat",
    "jupyter-client",
    "ipywidgets",
    "anywidget",
    "altair",
    "vl-convert-python",
    "webdataset",
    "lmdb",
    "torchao",  # the fp8 knob's float8 training (0.18 needs torch 2.11+, the box's; no deps)
)

# The box's packages that the closure and the lessons rely on (device/KINDS.md, "Python
# packages already there", read on a box on 2026-11-17). Not carried: a second copy would
# shadow the box's own build. A requirement or an import outside this set and the pins fails
# the build, so a new dependency is noticed here, not on the box.
BOX_HAS = frozenset(
    {
        "attrs",
        "certifi",
        "idna",
        "jinja2",
        "lightning",
        "markupsafe",
        "narwhals",
        "numpy",
        "nvidia-ml-py",
        "packaging",
        "pandas",
        "pillow",
        "psutil",
        "pygments",
        "python-dateutil",
        "pytorch-lightning",
        "pyyaml",
        "requests",
        "six",
        "torch",
        "torchvision",
        "typing-extensions",
        "urllib3",
    }
)

# Modules the workbench imports that neither the box nor the wheelhouse has, each with how the
# lessons do without it (the code that uses it tries the import and says what it does instead).
DO_WITHOUT = {
    "nvidia.dali": "DALI: the lessons and the data-path table say 'not installed' without it",
    "psycopg": "the class store's PostgreSQL driver: a room's server, not the box (SQLite here)",
    "torchcodec": "decode=gpu decodes with torchvision.io where TorchCodec is absent",
    "transformers": "hf:gpt2 and wb.hf_causal_lm only: no lesson builds a Hugging Face model, "
    "and the library with its tokenizers is far past the carry's 48 MiB",
}
# What the lessons run besides the notebooks and the workbench (lesson 8 runs the script).
LESSON_SCRIPTS = ("examples/train.py",)

# Required by a pinned wheel, needed by no lesson, and left out to keep the carry small
# (8.5 MiB of 49.5): the code that uses each tries the import and does without.
LEFT_OUT = {
    "debugpy": "ipykernel's debugger only (ipykernel.debugger tries the import)",
    "jedi": "IPython's tab completion only (imported when a completion is asked for)",
}

# The box's interpreter, for markers and wheel tags.
TARGET_ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "implementation_version": "3.12.3",
    "platform_python_implementation": "CPython",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "sys_platform": "linux",
    "os_name": "posix",
    "extra": "",
}
# pip matches a manylinux tag's glibc version exactly: name every one the box can load.
PLATFORMS = (
    *(f"manylinux_2_{n}_x86_64" for n in range(39, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)


def read_lock(path: Path = LOCK) -> dict[str, Version]:
    """The pins: one ``name==version`` a line; ``#`` starts a comment."""
    pins: dict[str, Version] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not version.strip():
            raise ValueError(f"{path.name}:{number}: {raw!r} is not name==version")
        key = canonicalize_name(name.strip())
        if key in pins:
            raise ValueError(f"{path.name}:{number}: {name.strip()} is pinned twice")
        pins[key] = Version(version.strip())
    return pins


def applies(requirement: Requirement) -> bool:
    """True where ``requirement`` is needed on the box: no extra, markers true for cp312."""
    return requirement.marker is None or requirement.marker.evaluate(TARGET_ENV)


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The ``Requires-Dist`` lines of ``wheel``'s METADATA that apply on the box."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        headers = HeaderParser().parsestr(zf.read(name).decode())
    found = [Requirement(line) for line in headers.get_all("Requires-Dist") or []]
    return [r for r in found if applies(r)]


def closure_problems(wheels: Iterable[Path], pins: dict[str, Version]) -> list[str]:
    """Each requirement of ``wheels`` that is neither pinned (at a version it accepts) nor on
    the box, as a sentence; empty when the wheelhouse is complete."""
    problems = []
    for wheel in wheels:
        owner = wheel.name.split("-", 2)[:2]
        for req in wheel_requirements(wheel):
            key = canonicalize_name(req.name)
            if key in BOX_HAS or key in LEFT_OUT:
                continue
            if key not in pins:
                problems.append(f"{'-'.join(owner)} needs {req}: neither pinned nor on the box")
            elif not req.specifier.contains(pins[key], prereleases=True):
                problems.append(f"{'-'.join(owner)} needs {req}, pinned {key}=={pins[key]}")
    return problems


def download(pins: dict[str, Version], into: Path) -> None:
    """Fetch each pin's wheel for the box unless ``into`` already holds it."""
    have = {_wheel_key(w) for w in into.glob("*.whl")}
    missing = [
        f"{name}=={version}" for name, version in pins.items() if (name, version) not in have
    ]
    if not missing:
        return
    tags = [arg for p in PLATFORMS for arg in ("--platform", p)]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
               *tags, "--dest", str(into), *missing]  # fmt: skip
    subprocess.run(command, check=True)


def prune(pins: dict[str, Version], into: Path) -> list[str]:
    """Remove wheels that are not pinned (older versions, dropped packages); their names."""
    removed = []
    for wheel in sorted(into.glob("*.whl")):
        name, version = _wheel_key(wheel)
        if pins.get(name) != version:
            wheel.unlink()
            removed.append(wheel.name)
    return removed


def lock_from_environment() -> list[str]:
    """``name==version`` for the closure of ``ROOTS`` outside the box, at the versions this
    environment has installed (the project's venv: what its tests ran against)."""
    seen: dict[str, str] = {}
    todo = [canonicalize_name(r) for r in ROOTS]
    while todo:
        key = todo.pop()
        if key in seen or key in BOX_HAS or key in LEFT_OUT:
            continue
        dist = metadata.distribution(key)
        seen[key] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if applies(req):
                todo.append(canonicalize_name(req.name))
    return [f"{name}=={seen[name]}" for name in sorted(seen)]


def imported_modules(sources: Iterable[str]) -> set[str]:
    """The absolute modules ``sources`` import: import statements anywhere (a lazy import in a
    function counts: the lesson may reach it) and ``importlib.import_module("name")``."""
    found: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module"
                  and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)):  # fmt: skip
                found.add(node.args[0].value)
    return found


def lesson_sources(root: Path = REPO) -> list[str]:
    """What runs in a lesson's kernel: every notebook's code cells (IPython's ``%`` and ``!``
    lines left out), the workbench package, and ``LESSON_SCRIPTS``."""
    sources = []
    for nb in sorted((root / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "code":
                lines = "".join(cell["source"]).splitlines()
                sources.append("\n".join(x for x in lines if not x.lstrip().startswith(("%", "!"))))
    sources += [p.read_text() for p in sorted((root / "workbench").rglob("*.py"))]
    return sources + [(root / s).read_text() for s in LESSON_SCRIPTS if (root / s).exists()]


def import_problems(
    modules: Iterable[str], pins: dict[str, Version], providers: dict[str, list[str]] | None = None
) -> list[str]:
    """Each of ``modules`` that the box would lack: not the standard library, the workbench,
    ``DO_WITHOUT``, the box's (``BOX_HAS``) or pinned, as a sentence. ``providers``: import name
    to distributions (``importlib.metadata.packages_distributions``, this environment's)."""
    providers = metadata.packages_distributions() if providers is None else providers
    problems = []
    for module in sorted(modules):
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top == "workbench" or _without(module):
            continue
        dists = {canonicalize_name(d) for d in providers.get(top, [])}
        if not dists:
            problems.append(f"{module}: no distribution here provides it, so neither can the box")
        elif not dists & (BOX_HAS | set(pins)):
            problems.append(f"{module} ({', '.join(sorted(dists))}): neither on the box nor "
                            "pinned in wheelhouse.txt")  # fmt: skip
    return problems


def _without(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in DO_WITHOUT)


def _wheel_key(wheel: Path) -> tuple[str, Version]:
    name, version, _, _ = parse_wheel_filename(wheel.name)
    return canonicalize_name(name), version


def build(into: Path, limit_mib: float) -> int:
    """Download, prune and check the wheelhouse; 0 when complete and under the limit."""
    pins = read_lock()
    into.mkdir(parents=True, exist_ok=True)
    download(pins, into)
    for name in prune(pins, into):
        print(f"removed {name}: not pinned")
    wheels = sorted(into.glob("*.whl"))
    problems = closure_problems(wheels, pins)
    absent = sorted(set(pins) - {_wheel_key(w)[0] for w in wheels})
    problems += [f"{name}: pinned but no wheel was downloaded" for name in absent]
    problems += import_problems(imported_modules(lesson_sources()), pins)
    size_mib = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"{len(wheels)} wheels in {into}: {size_mib:.1f} MiB (limit {limit_mib:g} MiB)")
    if size_mib > limit_mib:
        problems.append(f"{size_mib:.1f} MiB is over the limit of {limit_mib:g} MiB")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="where the wheels go")
    parser.add_argument("--limit-mib", type=float, default=LIMIT_MIB, help="largest total size")
    parser.add_argument("--lock", action="store_true", help="print pins from this environment")
    args = parser.parse_args(argv)
    if args.lock:
        print("\n".join(lock_from_environment()))
        return 0
    return build(args.dir, args.limit_mib)


if __name__ == "__main__":
    sys.exit(main())
