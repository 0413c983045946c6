"""What a failed burst's exception means, and a CUDA context broken for good."""

from __future__ import annotations

import pytest
import torch

from workbench.engine import failures
from workbench.engine.failures import (
    compile_hint,
    cuda_health,
    describe_error,
    is_oom_error,
    is_sticky_cuda_error,
    note_failure,
    traceback_text,
)


@pytest.fixture(autouse=True)
def _healthy_process(monkeypatch):
    monkeypatch.setattr(failures, "_broken_cuda", None)


@pytest.mark.parametrize(
    "text",
    [
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
        "CUDA error: out of memory",
    ],
)
def test_library_allocation_failures_are_out_of_memory(text):
    assert is_oom_error(RuntimeError(text))


def test_other_errors_are_not_out_of_memory():
    assert not is_oom_error(RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED"))
    assert not is_oom_error(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


ILLEGAL = "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be..."


def test_a_sticky_fault_says_restart_and_every_later_burst_says_so_too():
    assert is_sticky_cuda_error(RuntimeError("CUDA error: device-side assert triggered"))
    error = note_failure(RuntimeError(ILLEGAL))
    assert "Restart the kernel" in error and "illegal memory access" in error
    assert "Restart the kernel" in cuda_health(torch.device("cuda", 0))
    assert cuda_health(torch.device("cpu")) is None  # the CPU is fine


def test_the_probe_finds_a_fault_left_by_the_users_own_code(monkeypatch):
    def broken_sync(device=None):
        raise RuntimeError(ILLEGAL)

    monkeypatch.setattr(torch.cuda, "synchronize", broken_sync)
    assert "illegal memory access" in cuda_health(torch.device("cuda", 0))


def test_a_healthy_device_passes_the_probe(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    assert cuda_health(torch.device("cuda", 0)) is None


def test_a_burst_after_a_fault_is_an_error_that_says_restart(monkeypatch):
    # the engine path on CPU with a recorded fake of a broken CUDA context
    from workloads_for_tests import tensor_workload

    import workbench.engine.burst as burst
    from workbench import Knobs, run_burst

    monkeypatch.setattr(failures, "_broken_cuda", "CUDA error: an illegal memory access")
    monkeypatch.setattr(burst, "cuda_health", lambda dev: failures.restart_advice("x"))
    r = run_burst(tensor_workload(), Knobs(batch_size=8), seconds=0.2, record=False)
    assert r.status == "error" and "Restart the kernel" in r.error and r.steps == 0


def _raise_from(path: str, src: str) -> BaseException:
    """The exception ``src`` raises, as if the code lived at ``path`` (its traceback says so)."""
    try:
        exec(compile(src, path, "exec"), {})
    except Exception as exc:
        return exc
    raise AssertionError("src did not raise")


def test_an_error_without_a_message_names_where_it_was_raised():
    exc = _raise_from("/venv/lib/python3.12/site-packages/torch/_inductor/graph.py",
                      "def run():\n    assert False\nrun()\n")  # fmt: skip
    assert describe_error(exc) == "AssertionError at torch/_inductor/graph.py:2 in run"


def test_an_error_with_a_message_is_its_message():
    exc = _raise_from("/x/y.py", "raise ValueError('batch too big')\n")
    assert describe_error(exc) == "ValueError: batch too big"


def test_an_error_inside_the_compiler_says_so_and_names_the_other_modes():
    exc = _raise_from("/venv/site-packages/torch/_inductor/select_algorithm.py", "assert False\n")
    hint = compile_hint(exc, "max-autotune")
    assert "inside torch.compile" in hint and "compile=default or off" in hint
    assert "compile=off measures" in compile_hint(exc, "default")
    assert compile_hint(exc, "off") == ""


def test_an_error_in_the_model_gets_no_compiler_hint():
    exc = _raise_from("/home/me/model.py", "raise RuntimeError('shape mismatch')\n")
    assert compile_hint(exc, "max-autotune") == ""


def _raise_chained() -> None:
    try:
        raise KeyError("the cause")
    except KeyError as exc:
        raise RuntimeError("the effect") from exc


def test_a_traceback_is_text_with_its_chain_and_keeps_its_end_when_cut():
    try:
        _raise_chained()
    except RuntimeError as exc:
        whole = traceback_text(exc)
        cut = traceback_text(exc, limit=120)
    assert "KeyError: 'the cause'" in whole and "direct cause" in whole
    assert whole.rstrip().endswith("RuntimeError: the effect")
    assert cut.startswith(f"[... the first {len(whole) - 120} characters of this traceback cut")
    assert cut.endswith(whole[-120:]) and len(cut) < len(whole)
