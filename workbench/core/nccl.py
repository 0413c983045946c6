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

Interface lists (``NCCL_SOCKET_IFNAME``, ``NCCL_IB_HCA``) follow NCCL's ``parseStringList``:
comma-separated prefixes, ``^`` first to exclude, ``=`` next for exact names, and for HCAs an
optional ``:port``. :func:`parse_interfaces` reads them the same way, so that
``workbench.distributed.netcheck`` can ask each node whether the list selects anything there.
Some limits span two variables (socket threads x sockets per thread <= 64):
:func:`check_together`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from workbench.core.envvars import ONE_LINE, has_control
from workbench.core.errors import KnobError

__all__ = [
    "DEBUG_ONLY",
    "DEBUG_SOURCE",
    "ON_GLOO",
    "VARIABLES",
    "InterfaceList",
    "NcclError",
    "Rule",
    "check_env",
    "check_together",
    "check_variable",
    "flags",
    "is_debug_only",
    "parse_interfaces",
]

ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")


class NcclError(KnobError):
    """An NCCL variable with a value NCCL would refuse or misread; names variable and value."""


ON_GLOO = "NCCL variables act only with the NCCL backend on GPUs; gloo ran here"
"""The ``no_effect`` reason for NCCL variables in a job on CPUs (gloo, not NCCL)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """What one NCCL variable accepts, and what setting it means beyond speed."""

    allowed: str
    """Human words for the allowed values, used in error messages."""
    check: Callable[[str], bool] | None = None
    """True when a value is allowed; None: any text (a path, an interface name, ...)."""
    numerics: bool = False
    """Changes the order in which values are summed, so results can differ in the last bits."""
    debug_only: bool = False
    """Listed in NCCL's "Debugging" section: not for production, remove once the issue is fixed."""


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


def _level(names: tuple[str, ...]) -> Callable[[str], bool]:
    """A path-type name (``NVL``, ``PIX``, ...) or the older integer form 0..5."""
    by_name = _choice(names)
    return lambda value: by_name(value) or value.strip() in {"0", "1", "2", "3", "4", "5"}


def _int_between(low: int, high: int) -> Callable[[str], bool]:
    at_least = _int_at_least(low)
    return lambda value: at_least(value) and int(value.strip()) <= high


@dataclass(frozen=True, slots=True)
class InterfaceList:
    """NCCL_SOCKET_IFNAME / NCCL_IB_HCA as NCCL's ``parseStringList`` reads them.

    ``^`` first: use every interface *except* those listed; ``=`` next: names match exactly,
    else each item is a prefix (``eth`` matches eth0, eth1). An HCA item may end in ``:port``.
    """

    exclude: bool
    exact: bool
    items: tuple[tuple[str, int | None], ...]
    """(name or prefix, port or None)."""

    def matches(self, name: str) -> bool:
        """Whether ``name`` is one of the listed ones (before ``exclude`` is applied)."""
        return any(name == item if self.exact else name.startswith(item) for item, _ in self.items)

    def selects(self, names: list[str]) -> list[str]:
        """The names NCCL would consider, of ``names`` (a node's interfaces or HCAs)."""
        return [n for n in names if self.matches(n) != self.exclude]


_IFACE_NAME = re.compile(r"^[A-Za-z0-9_.@-]+$")


def parse_interfaces(value: str, with_port: bool = False) -> InterfaceList | None:
    """An :class:`InterfaceList`, or None when ``value`` is not one (an empty item, a bad
    name or port)."""
    text = value.strip()
    exclude = text.startswith("^")
    text = text.removeprefix("^")
    exact = text.startswith("=")
    text = text.removeprefix("=")
    items: list[tuple[str, int | None]] = []
    for raw in text.split(","):
        name, colon, port = raw.strip().partition(":")
        if not _IFACE_NAME.match(name) or (colon and not with_port):
            return None
        if colon and not (port.isdigit() and int(port) >= 1):
            return None
        items.append((name, int(port) if colon else None))
    return InterfaceList(exclude, exact, tuple(items))


