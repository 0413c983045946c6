"""The engine stands alone: a bare GPU box has torch, nvidia-ml-py, pyyaml, psutil, pandas."""

import subprocess
import sys

from blocked_imports import run_with_ui_blocked


def test_engine_imports_and_runs_with_ui_packages_and_dali_blocked(tiny_data, tmp_path):
    store = str(tmp_path / "h.sqlite")
    doc = run_with_ui_blocked(
        f"""
        import workbench as wb
        r = wb.run_burst("cnn", wb.Knobs(batch_size=8), data_dir={str(tiny_data)!r},
                         seconds=0.3, warmup_steps=1, store={store!r})
        out.update(status=r.status, error=r.error, rows=len(wb.open_store({store!r})))
        """
    )
    assert doc == {"status": "ok", "error": None, "rows": 1, "leaked": []}


def test_import_workbench_is_light():
    """`import workbench` does not import torch until a burst needs it (fast CLI commands)."""
    code = "import sys, workbench; print('torch' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "False"


def test_distributed_job_runs_with_ui_packages_and_dali_blocked():
    """torchrun's ranks import the engine only: a 2-rank all-reduce on a bare box."""
    doc = run_with_ui_blocked(
        """
        import workbench as wb
        res = wb.comm_bench(2, sizes=[8192], device="cpu")
        out.update(status=res.status, error=res.error, rows=len(res.rows))
        """
    )
    assert doc == {"status": "ok", "error": None, "rows": 1, "leaked": []}
