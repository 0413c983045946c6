"""The ``alloc_conf`` knob: PyTorch's caching-allocator settings, checked as PyTorch parses them.

PyTorch reads ``PYTORCH_ALLOC_CONF`` (and, with priority for CUDA, the older
``PYTORCH_CUDA_ALLOC_CONF``) once, when the allocator is first used, and refuses a bad value
there, deep inside a job. The knob is checked here instead, before anything starts, against
the options and value forms of the installed torch (2.14: ``c10/core/AllocatorConfig.h``'s
``AcceleratorAllocatorConfig`` for the device-generic options, ``c10/cuda/CUDAAllocatorConfig.h``
for the CUDA ones; the key names were read from ``libc10.so``/``libc10_cuda.so`` of that
build). Booleans are exactly ``True`` or ``False``, as PyTorch's tokenizer wants; spaces are
ignored, as there.

Because the allocator reads it only at start-up, a burst with ``alloc_conf`` on a GPU runs in a
fresh process (a one-rank torchrun job, ``workbench.distributed.jobs``) that gets both variables in
its environment; the kernel's own environment never changes. On a CPU the CUDA caching
allocator does not exist, so the knob is listed in ``no_effect``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from workbench.core.errors import KnobError

ENV_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
"""Both are set to the knob's value: CUDA's config reads PYTORCH_CUDA_ALLOC_CONF first, the
device-generic one PYTORCH_ALLOC_CONF first; a stale value of either in the user's own
environment must not win over the knob."""

_KNOB = "alloc_conf"


@dataclass(frozen=True, slots=True)
class AllocOption:
    """One allocator option: its name, the form of its value, and what it changes."""

    name: str
    form: str
    doc: str
    check: Callable[[str], bool]


def _is_bool(v: str) -> bool:
    return v in ("True", "False")


def _int_at_least(low: int) -> Callable[[str], bool]:
    return lambda v: v.isdigit() and int(v) >= low


def _fraction(open_low: bool) -> Callable[[str], bool]:
    def check(v: str) -> bool:
        try:
            x = float(v)
        except ValueError:
            return False
        return (0.0 < x < 1.0) if open_low else (0.0 <= x <= 1.0)

    return check


def _power_of_two(v: str, zero_ok: bool = False) -> bool:
    if not v.isdigit():
        return False
    n = int(v)
    return (zero_ok and n == 0) or (n > 0 and n & (n - 1) == 0)


def _roundup(v: str) -> bool:
    """``N`` (a power of 2) or ``[SIZE_MB:DIV,...,>:DIV]`` (sizes powers of 2, divisions powers
    of 2 or 0 to turn rounding off), as AllocatorConfig's parseRoundUpPower2Divisions reads."""
    if not v.startswith("["):
        return _power_of_two(v)
    if not v.endswith("]") or len(v) < 3:
        return False
    for pair in v[1:-1].split(","):
        size, colon, div = pair.partition(":")
        if not colon or not (size == ">" or _power_of_two(size)) or not _power_of_two(div, True):
            return False
    return True