def _interfaces(with_port: bool) -> Callable[[str], bool]:
    return lambda value: parse_interfaces(value, with_port) is not None


def _int_at_least_or(low: int, *also: int) -> Callable[[str], bool]:
    at_least = _int_at_least(low)

    def check(value: str) -> bool:
        try:
            return at_least(value) or int(value.strip()) in also
        except ValueError:
            return False

    return check


P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")
_ZERO_ONE = _choice(("0", "1"))
_ORDER = "changes which algorithm, protocol or channels sum the gradients: results can differ"
_DEBUG = "NCCL documents it for debugging only: remove it from production once the issue is fixed"

DEBUG_SOURCE = (
    "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html, section Debugging "
    "(read 2026-12-05, the guide of NCCL 2.30)"
)
"""Where :data:`DEBUG_ONLY` comes from. NCCL's guide splits its variables in two: "System
configuration" (kept in scripts) and "Debugging", whose variables "should not be used in
production nor retained in scripts", since forcing them "may result in sub-optimal behavior,
crashes, or hangs" (a forced algorithm that suits 8 GPUs may not suit 512)."""

DEBUG_ONLY = frozenset(
    {
        "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_P2P_DIRECT_DISABLE", "NCCL_SHM_DISABLE",
        "NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NRINGS", "NCCL_MIN_NRINGS", "NCCL_CHECKS_DISABLE", "NCCL_CHECK_POINTERS",
        "NCCL_CHECK_MODE", "NCCL_LAUNCH_MODE", "NCCL_IB_DISABLE", "NCCL_IB_AR_THRESHOLD",
        "NCCL_IB_OOO_RQ", "NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_SPLIT_DATA_ON_QPS",
        "NCCL_IB_CUDA_SUPPORT", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_ADAPTIVE_ROUTING",
        "NCCL_IB_ECE_ENABLE", "NCCL_MEM_SYNC_DOMAIN", "NCCL_CUMEM_ENABLE",
        "NCCL_CUMEM_HOST_ENABLE", "NCCL_NET_GDR_LEVEL", "NCCL_IB_GDR_LEVEL", "NCCL_NET_GDR_C2C",
        "NCCL_NET_GDR_READ", "NCCL_GDRCOPY_ENABLE", "NCCL_GDRCOPY_FIFO_ENABLE",
        "NCCL_GDRCOPY_SYNC_ENABLE", "NCCL_GDRCOPY_FLUSH_ENABLE", "NCCL_NET_SHARED_BUFFERS",
        "NCCL_NET_SHARED_COMMS", "NCCL_IGNORE_NET_MISMATCH", "NCCL_IGNORE_COLLNET_MISMATCH",
        "NCCL_SINGLE_RING_THRESHOLD", "NCCL_LL_THRESHOLD", "NCCL_TREE_THRESHOLD", "NCCL_ALGO",
        "NCCL_PROTO", "NCCL_NVB_DISABLE", "NCCL_PXN_DISABLE", "NCCL_P2P_PXN_LEVEL",
        "NCCL_PXN_C2C", "NCCL_RUNTIME_CONNECT", "NCCL_GRAPH_REGISTER", "NCCL_LOCAL_REGISTER",
        "NCCL_LEGACY_CUDA_REGISTER", "NCCL_WIN_ENABLE", "NCCL_SET_STACK_SIZE",
        "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_GRAPH_STREAM_ORDERING", "NCCL_DMABUF_ENABLE",
        "NCCL_P2P_NET_CHUNKSIZE", "NCCL_P2P_LL_THRESHOLD", "NCCL_ALLOC_P2P_NET_LL_BUFFERS",
        "NCCL_COMM_BLOCKING", "NCCL_CGA_CLUSTER_SIZE", "NCCL_MAX_CTAS", "NCCL_MIN_CTAS",
        "NCCL_NVLS_ENABLE", "NCCL_IB_MERGE_NICS", "NCCL_NET_MERGE_POLICY", "NCCL_MNNVL_ENABLE",
        "NCCL_MNNVL_UUID", "NCCL_MNNVL_CLIQUE_ID", "NCCL_RAS_ENABLE", "NCCL_RAS_ADDR",
        "NCCL_RAS_TIMEOUT_FACTOR", "NCCL_LAUNCH_ORDER_IMPLICIT", "NCCL_LAUNCH_RACE_FATAL",
        "NCCL_IPC_USE_ABSTRACT_SOCKET", "NCCL_SYM_GIN_KERNELS_ENABLE",
    }
)  # fmt: skip
"""Every variable NCCL's guide lists under "Debugging" (:data:`DEBUG_SOURCE`), in or out of
:data:`VARIABLES` (an entry there has ``debug_only`` set to match). A saved config keeps them
as suggestions, never among the variables it applies."""


