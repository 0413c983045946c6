"""Every figure the lessons state, and where it comes from (read by test_lesson_claims.py).

A lesson's prose (its markdown cells and the comments of its code cells) and the whole
instructor guide (notebooks/README.md, but for the tables ``publish_gpu.py`` generates from the
kept runs, and product names such as "H100 80GB") may state a number with a performance unit (a
ratio "4.7x", a share "12%", a rate in images/s or GB/s, TFLOP/s, a memory size) only when it
is listed here with its source, and the source agrees with it:

- ``Kept``, ``Ratio``, ``Formula``: computed from the reference entries
  (``notebooks/reference/*.json``: the kept H200 run, NVIDIA's tables and datasheets); the
  stated number must be the computed one at the precision it is written with;
- ``Setting``: a value the workbench itself uses (a check's band, a default), read from the code;
- ``Written``: this project's own figure, or a value the lesson's code sets, in the named file:
  the file must still say it;
- ``Published``: a figure printed by another source, with its url (nothing to compute here);
- ``Given``: a value the text gives as an example or a rated speed, not a result (``why``).

Where one text means two things in one place (lesson 11's "5%": a band, an example), each
claim names a word of its sentence (``near``). A new figure in a lesson fails the test until it
is added here with its source.

Each claim is **marked** (:func:`mark`) as one of :data:`MARKS`: *measured here* (this
project's own measurement: a kept run's entry, or a figure of its own in a named file), *published*
(another source's, with its url), *expected* (an example, a rated or a recommended value, with
the reason) or *a setting* (a value the workbench itself uses: a check's band, a default). A kept
entry's mark is its own kind in ``notebooks/reference``; a ratio of a measured and a published
entry is published.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workbench.analysis.diagnosis import BALANCE_BAND
from workbench.core.knobs import Knobs
from workbench.core.results import NOISY_IQR_RATIO
from workbench.engine.datasets import build_datasets
from workbench.history.exercise_rules import RULES
from workbench.workshop import checks as workshop
from workbench.workshop import compute_lesson, reference, transformer_lesson
from workbench.workshop.board.figures import PREDICTION_BAND

ROOT = Path(__file__).resolve().parents[2]
Value = float | tuple[float, ...]


@dataclass(frozen=True)
class Kept:
    """The value of one reference entry."""

    ref_id: str

    def value(self) -> Value:
        return reference.find(self.ref_id).value

    def __str__(self) -> str:
        return f"entry {self.ref_id}"


@dataclass(frozen=True)
class Ratio:
    """``new / old`` of two entries; ``tol`` where the source prints its own rounding."""

    new: str
    old: str
    tol: float | None = None

    def value(self) -> Value:
        return reference.ratio(self.new, self.old)

    def __str__(self) -> str:
        return f"entries {self.new} / {self.old}"


@dataclass(frozen=True)
class Formula:
    """A figure computed from entries or stated quantities (``how`` says what); ``marked``: what
    its inputs are (:data:`MARKS`)."""

    how: str
    compute: Callable[[], Value]
    marked: str = "measured here"

    def value(self) -> Value:
        return self.compute()

    def __str__(self) -> str:
        return self.how


@dataclass(frozen=True)
class Setting:
    """A value the workbench uses, read from its code, in the text's unit."""

    how: str
    read: Callable[[], float]

    def value(self) -> Value:
        return self.read()

    def __str__(self) -> str:
        return self.how


@dataclass(frozen=True)
class Written:
    """A figure or value that ``path`` (from the repository root) states as ``phrase``;
    ``marked``: this project's measurement, or a value its code sets (:data:`MARKS`)."""

    path: str
    phrase: str
    marked: str = "measured here"

    def __str__(self) -> str:
        return f"{self.path}: {self.phrase!r}"


@dataclass(frozen=True)
class Published:
    """A figure printed by another source."""

    url: str
    what: str

    def __str__(self) -> str:
        return f"{self.what} ({self.url})"


@dataclass(frozen=True)
class Given:
    """An example or a rated speed the text gives, not a result."""

    why: str

    def __str__(self) -> str:
        return f"given: {self.why}"


Source = Kept | Ratio | Formula | Setting | Written | Published | Given
MARKS = ("measured here", "published", "expected", "a setting")


def mark(source: Source) -> str:
    """What kind of claim a source makes (module docstring)."""
    if isinstance(source, Kept | Ratio):
        ids = [source.ref_id] if isinstance(source, Kept) else [source.new, source.old]
        kinds = {reference.find(i).kind for i in ids}
        return "published" if "published" in kinds else "measured here"
    if isinstance(source, Formula | Written):
        return source.marked
    if isinstance(source, Published):
        return "published"
    if isinstance(source, Given):
        return "expected"
    return "a setting"


