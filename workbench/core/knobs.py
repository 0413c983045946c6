"""The knobs a person moves, as one frozen, validated dataclass.

``Knobs`` is the single source of truth for every knob: its name (the same in ``--set``, in
Python and in saved configs), default, type, allowed values or range, and a one-line doc that
the notebook panel shows as a tooltip. Validation happens at construction, so an invalid
``Knobs`` never exists: a bad value raises :class:`KnobError` (a ``ValueError``) naming the
knob, the value and what is allowed, and combinations that cannot work are refused with the
reason.

Knobs that cannot act on the current device (pin_memory without CUDA, tf32 on a CPU, ...)
are *valid* knobs: the burst reports them in ``no_effect`` instead of refusing them, because a
config tuned on a laptop should still load on a GPU box.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from workbench.core import allocconf
from workbench.core.errors import KnobError
from workbench.core.nccl import check_together, check_variable

PRECISIONS = ("default", "fp32-strict", "tf32", "bf16", "fp16")
"""``default``: PyTorch's own math, as an untouched ``import torch`` has it (fp32 matmuls at
"highest", cuDNN convolutions allowed TF32); ``fp32-strict``: IEEE fp32 everywhere, cuDNN too;
``tf32``: TF32 tensor cores for fp32 matmuls and convolutions; ``bf16``/``fp16``: autocast."""
FP32_PRECISIONS = ("default", "fp32-strict", "tf32")
"""The precisions whose math is fp32 (no autocast): they differ only in where TF32 may act."""
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")
LOADERS = ("torch", "dali", "synthetic")
OPTIMIZER_IMPLS = ("foreach", "fused", "for-loop")
DATA_FORMATS = ("files", "shards", "lmdb", "predecoded")
DECODES = ("cpu", "gpu")
"""Where the torch loader's image pipeline runs: ``cpu`` (workers decode with Pillow, crop,
flip and normalize: float32 batches cross to the device) or ``gpu`` (workers only read the
stored bytes; the training device decodes them with nvJPEG and augments there)."""
CACHE_MODES = ("warm", "cold")
ATTENTIONS = ("auto", "flash", "efficient", "cudnn", "math")
"""PyTorch's scaled-dot-product-attention backends (``torch.nn.attention.SDPBackend``), as
``torch.nn.attention.sdpa_kernel`` selects them for a burst: ``auto`` is PyTorch's own choice
per call among all of them (``workbench.engine.attention`` says what each needs)."""
PACKINGS = ("off", "pad", "pack")
"""How a transformer workload's documents fill its sequences (``workbench.engine.packing``):
``off`` (the workload's own fixed windows of one token stream, no documents), ``pad`` (one
document a row, padded to the sequence length or truncated) or ``pack`` (documents
concatenated into full rows, an attention mask keeping them apart)."""
SHARDINGS = ("ddp", "fsdp")
"""How the ranks of a distributed job hold the model: ``ddp`` (DistributedDataParallel: every
rank a whole replica, gradients all-reduced) or ``fsdp`` (FSDP2's ``fully_shard`` per block,
then the root: each rank keeps 1/world_size of the parameters, gradients and optimizer state;
``workbench.engine.sharding`` says how)."""
FP8_RECIPES = ("off", "tensorwise", "rowwise", "rowwise_with_gw_hp")
"""Float8 training of the Linear layers: ``off``, or one of torchao's recipes
(``torchao.float8.Float8LinearConfig.from_recipe_name``), fastest first: ``tensorwise`` (one
dynamic scale per tensor, cuBLAS), ``rowwise`` (a scale per row, CUTLASS; scales rounded to
powers of two), ``rowwise_with_gw_hp`` (rowwise, the weight gradient kept in high precision:
the most accurate). ``workbench.engine.fp8`` says where it acts."""
DALI_FORMATS = ("files", "shards")
_NCCL_NAME = re.compile(r"^NCCL_[A-Z0-9_]+$")
_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f"}
_RENAMED: dict[tuple[str, str], tuple[str, str]] = {
    ("precision", "fp32"): (
        "fp32-strict",
        "precision=fp32 (workbench 0.1) measured IEEE fp32 everywhere, TF32 off in cuDNN too: "
        "it now reads as fp32-strict; PyTorch's own math, where cuDNN may use TF32, is "
        "precision=default",
    ),
}
"""Old knob values and what they read as now, with the one line that says why: the value
that measured IEEE fp32 everywhere keeps meaning exactly that (saved configs, history rows,
tuner spaces and ``--set`` alike), under a name that no longer looks like PyTorch's default."""
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RenamedValueWarning(UserWarning):
    """A knob value from an older workbench, read under its current name; the message says
    what the old value measured and what it reads as now."""


