"""Environment variables of a training job beside NCCL's: checked before they are launched.

Like NCCL's, these are read once at start-up: PyTorch parses ``PYTORCH_CUDA_ALLOC_CONF`` when
it initializes CUDA and refuses a malformed one there, inside the job. So a saved config
checks what can be checked with certainty (the ``key:value`` syntax, the values of
``expandable_segments`` and ``backend``, positive counts) and warns about names and allocator
options it does not know instead of refusing them: PyTorch adds options between releases.
NCCL_* variables are checked by :mod:`workbench.core.nccl`.
"""

from __future__ import annotations

import re

from workbench.core.errors import KnobError
from workbench.core.trusted import power_of

__all__ = ["ONE_LINE", "EnvVarError", "check_variable", "has_control", "is_variable_name"]

ALLOC_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
_POSITIVE_INT_VARS = ("CUDA_DEVICE_MAX_CONNECTIONS", "OMP_NUM_THREADS")
_QUIET_PREFIXES = ("TORCH_", "PYTORCH_", "CUDA_", "CUBLAS_", "CUDNN_")
ALLOC_KEYS = (
    "backend",
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "expandable_segments",
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
    "pinned_use_background_threads",
)
_ALLOC_CHOICES = {
    "expandable_segments": ("True", "False"),
    "backend": ("native", "cudaMallocAsync"),
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
ONE_LINE = "text on one line, without control characters (newline, tab, NUL, escape)"
"""What a variable's value may be: a newline would start a new line in the exports, the sbatch
script and the ssh command a value is written into; a NUL cannot be put in an environment."""


def has_control(value: str) -> bool:
    """True when ``value`` holds a control character (C0 or DEL)."""
    return bool(_CONTROL.search(value))


class EnvVarError(KnobError):
    """A variable value the program reading it would refuse; names variable, value, allowed."""


def is_variable_name(name: object) -> bool:
    """True for a name a shell can export (letters, digits, _; not starting with a digit)."""
    return isinstance(name, str) and bool(_NAME.match(name))


def check_variable(name: str, value: str) -> list[str]:
    """Raise EnvVarError for a value that cannot work; return warnings (unknown names, options)."""
    if has_control(value):
        raise EnvVarError(name, value, ONE_LINE)
    if name in ALLOC_VARS:
        return _alloc_conf_notes(name, value)
    if name in _POSITIVE_INT_VARS:
        if not value.isdigit() or int(value) < 1:
            raise EnvVarError(name, value, "a positive integer")
        return []
    if name.startswith(_QUIET_PREFIXES) or power_of(name) is not None:
        return []  # a variable that can run code is warned about as such (core.trusted)
    return [f"{name} is not a variable workbench knows; it is passed through as is"]


def _alloc_conf_notes(name: str, value: str) -> list[str]:
    notes = []
    for item in _split_outside_brackets(value):
        key, colon, setting = (s.strip() for s in item.partition(":"))
        if not (colon and key and setting):
            raise EnvVarError(
                name, value, "key:value pairs separated by commas, e.g. expandable_segments:True"
            )
        if key not in ALLOC_KEYS:
            known = ", ".join(ALLOC_KEYS)
            notes.append(f"{name}: {key!r} is not an allocator option workbench knows ({known})")
        elif key in _ALLOC_CHOICES and setting not in _ALLOC_CHOICES[key]:
            allowed = " or ".join(_ALLOC_CHOICES[key])
            raise EnvVarError(name, value, f"{key} takes {allowed} (exactly so), not {setting!r}")
    return notes


def _split_outside_brackets(text: str) -> list[str]:
    """Split on commas outside [...], as in roundup_power2_divisions:[256:1,512:2,>:8]."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [s for s in items if s.strip()]