@dataclass(frozen=True)
class Claim:
    where: str
    """A lesson ("03") or "guide" (notebooks/README.md's two sections)."""
    text: str
    """As the prose writes it: "4.7x", "15-30%"."""
    source: Source
    near: str = ""
    """A word of the claim's sentence, where the same text means two things in one place."""


def _default(check: Callable[..., object], name: str) -> float:
    """A check's keyword default (its band), as a percentage."""
    return 100 * inspect.signature(check).parameters[name].default


def _default_value(function: Callable[..., object], name: str) -> float:
    """A function's keyword default, as it is."""
    return inspect.signature(function).parameters[name].default


def _cudnn_order_pct() -> float:
    """The two identical 'off' bursts of the kept run, first and last: gap over their mean."""
    first, last = (reference.find(i).value for i in ("wb-gpu-r50-cudnn-off-1",
                                                     "wb-gpu-r50-cudnn-off-2"))  # fmt: skip
    return 100 * abs(first - last) / ((first + last) / 2)


def _transformer_mfu() -> tuple[float, float]:
    """The lowest and highest MFU of the published transformer runs in lesson 11's table."""
    ranges = [re.findall(r"[\d.]+", row["figure"]) for row in compute_lesson.PUBLISHED
              if row["figure"].endswith("% MFU") and "vs" not in row["figure"]]  # fmt: skip
    values = [float(x) for pair in ranges for x in pair]
    return min(values), max(values)


PYTORCH_2 = "https://pytorch.org/get-started/pytorch-2.0/"
DOCKER_RUN = "https://docs.docker.com/reference/cli/docker/container/run/"
MIG_PROFILES = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html"
CHANNELS_LAST_TUTORIAL = (
    "https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html#performance-gains"
)
COMPOSER = "https://docs.mosaicml.com/projects/composer/en/v0.3.0/method_cards/channels_last.html"
CHECK_BAND = Setting("workshop.check_best's tolerance", lambda: _default(workshop.check_best,
                                                                        "tolerance"))  # fmt: skip
NOISY = Setting("core.results.NOISY_IQR_RATIO", lambda: 100 * NOISY_IQR_RATIO)
SAME_BAND = Setting("compute_lesson.SAME_BAND", lambda: 100 * compute_lesson.SAME_BAND)
KEPT_BF16_OVER_TF32 = Ratio("wb-gpu-r50-bf16", "wb-gpu-r50-tf32")
CUDNN_ORDER = Formula("|off 1 - off 2| / their mean, wb-gpu-r50-cudnn-off-1 and -off-2",
                      _cudnn_order_pct)  # fmt: skip
TRANSFORMER_MFU = Formula(
    "the published transformer MFU ranges of compute_lesson.PUBLISHED: Llama 3 "
    "(https://arxiv.org/abs/2407.21783) and Megatron-LM (https://arxiv.org/abs/2205.05198)",
    _transformer_mfu,
    "published",
)
A100_AMP_MFU = Kept("dle-a100-amp-1gpu-mfu")
CPU_MATH_OVER_AUTO = Written("docs/figures.md", "read 0.92 (0.90-0.96)")
LLMC_MFU_H200 = Formula(
    "llm.c's per-GPU rate x gpt:124m's FLOPs a token / the H200's dense bf16 peak "
    "(transformer_lesson.llmc_anchor)",
    lambda: transformer_lesson.llmc_anchor().mfu_needed_pct("h200"),
    "published",
)

