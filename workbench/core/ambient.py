"""The process's own environment: variables that shape a burst without being knobs.

A burst is described by its knobs, but some variables act before any knob does: PyTorch's
allocator reads ``PYTORCH_CUDA_ALLOC_CONF`` at first CUDA use, NCCL reads ``NCCL_*`` when a
communicator is created, OpenMP reads ``OMP_NUM_THREADS`` when torch loads. A notebook kernel
started from a shell (or a container image) that exports one of them measures with it, and
torchrun ranks inherit the kernel's environment (``workbench.distributed.jobs.worker_env``). So
such a variable is never measured silently: each burst records the ones set around it in
``BurstResult.ambient_env`` with a sentence per variable in ``ambient_notes``, and a saved
config keeps them in ``provenance.ambient_env`` (loading warns), so production either
reproduces them or knows they were there.

The policy, per variable (docs/measurement.md has the table):

- **A knob of the same name wins.** ``Knobs(nccl={"NCCL_ALGO": "Ring"})`` reaches the ranks
  over an ambient ``NCCL_ALGO=Tree``, and ``alloc_conf`` sets both allocator variables; the
  ambient value is then not in ``ambient_env`` (it did not act) and a note says it was replaced.
- **An ambient variable that no knob sets is recorded**, not refused: clusters export
  ``NCCL_SOCKET_IFNAME`` or ``NCCL_IB_HCA`` because jobs do not run without them, and a room
  hands each learner a ``CUDA_VISIBLE_DEVICES``. Refusing them would refuse the machine.
- **A library-level override that a knob cannot beat is a ``no_effect`` entry** of that knob
  (``conflicts``): ``NVIDIA_TF32_OVERRIDE=0`` makes cuBLAS and cuDNN ignore PyTorch's TF32
  switch, so ``precision=tf32`` runs strict fp32; ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` makes
  PyTorch's fp32 matmuls TF32 whatever the burst sets, so ``precision=fp32-strict`` is not
  strict. Both also move ``precision=default`` off PyTorch's own math.
- **A variable that makes the numbers meaningless is also ``suspect``** on a GPU
  (``CUDA_LAUNCH_BLOCKING=1``: every kernel launch waits for the kernel;
  ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``: every tensor is a cudaMalloc and a cudaFree).

Only variables that change speed or numerics are listed; ``WORKBENCH_*`` and the like are the
workbench's own settings, not the burst's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from workbench.core.allocconf import ENV_VARS as ALLOC_VARS
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult

__all__ = ["RULES", "Rule", "ambient_env", "conflicts", "notes", "rule_for", "stamp",
           "suspects"]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Rule:
    """Why one variable (or a family, by prefix) shapes a burst, and where it acts."""

    why: str
    """What it changes, in a few words: speed, memory or numerics."""
    acts_on: str = "any"
    """"cuda": only a GPU burst; "nccl": only NCCL communicators (GPU, torchrun jobs);
    "any": a CPU burst too."""


_NCCL = Rule("NCCL's algorithm, transport or buffers for gradient all-reduce", "nccl")
_ALLOC = Rule(
    "the CUDA caching allocator's settings (read at first CUDA use): peak reserved memory, "
    "fragmentation and where a batch size runs out of memory",
    "cuda",
)

RULES: dict[str, Rule] = {
    "PYTORCH_CUDA_ALLOC_CONF": _ALLOC,
    "PYTORCH_ALLOC_CONF": _ALLOC,
    "PYTORCH_NO_CUDA_MEMORY_CACHING": Rule(
        "turns PyTorch's caching allocator off: every tensor is a cudaMalloc and a cudaFree",
        "cuda",
    ),
    "CUDA_VISIBLE_DEVICES": Rule("which GPUs (or MIG slice) this process can see", "cuda"),
    "CUDA_LAUNCH_BLOCKING": Rule(
        "makes every CUDA kernel launch wait for the kernel: the host cannot queue ahead", "cuda"
    ),
    "CUDA_DEVICE_MAX_CONNECTIONS": Rule(
        "how many hardware queues streams map to: overlap of communication and compute", "cuda"
    ),
    "CUDA_MODULE_LOADING": Rule(
        "when CUDA kernels are loaded (LAZY or EAGER): start-up, memory", "cuda"
    ),
    "CUBLAS_WORKSPACE_CONFIG": Rule(
        "cuBLAS's workspace size (set for deterministic algorithms): matmul speed", "cuda"
    ),
    "NVIDIA_TF32_OVERRIDE": Rule(
        "NVIDIA's libraries' own TF32 switch: 0 turns TF32 off in cuBLAS and cuDNN whatever "
        "PyTorch asks",
        "cuda",
    ),
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": Rule(
        "1 makes PyTorch's fp32 matmuls use TF32 whatever the program sets", "cuda"
    ),
    "OMP_NUM_THREADS": Rule("intra-op CPU threads of torch (read when torch loads)"),
    "MKL_NUM_THREADS": Rule("MKL's CPU threads (CPU matmuls and convolutions)"),
}
"""Variables by exact name."""

PREFIX_RULES: dict[str, Rule] = {
    "NCCL_": _NCCL,
    "TORCH_NCCL_": Rule(
        "PyTorch's NCCL process group (async error handling, blocking waits, stream use)", "nccl"
    ),
    "TORCH_CUDNN_": Rule(
        "cuDNN's plan cache and API choice in PyTorch (convolution speed)", "cuda"
    ),
    "TORCHINDUCTOR_": Rule(
        "torch.compile's Inductor settings (autotuning, caches): compile_s and the compiled step"
    ),
}
"""Families by prefix (checked after exact names; the longest prefix wins)."""

SET_BY_TORCH = frozenset({"TORCHINDUCTOR_CACHE_DIR"})
"""Variables torch itself exports once it runs (Inductor names its cache folder so that its
compile workers agree): present after any compile burst, so they say nothing about the user."""

_WHERE = {
    "cuda": "acts on GPU bursts only: no effect on this CPU burst, but a GPU run from this "
    "environment gets it",
    "nccl": "acts only in NCCL communicators (GPU torchrun jobs): no effect here, but a GPU job "
    "from this environment gets it",
}


def rule_for(name: str) -> Rule | None:
    """The rule for ``name``, or None when the variable does not shape a burst."""
    if name in SET_BY_TORCH:
        return None
    if name in RULES:
        return RULES[name]
    prefixes = [p for p in PREFIX_RULES if name.startswith(p)]
    return PREFIX_RULES[max(prefixes, key=len)] if prefixes else None


def knob_set_names(knobs: Knobs) -> set[str]:
    """The variables the burst's own knobs set (they win over the environment)."""
    names = set(knobs.nccl)
    if knobs.alloc_conf:
        names.update(ALLOC_VARS)
    return names