def is_debug_only(name: str) -> bool:
    """Whether NCCL documents ``name`` for debugging only (:data:`DEBUG_ONLY`)."""
    return name in DEBUG_ONLY


VARIABLES: dict[str, Rule] = {
    "NCCL_ALGO": Rule(_list_words(ALGORITHMS), _name_list(ALGORITHMS), True, True),
    "NCCL_PROTO": Rule(_list_words(PROTOCOLS), _name_list(PROTOCOLS), True, True),
    "NCCL_MIN_NCHANNELS": Rule("a positive integer", _int_at_least(1), True, True),
    "NCCL_MAX_NCHANNELS": Rule("a positive integer", _int_at_least(1), True, True),
    "NCCL_BUFFSIZE": Rule(
        "a positive integer (bytes; powers of 2 recommended)", _int_at_least(1), debug_only=True
    ),
    "NCCL_P2P_LEVEL": Rule(
        "one of " + ", ".join(P2P_LEVELS) + " (or the older integers 0-5)",
        _level(P2P_LEVELS),
        debug_only=True,
    ),
    "NCCL_NET_GDR_LEVEL": Rule(
        "one of " + ", ".join(GDR_LEVELS) + " (or the older integers 0-5)",
        _level(GDR_LEVELS),
        debug_only=True,
    ),
    "NCCL_IB_TIMEOUT": Rule("an integer 1-31 (timeout = 4.096 us x 2^value)", _int_between(1, 31)),
    "NCCL_DEBUG": Rule("one of " + ", ".join(DEBUG_LEVELS), _choice(DEBUG_LEVELS)),
    "NCCL_P2P_DISABLE": Rule("0 or 1 (1 disables)", _ZERO_ONE, debug_only=True),
    "NCCL_SHM_DISABLE": Rule("0 or 1 (1 disables)", _ZERO_ONE, debug_only=True),
    "NCCL_IB_DISABLE": Rule("0 or 1 (1 disables)", _ZERO_ONE, debug_only=True),
    # Multi-node: which network, which interfaces, how many sockets (NCCL's env page).
    "NCCL_SOCKET_IFNAME": Rule(
        "comma-separated interface name prefixes (eth,ib); ^ first excludes them (^docker,lo); "
        "= makes names exact (=eth0, ^=docker0)",
        _interfaces(with_port=False),
    ),
    "NCCL_IB_HCA": Rule(
        "comma-separated HCA name prefixes, each with an optional :port (mlx5_0:1,mlx5_1); "
        "^ first excludes them; = makes names exact (=mlx5_0)",
        _interfaces(with_port=True),
    ),
    "NCCL_NET_GDR_READ": Rule(
        "0 or 1 (1: send data read directly from GPU memory)", _ZERO_ONE, debug_only=True
    ),
    "NCCL_CROSS_NIC": Rule(
        "0 (each ring/tree on one NIC), 1 (may cross NICs) or 2 (decide per system)",
        _choice(("0", "1", "2")),
    ),
    "NCCL_SOCKET_NTHREADS": Rule(
        "an integer 1-16 (CPU helper threads per socket connection; with "
        "NCCL_NSOCKS_PERTHREAD their product at most 64)",
        _int_between(1, 16),
    ),
    "NCCL_NSOCKS_PERTHREAD": Rule(
        "a positive integer (sockets per helper thread; with NCCL_SOCKET_NTHREADS their "
        "product at most 64)",
        _int_between(1, 64),
    ),
    "NCCL_IB_GID_INDEX": Rule(
        "an integer >= 0 (the GID table entry; RoCE v2 is often 3), or -1 to let NCCL pick",
        _int_at_least_or(0, -1),
    ),
    "NCCL_IB_RETRY_CNT": Rule(
        "an integer 0-7 (InfiniBand's 3-bit retry count)", _int_between(0, 7)
    ),
    "NCCL_SOCKET_FAMILY": Rule("AF_INET or AF_INET6", _choice(("AF_INET", "AF_INET6"))),
    "NCCL_NET": Rule(
        "the network module's name: IB, Socket, or a net plugin's own name",
        lambda value: bool(_IFACE_NAME.match(value.strip())),
    ),
    # Known, but their values depend on the system or the NCCL release: any text.
    "NCCL_DEBUG_SUBSYS": Rule("subsystem names, e.g. INIT,COLL"),
    "NCCL_DEBUG_FILE": Rule("a file name pattern"),
    "NCCL_TOPO_FILE": Rule("a file path"),
    "NCCL_TOPO_DUMP_FILE": Rule("a file path"),
    # Plugins: a library NCCL loads (workbench.core.trusted warns about them on loading).
    "NCCL_NET_PLUGIN": Rule("a net plugin's name (libnccl-net-NAME.so) or library path"),
    "NCCL_TUNER_PLUGIN": Rule("a tuner plugin's name or library path"),
    "NCCL_PROFILER_PLUGIN": Rule("a profiler plugin's name or library path"),
}