CLAIMS: tuple[Claim, ...] = (
    # 02 the data pipeline
    Claim("02", "1,673-1,927 MiB", Written("workbench/engine/telemetry.py",
                                           "1,673-1,927 MiB summed RSS against 591-668 MiB PSS")),
    Claim("02", "591-668 MiB", Written("workbench/engine/telemetry.py",
                                       "1,673-1,927 MiB summed RSS against 591-668 MiB PSS")),
    Claim("02", "10%", NOISY),
    Claim("02", "5%", CHECK_BAND),
    # 03 precision
    Claim("03", "3x", Ratio("wb-gpu-r50-tf32", "wb-gpu-r50-fp32")),
    Claim("03", "10%", Setting("workshop.check_speedup's rel_tol",
                               lambda: _default(workshop.check_speedup, "rel_tol"))),
    Claim("03", "25%", Setting("exercise_rules.RULES['03-precision'].rel_tol",
                               lambda: 100 * RULES["03-precision"].rel_tol)),
    # 04 batch size and memory
    Claim("04", "16 GB", Published(reference.find("dle-v100-fp32-1gpu").url,
                                   "NVIDIA's DGX-1 16GB (V100) ResNet-50 table")),
    Claim("04", "4x", Written("notebooks/04_batch_size_and_memory.ipynb", "grad_accum=4",
                              "a setting")),
    Claim("04", "90%", Setting("workshop.check_knee's share",
                               lambda: _default(workshop.check_knee, "share"))),
    # 05 the bottleneck
    Claim("05", "15%", Setting("analysis.diagnosis.BALANCE_BAND", lambda: 100 * BALANCE_BAND)),
    # 06 distributed
    Claim("06", "25 MiB", Setting("Knobs().bucket_cap_mb", lambda: Knobs().bucket_cap_mb)),
    *(Claim("06", size, Written("notebooks/06_distributed_and_nccl.ipynb",
                                "[8 * 1024, 64 * 1024, 512 * 1024, 4 * 2**20]", "a setting"))
      for size in ("8 KiB", "64 KiB", "512 KiB", "4 MiB")),
    Claim("06", "7.72x", Ratio("dle-a100-tf32-8gpu", "dle-a100-tf32-1gpu", tol=0.01)),
    Claim("06", "6.72x", Ratio("dle-a100-amp-8gpu", "dle-a100-amp-1gpu", tol=0.01)),
    Claim("06", "400 Gb/s", Given("a rated InfiniBand port speed, named as an example")),
    Claim("06", "100 Gb/s", Given("a rated Ethernet port speed, named as an example")),
    Claim("06", "50 GB/s", Formula("400 Gb/s / 8 bits a byte", lambda: 400 / 8, "expected")),
    Claim("06", "12.5 GB/s", Formula("100 Gb/s / 8 bits a byte", lambda: 100 / 8, "expected")),
    # 07 profiling
    Claim("07", "10%", Setting("workshop.check_top_operator's tolerance",
                               lambda: _default(workshop.check_top_operator, "tolerance"))),
    Claim("07", "19%", A100_AMP_MFU),
    Claim("07", "40%", Given("a GPU starved by its host, an example")),
    Claim("07", "95%", Given("a GPU that is the limit, an example")),
    # 08 production
    Claim("08", "20%", Written("notebooks/08_to_production.ipynb", "rel_tol=0.2", "a setting")),
    # 09 storage
    Claim("09", "7.9 GB/s", Formula("PCIe 4.0 x4: 4 lanes x 16 GT/s x 128/130 / 8 bits a byte",
                                    lambda: 4 * 16 * 128 / 130 / 8, "expected")),
    Claim("09", "6 Gb/s", Given("SATA revision 3's rated line rate (0.6 GB/s after 8b/10b)")),
    Claim("09", "1 MiB", Written("workbench/engine/storage.py", "os.pread(fd, _MIB, offset)",
                                 "a setting")),
    Claim("09", "4 KiB", Written("workbench/engine/storage.py", "_random(fd, size, 4096,",
                                 "a setting")),
    Claim("09", "1.8x", Written("docs/figures.md", "256 px would be 150 MiB, 1.8x")),
    # 10 memory and money
    Claim("10", "20%", Given("the speed-up of the example")),
    Claim("10", "16.7%", Formula("1 - 1/1.2: the bill of the same work at 1.2x the speed",
                                 lambda: 100 * (1 - 1 / 1.2), "expected")),
    # 11 compute and monitoring
    Claim("11", "93%", Published(PYTORCH_2, "PyTorch 2.0: 163 open-source models on an A100")),
    Claim("11", "21%", Published(PYTORCH_2, "PyTorch 2.0: the fp32 average speed-up")),
    Claim("11", "51%", Published(PYTORCH_2, "PyTorch 2.0: the AMP average speed-up")),
    Claim("11", "30%", Published(COMPOSER, "MosaicML Composer's Channels Last method card")),
    Claim("11", "22%", Published(CHANNELS_LAST_TUTORIAL, "PyTorch's channels-last tutorial")),
    Claim("11", "8-35%", Published(CHANNELS_LAST_TUTORIAL, "PyTorch's channels-last tutorial")),
    Claim("11", "38-56%", TRANSFORMER_MFU),
    Claim("11", "5%", SAME_BAND, near="within"),
    Claim("11", "5%", Given("a low MFU, an example"), near="MFU"),
    Claim("11", "100%", Given("NVML's GPU-Util when any kernel runs: its definition, quoted")),
    # 12 a transformer on a GPU
    Claim("12", "0.92x", CPU_MATH_OVER_AUTO),
    # the guide: "What to expect on a CPU and on a GPU", "Common questions"
    Claim("guide", "4.7x", Ratio("wb-gpu-r50-bf16", "wb-gpu-r50-fp32")),
    Claim("guide", "5.0x", Ratio("wb-gpu-r50-fp16", "wb-gpu-r50-fp32")),
    Claim("guide", "1.43x", KEPT_BF16_OVER_TF32),
    Claim("guide", "1.53x", Ratio("wb-gpu-r50-fp16", "wb-gpu-r50-tf32")),
    Claim("guide", "1.2-1.3x", Formula(
        f"1 + the published gains: 22% ({CHANNELS_LAST_TUTORIAL}), about 30% ({COMPOSER})",
        lambda: (1.22, 1.30), "published")),
    Claim("guide", "12%", CUDNN_ORDER),
    Claim("guide", "5%", CHECK_BAND),
    Claim("guide", "10%", NOISY, near="noisy"),
    Claim("guide", "10%", Setting("workshop.check_top_operator's tolerance",
                                  lambda: _default(workshop.check_top_operator, "tolerance")),
          near="for operators"),
    Claim("guide", "10%", Setting("workshop.check_scale_out's same band",
                                  lambda: 100 * workshop.SCALE_OUT_SAME), near="busbw"),
    Claim("guide", "10.6%", Kept("wb-gpu-r50-bf16-mfu")),
    Claim("guide", "19%", A100_AMP_MFU),
    Claim("guide", "3.2x", Ratio("nvidia-h200-bf16-dense", "nvidia-a100-bf16-dense")),
    Claim("guide", "2.4x", Ratio("nvidia-h200-sxm-bandwidth", "nvidia-a100-80gb-sxm-bandwidth")),
    Claim("guide", "38-56%", TRANSFORMER_MFU),
    Claim("guide", "100%", Given("NVML's GPU-Util when any kernel runs: its definition")),
    Claim("guide", "0.92x", CPU_MATH_OVER_AUTO),
    Claim("guide", "50%", Written("docs/figures.md", "| 82.7 (50% less) |")),
    Claim("guide", "1.62x", Ratio("wb-gpu-gpt-compile-reduce-overhead",
                                  "wb-gpu-gpt-compile-default")),
    Claim("guide", "1.25x", Ratio("torchao-llama3-8b-fp8-tensorwise", "torchao-llama3-8b-bf16")),
    Claim("guide", "1.10x", Ratio("torchao-llama3-8b-fp8-rowwise", "torchao-llama3-8b-bf16")),
    # the guide beyond those two sections: the room's set-up, the exercises, the board
    Claim("guide", "4 MB", Setting("build_datasets' token_mb",
                                   lambda: _default_value(build_datasets, "token_mb"))),
    Claim("guide", "16 GB", Given("recommended memory a learner on a GPU room: the kernel, up to "
                                  "16 forked workers, the profiler's trace")),
    Claim("guide", "8 GB", Given("recommended memory a learner on a CPU room")),
    Claim("guide", "2 GB", Given("recommended /dev/shm on a GPU room: 16 workers x 2 batches of "
                                 "a resnet50 batch of 64 (the guide's 1.2 GB) and room to spare")),
    Claim("guide", "1 GB", Given("recommended /dev/shm on a CPU room (smaller cnn batches)")),
    Claim("guide", "64 MB", Published(DOCKER_RUN, "docker run --shm-size: its default")),
    Claim("guide", "38.5 MB", Formula("64 x 3 x 224 x 224 x 4 bytes (a resnet50 batch of 64)",
                                      lambda: 64 * 3 * 224 * 224 * 4 / 1e6, "expected")),
    Claim("guide", "1.2 GB", Formula("16 workers x 2 batches x 38.5 MB",
                                     lambda: 16 * 2 * 64 * 3 * 224 * 224 * 4 / 1e9,
                                     "expected")),
    Claim("guide", "35 GB", Published(MIG_PROFILES, "the H200's 1g.35gb and 2g.35gb profiles")),
    Claim("guide", "25%", Setting("workshop.PREDICTION_TOL", lambda: 100 * workshop.PREDICTION_TOL),
          near="predicted number"),
    Claim("guide", "25%", Setting("exercise_rules.RULES['01-data-wait'].rel_tol",
                                  lambda: 100 * RULES["01-data-wait"].rel_tol),
          near="15 points"),
    Claim("guide", "25%", Setting("board.figures.PREDICTION_BAND", lambda: 100 * PREDICTION_BAND),
          near="in time"),
    Claim("guide", "90%", Setting("workshop.check_knee's share",
                                  lambda: _default(workshop.check_knee, "share"))),
    Claim("guide", "15%", Setting("analysis.diagnosis.BALANCE_BAND", lambda: 100 * BALANCE_BAND)),
    Claim("guide", "1 MiB", Written("workbench/engine/storage.py", "a test file of at least 1 MiB",
                                    "a setting")),
    Claim("guide", "20%", Written("notebooks/08_to_production.ipynb", "rel_tol=0.2", "a setting"),
          near="re-measured"),
    Claim("guide", "20%", LLMC_MFU_H200, near="H200 matches"),
)  # fmt: skip
