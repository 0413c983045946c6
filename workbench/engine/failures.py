"""What a failed burst's exception means: out of memory, a CUDA context that is now broken for
good, or any other error; and one readable line for it.

Why the CUDA context matters: some device faults (an illegal memory access, a device-side
assert, an unspecified launch failure) are *sticky*: the CUDA context stays broken and every
later GPU call in the process fails with the same error. A notebook kernel that hit one cannot
measure anything again, and without being told so the user would read each later burst's
error as a new problem. Only a new process (restarting the kernel) recovers.
"""

from __future__ import annotations

import re
import traceback

import torch

from workbench.core.results import TRACEBACK_CHARS

OOM_TEXT = re.compile(
    r"out of memory|can't allocate memory|ALLOC_FAILED|cudaErrorMemoryAllocation"
    r"|CUBLAS_STATUS_NOT_INITIALIZED when calling `?cublasCreate",
)
"""Allocation failures: the caching allocator's own OOM and a failed CPU allocation, and the
ones that surface from libraries that allocate outside it (cuBLAS, cuDNN, cuFFT, cuSOLVER,
cuSPARSE ``*_STATUS_ALLOC_FAILED``; ``cublasCreate`` failing to initialise, which on a full
device is its way of saying out of memory)."""

STICKY_CUDA_TEXT = re.compile(
    r"illegal memory access|device-side assert|unspecified launch failure|misaligned address"
    r"|illegal instruction|uncorrectable ECC error|launch timed out and was terminated"
    r"|hardware stack error|invalid program counter|operation not supported on global/shared",
    re.IGNORECASE,
)
"""cudaGetErrorString texts of the errors that leave the context unusable."""

_broken_cuda: str | None = None


def is_oom_error(exc: BaseException) -> bool:
    """CUDA OOM, a failed CPU allocation, a library's allocation failure, or MemoryError."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and bool(OOM_TEXT.search(str(exc)))


def is_sticky_cuda_error(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and bool(STICKY_CUDA_TEXT.search(str(exc)))


def describe_error(exc: BaseException) -> str:
    """One readable line: the exception type and its last line.

    Exceptions from DataLoader workers arrive wrapped ("Caught X in DataLoader worker process
    0. Original Traceback ..."); their last line is the original error, file name included.
    """
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if len(lines) > 1 and ": " in last and " " not in last.split(": ", 1)[0]:
        return last  # already "Type: message" from a worker's traceback
    if last:
        return f"{type(exc).__name__}: {last}"
    where = raised_at(exc)
    return f"{type(exc).__name__} at {where}" if where else type(exc).__name__


def raised_at(exc: BaseException) -> str:
    """``torch/_inductor/graph.py:812 in run``: where ``exc`` was raised, for an exception
    with no message (a bare ``assert`` deep in a library says nothing else). Paths inside a
    ``site-packages`` folder are shown from the package on; empty without a traceback.

    Why: the GPU session met ``compile=max-autotune`` failing with a bare AssertionError; the
    result said "AssertionError" and nothing a user could search for or report."""
    tb = exc.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    path = code.co_filename.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            path = path.rsplit(marker, 1)[1]
            break
    return f"{path}:{tb.tb_lineno} in {code.co_name}"


def compile_hint(exc: BaseException, compile_mode: str) -> str:
    """A sentence for an error raised inside torch.compile (Dynamo or Inductor), or "".

    Such an error is the compiler's, not the model's: the same step runs eagerly, and often
    under another mode (``max-autotune`` adds Triton GEMM templates and CUDA graphs to
    ``default``). Saying so spares the user a hunt through their own code."""
    if compile_mode == "off":
        return ""
    tb, inside = exc.__traceback__, False
    while tb is not None and not inside:
        path = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        inside = "/torch/_inductor/" in path or "/torch/_dynamo/" in path
        tb = tb.tb_next
    if not inside:
        return ""
    others = "off" if compile_mode == "default" else "default or off"
    return (
        f" (raised inside torch.compile, mode {compile_mode}: the compiler failed, not "
        f"the model; compile={others} measures the same step without it)"
    )


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def traceback_text(exc: BaseException, limit: int = TRACEBACK_CHARS) -> str:
    """``exc``'s traceback as text (its chain too), for a failed result's ``traceback``.

    Text, not the exception: a traceback object keeps every frame alive, and with the frames
    their tensors (a batch, activations, on a GPU gigabytes), until a cycle collection; the
    result outlives the burst. Longer than ``limit`` characters, the end is kept (the frame
    that raised and the message) after a line saying how much was cut.
    """
    text = "".join(traceback.format_exception(exc))
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    return f"[... the first {cut} characters of this traceback cut ...]\n{text[cut:]}"


def restart_advice(cause: str) -> str:
    return (
        f"CUDA is unusable in this process after a device fault ({cause}): every later GPU "
        "call fails the same way. Restart the kernel (or the process) to measure again."
    )


def note_failure(exc: BaseException) -> str:
    """The failed burst's ``error``; a sticky CUDA fault is remembered and says so."""
    global _broken_cuda
    if is_sticky_cuda_error(exc):
        _broken_cuda = _first_line(exc)
        return restart_advice(_broken_cuda)
    return describe_error(exc)


def cuda_health(device: torch.device) -> str | None:
    """None when the device can run a burst; else the error a burst would only repeat.

    Remembers a fault seen by an earlier burst, and probes the context once (a synchronize
    reports a sticky fault left behind by the user's own code, too)."""
    if device.type != "cuda":
        return None
    if _broken_cuda is None:
        try:
            torch.cuda.synchronize(device)
        except RuntimeError as exc:
            return note_failure(exc)
    return restart_advice(_broken_cuda) if _broken_cuda else None
