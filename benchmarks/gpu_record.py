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
from dataclasses import dataclass
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


def burst_record(label: str, result: Any, tags: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One burst as the kept file holds it: the whole result, its label, the mean step, and
    ``tags`` (what the result cannot say itself, such as the data path it measured)."""
    rec = {"label": label, **(tags or {}), **result.to_dict()}
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


def load_kept(results_dir: Path = RESULTS) -> list[tuple[Path, dict[str, Any]]]:
    """Every kept run, loaded, newest first: where a figure is looked up, the newest wins."""
    return [(p, load(p)) for p in reversed(kept_runs(results_dir))]


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


# -- the data paths (the loader step) ----------------------------------------------------------

GOAL_OF_CEILING = 0.90
"""Issue 29's goal: resnet50 bf16 on JPEGs reaches 90% of its resident-batch ceiling through
one of the data paths."""
CEILING = "ceiling"
"""The ``data_path`` tag of the resident-batch bursts (``loader=synthetic``) that bracket the
paths: one before them, one after, so that the ratio to the ceiling allows for drift."""


@dataclass(frozen=True)
class DataPath:
    """One way to feed the model, as the loader step tags its bursts (``data_path``)."""

    key: str
    text: str  # how a table names it; the record's worker count is added after it
    per: str  # what its loader-alone figure is shared by: "worker" (CPU decode) or "GPU"
    workers: str = "worker"  # what num_workers counts on this path


DATA_PATHS: tuple[DataPath, ...] = (
    DataPath("cpu-few", "decode=cpu (Pillow in the workers)", "worker"),
    DataPath("cpu-many", "decode=cpu (Pillow in the workers)", "worker"),
    DataPath("gpu-overlap", "decode=gpu (workers read bytes, the GPU decodes and augments), "
             "overlap on (a side stream, one batch ahead)", "GPU"),
    DataPath("gpu-inline", "decode=gpu, overlap off (in line on the training stream)", "GPU"),
    DataPath("predecoded-gpu", "data_format=predecoded, decode=gpu (uint8 squares to the GPU, "
             "cropped there)", "GPU"),
    DataPath("dali", "loader=dali, mixed decode (nvJPEG)", "GPU", workers="CPU thread"),
)  # fmt: skip
NOT_MEASURED = "not measured: the step ended before it"


def data_paths(step: Mapping[str, Any]) -> dict[str, Any] | None:
    """The loader step's answer, from its record (a pure function: the step writes it into
    its facts, ``publish_gpu.py`` tables it, and both are tested on CPU records).

    Per path: the loader alone (``facts["loader_alone"]``, images/s, and per worker or per
    GPU), the training burst on JPEGs and its share of the resident-batch ceiling (the mean of
    the bursts before and after the paths: a drift between them shows in
    ``after_over_before``); a path that did not run keeps its reason (``not_run``). None when
    the step holds no tagged burst (a run from before these rows)."""
    bursts = [b for b in step.get("bursts", []) if b.get("data_path")]
    if not bursts:
        return None
    ceiling = _ceiling([b for b in bursts if b["data_path"] == CEILING])
    alone = {r["data_path"]: r for r in (step.get("facts") or {}).get("loader_alone") or []
             if isinstance(r, Mapping) and r.get("data_path")}  # fmt: skip
    trained = {b["data_path"]: b for b in bursts if b["data_path"] != CEILING}
    skipped = {s["what"]: s["reason"] for s in step.get("skipped", [])}
    rows = [_path_row(p, trained.get(p.key), alone.get(p.key), skipped.get(p.key), ceiling)
            for p in DATA_PATHS]  # fmt: skip
    measured = [r for r in rows if r["over_ceiling"] is not None]
    out: dict[str, Any] = {"ceiling": ceiling, "rows": rows, "goal": GOAL_OF_CEILING,
                           "best": None, "goal_met": None}  # fmt: skip
    if measured:
        best = max(measured, key=lambda r: r["over_ceiling"])
        out["best"] = {"path": best["path"], "over_ceiling": best["over_ceiling"]}
        out["goal_met"] = best["over_ceiling"] >= GOAL_OF_CEILING
    return out


def _ceiling(bursts: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    speeds = [b.get("samples_per_s") for b in bursts if b.get("status") == "ok"]
    speeds = [s for s in speeds if s]
    if not speeds:
        return None
    out: dict[str, Any] = {"samples_per_s": statistics.fmean(speeds), "bursts": speeds}
    if len(speeds) >= 2:
        out["after_over_before"] = round(speeds[-1] / speeds[0], 4)
    return out


def _path_row(
    path: DataPath,
    burst: Mapping[str, Any] | None,
    alone: Mapping[str, Any] | None,
    skipped: str | None,
    ceiling: Mapping[str, Any] | None,
) -> dict[str, Any]:
    workers = next((r["knobs"].get("num_workers") for r in (burst, alone)
                    if r and r.get("knobs")), None)  # fmt: skip
    alone_sps = alone.get("samples_per_s") if alone and alone.get("status") == "ok" else None
    trained = burst.get("samples_per_s") if burst and burst.get("status") == "ok" else None
    share = workers if path.per == "worker" else 1
    text = path.text + ("" if workers is None else f", {_count(workers, path.workers)}")
    row: dict[str, Any] = {
        "path": path.key, "text": text, "per": path.per, "workers": workers,
        "loader_alone": alone_sps,
        "loader_per": alone_sps / share if alone_sps is not None and share else None,
        "training": trained, "label": burst.get("label") if burst else None,
        "decode": burst.get("decode") if burst else None,
        "h2d_bytes_per_sample": burst.get("h2d_bytes_per_sample") if burst else None,
        "over_ceiling": (trained / ceiling["samples_per_s"]
                         if trained and ceiling else None),
        "not_run": (skipped or NOT_MEASURED) if burst is None and alone is None else None,
    }  # fmt: skip
    failed = [r for r in (burst, alone) if r and r.get("status") != "ok"]
    if failed:
        row["failed"] = "; ".join(f"{r.get('status')}: {r.get('error')}" for r in failed)
    return row


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


# -- the lessons (the lessons steps) -----------------------------------------------------------


@dataclass(frozen=True)
class LessonRun:
    """A lesson's newest record (``run_lessons.LessonRecord`` as a dict), with the kept run
    (file and document) that holds it."""

    path: Path
    run: Mapping[str, Any]
    record: Mapping[str, Any]


def lesson_key(name: str) -> str:
    """A lesson's number, the key that joins sessions: "03_precision" -> "03"."""
    return Path(name).stem[:2]


def lesson_runs(runs: Sequence[tuple[Path, Mapping[str, Any]]]) -> dict[str, LessonRun]:
    """Per lesson (``lesson_key``), the record of the newest kept run that ran it (a pure
    function: ``runs`` newest first, as ``load_kept`` gives them).

    A session has 15 minutes of device time and a call 10, less than the lessons take in all,
    so they run over several sessions: a lesson skipped for time in a newer run keeps the
    older run's record, and a lesson run twice in one session (a rerun after a fix, in a later
    step) is read from the later step. Records sit in a step's ``facts["lessons"]["lessons"]``
    (``run_lessons.py``'s document)."""
    found: dict[str, LessonRun] = {}
    for path, run in runs:
        for step in reversed(run.get("steps") or []):
            doc = (step.get("facts") or {}).get("lessons") or {}
            for rec in doc.get("lessons") or []:
                key = lesson_key(rec["lesson"])
                if key not in found and not str(rec.get("outcome", "")).startswith("skipped"):
                    found[key] = LessonRun(path, run, rec)
    return found