def current_value(name: str, value: Any) -> tuple[Any, str | None]:
    """``value`` under its current name, and the note that says so (None if not renamed)."""
    renamed = _RENAMED.get((name, value)) if isinstance(value, str) else None
    return (value, None) if renamed is None else renamed


def current_values(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Knob values (a knobs dict) with old values under their current names, silently, and
    the notes of those renamed: a source of many (a history read) warns once with them."""
    out, notes = dict(data), []
    for name, value in data.items():
        out[name], note = current_value(name, value)
        if note is not None and note not in notes:
            notes.append(note)
    return out, notes


def warn_renamed(notes: list[str], source: str | None = None) -> None:
    """One RenamedValueWarning per note, prefixed by the source (a file, a store), pointed at
    the first caller outside workbench so Python's filter shows it once per calling line."""
    for note in notes:
        text = f"{source}: {note}" if source else note
        warnings.warn(text, RenamedValueWarning, stacklevel=_outside_level())


def _outside_level() -> int:
    """The stacklevel of the first frame outside workbench (and dataclasses' generated
    ``__init__``), counted from warn_renamed's caller's caller."""
    frame, level = sys._getframe(2), 2
    while frame is not None and _inside(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def _inside(filename: str) -> bool:
    return (
        filename.startswith(_PACKAGE_DIR + os.sep)
        or filename == "<string>"
        or (os.path.basename(filename) == "dataclasses.py")
    )


@dataclass(frozen=True, slots=True)
class KnobSpec:
    """What the UI and the CLI need to know about one knob."""

    name: str
    kind: str  # "int", "float", "bool", "choice", "optional_int", "mapping", "text"
    default: Any
    doc: str
    group: str
    choices: tuple[str, ...] | None = None
    low: float | None = None
    high: float | None = None

    def allowed(self) -> str:
        """Human words for the allowed values, used in every error message."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices or ())
        if self.kind == "bool":
            return "true or false"
        if self.kind == "mapping":
            return "a mapping of NCCL_* variable names to string values"
        if self.kind == "text":  # the one text knob: alloc_conf
            return allocconf.allowed()
        noun = "an integer" if "int" in self.kind else "a number"
        rng = f"{noun} from {_fmt(self.low)} to {_fmt(self.high)}"
        return rng + (", or none (unset)" if self.kind == "optional_int" else "")


def _fmt(x: float | None) -> str:
    return "-inf" if x is None else (str(int(x)) if float(x).is_integer() else str(x))


def _knob(default: Any, doc: str, group: str, kind: str, **limits: Any) -> Any:
    spec = {"doc": doc, "group": group, "kind": kind, **limits}
    if isinstance(default, dict):
        return field(default_factory=lambda: MappingProxyType({}), metadata=spec)
    return field(default=default, metadata=spec)


@dataclass(frozen=True, kw_only=True, slots=True)
class Knobs:
    """Every knob of a burst. Construct with keywords; invalid values raise KnobError."""

    batch_size: int = _knob(
        32,
        "Samples per micro-batch fed to the model (per rank).",
        "compute",
        "int",
        low=1,
        high=65536,
    )
    num_workers: int = _knob(
        0,
        "DataLoader worker processes decoding batches in parallel (0: in the training process).",
        "data",
        "int",
        low=0,
        high=256,
    )
    prefetch_factor: int | None = _knob(
        None,
        "Batches each worker keeps ready ahead of time (needs num_workers > 0; unset: torch's 2).",
        "data",
        "optional_int",
        low=1,
        high=64,
    )
    pin_memory: bool = _knob(
        False,
        "Page-locked host batches, copied to the GPU with non_blocking=True (CUDA only).",
        "data",
        "bool",
    )
    persistent_workers: bool = _knob(
        False,
        "Keep loader workers alive between epochs instead of re-forking them (needs workers).",
        "data",
        "bool",
    )
    precision: str = _knob(
        "default",
        "Math precision: default (PyTorch's own: fp32 matmuls IEEE, cuDNN convolutions may use "
        "TF32), fp32-strict (IEEE everywhere, cuDNN too), tf32 (TF32 matmuls and convolutions, "
        "Ampere+), bf16 or fp16 autocast (fp16 with loss scaling). The old fp32 reads as "
        "fp32-strict.",
        "compute",
        "choice",
        choices=PRECISIONS,
    )
    channels_last: bool = _knob(
        False,
        "NHWC memory layout for image models and inputs (faster convolutions on tensor cores).",
        "compute",
        "bool",
    )
    compile: str = _knob(
        "off",
        "torch.compile mode; compile time is reported as compile_s, outside the measured window. "
        "max-autotune times Triton matmul kernels: minutes on a cold start (past 140 s for gpt "
        "on an H200); reduce-overhead adds CUDA graphs without that search.",
        "compute",
        "choice",
        choices=COMPILE_MODES,
    )
    cudnn_benchmark: bool = _knob(
        False,
        "Let cuDNN time its convolution algorithms on the first step and keep the fastest.",
        "compute",
        "bool",
    )
    grad_accum: int = _knob(
        1,
        "Micro-batches accumulated per optimizer step (effective batch = batch_size x grad_accum).",
        "compute",
        "int",
        low=1,
        high=1024,
    )
    attention: str = _knob(
        "auto",
        "Which kernel runs scaled_dot_product_attention (torch.nn.attention.sdpa_kernel): auto "
        "(PyTorch picks per call), flash (FlashAttention-2: CUDA sm80+, fp16/bf16, head dim up "
        "to 256; on a CPU PyTorch's own C++ flash kernel), efficient (memory-efficient, CUDA, "
        "fp32 too), cudnn (cuDNN 9+, sm80+, fp16/bf16) or math (the reference, anywhere). Acts "
        "on models whose attention calls F.scaled_dot_product_attention.",
        "compute",
        "choice",
        choices=ATTENTIONS,
    )
    fp8: str = _knob(
        "off",
        "Float8 training of the Linear layers (torchao's convert_to_float8_training): off, "
        "tensorwise (one scale a tensor: the fastest), rowwise (a scale a row: more accurate) "
        "or rowwise_with_gw_hp (rowwise, weight gradients in bf16: the most accurate). Needs "
        "precision=bf16, CUDA compute capability 8.9+ (Ada, Hopper, Blackwell) and torchao; "
        "layers with a dimension not divisible by 16 and the output head stay in bf16. Fast "
        "only with torch.compile, which fuses its casts.",
        "compute",
        "choice",
        choices=FP8_RECIPES,
    )
    loader: str = _knob(
        "torch",
        "Data loading backend: torch DataLoader, NVIDIA DALI, or synthetic (one batch resident on "
        "the device, replayed: the compute-only ceiling).",
        "data",
        "choice",
        choices=LOADERS,
    )
    dali_decode: str = _knob(
        "auto",
        "Where DALI decodes JPEGs (loader=dali): mixed (nvJPEG on the GPU), cpu (libjpeg-turbo in "
        "DALI's threads), or auto (mixed when the burst runs on CUDA, cpu otherwise).",
        "data",
        "choice",
        choices=("auto", "cpu", "mixed"),
    )
    dali_hw_decoder_load: float = _knob(
        0.65,
        "Share of JPEGs DALI's mixed decode sends to the GPU's hardware JPEG decoder (A100, "
        "H100, ...); the rest decode on CUDA cores and CPU threads.",
        "data",
        "float",
        low=0.0,
        high=1.0,
    )
    decode: str = _knob(
        "cpu",
        "Where the torch loader's images are decoded and augmented: cpu (workers decode with "
        "Pillow, crop, flip, normalize; float32 batches are copied to the device) or gpu "
        "(workers read bytes only; the device decodes JPEGs with nvJPEG, or takes predecoded "
        "uint8 pixels, and crops, flips and normalizes there). CUDA only.",
        "data",
        "choice",
        choices=DECODES,
    )
    decode_overlap: bool = _knob(
        True,
        "decode=gpu: prepare the next batch (copy, decode, crop) on a side CUDA stream while the "
        "model trains on this one (on), or in line on the training stream (off).",
        "data",
        "bool",
    )
    data_format: str = _knob(
        "files",
        "How the images are stored: files (a JPEG folder, read at random), shards (WebDataset "
        "tar files, read in sequence), lmdb (one LMDB of JPEGs, random access) or predecoded "
        "(uint8 pixels at training resolution, memory-mapped: no decoder). Build one with "
        "workbench data --format.",
        "data",
        "choice",
        choices=DATA_FORMATS,
    )
    cache: str = _knob(
        "warm",
        "Page cache before the measured window: warm (as it is: what RAM serves) or cold (the "
        "dataset's pages dropped first: what a first epoch costs on this disk).",
        "data",
        "choice",
        choices=CACHE_MODES,
    )
    packing: str = _knob(
        "off",
        "Transformer workloads with documents (gpt, gpt:124m): off (fixed windows of one token "
        "stream), pad (one document a row, padded to the sequence length, truncated if longer) "
        "or pack (documents concatenated into full rows; a block-diagonal causal mask keeps "
        "them apart, positions restart per document). tokens_per_s counts real tokens, "
        "pad_share_pct the padding.",
        "data",
        "choice",
        choices=PACKINGS,
    )
    world_size: int = _knob(
        1,
        "Processes (GPUs) in a data-parallel job launched by torchrun, over all its nodes.",
        "dist",
        "int",
        low=1,
        high=4096,
    )
    nodes: int = _knob(
        1,
        "Machines the job spans (world_size is the total rank count and must divide by it); "
        "more than one needs a launcher: slurm, ssh, or local for tests.",
        "dist",
        "int",
        low=1,
        high=1024,
    )
    bucket_cap_mb: float = _knob(
        25.0,
        "DDP gradient bucket size in MiB: bigger buckets, fewer all-reduce calls.",
        "dist",
        "float",
        low=0.1,
        high=4096,
    )
    gradient_as_bucket_view: bool = _knob(
        False,
        "DDP: gradients are views into the all-reduce buckets (saves one gradient-sized copy "
        "of memory and a copy per step).",
        "dist",
        "bool",
    )
    static_graph: bool = _knob(
        False,
        "DDP: the model uses the same parameters every step, so DDP can skip re-discovering "
        "unused ones and overlap communication better.",
        "dist",
        "bool",
    )
    sharding: str = _knob(
        "ddp",
        "How the ranks hold the model (world_size > 1): ddp (DistributedDataParallel: a whole "
        "replica on every rank, gradients all-reduced) or fsdp (FSDP2 fully_shard per block, "
        "then the root: each rank keeps 1/world_size of the parameters, gradients and optimizer "
        "state, and all-gathers a block's parameters when it runs).",
        "dist",
        "choice",
        choices=SHARDINGS,
    )
    reshard_after_forward: bool = _knob(
        True,
        "sharding=fsdp: free each block's gathered parameters after its forward and gather them "
        "again for its backward (on: less memory, one more all-gather a block; PyTorch's default) "
        "or keep them until the backward (off).",
        "dist",
        "bool",
    )
    alloc_conf: str = _knob(
        "",
        "PyTorch caching-allocator settings (PYTORCH_ALLOC_CONF), e.g. expandable_segments:True "
        "against fragmentation; read at CUDA start-up, so a GPU burst runs in a fresh process.",
        "memory",
        "text",
    )
    activation_checkpointing: bool = _knob(
        False,
        "Recompute each block's activations in the backward pass instead of keeping them: "
        "less activation memory for about one more forward pass of compute.",
        "memory",
        "bool",
    )
    optimizer_impl: str = _knob(
        "foreach",
        "How the optimizer step runs: foreach (batched kernels over all tensors), fused (one "
        "kernel per group; no GradScaler host sync) or for-loop (one tensor at a time).",
        "memory",
        "choice",
        choices=OPTIMIZER_IMPLS,
    )
    nccl: Mapping[str, str] = _knob(
        {},
        "NCCL_* environment variables for the workers (never set in this process).",
        "dist",
        "mapping",
    )

    def __post_init__(self) -> None:
        for spec in knob_specs():
            object.__setattr__(self, spec.name, _coerce(spec, getattr(self, spec.name)))
        _check_combinations(self)

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in self.to_dict().items())))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.changes().items())
        return f"Knobs({inner})"

    def changes(self) -> dict[str, Any]:
        """The knobs that differ from their defaults, in field order (as ``to_dict`` gives)."""
        return {k: v for k, v in self.to_dict().items() if v != _DEFAULTS[k]}

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON/YAML-ready dict of every knob (nccl as a plain dict)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["nccl"] = dict(out["nccl"])
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Knobs:
        """Build from a dict; unknown keys are refused with the known ones listed."""
        unknown = sorted(set(data) - set(KNOB_NAMES))
        if unknown:
            raise unknown_knob(unknown[0], data[unknown[0]])
        return cls(**dict(data))

    def replace(self, **changes: Any) -> Knobs:
        """A copy with some knobs changed (NCCL_* names go into the nccl mapping)."""
        nccl = {k: changes.pop(k) for k in list(changes) if k.startswith("NCCL_")}
        unknown = sorted(set(changes) - set(KNOB_NAMES))
        if unknown:
            raise unknown_knob(unknown[0], changes[unknown[0]])
        if nccl:
            changes["nccl"] = {**self.nccl, **changes.get("nccl", {}), **nccl}
        return dataclasses.replace(self, **changes)

    def with_text(self, assignments: list[str] | tuple[str, ...]) -> Knobs:
        """Apply CLI-style ``KNOB=VALUE`` strings (values parsed from text)."""
        changes: dict[str, Any] = {}
        for item in assignments:
            name, sep, text = item.partition("=")
            name = name.strip()
            if not sep:
                raise KnobError(name, item, "expected KNOB=VALUE, e.g. batch_size=64")
            changes[name] = parse_value(name, text.strip())
        return self.replace(**changes)


def _known() -> str:
    return ", ".join(KNOB_NAMES) + ", NCCL_*"


def unknown_knob(name: str, value: Any) -> KnobError:
    """The refusal of a knob name that does not exist, with the nearest real name first
    (``batch_sise`` -> "did you mean batch_size?"), then every known one."""
    guess = _closest_name(name)
    hint = f" (did you mean {guess}?)" if guess else ""
    return KnobError(name, value, f"unknown knob{hint}; known: {_known()}")


def meant_knob(name: str) -> str | None:
    """The knob a keyword names or misspells (``batchsize`` -> batch_size); None for others."""
    knob = name if name in SPECS else _closest_name(name)
    return None if knob is None or _NCCL_NAME.match(knob) else knob


def not_an_argument(
    function: str, name: str, given: Mapping[str, Any], arguments: Sequence[str],
    knobs_keyword: str | None = None,
) -> UnknownKnob:  # fmt: skip
    """The refusal of ``function(..., name=...)`` where ``name`` is no argument: a knob (or a
    typo of one) goes in ``Knobs(...)``, the second argument or ``knobs_keyword=``; a typo of
    an argument names the argument."""
    value = given[name]
    knob = meant_knob(name)
    if knob is not None:
        meant = "" if knob == name else f" (did you mean {knob}?)"
        knobs = f"wb.Knobs({knob}={value!r})"
        how = f"{knobs_keyword}={knobs}" if knobs_keyword else f"{function}(workload, {knobs})"
        return UnknownKnob(name, value, f"{function} takes no knob by keyword{meant}: knobs go "
                                        f"in Knobs, {how}")  # fmt: skip
    close = difflib.get_close_matches(name, arguments, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    return UnknownKnob(name, value, f"no argument of {function}: {hint}its arguments are "
                                    f"{', '.join(arguments)}")  # fmt: skip


def _closest_name(name: str) -> str | None:
    """The knob name a typo most likely meant; an NCCL variable typed in lower case is read
    in upper case (``nccl_algo`` -> NCCL_ALGO), as NCCL spells it."""
    if _NCCL_NAME.match(name.upper()):
        return name.upper()
    close = difflib.get_close_matches(name.lower(), KNOB_NAMES, n=1, cutoff=0.75)
    return close[0] if close else None


def parse_value(name: str, text: str) -> Any:
    """Parse a knob value typed as text (CLI ``--set``, a UI text box)."""
    if _NCCL_NAME.match(name):
        return text
    spec = SPECS.get(name)
    if spec is None:
        raise unknown_knob(name, text)
    low = text.lower()
    if spec.kind == "text" and low in {"none", "null", "default"}:
        return ""
    if spec.kind == "optional_int" and low in {"none", "null", ""}:
        return None
    if spec.kind == "bool":
        if low in _TRUE | _FALSE:
            return low in _TRUE
        raise KnobError(name, text, spec.allowed())
    if spec.kind in {"int", "optional_int"}:
        try:
            return int(text)
        except ValueError:
            raise KnobError(name, text, spec.allowed()) from None
    if spec.kind == "float":
        try:
            return float(text)
        except ValueError:
            raise KnobError(name, text, spec.allowed()) from None
    return text


def check_value(name: str, value: Any) -> Any:
    """One knob value checked on its own (type and range, not combinations); canonical form.

    For lists of values (a sweep, a tuner's search space) that are checked before any burst
    runs: a combination such as prefetch without workers depends on the other knobs.
    """
    if _NCCL_NAME.match(name):
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise KnobError(name, value, "a string value (numbers are converted)")
        return str(value).strip()
    spec = SPECS.get(name)
    if spec is None:
        raise unknown_knob(name, value)
    return _coerce(spec, value)


def _coerce(spec: KnobSpec, value: Any) -> Any:
    """Check one value against its spec; return it in canonical form."""
    if spec.kind == "mapping":
        return _coerce_nccl(value)
    if spec.kind == "text":
        return allocconf.normalize(value)
    if spec.kind == "optional_int" and value is None:
        return None
    if spec.kind == "bool":
        if isinstance(value, bool):
            return value
        raise KnobError(spec.name, value, spec.allowed())
    if spec.kind == "choice":
        value, note = current_value(spec.name, value)
        if note is not None:
            warn_renamed([note])
        if isinstance(value, str) and value in (spec.choices or ()):
            return value
        raise KnobError(spec.name, value, spec.allowed())
    return _coerce_number(spec, value)


def _coerce_number(spec: KnobSpec, value: Any) -> Any:
    is_int_kind = spec.kind in {"int", "optional_int"}
    ok_type = isinstance(value, int) or (not is_int_kind and isinstance(value, float))
    if isinstance(value, bool) or not ok_type:
        raise KnobError(spec.name, value, spec.allowed())
    if value != value or not (spec.low <= value <= spec.high):  # NaN fails too
        raise KnobError(spec.name, value, spec.allowed())
    return float(value) if spec.kind == "float" else int(value)


def _coerce_nccl(value: Any) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise KnobError("nccl", value, SPECS["nccl"].allowed())
    clean: dict[str, str] = {}
    for name in sorted(value):
        if not isinstance(name, str) or not _NCCL_NAME.match(name):
            raise KnobError("nccl", name, "variable names look like NCCL_ALGO (NCCL_[A-Z0-9_]+)")
        text = value[name]
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise KnobError(name, text, "a string value (numbers are converted)")
        clean[name] = str(text).strip()
    for name, text in clean.items():
        check_variable(name, text)  # a known variable with a bad value raises, naming both
    check_together(clean)  # values that are fine alone but not together (socket threads)
    return MappingProxyType(clean)


def _check_combinations(k: Knobs) -> None:
    """Refuse combinations that cannot work, saying why."""
    if k.num_workers == 0 and k.prefetch_factor is not None:
        raise KnobError(
            "prefetch_factor",
            k.prefetch_factor,
            "needs num_workers > 0 (with 0 workers batches are loaded in the training "
            "process and nothing prefetches); set num_workers or leave prefetch_factor unset",
        )
    if k.num_workers == 0 and k.persistent_workers:
        raise KnobError(
            "persistent_workers",
            True,
            "needs num_workers > 0 (there are no worker processes to keep alive)",
        )
    if k.world_size % k.nodes:
        raise KnobError(
            "world_size",
            k.world_size,
            f"a multiple of nodes={k.nodes}: world_size is the total rank count, split evenly "
            f"over the nodes (e.g. world_size={k.nodes * max(1, k.world_size // k.nodes)})",
        )
    _check_dali_format(k)
    _check_fp8(k)


def _check_fp8(k: Knobs) -> None:
    """Float8 is a step past bf16 autocast, not a replacement for it: torchao's recipes are
    built and benchmarked with everything outside the converted matmuls (attention, norms,
    the output head) in bf16, and the question fp8 answers is whether it beats that."""
    if k.fp8 != "off" and k.precision != "bf16":
        raise KnobError(
            "fp8",
            k.fp8,
            f"needs precision=bf16 (not {k.precision}): torchao's float8 recipes convert the "
            "Linear layers' matmuls and keep the rest of the model in bf16 autocast; set "
            "precision=bf16, or fp8=off",
        )


def _check_dali_format(k: Knobs) -> None:
    """DALI reads files and shards itself; the other formats it cannot read as stored here."""
    if k.loader != "dali" or k.data_format in DALI_FORMATS:
        return
    why = {
        "lmdb": "DALI's LMDB readers (fn.readers.caffe, caffe2) read Caffe's protobuf records, "
        "not this LMDB of plain JPEG bytes",
        "predecoded": "predecoded pixels skip the JPEG decoder that DALI exists to run; DALI "
        "has no reader for one memory-mapped pixel file",
    }[k.data_format]
    raise KnobError(
        "data_format", k.data_format, f"files or shards with loader=dali: {why} (use loader=torch)"
    )


def knob_specs() -> tuple[KnobSpec, ...]:
    """One KnobSpec per Knobs field, in declaration order."""
    return _SPECS


def _make_specs() -> tuple[KnobSpec, ...]:
    specs = []
    for f in dataclasses.fields(Knobs):
        meta = f.metadata
        default = f.default if f.default is not dataclasses.MISSING else {}
        specs.append(
            KnobSpec(
                name=f.name,
                kind=meta["kind"],
                default=default,
                doc=meta["doc"],
                group=meta["group"],
                choices=meta.get("choices"),
                low=meta.get("low"),
                high=meta.get("high"),
            )
        )
    return tuple(specs)


_SPECS = _make_specs()
SPECS: dict[str, KnobSpec] = {s.name: s for s in _SPECS}
KNOB_NAMES: tuple[str, ...] = tuple(SPECS)
_DEFAULTS: dict[str, Any] = {s.name: s.default for s in _SPECS}


def with_knob(base: Knobs, name: str, value: Any) -> Knobs:
    """``base`` with one knob changed, keeping what the change implies.

    Going to ``num_workers=0`` also unsets ``prefetch_factor`` and ``persistent_workers``:
    both mean nothing without worker processes (``Knobs`` refuses them there), and a sweep or
    tune over workers would otherwise stop at its first 0. The reverse is not repaired: asking
    for a prefetch factor with no workers is a KnobError that says so.
    """
    changes: dict[str, Any] = {name: value}
    if name == "num_workers" and value == 0:
        changes |= {"prefetch_factor": None, "persistent_workers": False}
    return base.replace(**changes)


DDP_KNOBS = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph")
"""The knobs DistributedDataParallel takes as arguments (the burst's and a saved config's)."""


class UnknownKnob(KnobError, TypeError):
    """A keyword that is no knob (``Knobs(batchsize=64)``): a KnobError with the nearest real
    name, and still the TypeError Python gives for an unexpected keyword."""


def _refuse_unknown_keywords(init: Any) -> Any:
    """``Knobs(...)``'s generated ``__init__``, refusing a keyword that is no knob by name
    with "did you mean ...?" (Python's own message names neither the fix nor the knobs)."""

    @functools.wraps(init)
    def checked(self: Knobs, *args: Any, **kwargs: Any) -> None:
        for name in kwargs:
            if name in SPECS:
                continue
            if _NCCL_NAME.match(name):
                nccl = f"an NCCL variable: Knobs(nccl={{{name!r}: {str(kwargs[name])!r}}})"
                raise UnknownKnob(name, kwargs[name], nccl)
            raise UnknownKnob(name, kwargs[name], unknown_knob(name, kwargs[name]).allowed or "")
        init(self, *args, **kwargs)

    return checked


Knobs.__init__ = _refuse_unknown_keywords(Knobs.__init__)  # type: ignore[method-assign]

DEFAULTS = Knobs()
"""Every knob at its default, built once: "did this knob move?" is ``getattr(knobs, name) !=
getattr(DEFAULTS, name)``, with no new Knobs (and its checks) made per question."""
