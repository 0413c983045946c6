"""The dispatcher (workbench/cli/dispatch.py): small, and it imports a command's module only
when that command is chosen, so --version and the light commands stay light."""

import json
import os
import subprocess
import sys
from pathlib import Path

from workbench.cli import main


def test_version_names_our_distribution_and_where_workbench_is_imported_from(capsys):
    import workbench

    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"throughput-workbench {workbench.__version__} (import workbench from ")
    assert os.path.dirname(workbench.__file__) in out


def test_the_dispatcher_stays_small():
    """pip's and accelerate's CLIs keep one module a command under a small dispatcher."""
    from workbench.cli import dispatch

    assert len(Path(dispatch.__file__).read_text().splitlines()) <= 100


LOADED = """
import contextlib, io, json, sys
from workbench.cli import main
from workbench.cli.dispatch import COMMANDS

def commands():
    return sorted(n for n, (m, _) in COMMANDS.items() if f"workbench.cli.{m}" in sys.modules)

seen = {"import": commands()}
for argv in (["--version"], ["--help"], ["history", "--store", sys.argv[1], "--json"]):
    with contextlib.redirect_stdout(io.StringIO()):
        main(argv)
    seen[argv[0]] = commands()
seen["torch"] = "torch" in sys.modules
print(json.dumps(seen))
"""


def test_a_command_module_is_imported_only_when_its_command_is_chosen(tmp_path):
    """``import workbench.cli``, ``--version`` and ``--help`` load no command's module (nor
    torch); ``workbench history`` loads its own only."""
    store = str(tmp_path / "h.sqlite")
    p = subprocess.run([sys.executable, "-c", LOADED, store], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"import": [], "--version": [], "--help": [],
                                    "history": ["history"], "torch": False}  # fmt: skip
