"""Run a snippet in a fresh interpreter where the UI packages and DALI cannot be imported.

That is what a bare GPU box has: the engine (and the production config loader) must work there.
Checking ``sys.modules`` afterwards is not enough: code that tries ``import altair`` inside
``try/except ImportError`` leaves nothing there, yet on a box that has altair it would import
it. So the blocking finder records every attempt, and any import attempt fails the test.

A *probe* (``importlib.util.find_spec``, how ``dali_available`` asks whether DALI is installed
without importing it) is recorded too but allowed: it imports nothing. The two are told apart
by the import machinery on the stack: only an ``import`` statement (or ``importlib.
import_module``) goes through ``_find_and_load``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

BLOCKED = ["ipywidgets", "altair", "anywidget", "vl_convert", "jupyterlab", "nvidia.dali"]

_PREAMBLE = f"""
import importlib.abc, json, sys

BLOCKED = {BLOCKED!r}
ATTEMPTS = []

def _blocked(name):
    return any(name == b or name.startswith(b + ".") for b in BLOCKED)

def _attempt(name):
    frame, kind = sys._getframe(2), "probe"
    while frame is not None and frame.f_globals.get("__name__", "").startswith("importlib"):
        kind = "import" if frame.f_code.co_name == "_find_and_load" else kind
        frame = frame.f_back
    where = f"{{frame.f_code.co_filename}}:{{frame.f_lineno}}" if frame else "?"
    return {{"module": name, "kind": kind, "where": where}}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if _blocked(name):
            ATTEMPTS.append(_attempt(name))
            raise ModuleNotFoundError(f"blocked for this test: {{name}}")
        return None

sys.meta_path.insert(0, Block())
out = {{}}
"""

_EPILOGUE = """
out["leaked"] = sorted(m for m in sys.modules if _blocked(m))
print(json.dumps({"out": out, "attempts": ATTEMPTS}))
"""


def run_with_ui_blocked(body: str, timeout: float = 300) -> dict:
    """Run ``body`` (which fills the dict ``out``); return ``out`` plus ``leaked`` modules.

    Fails (AssertionError naming the module and the importing line) if ``body`` or anything
    it calls tried to import a blocked module, even where the ImportError was caught.
    """
    doc = run_blocked_raw(body, timeout)
    imports = [a for a in doc["attempts"] if a["kind"] == "import"]
    assert not imports, f"blocked modules were imported (and the error caught): {imports}"
    return doc["out"]


def run_blocked_raw(body: str, timeout: float = 300) -> dict:
    """``{"out": ..., "attempts": [{"module", "kind", "where"}, ...]}``, nothing asserted."""
    script = _PREAMBLE + textwrap.dedent(body) + _EPILOGUE
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=timeout)  # fmt: skip
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])
