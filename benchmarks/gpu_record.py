"""The kept record of a GPU run: one JSON file per run under ``benchmarks/results/``.

A figure a user may quote must be traceable to the output that produced it. So a GPU session
writes everything it measured into one file, named by date and device
(``gpu-20261205-0912-nvidia-h200.json``), rewritten after every step (temporary file, then
``os.replace``: a reader or a kill never sees half a file), and the file is committed. The
published tables are generated from these files (``publish_gpu.py``), never typed.

Layout (``SCHEMA``)::

    schema, recorded (true: written by this code as it ran), dry (true: a CPU rehearsal),
    command (the exact command line), git_commit, git_dirty, started_at, ended_at,
    device, environment {nvidia_smi_q, cores {os_cpu_count, affinity, cgroup_quota, usable},
                         versions {python, torch, cuda, cudnn, driver, ...}, env {WORKBENCH_*...}},
    plan [{name, est_s, timeout_s, why}],
    steps [{name, status, wall_s, est_s, timeout_s, reason, bursts [...], facts {...},
            checks [{name, ok, detail}], log_tail}],
    running (the step in progress, or null), summary {passed, failed, skipped, timeout}

A burst is its whole ``BurstResult.to_dict()`` (knobs, samples/s, step p50, every per-step
time, NVML at the window's edges and inside it where the engine keeps them) with its
``label`` and ``step_ms_mean`` added where the result has none: the mean beside the p50 is
what shows a bimodal window (epoch restarts, a stall).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA = "workbench-gpu-run/1"
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
STATUSES = ("passed", "failed", "skipped", "timeout")
NVIDIA_SMI_Q_CHARS = 60_000
"""``nvidia-smi -q`` of one GPU is about 12 KB; eight GPUs stay whole under this."""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def slug(text: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200': a file name part."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def run_path(results_dir: Path, device: str, started: datetime, *, dry: bool = False) -> Path:
    """One file per run, named by date, time and device (``-dry`` for a CPU rehearsal)."""
    stamp = started.astimezone(timezone.utc).strftime("%Y%m%d-%H%M")
    return results_dir / f"gpu-{stamp}-{slug(device)}{'-dry' if dry else ''}.json"


def write_atomic(path: Path, doc: Mapping[str, Any]) -> None:
    """Replace ``path`` with ``doc`` in one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, path)


# -- provenance --------------------------------------------------------------------------------


def git_state(root: Path = ROOT) -> tuple[str | None, bool | None]:
    """The commit whose code runs, and whether the tree differs from it. A copy of the tree
    without ``.git`` (a lent machine gets the working tree only) reads ``WORKBENCH_COMMIT``
    and ``WORKBENCH_DIRTY``, which the command that starts the session sets."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10,
                               check=True).stdout.strip()  # fmt: skip
        return head, bool(dirty)
    except (OSError, subprocess.SubprocessError):
        commit = os.environ.get("WORKBENCH_COMMIT") or None
        dirty_env = os.environ.get("WORKBENCH_DIRTY")
        return commit, None if dirty_env is None else dirty_env not in ("0", "", "false")


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command as it was typed, as far as the process can tell: ``WORKBENCH_COMMAND``
    (set by gpu_session.sh to its own command line) or this process's argv; a store URL's
    password in it is masked (the record is published)."""
    from workbench.history.dsn import redact_urls  # light: the standard library only

    return redact_urls(os.environ.get("WORKBENCH_COMMAND") or shlex.join(
        [Path(sys.executable).name, *(sys.argv if argv is None else argv)]
    ))  # fmt: skip


def cores() -> dict[str, Any]:
    """What the host lets this process use: the affinity mask and the cgroup quota, beside the
    machine's count (a container given 8 CPUs of a 224-core host sees 224 in os.cpu_count)."""
    from workbench.engine import hardware

    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    quota = hardware.cgroup_cpu_quota()
    return {"os_cpu_count": os.cpu_count(), "affinity": affinity,
            "cgroup_quota": quota, "usable": hardware.device_info("cpu").cpu_count}  # fmt: skip


def nvidia_smi_q() -> str | None:
    """``nvidia-smi -q`` (clocks, power limits, ECC, throttle reasons, persistence mode), or
    None where there is no nvidia-smi."""
    try:
        p = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (p.stdout or "") + (p.stderr or "")
    return text[:NVIDIA_SMI_Q_CHARS] if text.strip() else None


def environment() -> dict[str, Any]:
    """The machine a run measured on: nvidia-smi -q, usable cores, library and driver versions
    and the environment variables that shape a burst."""
    from workbench.engine import hardware

    shaping = ("WORKBENCH_", "NCCL_", "CUDA_", "PYTORCH_", "OMP_", "TORCH_")
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(shaping)}
    env.pop("WORKBENCH_STORE", None)  # may hold a password
    return {"nvidia_smi_q": nvidia_smi_q(), "cores": cores(), "versions": hardware.versions(),
            "env": env}  # fmt: skip


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "cpu"


# -- bursts and steps --------------------------------------------------------------------------


def burst_record(label: str, result: Any) -> dict[str, Any]:
    """One burst as the kept file holds it: the whole result, its label, and the mean step."""
    rec = {"label": label, **result.to_dict()}
    steps = rec.get("step_ms") or []
    if rec.get("step_ms_mean") is None and steps:
        rec["step_ms_mean"] = statistics.fmean(steps)
    return rec


def new_run(*, device: str, dry: bool, plan: Sequence[Mapping[str, Any]],
            command: str | None = None) -> dict[str, Any]:  # fmt: skip
    commit, dirty = git_state()
    return {"schema": SCHEMA, "recorded": True, "dry": dry,
            "command": command or command_line(), "git_commit": commit, "git_dirty": dirty,
            "started_at": utc_now(), "ended_at": None, "device": device,
            "environment": None, "plan": list(plan), "steps": [], "running": None,
            "summary": summary([])}  # fmt: skip


def summary(steps: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(STATUSES, 0)
    for step in steps:
        counts[step["status"]] = counts.get(step["status"], 0) + 1
    return counts


def load(path: Path) -> dict[str, Any]:
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema={doc.get('schema')!r}, expected {SCHEMA!r}")
    return doc


def kept_runs(results_dir: Path = RESULTS) -> list[Path]:
    """Every kept GPU run, oldest first (names sort by date); CPU rehearsals left out."""
    return sorted(p for p in results_dir.glob("gpu-*.json") if not p.stem.endswith("-dry"))


def find_burst(doc: Mapping[str, Any], step: str, label: str) -> dict[str, Any]:
    """The burst ``label`` of step ``step``; KeyError naming what the file holds."""
    for s in doc["steps"]:
        if s["name"] != step:
            continue
        for b in s.get("bursts", []):
            if b["label"] == label:
                return b
        have = ", ".join(b["label"] for b in s.get("bursts", []))
        raise KeyError(f"step {step!r} has no burst {label!r}; it has: {have}")
    raise KeyError(f"no step {step!r}; steps: {', '.join(s['name'] for s in doc['steps'])}")