def flags(env: Mapping[str, str]) -> dict[str, str]:
    """The NCCL variables in ``env`` a person should know more about than their speed.

    Saved with results and configs: a variable that changes how gradients are summed makes a
    run numerically different from the default one, and a debug-only variable left in a
    production launch script is a known source of slowdowns and hangs.
    """
    out: dict[str, str] = {}
    for name in sorted(env):
        rule = VARIABLES.get(name)
        if rule is None:
            continue
        notes = [text for on, text in ((rule.numerics, _ORDER), (rule.debug_only, _DEBUG)) if on]
        if notes:
            out[name] = "; ".join(notes)
    return out


def check_variable(name: str, value: str) -> str | None:
    """Raise NcclError for a known variable with a bad value; a warning for an unknown name.

    Returns None when the value is fine, or the text of a warning when ``name`` is not in the
    table (the caller decides how to show it: ``warnings.warn``, a log line, a UI message).
    """
    if has_control(value):  # any name: it is written into exports, scripts and command lines
        raise NcclError(name, value, ONE_LINE)
    rule = VARIABLES.get(name)
    if rule is None:
        return f"{name} is not an NCCL variable workbench knows; its value is passed through as is"
    if rule.check is not None and not rule.check(value):
        raise NcclError(name, value, rule.allowed)
    return None


def check_env(env: Mapping[str, str]) -> list[str]:
    """Check every ``NCCL_*`` entry of ``env``; other names are left alone. Returns warnings."""
    notes = [check_variable(k, v) for k, v in sorted(env.items()) if k.startswith("NCCL_")]
    check_together(env)
    return [n for n in notes if n is not None]


MAX_SOCKETS = 64
"""NCCL caps NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD at 64 sockets per connection."""


def check_together(env: Mapping[str, str]) -> None:
    """Refuse values that pass one by one but not together (each already checked alone)."""
    threads, socks = env.get("NCCL_SOCKET_NTHREADS"), env.get("NCCL_NSOCKS_PERTHREAD")
    if threads is None or socks is None:
        return
    product = int(threads) * int(socks)
    if product > MAX_SOCKETS:
        raise NcclError(
            "NCCL_NSOCKS_PERTHREAD", socks,
            f"with NCCL_SOCKET_NTHREADS={threads}, at most {MAX_SOCKETS // int(threads)}: NCCL "
            f"allows {MAX_SOCKETS} sockets per connection (threads x sockets, here {product})",
        )  # fmt: skip
