"""NCCL environment variables: which values NCCL accepts, checked before a job is launched.

NCCL reads its variables once, when a communicator is created, deep inside a training job. A
typo there (``NCCL_ALGO=Rign``) either fails the job minutes into its start-up or, for some
variables, is silently ignored. So values are checked here, where the error can name the
variable and what is allowed.

``VARIABLES`` maps a variable name to its :class:`Rule`. Only values we are certain of are
checked (from NVIDIA's "Environment Variables" page and NCCL's own parser); a known variable
with ``check=None`` takes any text. A name that is not in the table is accepted with a warning:
NCCL has many more variables than this table, and new releases add some.

Lists (``NCCL_ALGO``, ``NCCL_PROTO``) follow NCCL's parser (``parseList``, NCCL 2.24+): names are
case-insensitive and comma-separated, ``^`` in front excludes the listed ones, and
``;``-separated entries after the first may be scoped to one collective
(``Ring;allreduce:Tree``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from workbench.knobs import KnobError

__all__ = ["VARIABLES", "NcclError", "Rule", "check_env", "check_variable"]

ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")


class NcclError(KnobError):
    """An NCCL variable with a value NCCL would refuse or misread; names variable and value."""


@dataclass(frozen=True, slots=True)
class Rule:
    """What one NCCL variable accepts."""

    allowed: str
    """Human words for the allowed values, used in error messages."""
    check: Callable[[str], bool] | None = None
    """True when a value is allowed; None: any text (a path, an interface name, ...)."""


def _name_list(names: tuple[str, ...]) -> Callable[[str], bool]:
    """A checker for NCCL's list syntax over ``names`` (see the module docstring)."""
    known = {n.lower() for n in names}
    scopes = {c.lower() for c in COLLECTIVES}

    def check(value: str) -> bool:
        entries = value.split(";")
        for i, entry in enumerate(entries):
            scope, colon, items = entry.rpartition(":")
            if colon and scope.strip().lower() not in scopes:
                return False
            if not colon and i > 0:  # NCCL: only the first entry may omit the collective
                return False
            items = items.strip().removeprefix("^")
            words = [w.strip().lower() for w in items.split(",") if w.strip()]
            if not words or any(w not in known for w in words):
                return False
        return True

    return check


def _choice(names: tuple[str, ...]) -> Callable[[str], bool]:
    known = {n.lower() for n in names}
    return lambda value: value.strip().lower() in known


def _int_at_least(low: int) -> Callable[[str], bool]:
    def check(value: str) -> bool:
        try:
            return int(value.strip()) >= low
        except ValueError:
            return False

    return check


def _list_words(names: tuple[str, ...]) -> str:
    return (
        f"a comma-separated list of {', '.join(names)} (any case); ^ first excludes them; "
        "later ';' entries may name a collective, e.g. Ring;allreduce:Tree"
    )


_ZERO_ONE = Rule("0 or 1 (1 disables)", _choice(("0", "1")))

VARIABLES: dict[str, Rule] = {
    "NCCL_ALGO": Rule(_list_words(ALGORITHMS), _name_list(ALGORITHMS)),
    "NCCL_PROTO": Rule(_list_words(PROTOCOLS), _name_list(PROTOCOLS)),
    "NCCL_DEBUG": Rule("one of " + ", ".join(DEBUG_LEVELS), _choice(DEBUG_LEVELS)),
    "NCCL_MIN_NCHANNELS": Rule("a positive integer", _int_at_least(1)),
    "NCCL_MAX_NCHANNELS": Rule("a positive integer", _int_at_least(1)),
    "NCCL_BUFFSIZE": Rule("a positive integer (bytes; powers of 2 recommended)", _int_at_least(1)),
    "NCCL_P2P_DISABLE": _ZERO_ONE,
    "NCCL_SHM_DISABLE": _ZERO_ONE,
    "NCCL_IB_DISABLE": _ZERO_ONE,
    # Known, but their values depend on the system or the NCCL release: any text.
    "NCCL_SOCKET_IFNAME": Rule("interface name prefixes, e.g. eth or ^docker"),
    "NCCL_IB_HCA": Rule("InfiniBand HCA names, e.g. mlx5_0:1"),
    "NCCL_DEBUG_SUBSYS": Rule("subsystem names, e.g. INIT,COLL"),
    "NCCL_DEBUG_FILE": Rule("a file name pattern"),
    "NCCL_P2P_LEVEL": Rule("a path type such as NVL, PIX, PXB, PHB, SYS"),
    "NCCL_TOPO_FILE": Rule("a file path"),
}


def check_variable(name: str, value: str) -> str | None:
    """Raise NcclError for a known variable with a bad value; a warning for an unknown name.

    Returns None when the value is fine, or the text of a warning when ``name`` is not in the
    table (the caller decides how to show it: ``warnings.warn``, a log line, a UI message).
    """
    rule = VARIABLES.get(name)
    if rule is None:
        return f"{name} is not an NCCL variable workbench knows; its value is passed through as is"
    if rule.check is not None and not rule.check(value):
        raise NcclError(name, value, rule.allowed)
    return None


def check_env(env: Mapping[str, str]) -> list[str]:
    """Check every ``NCCL_*`` entry of ``env``; other names are left alone. Returns warnings."""
    notes = [check_variable(k, v) for k, v in sorted(env.items()) if k.startswith("NCCL_")]
    return [n for n in notes if n is not None]
