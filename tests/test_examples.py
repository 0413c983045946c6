"""examples/train.py: a plain PyTorch script trains with a saved config, on the CPU too."""

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from workbench.config import ConfigWarning, load_config, save_config
from workbench.knobs import Knobs

TRAIN = Path(__file__).resolve().parents[1] / "examples" / "train.py"
LINE = re.compile(
    r"train: ([\d.]+) samples/s \((\d+) process\(es\) on cpu, batch (\d+) x accum (\d+)"
)


def _run(command: list[str], **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, **kw)


def test_train_example_runs_a_tuned_config(tmp_path):
    knobs = Knobs(batch_size=8, num_workers=1, prefetch_factor=2, persistent_workers=True,
                  grad_accum=2)  # fmt: skip
    path = save_config(knobs, tmp_path / "tuned.yaml")
    p = _run([sys.executable, str(TRAIN), "--config", str(path), "--steps", "2", "--warmup", "1",
              "--samples", "64", "--device", "cpu"])  # fmt: skip
    assert p.returncode == 0, p.stderr
    m = LINE.search(p.stdout)
    assert m, p.stdout
    assert float(m[1]) > 0 and m.group(2, 3, 4) == ("1", "8", "2")


@pytest.mark.slow
def test_the_torchrun_line_launches_the_example_on_two_processes(tmp_path, tiny_data):
    """The config's own torchrun line, run as printed: DDP over gloo with every DDP knob set
    (gradient accumulation under no_sync included), fp16 with a GradScaler."""
    knobs = Knobs(batch_size=4, num_workers=1, precision="fp16", world_size=2, bucket_cap_mb=5,
                  gradient_as_bucket_view=True, static_graph=True, grad_accum=2,
                  nccl={"NCCL_DEBUG": "WARN"})  # fmt: skip
    path = save_config(knobs, tmp_path / "tuned.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        cfg = load_config(path)
    args = ["--config", str(path), "--data", str(tiny_data / "images"), "--steps", "2",
            "--warmup", "1", "--device", "cpu"]  # fmt: skip
    line = cfg.torchrun_command(str(TRAIN), script_args=args, with_env=True)
    assert line.startswith("NCCL_DEBUG=WARN torchrun --standalone --nproc_per_node=2 ")
    p = _run(["bash", "-c", line], cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    m = LINE.search(p.stdout)
    assert m, p.stdout
    assert m.group(2, 3, 4) == ("2", "4", "2") and "fp16" in p.stdout
