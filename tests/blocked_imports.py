"""Run a snippet in a fresh interpreter where the UI packages and DALI cannot be imported.

That is what a bare GPU box has: the engine (and the production config loader) must work there.
Checking ``sys.modules`` afterwards is not enough: code that tries ``import altair`` inside
``try/except ImportError`` leaves nothing there, yet on a box that has altair it would import
it. So the blocking finder records every attempt, and any import attempt fails the test.

The finder is installed by a generated ``sitecustomize`` on ``PYTHONPATH``, so every Python
process the snippet starts has it too: torchrun and its ranks (a DDP burst) are checked like
the kernel's process. Each attempt is appended to a log file with the process that made it.

A *probe* (``importlib.util.find_spec``, how ``dali_available`` asks whether DALI is installed
without importing it) is recorded too but allowed: it imports nothing. The two are told apart
by the import machinery on the stack: only an ``import`` statement (or ``importlib.
import_module``) goes through ``_find_and_load``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from benchmark_modules import load_benchmark

BLOCKED = list(load_benchmark("gpu_box").BLOCKED_ON_THE_BOX)  # the lent GPU box lacks these
LOG_ENV = "WORKBENCH_TEST_BLOCKED_LOG"

_SITECUSTOMIZE = f"""
import atexit, importlib.abc, json, os, sys

_BLOCKED = {BLOCKED!r}
_LOG = os.environ.get({LOG_ENV!r})

def _blocked(name):
    return any(name == b or name.startswith(b + ".") for b in _BLOCKED)

def _log(record):
    if _LOG:
        record.update(pid=os.getpid(), argv=" ".join(sys.argv[:3]))
        with open(_LOG, "a") as f:
            f.write(json.dumps(record) + "\\n")

def _attempt(name):
    frame, kind = sys._getframe(2), "probe"
    while frame is not None and frame.f_globals.get("__name__", "").startswith("importlib"):
        kind = "import" if frame.f_code.co_name == "_find_and_load" else kind
        frame = frame.f_back
    where = f"{{frame.f_code.co_filename}}:{{frame.f_lineno}}" if frame else "?"
    return {{"module": name, "kind": kind, "where": where}}

class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if _blocked(name):
            _log(_attempt(name))
            raise ModuleNotFoundError(f"blocked for this test: {{name}}")
        return None

@atexit.register
def _leaks():
    leaked = sorted(m for m in sys.modules if _blocked(m))
    if leaked:
        _log({{"module": ",".join(leaked), "kind": "leaked", "where": "sys.modules at exit"}})

sys.meta_path.insert(0, _Block())
_log({{"kind": "started"}})
"""

_PREAMBLE = """
import json, sys
out = {}
"""

_EPILOGUE = """
import os
from sitecustomize import _blocked
out["leaked"] = sorted(m for m in sys.modules if _blocked(m))
print(json.dumps({"out": out, "pid": os.getpid()}))
"""


def run_with_ui_blocked(body: str, timeout: float = 300) -> dict:
    """Run ``body`` (which fills the dict ``out``); return ``out`` plus ``leaked`` modules.

    Fails (AssertionError naming the module, the importing line and the process) if ``body``
    or anything it calls, in this process or any it starts, tried to import a blocked module,
    even where the ImportError was caught.
    """
    doc = run_blocked_raw(body, timeout)
    imports = [a for a in doc["attempts"] if a["kind"] in ("import", "leaked")]
    assert not imports, f"blocked modules were imported (and the error caught): {imports}"
    return doc["out"]


def run_blocked_raw(body: str, timeout: float = 300) -> dict:
    """``{"out": ..., "attempts": [{"module", "kind", "where", "pid", "argv", "child"}, ...],
    "children": [argv, ...]}``, nothing asserted. ``child``: made by a process the snippet
    started; ``children``: every Python process it started (each ran under the blocker)."""
    script = _PREAMBLE + textwrap.dedent(body) + _EPILOGUE
    with tempfile.TemporaryDirectory(prefix="wb-blocked-") as tmp:
        site_dir, log = Path(tmp) / "site", Path(tmp) / "attempts.jsonl"
        site_dir.mkdir()
        (site_dir / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        paths = [str(site_dir), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), LOG_ENV: str(log)}
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=timeout, env=env)  # fmt: skip
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout.strip().splitlines()[-1])
        lines = log.read_text().splitlines() if log.exists() else []
    records = [json.loads(line) for line in lines]
    for r in records:
        r["child"] = r["pid"] != doc["pid"]
    started = [r for r in records if r["kind"] == "started" and not r["child"]]
    assert started, f"the blocker did not load in the snippet's process: {p.stderr[-2000:]}"
    attempts = [r for r in records if r["kind"] != "started"]
    children = [r["argv"] for r in records if r["kind"] == "started" and r["child"]]
    return {"out": doc["out"], "attempts": attempts, "children": children}
