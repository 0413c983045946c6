"""Environment variables that run code or touch files: why a saved config is trusted input.

A saved config's ``env`` section and its ``nccl`` knobs are exported into every process of a
training job. Most of them tune speed; some load a shared library into every rank
(``NCCL_NET_PLUGIN``, ``LD_PRELOAD``), put folders first where libraries or modules are looked
up (``LD_LIBRARY_PATH``, ``PYTHONPATH``), or name a file every rank writes (``NCCL_DEBUG_FILE``,
created or truncated) or reads (``NCCL_TOPO_FILE``). So a config is trusted input, like a
script: whoever wrote it can run code as whoever launches it. Nothing here refuses them (a
cluster may need its network plugin); ``powers`` names each one and what it can do, so loading
a config warns and ``workbench show`` says so beside the export.

From NCCL's "Environment Variables" page (plugins, dump and input files), the dynamic loader's
and Python's own documentation.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["POWERS", "power_of", "powers"]

_PLUGIN = (
    "NCCL loads the {} plugin it names (a library name or path) into every rank: its code "
    "runs there"
)
_WRITES = (
    "every rank writes {} to the file it names, created or truncated: any file the job's user "
    "can write"
)
_READS = (
    "NCCL reads {} from the file it names instead of its own: a wrong one misroutes or slows "
    "every collective"
)

POWERS: dict[str, str] = {
    "NCCL_NET_PLUGIN": _PLUGIN.format("network"),
    "NCCL_TUNER_PLUGIN": _PLUGIN.format("tuner"),
    "NCCL_PROFILER_PLUGIN": _PLUGIN.format("profiler"),
    "NCCL_ENV_PLUGIN": _PLUGIN.format("environment"),
    "NCCL_DEBUG_FILE": _WRITES.format("NCCL's log"),
    "NCCL_TOPO_DUMP_FILE": _WRITES.format("the detected topology"),
    "NCCL_GRAPH_DUMP_FILE": _WRITES.format("NCCL's ring and tree graphs"),
    "NCCL_TOPO_FILE": _READS.format("the system topology"),
    "NCCL_GRAPH_FILE": _READS.format("its ring and tree graphs"),
    "NCCL_CONF_FILE": "NCCL reads more NCCL_* settings from the file it names",
    "LD_PRELOAD": "the dynamic loader loads the libraries it names into every process started "
    "with it, before any other: their code runs there",
    "LD_AUDIT": "the dynamic loader loads the libraries it names into every process as auditors",
    "LD_LIBRARY_PATH": "shared libraries are looked for in these folders first: a library there "
    "replaces CUDA's, NCCL's or the system's own",
    "PYTHONPATH": "Python imports modules from these folders before the installed ones: a "
    "torch.py there runs in place of torch",
    "PYTHONHOME": "Python loads its standard library from this folder",
    "PYTHONUSERBASE": "Python imports user packages from there and runs their .pth files at "
    "start-up",
    "PYTHONSTARTUP": "an interactive Python runs the file it names at start-up",
    "PYTHONBREAKPOINT": "breakpoint() imports and calls the function it names",
    "PYTHONWARNINGS": "Python imports the module of each warning category it names",
    "PATH": "programs started by name (python, torchrun, srun) are looked for there first",
    "TORCHINDUCTOR_CACHE_DIR": "torch.compile loads compiled kernels (shared libraries) from "
    "this folder",
    "TRITON_CACHE_DIR": "Triton loads compiled GPU kernels from this folder",
    "TORCH_EXTENSIONS_DIR": "PyTorch loads the C++ extensions built in this folder",
}
"""Variable name -> what it can do to the machine a job runs on."""


def power_of(name: str) -> str | None:
    """What ``name`` can do beyond tuning (load code, write or read a file); None: nothing."""
    if name in POWERS:
        return POWERS[name]
    if name.startswith("NCCL_") and name.endswith("_PLUGIN"):
        return "NCCL loads the plugin it names into every rank: its code runs there"
    if name.startswith("LD_"):
        return "a dynamic loader setting: it can change which libraries every process loads"
    return None


def powers(names: Iterable[str]) -> dict[str, str]:
    """Each of ``names`` that can run code or touch files, with what it can do (sorted)."""
    found = {name: power_of(name) for name in sorted(names)}
    return {name: what for name, what in found.items() if what is not None}
