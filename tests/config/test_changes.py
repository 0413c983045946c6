"""cfg.apply(): sets the config's process-wide state and says what it changed, as data and as a
short printed list; the dry run ``workbench show`` prints leaves the process as it found it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from workbench.config.changes import PYTORCH_DEFAULTS, Change
from workbench.config.tuned_config import TunedConfig
from workbench.core.knobs import Knobs
from workbench.engine.training import (
    at_torch_defaults,
    precision_state,
)

ALLOC = "expandable_segments:True"
VARIABLES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "OMP_NUM_THREADS", "NCCL_CROSS_NIC",
             "NCCL_ALGO", "RANK")  # fmt: skip


@pytest.fixture
def at_defaults(monkeypatch):
    """PyTorch's default switches and none of the config's variables; both put back after."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    readers = {k: v for k, v in PYTORCH_DEFAULTS.items() if k in precision_state()}
    with at_torch_defaults():  # puts back exactly what it found, after
        assert precision_state() == readers
        yield
    for name in VARIABLES:  # apply() wrote os.environ itself: monkeypatch cannot know
        os.environ.pop(name, None)


def _config() -> TunedConfig:
    knobs = Knobs(precision="tf32", cudnn_benchmark=True, alloc_conf=ALLOC,
                  nccl={"NCCL_CROSS_NIC": "1"})  # fmt: skip
    return TunedConfig(knobs, {"OMP_NUM_THREADS": "3"})


def test_apply_returns_exactly_what_it_changed_and_nothing_the_second_time(at_defaults):
    before = precision_state()
    made = _config().apply(quiet=True)
    after = precision_state()
    backend = [c for c in made if c.kind == "backend"]
    assert {c.name: (c.before, c.after) for c in backend} == {
        k: (before[k], v) for k, v in after.items() if before[k] != v
    }
    by_name = {c.name: c for c in made}
    assert by_name["cudnn.benchmark"] == Change("cudnn.benchmark", False, True, "backend")
    assert by_name["cuda.matmul.allow_tf32"].after is True  # tf32: matmuls on TF32
    env = [(c.name, c.before, c.after) for c in made if c.kind == "env"]
    assert env == [("NCCL_CROSS_NIC", None, "1"), ("OMP_NUM_THREADS", None, "3"),
                   ("PYTORCH_ALLOC_CONF", None, ALLOC),
                   ("PYTORCH_CUDA_ALLOC_CONF", None, ALLOC)]  # fmt: skip
    assert os.environ["OMP_NUM_THREADS"] == "3" and os.environ["PYTORCH_ALLOC_CONF"] == ALLOC
    assert _config().apply(quiet=True) == []


def test_a_variable_found_with_another_value_is_replaced_and_shown(at_defaults):
    os.environ["OMP_NUM_THREADS"] = "16"
    made = [c for c in _config().apply(quiet=True) if c.name == "OMP_NUM_THREADS"]
    assert [str(c) for c in made] == ["OMP_NUM_THREADS: 16 -> 3"]


def test_apply_prints_the_short_list_on_rank_0_only(at_defaults, capsys):
    made = _config().apply()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "workbench: cfg.apply() changed:"
    assert lines[1:] == [f"  {c}" for c in made]
    assert "  cudnn.benchmark: False -> True" in lines
    assert f"  PYTORCH_ALLOC_CONF: (unset) -> {ALLOC}" in lines
    _config().apply()
    assert capsys.readouterr().out == "workbench: cfg.apply(): nothing changed\n"
    _config().apply(quiet=True)
    os.environ["RANK"] = "1"
    TunedConfig(Knobs(), {"OMP_NUM_THREADS": "5"}).apply()
    assert capsys.readouterr().out == ""


def test_the_allocator_variable_set_after_cuda_started_says_it_is_too_late(
    at_defaults, monkeypatch
):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    made = {c.name: c for c in _config().apply(quiet=True)}
    assert "CUDA is already initialized here" in made["PYTORCH_ALLOC_CONF"].note
    assert made["OMP_NUM_THREADS"].note is None


def test_the_dry_run_is_apply_in_a_fresh_process_and_leaves_this_one_alone(restored_backend_flags):
    torch.backends.cudnn.benchmark = True  # this process's own state: not a fresh one's
    torch.set_float32_matmul_precision("medium")
    before, environ = precision_state(), dict(os.environ)
    dry = _config().fresh_process_changes()
    assert precision_state() == before and dict(os.environ) == environ
    assert Change("cudnn.benchmark", False, True, "backend") in dry
    assert ("PYTORCH_CUDA_ALLOC_CONF", None, ALLOC) in [(c.name, c.before, c.after) for c in dry]


def test_pytorch_defaults_are_what_a_fresh_interpreter_reads():
    code = ("import json; from workbench.engine.training import precision_state; "
            "print(json.dumps(precision_state()))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.getcwd()})  # fmt: skip
    fresh = json.loads(out.stdout.splitlines()[-1])
    assert {k: v for k, v in PYTORCH_DEFAULTS.items() if k in fresh} == fresh
