"""The production side of the precision knob: a saved config at the default knobs leaves
PyTorch's math as PyTorch set it; an old ``fp32`` in a saved file reads as ``fp32-strict``.

Issue 28: ``apply_backend_flags`` used to write ``cudnn.allow_tf32 = False`` for the default
(``fp32``), about 3x slower than PyTorch untouched for a convnet on an H200."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import yaml

from workbench.config.saved import load_config, save_config
from workbench.config.tuned_config import TunedConfig
from workbench.core.knobs import Knobs, RenamedValueWarning
from workbench.engine.training import precision_state

# Every switch of PyTorch's math a script can read, each through every API that reads it
# (legacy and per-backend TF32 both, by precision_state), plus the others beside them.
_READ_ALL = textwrap.dedent(
    """
    import torch
    from workbench.engine.training import precision_state

    def every_switch():
        b = torch.backends
        state = dict(precision_state())  # legacy + per-backend TF32, cudnn.benchmark
        state.update({
            "cuda.matmul.allow_fp16_reduced_precision_reduction":
                b.cuda.matmul.allow_fp16_reduced_precision_reduction,
            "cuda.matmul.allow_bf16_reduced_precision_reduction":
                b.cuda.matmul.allow_bf16_reduced_precision_reduction,
            "cudnn.enabled": b.cudnn.enabled,
            "cudnn.deterministic": b.cudnn.deterministic,
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "sdp flash": b.cuda.flash_sdp_enabled(),
            "sdp mem_efficient": b.cuda.mem_efficient_sdp_enabled(),
            "sdp math": b.cuda.math_sdp_enabled(),
        })
        return state
    """
)


def _in_a_fresh_process(body: str) -> dict:
    """Run ``body`` after ``_READ_ALL`` in a new interpreter (an untouched ``import torch``, as
    a production script starts); it prints one JSON line, returned."""
    code = _READ_ALL + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_config_saved_at_the_default_knobs_leaves_every_math_switch_as_pytorch_set_it(tmp_path):
    path = save_config(Knobs(), tmp_path / "tuned.yaml")
    assert yaml.safe_load(path.read_text())["knobs"]["precision"] == "default"
    out = _in_a_fresh_process(
        f"""
        import json
        import workbench as wb
        before = every_switch()
        cfg = wb.load_config({str(path)!r})
        written = cfg.apply_backend_flags()
        print(json.dumps({{"before": before, "after": every_switch(), "written": written}}))
        """
    )
    assert out["written"] == {}
    assert out["after"] == out["before"]
    assert out["before"]["cudnn.allow_tf32"] is True  # what PyTorch set: cuDNN may use TF32


def test_a_default_config_leaves_the_scripts_own_tf32_alone(restored_backend_flags):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True  # the script chose TF32 matmuls itself
    before = precision_state()
    assert TunedConfig(Knobs()).apply_backend_flags() == {}
    assert precision_state() == before


def test_an_old_fp32_in_a_saved_file_reads_as_fp32_strict_with_one_warning(
    tmp_path, restored_backend_flags
):
    path = save_config(Knobs(precision="fp32-strict"), tmp_path / "old.yaml")
    path.write_text(path.read_text().replace("precision: fp32-strict", "precision: fp32"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(path, check_machine=False)
    renamed = [str(w.message) for w in caught if w.category is RenamedValueWarning]
    assert cfg.knobs.precision == "fp32-strict"
    assert len(renamed) == 1 and "\n" not in renamed[0]
    assert renamed[0].startswith(f"{path}: precision=fp32") and "fp32-strict" in renamed[0]
    assert cfg.apply_backend_flags() == {"fp32_precision": "ieee"}  # IEEE everywhere, as it was
    assert precision_state()["cudnn.allow_tf32"] is False
