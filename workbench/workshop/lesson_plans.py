"""What each lesson measures on this kind of device, and the knobs its bursts start from.

On a GPU a lesson starts where a production script on that GPU starts: PyTorch's own math
(``precision="default"``, the Knobs default: cuDNN convolutions in TF32, matmuls IEEE) or bf16,
and a convnet in ``channels_last``, the layout tensor cores compute convolutions in. Every
figure this project kept from a GPU (``notebooks/reference/gpu_runs.json``) was measured that
way, so a learner's GPU numbers and the reference beside them compare like with like. A lesson
about one of those knobs (lesson 3 sweeps precision, lesson 11 measures channels_last against
NCHW) moves that knob and keeps the others.

On a CPU the lessons keep the small ``cnn`` in NCHW at PyTorch's default math: there is no
tensor core to feed, and the CPU figures in the guide were measured that way.

Lesson 12 is about a transformer: ``gpt:124m`` (GPT-2 small at 1,024 tokens) on a GPU, the tiny
``gpt`` on a CPU, each on one resident batch (the compute, as the published figures it sits
beside were measured), starting from the default math; it sweeps precision first and then
moves the transformer knobs at bf16 on a GPU. Its GPU plan's batch (16) is the most it runs:
the lesson chooses its batch from the device's free memory so that every burst fits a 1g.10gb
slice (``transformer_lesson.here``, ``transformer_sizing``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from workbench.analysis.diagnosis import classify
from workbench.core.knobs import Knobs

__all__ = ["CONVNETS", "GPU_CONVNET_KNOBS", "LessonPlan", "gpu_verdicts", "lesson_knobs",
           "lesson_plan", "lesson_workload", "loader_ceiling_estimate"]  # fmt: skip

CONVNETS = frozenset({"resnet50", "cnn"})
"""The built-in workloads whose layers are convolutions (``channels_last`` acts on them)."""
GPU_CONVNET_KNOBS: dict[str, Any] = {"channels_last": True}
"""What a convnet's burst holds on a GPU unless the lesson says otherwise: NHWC, as every
resnet50 figure of the kept H200 run was measured."""


def lesson_workload(gpu: bool | None = None) -> str:
    """The lessons' image workload: ``resnet50`` on a GPU, the small ``cnn`` on a CPU."""
    return "resnet50" if _gpu(gpu) else "cnn"


def lesson_knobs(workload: str | None = None, gpu: bool | None = None, **knobs: Any) -> Knobs:
    """The knobs of a lesson's burst on this device: ``knobs`` as given, and on a GPU a convnet
    in channels_last (``GPU_CONVNET_KNOBS``) unless ``knobs`` names it. Precision stays the
    Knobs default (PyTorch's own math) unless given.

    ``workload`` defaults to the lessons' own (:func:`lesson_workload`), ``gpu`` to whether
    CUDA is available here."""
    gpu = _gpu(gpu)
    workload = workload or lesson_workload(gpu)
    held = GPU_CONVNET_KNOBS if gpu and workload in CONVNETS else {}
    return Knobs(**{**held, **knobs})


def _gpu(gpu: bool | None) -> bool:
    return torch.cuda.is_available() if gpu is None else gpu


@dataclass(frozen=True, slots=True)
class LessonPlan:
    """What one lesson measures on this kind of device: its workload, the knobs it holds and
    the knob it sweeps. ``teaches`` says which side must be the limit for the sweep to show
    its lesson: "compute" lessons (precision, batch size, DDP) replay one resident batch
    (``loader="synthetic"``) so that resnet50 on a GPU is not waiting on JPEG decoding, which
    would flatten every curve; "data" lessons keep the real loader on purpose."""

    workload: str
    base: Knobs
    knob: str
    values: tuple[Any, ...]
    teaches: str


def _on_gpu(**knobs: Any) -> Knobs:
    return lesson_knobs("resnet50", True, **knobs)


_PLANS: dict[str, tuple[LessonPlan, LessonPlan]] = {
    # lesson: (on a GPU: resnet50 in channels_last at PyTorch's default math, on a CPU)
    "02": (
        LessonPlan("resnet50", _on_gpu(batch_size=64), "num_workers", (0, 2, 4, 8, 16), "data"),
        LessonPlan("cnn", Knobs(batch_size=8), "num_workers", (0, 1, 2), "data"),
    ),
    "03": (  # the precision lesson sweeps precision at the layout of the kept H200 run
        LessonPlan("resnet50", _on_gpu(batch_size=128, loader="synthetic"), "precision",
                   ("default", "fp32-strict", "tf32", "bf16", "fp16"), "compute"),
        LessonPlan("cnn", Knobs(batch_size=8, loader="synthetic"), "precision",
                   ("default", "tf32", "bf16", "fp16"), "compute"),  # a CPU's default is strict
    ),
    "04": (
        LessonPlan("resnet50", _on_gpu(loader="synthetic"), "batch_size", (32, 64, 128, 256),
                   "compute"),
        LessonPlan("cnn", Knobs(loader="synthetic"), "batch_size", (4, 8, 16, 32), "compute"),
    ),
    "06": (
        LessonPlan("resnet50", _on_gpu(batch_size=64, loader="synthetic"), "bucket_cap_mb",
                   (1.0, 25.0, 100.0), "compute"),
        LessonPlan("cnn", Knobs(batch_size=16, loader="synthetic"), "bucket_cap_mb",
                   (1.0, 25.0), "compute"),
    ),
    "12": (  # a transformer: GPT-2 small's shape at 1,024 tokens; on a CPU the tiny gpt
        LessonPlan("gpt:124m", Knobs(batch_size=16, loader="synthetic"), "precision",
                   ("default", "bf16"), "compute"),
        LessonPlan("gpt", Knobs(batch_size=2, loader="synthetic"), "precision",
                   ("default", "bf16"), "compute"),
    ),
}  # fmt: skip


def lesson_plan(lesson: str, gpu: bool | None = None) -> LessonPlan:
    """The plan of ``lesson`` ("03") for a GPU or a CPU (this machine's kind by default)."""
    if lesson not in _PLANS:
        raise KeyError(f"lesson {lesson!r} has no sweep plan; planned: {', '.join(_PLANS)}")
    on_gpu_plan, on_cpu_plan = _PLANS[lesson]
    return on_gpu_plan if _gpu(gpu) else on_cpu_plan


def loader_ceiling_estimate(knobs: Knobs, decode_sps_per_core: float) -> float:
    """What the loader can deliver with ``knobs``, from one core's measured decode rate: no
    limit for the synthetic loader (nothing is loaded), one core in the training loop with
    ``num_workers=0``, one core per worker otherwise (an upper bound: workers need the cores)."""
    if knobs.loader == "synthetic":
        return float("inf")
    return decode_sps_per_core * max(1, knobs.num_workers)


def gpu_verdicts(plan: LessonPlan, compute_sps: float, decode_sps_per_core: float) -> list[str]:
    """The diagnosis's rule (``classify``) at each point of ``plan``'s sweep, for a GPU whose
    model alone runs at ``compute_sps`` (a recorded figure) and a loader built from
    ``decode_sps_per_core``: a "compute" lesson must not read "data-bound" anywhere."""
    verdicts = []
    for value in plan.values:
        knobs = plan.base.replace(**{plan.knob: value})
        loader = loader_ceiling_estimate(knobs, decode_sps_per_core)
        verdicts.append(classify(loader, compute_sps))
    return verdicts
