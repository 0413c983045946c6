"""The engine stands alone: a bare GPU box has torch, nvidia-ml-py, pyyaml, psutil, pandas."""

import json
import subprocess
import sys
import textwrap

BLOCKED = ["ipywidgets", "altair", "anywidget", "vl_convert", "jupyterlab", "nvidia.dali"]


def test_engine_imports_and_runs_with_ui_packages_and_dali_blocked(tiny_data, tmp_path):
    script = textwrap.dedent(
        f"""
        import importlib.abc, json, sys

        BLOCKED = {BLOCKED!r}

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                    raise ModuleNotFoundError(f"blocked for this test: {{name}}")
                return None

        sys.meta_path.insert(0, Block())
        import workbench as wb
        r = wb.run_burst("cnn", wb.Knobs(batch_size=8), data_dir={str(tiny_data)!r},
                         seconds=0.3, warmup_steps=1, store={str(tmp_path / "h.sqlite")!r})
        leaked = sorted(m for m in sys.modules if any(m == b or m.startswith(b + ".")
                                                    for b in BLOCKED))
        print(json.dumps({{"status": r.status, "error": r.error, "leaked": leaked,
                          "rows": len(wb.open_store({str(tmp_path / "h.sqlite")!r}))}}))
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    assert doc == {"status": "ok", "error": None, "leaked": [], "rows": 1}


def test_import_workbench_is_light():
    """`import workbench` does not import torch until a burst needs it (fast CLI commands)."""
    code = "import sys, workbench; print('torch' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "False"