_MB_MIN = 20  # kLargeBuffer: PyTorch refuses max_split_size_mb / max_non_split_rounding_mb < 20
OPTIONS: dict[str, AllocOption] = {
    o.name: o
    for o in (
        AllocOption("expandable_segments", "True or False",
                    "grow one segment per stream by mapping more pages instead of new cudaMalloc "
                    "blocks: less fragmentation when batch shapes change", _is_bool),
        AllocOption("max_split_size_mb", f"an integer >= {_MB_MIN}",
                    "blocks larger than this are never split: fewer unusable slivers of big "
                    "blocks (fragmentation) at some reuse cost", _int_at_least(_MB_MIN)),
        AllocOption("max_non_split_rounding_mb", f"an integer >= {_MB_MIN}",
                    "a request may take an unsplit cached block up to this much larger",
                    _int_at_least(_MB_MIN)),
        AllocOption("garbage_collection_threshold", "a number between 0 and 1 (exclusive)",
                    "past this share of the memory limit, free cached unused blocks before "
                    "asking the driver (avoids a full cache flush on OOM)", _fraction(True)),
        AllocOption("roundup_power2_divisions", "a power of 2, or [MB:DIV,...,>:DIV]",
                    "round request sizes up to 1/N steps between powers of 2: more reuse, "
                    "some waste", _roundup),
        AllocOption("large_segment_size_mb", "an integer >= 1",
                    "size of the segments large requests are packed into", _int_at_least(1)),
        AllocOption("backend", "native or cudaMallocAsync",
                    "PyTorch's own caching allocator, or CUDA's stream-ordered allocator",
                    lambda v: v in ("native", "cudaMallocAsync")),
        AllocOption("release_lock_on_cudamalloc", "True or False",
                    "release the allocator lock around cudaMalloc", _is_bool),
        AllocOption("per_process_memory_fraction", "a number from 0 to 1",
                    "cap this process's allocations at a share of the GPU's memory",
                    _fraction(False)),
        AllocOption("throw_on_cudamalloc_oom", "True or False",
                    "raise at once when cudaMalloc fails instead of freeing the cache and "
                    "retrying", _is_bool),
        AllocOption("graph_capture_record_stream_reuse", "True or False",
                    "reuse blocks freed during CUDA-graph capture", _is_bool),
        AllocOption("pinned_use_cuda_host_register", "True or False",
                    "pinned host memory by malloc + cudaHostRegister instead of cudaHostAlloc",
                    _is_bool),
        AllocOption("pinned_num_register_threads", "a power of 2",
                    "threads that register pinned pages (with pinned_use_cuda_host_register)",
                    _power_of_two),
        AllocOption("pinned_use_background_threads", "True or False",
                    "process pinned-memory events on a background thread", _is_bool),
        AllocOption("pinned_reserve_segment_size_mb", "an integer >= 0",
                    "pinned memory reserved up front for small pinned requests",
                    _int_at_least(0)),
        AllocOption("pinned_max_round_threshold_mb", "an integer >= 0",
                    "pinned requests up to this size are rounded to a power of 2",
                    _int_at_least(0)),
        AllocOption("pinned_max_cached_size_mb", "an integer >= 0",
                    "most pinned memory kept cached in the free lists", _int_at_least(0)),
        AllocOption("pinned_free_catch_all", "True or False",
                    "free pinned blocks from any stream on a pinned-memory OOM", _is_bool),
    )
}  # fmt: skip
"""The options torch 2.14's allocator accepts (any other makes it raise at CUDA start-up)."""


def allowed() -> str:
    """The words every refusal carries: the form and every option."""
    return "'' (allocator defaults) or key:value pairs separated by commas; options: " + ", ".join(
        OPTIONS
    )


def split_pairs(text: str) -> list[tuple[str, str]]:
    """``key:value`` pairs of ``text``; commas inside ``[...]`` belong to the value."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if depth < 0:
            raise KnobError(_KNOB, text, f"an unmatched ']'; {allowed()}")
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise KnobError(_KNOB, text, f"an unclosed '['; {allowed()}")
    items.append(text[start:])
    pairs = []
    for item in items:
        key, colon, value = item.partition(":")
        if not colon or not key or not value:
            raise KnobError(_KNOB, text, f"{item!r} is not key:value; {allowed()}")
        pairs.append((key, value))
    return pairs


def normalize(value: object) -> str:
    """The canonical form of an ``alloc_conf`` value (spaces dropped), or KnobError that names
    the option at fault and lists the allowed ones."""
    if not isinstance(value, str):
        raise KnobError(_KNOB, value, allowed())
    text = re.sub(r"\s+", "", value)
    if not text:
        return ""
    seen: set[str] = set()
    for key, setting in split_pairs(text):
        option = OPTIONS.get(key)
        if option is None:
            raise KnobError(_KNOB, value, f"unknown allocator option {key!r}; {allowed()}")
        if key in seen:
            raise KnobError(_KNOB, value, f"option {key!r} is given twice")
        seen.add(key)
        if not option.check(setting):
            raise KnobError(_KNOB, value, f"{key} takes {option.form}, not {setting!r}")
    return text


def env_for(alloc_conf: str) -> dict[str, str]:
    """The variables a fresh process needs for ``alloc_conf`` (empty when it is unset)."""
    return {name: alloc_conf for name in ENV_VARS} if alloc_conf else {}
