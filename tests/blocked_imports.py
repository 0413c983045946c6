"""Run a snippet in a fresh interpreter where the UI packages and DALI cannot be imported.

That is what a bare GPU box has: the engine (and the production config loader) must work there.
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

def _blocked(name):
    return any(name == b or name.startswith(b + ".") for b in BLOCKED)

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if _blocked(name):
            raise ModuleNotFoundError(f"blocked for this test: {{name}}")
        return None

sys.meta_path.insert(0, Block())
out = {{}}
"""

_EPILOGUE = """
out["leaked"] = sorted(m for m in sys.modules if _blocked(m))
print(json.dumps(out))
"""


def run_with_ui_blocked(body: str, timeout: float = 300) -> dict:
    """Run ``body`` (which fills the dict ``out``); return ``out`` plus ``leaked`` modules."""
    script = _PREAMBLE + textwrap.dedent(body) + _EPILOGUE
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=timeout)  # fmt: skip
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])