def ambient_env(environ: Mapping[str, str], knobs: Knobs) -> dict[str, str]:
    """The variables of ``environ`` that shape a burst and that no knob of ``knobs`` set."""
    own = knob_set_names(knobs)
    return {k: environ[k] for k in sorted(environ) if k not in own and rule_for(k) is not None}


def notes(environ: Mapping[str, str], knobs: Knobs, device_type: str) -> list[str]:
    """One sentence per recorded variable, and one per ambient value a knob replaced."""
    out = []
    for name, value in ambient_env(environ, knobs).items():
        rule = rule_for(name)
        assert rule is not None  # ambient_env keeps only named ones
        where = _acts_here(rule, device_type)
        out.append(f"{name}={value} came from the environment, not a knob: {rule.why}; {where}")
    wanted = {**knobs.nccl, **({n: knobs.alloc_conf for n in ALLOC_VARS} if knobs.alloc_conf
                               else {})}  # fmt: skip
    for name in sorted(wanted):
        if name in environ and environ[name] != wanted[name]:
            out.append(
                f"{name}={environ[name]} in the environment was replaced by the knob's "
                f"{wanted[name]!r} (a torchrun job's ranks get the knob's value)"
            )
    return out


def _acts_here(rule: Rule, device_type: str) -> str:
    if rule.acts_on == "any" or (rule.acts_on == "cuda" and device_type == "cuda"):
        return "it shaped this burst: make it part of what you reproduce, or unset it"
    if rule.acts_on == "nccl" and device_type == "cuda":
        return "it shapes GPU torchrun jobs: make it an NCCL knob to compare it, or unset it"
    return _WHERE[rule.acts_on]


def conflicts(environ: Mapping[str, str], precision: str, device_type: str) -> dict[str, str]:
    """Knobs an ambient library override keeps from acting on a GPU: ``no_effect`` entries.
    Only ``precision`` can meet one (the TF32 overrides), so only its value is asked."""
    if device_type != "cuda":
        return {}
    out = {}
    no_tf32 = environ.get("NVIDIA_TF32_OVERRIDE", "").strip() == "0"
    forced_tf32 = _on(environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"))
    if precision == "tf32" and no_tf32:
        out["precision"] = ("NVIDIA_TF32_OVERRIDE=0 in the environment turns TF32 off inside "
                            "cuBLAS and cuDNN: this tf32 burst ran strict fp32 math; unset it "
                            "and restart the kernel")  # fmt: skip
    elif precision == "default" and no_tf32:
        out["precision"] = ("NVIDIA_TF32_OVERRIDE=0 in the environment turns TF32 off inside "
                            "cuDNN: this default burst ran convolutions in IEEE fp32, not as "
                            "PyTorch's default does; unset it and restart the kernel")  # fmt: skip
    if precision in ("fp32-strict", "default") and forced_tf32:
        wanted = "strict" if precision == "fp32-strict" else "PyTorch's default math"
        out["precision"] = (f"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 in the environment makes fp32 "
                            f"matmuls use TF32: this {precision} burst was not {wanted}; "
                            f"unset it and restart the kernel")  # fmt: skip
    return out


def suspects(environ: Mapping[str, str], device_type: str) -> list[str]:
    """Ambient settings that make a GPU burst's throughput mean nothing about training."""
    if device_type != "cuda":
        return []
    out = []
    if _on(environ.get("CUDA_LAUNCH_BLOCKING")):
        out.append("CUDA_LAUNCH_BLOCKING=1 in the environment: every kernel launch waited for "
                   "its kernel, so the step time is not a training step's; unset it")  # fmt: skip
    if _on(environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING")):
        out.append("PYTORCH_NO_CUDA_MEMORY_CACHING=1 in the environment: the caching allocator "
                   "was off (a cudaMalloc per tensor); unset it")  # fmt: skip
    return out


def _on(value: str | None) -> bool:
    return value is not None and value.strip().lower() in {"1", "true", "yes", "on"}


def stamp(result: BurstResult, knobs: Knobs, device_type: str,
          environ: Mapping[str, str] | None = None) -> None:  # fmt: skip
    """Record the environment around a burst in its result: ``ambient_env``, its notes, and
    the ``suspect`` entries. Called by the process that started the burst (the kernel, the
    CLI), never by a torchrun rank, whose environment holds the knobs' own variables too."""
    env = os.environ if environ is None else environ
    result.ambient_env = ambient_env(env, knobs)
    result.ambient_notes = notes(env, knobs, device_type)
    result.suspect.extend(s for s in suspects(env, device_type) if s not in result.suspect)
