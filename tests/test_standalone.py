"""The engine stands alone: a bare GPU box has torch, nvidia-ml-py, pyyaml, psutil, pandas."""

import subprocess
import sys

import pytest
from blocked_imports import run_blocked_raw, run_with_ui_blocked

pytestmark = pytest.mark.concurrent  # fresh interpreters and ranks


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
    body = """
        import workbench as wb
        res = wb.comm_bench(2, sizes=[8192], device="cpu")
        out.update(status=res.status, error=res.error, rows=len(res.rows))
        """
    assert run_with_ui_blocked(body) == {"status": "ok", "error": None, "rows": 1, "leaked": []}


def test_a_ddp_burst_runs_with_ui_packages_and_dali_blocked_in_every_rank(tiny_data):
    """The blocker is in every process the job starts (torchrun, both ranks), not only in
    the one that asks for the burst: a rank that imported altair would fail here."""
    body = f"""
        import workbench as wb
        r = wb.run_burst("cnn", wb.Knobs(batch_size=4, world_size=2), data_dir={str(tiny_data)!r},
                         seconds=0.3, warmup_steps=1, record=False)
        out.update(status=r.status, error=r.error, ranks=len(r.ranks))
        """
    doc = run_blocked_raw(body)
    assert doc["out"] == {"status": "ok", "error": None, "ranks": 2, "leaked": []}
    imports = [a for a in doc["attempts"] if a["kind"] != "probe"]
    assert imports == []
    assert len(doc["children"]) >= 3, doc["children"]  # torchrun's agent and two ranks


def test_an_import_attempt_in_a_child_process_fails_the_check_too():
    body = """
        import subprocess, sys
        attempt = "try:\\n import altair\\nexcept ImportError:\\n pass"
        subprocess.run([sys.executable, "-c", attempt], check=True)
        """
    with pytest.raises(AssertionError, match=r"blocked modules were imported.*'child': True"):
        run_with_ui_blocked(body)


@pytest.mark.parametrize(
    "attempt", ["import altair", "import importlib; importlib.import_module('ipywidgets')"]
)
def test_an_import_attempt_fails_the_check_even_when_its_error_is_caught(attempt):
    body = f"try:\n    {attempt}\nexcept ImportError:\n    out['caught'] = True\n"
    with pytest.raises(AssertionError, match=r"blocked modules were imported.*<string>:"):
        run_with_ui_blocked(body)


def test_a_probe_that_imports_nothing_is_recorded_but_allowed():
    """dali_available asks importlib.util.find_spec, which imports nothing: allowed."""
    body = (
        "from workbench.engine.loaders.dali import dali_available\nout['why'] = dali_available()\n"
    )
    doc = run_blocked_raw(body)
    assert [(a["module"], a["kind"]) for a in doc["attempts"]] == [("nvidia.dali", "probe")]
    assert "dali.py" in doc["attempts"][0]["where"] and "not installed" in doc["out"]["why"]
    assert run_with_ui_blocked(body)["leaked"] == []
