"""The GPU session's steps: each one question, each run in its own process by gpu_session.py.

    python benchmarks/gpu_steps.py STEP --json FILE [--dry] [--seconds S]

A step writes ``FILE`` (the step's part of the kept run: ``gpu_record``'s step layout) after
every burst, so a step stopped by its timeout keeps what it measured. The steps, in the order
the session runs them (the open questions of the first GPU session, 2026-12-04):

- ``environment``: nvidia-smi -q, the usable cores (affinity, cgroup quota), versions.
- ``drift``: ``IDENTICAL`` identical resnet50 bf16 bursts in one process; cudnn_benchmark
  A-B-B-A (ABBA cancels a drift that is linear in time: the pair's on/off ratio is the sum of
  its on bursts over the sum of its off ones); the same config in a fresh process.
  The first session read 4,306 / 3,990 / 3,819 / 3,816 samples/s from four identical bursts.
- ``loader``: the data paths (issue 29), on a set big enough for batch 128 at 100 batches an
  epoch (12,800 images, built on the box: it has no network), so the window does not measure
  epoch restarts. Per path the loader alone (no model: images/s, per worker or per GPU), then
  resnet50 bf16 training through it: CPU decode at 8 and 16 workers, ``decode=gpu`` with the
  device pipeline's overlap on and off, predecoded squares with ``decode=gpu`` (when the copy
  fits the step's budget), DALI's mixed decode (else "not installed"), between two
  resident-batch bursts (the ceiling, before and after). ``gpu_record.data_paths`` reads the
  answer from the record: each path's share of the ceiling, and whether one reached 90%.
- ``paths``: what never ran on a GPU: activation checkpointing, fused and foreach optimizers,
  a pinned dict batch, ``memory_snapshot``, ``alloc_conf`` (a fresh one-rank process), and a
  tune of 8 bursts whose start and "start again" show drift in place.
- ``check``: ``gpu_check.py``'s rows within the time the session gives it.
- ``transformer``: ``gpt:124m`` (GPT-2 small at 1,024 tokens) on one resident batch, one burst
  a row of ``gpu_transformer.ROWS``: bf16 eager, compiled, compiled with CUDA graphs, and each
  attention backend (a backend refused for these shapes keeps its refusal); a call of its own
  (``--steps transformer --budget-s 570``), rows that do not fit skipped and said.
- ``pytest-gpu``: the tests marked ``gpu`` (DALI's listed as not run where DALI is absent).
- ``fp8``: gpt:124m compiled in bf16, then with float8 training (tensorwise, rowwise), then
  bf16 again (``gpu_fp8.py``): tokens/s, MFU and memory of each recipe against the bf16 pair.
- ``lessons`` and ``lessons-optional``: the half day's lessons, then the optional ones and the
  instructor's board, executed on the GPU (``run_lessons.py``), each with its time, outcome
  and per-cell times; each a call of its own (``--steps lessons --budget-s 570``), what does
  not fit left for a later session (``--lessons unmeasured``).

``--dry`` (a CPU without CUDA): the same steps with the cnn workload and short windows, so the
layout and the logic are exercised everywhere; the GPU-only steps say "skipped: no CUDA".
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_record, run as a script
import gpu_fidelity
import gpu_fp8
import gpu_proc
import gpu_record
import gpu_transformer

HERE = Path(__file__).resolve().parent
IDENTICAL = 4
"""Identical bursts in the drift step: enough to see a trend past two bursts' noise (4 bursts
and one ABBA pass keep the step near 70 s, inside the first call beside the fidelity rows)."""
BIG_SET_BATCH = 256
"""The set is built for batch 256 at 50 batches an epoch (12,800 images): batch 128, the
session's, then reads 100 batches an epoch."""
DRY_SECONDS = 0.25


class StepSkipped(Exception):
    """A step that cannot run here (no CUDA): recorded as skipped with the reason."""


@dataclass
class Context:
    """Where and how big: a GPU session, or its CPU rehearsal (``dry``)."""

    dry: bool
    seconds: float
    out: Path  # the step's own JSON
    workdir: Path  # data sets built for the session
    started: float = field(default_factory=time.monotonic)  # the step's budget counts from here

    @property
    def device(self) -> str:
        return "cpu" if self.dry else "cuda"

    def reference(self, **kw: Any) -> tuple[str, Any]:
        """The drift step's config: resnet50 bf16 on a resident batch of 128 (compute only,
        the first session's precision row), or a small cnn on a CPU."""
        from workbench import Knobs

        if self.dry:
            return "cnn", Knobs(**{"batch_size": 16, "loader": "synthetic", **kw})
        return "resnet50", Knobs(**{"batch_size": 128, "loader": "synthetic",
                                    "channels_last": True, "precision": "bf16", **kw})  # fmt: skip

    def jpeg(self, **kw: Any) -> tuple[str, Any]:
        """The data path's config: resnet50 bf16 on the JPEG set (cnn on a CPU)."""
        from workbench import Knobs

        if self.dry:
            return "cnn", Knobs(**{"batch_size": 16, **kw})
        return "resnet50", Knobs(**{"batch_size": 128, "channels_last": True,
                                    "precision": "bf16", **kw})  # fmt: skip


@dataclass
class StepLog:
    """What one step measured, written to its JSON after every burst."""

    name: str
    ctx: Context
    bursts: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    reason: str | None = None  # why the whole step was skipped
    running: str | None = None  # the burst in progress: named as failed if the step dies in it

    def burst(self, label: str, workload: Any, knobs: Any, *,
              tags: dict[str, Any] | None = None, **kw: Any) -> Any:  # fmt: skip
        from workbench import run_burst

        kw.setdefault("seconds", self.ctx.seconds)
        kw.setdefault("device", self.ctx.device)
        with self.measuring(label):
            r = run_burst(workload, knobs, record=False, **kw)
        self.add(label, r, tags=tags)
        return r

    @contextmanager
    def measuring(self, label: str) -> Iterator[None]:
        """Name the burst in progress in the step's JSON before it starts: a step killed or
        crashed inside it leaves that name, and the session records the burst as failed."""
        self.running = label
        self.write()
        gpu_proc.rehearse_fault(self.name, len(self.bursts), self.ctx.dry)
        try:
            yield
        finally:
            self.running = None

    def add(self, label: str, result: Any, *, must_pass: bool = True,
            tags: dict[str, Any] | None = None) -> None:  # fmt: skip
        """Keep a burst; ``must_pass``: a failed burst fails the step (a tune's OOM or a batch
        bigger than the data set is a result the tune handles, not a failure); ``tags``: what
        the result cannot say itself (the data path it measured)."""
        self.bursts.append(gpu_record.burst_record(label, result, tags))
        if must_pass:
            self.expect(f"{label}: ok", result.ok, f"{result.status}: {result.error}")
        print(f"{self.name}: {label}: {result.summary().splitlines()[0]}", flush=True)
        self.write()

    def expect(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append({"name": name, "ok": bool(ok), "detail": "" if ok else detail})
        return bool(ok)

    def skip(self, what: str, reason: str) -> None:
        self.skipped.append({"what": what, "reason": reason})
        print(f"{self.name}: {what}: skipped: {reason}", flush=True)
        self.write()

    def doc(self, status: str | None = None) -> dict[str, Any]:
        failed = [c for c in self.checks if not c["ok"]]
        return {"name": self.name, "status": status or ("failed" if failed else "passed"),
                "bursts": self.bursts, "facts": self.facts, "checks": self.checks,
                "skipped": self.skipped, "reason": self.reason,
                "running": self.running}  # fmt: skip

    def write(self, status: str | None = None) -> None:
        gpu_record.write_atomic(self.ctx.out, self.doc(status))


# -- environment -------------------------------------------------------------------------------


def environment(log: StepLog) -> None:
    """The machine: what nvidia-smi -q says, the cores this process may use, the versions."""
    from workbench.engine.telemetry import nvml_status

    log.facts.update(gpu_record.environment())
    log.facts["nvml"] = nvml_status() or "ok"
    log.facts["device"] = gpu_record.device_name()
    log.expect("NVML answers", log.ctx.dry or log.facts["nvml"] == "ok", log.facts["nvml"])


# -- drift -------------------------------------------------------------------------------------

ABBA = (("off", False), ("on", True), ("on", True), ("off", False))
ABBA_PASSES = (1,)
"""One A-B-B-A pass: the check's cudnn row measures both orders again in the same call."""


def drift(log: StepLog) -> None:
    """Identical bursts, cudnn A-B-B-A twice, then the same config in a fresh process."""
    wl, knobs = log.ctx.reference()
    for i in range(IDENTICAL if not log.ctx.dry else 2):
        log.burst(f"identical {i + 1}", wl, knobs)
    for p in ABBA_PASSES:
        for label, on in ABBA:
            abba = dataclasses.replace(knobs, cudnn_benchmark=on)
            log.burst(f"cudnn ABBA {p}: {label}", wl, abba)
    fresh = fresh_process_burst(log.ctx, wl, knobs.to_dict())
    if fresh is not None:
        log.bursts.append({"label": "fresh process", **fresh})
        log.expect("fresh process: ok", fresh.get("status") == "ok", str(fresh.get("error")))
    log.facts.update(drift_facts(log.bursts))
    log.write()


def fresh_process_burst(ctx: Context, workload: str, knobs: dict[str, Any]) -> dict | None:
    """One burst of the same config in a new Python process: its CUDA context, cuDNN plans
    and allocator start cold, as a production job's do."""
    out = ctx.out.with_suffix(".fresh.json")
    argv = [sys.executable, str(Path(__file__)), "one-burst", "--json", str(out),
            "--seconds", str(ctx.seconds), "--workload", workload,
            "--knobs", json.dumps(knobs)] + (["--dry"] if ctx.dry else [])  # fmt: skip
    p = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    if not out.exists():
        tail = (p.stdout + p.stderr)[-2000:]
        return {"status": "error", "error": f"exit {p.returncode}: {tail}"}
    return json.loads(out.read_text())


def drift_facts(bursts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the drift step answers, from its bursts (a pure function: tested on CPU records).

    - ``identical``: samples/s of the identical bursts in order, ``first_over_last``,
      ``spread_pct`` ((max - min) / median) and ``trend_pct_per_burst`` (least-squares slope
      over the median: the drift a comparison of neighbours would suffer);
    - ``abba``: per pass, cudnn on/off as (on1 + on2) / (off1 + off2), which a drift linear
      in time leaves unbiased, and ``pass_gap_pct`` between the two passes;
    - ``fresh_over_first``: the fresh process's burst over this process's first;
    - ``clocks``: per burst, SM clock (median), temperature (max), power (mean) and throttle
      reasons, so a trend in speed can be set beside one in clocks.
    """
    by = {b["label"]: b for b in bursts}
    same = [b["samples_per_s"] for b in bursts if b["label"].startswith("identical")]
    facts: dict[str, Any] = {"identical": same}
    if len(same) >= 2 and all(same):
        med = statistics.median(same)
        facts["first_over_last"] = round(same[0] / same[-1], 4)
        facts["spread_pct"] = round(100 * (max(same) - min(same)) / med, 2)
        facts["trend_pct_per_burst"] = round(100 * _slope(same) / med, 2)
    passes = {}
    for p in (1, 2):
        on = [b["samples_per_s"] for b in _abba(bursts, p, "on")]
        off = [b["samples_per_s"] for b in _abba(bursts, p, "off")]
        if len(on) == 2 and len(off) == 2 and all(on + off):
            passes[p] = sum(on) / sum(off)
    facts["abba_on_over_off"] = {str(p): round(r, 4) for p, r in passes.items()}
    if len(passes) == 2:
        a, b = passes[1], passes[2]
        facts["abba_pass_gap_pct"] = round(100 * abs(a - b) / ((a + b) / 2), 2)
    fresh = by.get("fresh process", {}).get("samples_per_s")
    if fresh and same and same[0]:
        facts["fresh_over_first"] = round(fresh / same[0], 4)
    facts["clocks"] = [_clock_row(b) for b in bursts]
    return facts


def _abba(bursts: Sequence[dict[str, Any]], p: int, side: str) -> list[dict[str, Any]]:
    return [b for b in bursts if b["label"] == f"cudnn ABBA {p}: {side}"]


def _slope(ys: Sequence[float]) -> float:
    """Least-squares slope of ``ys`` against 0, 1, 2, ...: units per burst."""
    n = len(ys)
    xbar, ybar = (n - 1) / 2, statistics.fmean(ys)
    den = sum((x - xbar) ** 2 for x in range(n))
    return sum((x - xbar) * (y - ybar) for x, y in enumerate(ys)) / den


def _clock_row(b: dict[str, Any]) -> dict[str, Any]:
    return {"label": b["label"], "samples_per_s": b.get("samples_per_s"),
            "sm_clock_mhz": b.get("sm_clock_mhz"), "mem_clock_mhz": b.get("mem_clock_mhz"),
            "temp_c": b.get("temp_c"), "power_w": b.get("power_w"),
            "throttle_reasons": b.get("throttle_reasons"), "suspect": b.get("suspect")}  # fmt: skip


# -- the data path -----------------------------------------------------------------------------

PREDECODED_EST_S = 40.0
"""The predecoded copy of the 12,800-image set at 256 px (~30 s over 16 cores: an estimate,
no session has built it yet) and its two rows. Built only when this fits in what is left of
the step's budget once the closing ceiling burst is set aside; the step says so otherwise."""
CEILING_EST_S = 8.0
"""The closing resident-batch burst: a resnet50 burst on a resident batch, ~7 s."""
MIN_IMAGES = 4000
"""Issue 29's figures need a set of 4,000+ JPEGs: the step's own is 12,800."""


def loader(log: StepLog, budget_s: float) -> None:
    """Every way to feed resnet50 bf16 on a set with long epochs: each path's loader alone
    (no model: images/s, per worker or per GPU), then training through it, between two
    resident-batch bursts (the ceiling, before and after: ``gpu_record.data_paths`` sets each
    path beside their mean). The bursts of one path run back to back, the cheapest paths first,
    so a step stopped by its timeout keeps the rows that matter most."""
    from workbench.engine.device_images import jpeg_decoder

    big = big_set(log)
    images = log.facts["big_set"]["images"]
    log.expect(f"the set holds {MIN_IMAGES:,}+ images", log.ctx.dry or images >= MIN_IMAGES,
               f"{images} images")  # fmt: skip
    cores = gpu_record.cores()["usable"] or 1
    few, many = (1, 2) if log.ctx.dry else (min(8, cores), min(16, cores))
    log.facts.update(workers=[few, many], jpeg_decoder=jpeg_decoder()[0], loader_alone=[])
    _ceiling(log, big, "before")
    _cpu_decode(log, big, "cpu-few", few)
    _device_decode(log, big, "gpu-overlap", few, overlap=True)
    if many != few:
        _cpu_decode(log, big, "cpu-many", many)
    else:
        log.skip("cpu-many", f"this box lets the step use {cores} cores: {few} workers are "
                 "already one a core")  # fmt: skip
    _device_decode(log, big, "gpu-inline", few, overlap=False)
    _dali(log, big, few)
    left = budget_s - (time.monotonic() - log.ctx.started) - CEILING_EST_S
    if log.ctx.dry or left >= PREDECODED_EST_S:
        _predecoded(log, big, few)
    else:
        log.skip("predecoded-gpu", f"not built: the copy and its rows need ~"
                 f"{PREDECODED_EST_S:.0f} s, {max(left, 0):.0f} s of the step's "
                 f"{budget_s:.0f} s were left")  # fmt: skip
    _ceiling(log, big, "after")
    log.facts["data_paths"] = gpu_record.data_paths(log.doc())
    log.write()


def big_set(log: StepLog) -> Path:
    """The image set with long epochs, built on the box (no network: the images are drawn):
    batch 256 at 50 batches an epoch. A rehearsal draws 80 images, whose short epochs the
    burst continues (a sample set's: ``workbench.engine.epochs``)."""
    from workbench.engine.datasets import ensure_datasets, ensure_datasets_for_batch

    root = log.ctx.workdir / "big"
    t0 = time.perf_counter()
    if log.ctx.dry:
        paths = ensure_datasets(root, images_per_class=8)
    else:
        paths = ensure_datasets_for_batch(root, BIG_SET_BATCH)
    images = sum(1 for p in paths.images.rglob("*") if p.is_file())
    log.facts["big_set"] = {"images": images, "build_s": round(time.perf_counter() - t0, 1),
                            "root": str(paths.root)}  # fmt: skip
    log.write()
    return paths.root


def _ceiling(log: StepLog, data: Path, when: str) -> None:
    """The resident-batch ceiling (``loader=synthetic``: one batch of the same images, replayed)."""
    wl, knobs = log.ctx.reference()
    log.burst(f"ceiling: resident batch ({when})", wl, knobs, data_dir=data,
              tags={"data_path": gpu_record.CEILING})  # fmt: skip


def _cpu_decode(log: StepLog, data: Path, key: str, workers: int) -> None:
    """The torch DataLoader as it is: workers decode with Pillow and augment on the CPU."""
    wl, knobs = log.ctx.jpeg(num_workers=workers, persistent_workers=True,
                             pin_memory=not log.ctx.dry)  # fmt: skip
    _loader_alone(log, key, wl, knobs, data)
    log.burst(f"jpeg, {workers} workers", wl, knobs, data_dir=data, tags={"data_path": key})


def _device_decode(log: StepLog, data: Path, key: str, workers: int, *, overlap: bool,
                   **change: Any) -> None:  # fmt: skip
    """``decode=gpu``: the workers read stored bytes, the device decodes and augments them.
    The loader alone runs the device pipeline on a rehearsal's CPU too (its CPU twin, where
    ``DeviceImages`` works on CPU tensors); the training burst on a CPU is refused as a user's
    would be, with the reason in ``no_effect``."""
    wl, knobs = log.ctx.jpeg(num_workers=workers, persistent_workers=True,
                             pin_memory=not log.ctx.dry, decode="gpu",
                             decode_overlap=overlap, **change)  # fmt: skip
    from workbench.engine.device_images import jpeg_decoder

    # which decoder ran, its version and how its write is ordered: the overlap rows compare it
    tags = {"data_path": key, "overlap": overlap, "decoder": jpeg_decoder()[0]}
    with device_decode(on_cpu=log.ctx.dry) as built:
        _loader_alone(log, key, wl, knobs, data, tags={**tags, "device_pipeline": True})
    log.expect(f"loader alone, {key}: the device pipeline ran", bool(built), "not built")
    how = "predecoded, decode=gpu" if change.get("data_format") else "gpu decode"
    label = f"{how}, overlap {'on' if overlap else 'off'}, {workers} workers"
    with device_decode() as built:
        r = log.burst(label, wl, knobs, data_dir=data, tags=tags)
    seen = f"decode={r.decode}, no_effect={r.no_effect}"
    if log.ctx.dry:
        refused = "decode" in r.no_effect and r.decode == "cpu"
        log.expect(f"{label}: refused on a CPU, with the reason", refused, seen)
        return
    acted = r.decode == "gpu" and "decode" not in r.no_effect and bool(built)
    log.expect(f"{label}: decoded on the GPU", acted, seen)
    log.expect(f"{label}: h2d_bytes_per_sample", r.h2d_bytes_per_sample is not None)


@contextmanager
def device_decode(*, on_cpu: bool = False) -> Iterator[list[str]]:
    """Inside the block, record the devices of the ``decode=gpu`` streams the loader builds
    (proof that the device pipeline ran) and, with ``on_cpu``, build them on a CPU too (the
    rehearsal's CPU twin, where ``DeviceImages`` works on CPU tensors).

    Why here: a burst on a CPU refuses ``decode=gpu`` (``decode_no_effect``), as it must for a
    user; the dry path lifts that refusal for its loader-alone rows only. It wraps the loader
    package's own ``build_device_stream`` (the one ``build_loader`` calls): nothing else in the
    engine changes."""
    import workbench.engine.loaders as loaders

    build, no_effect = loaders.build_device_stream, loaders.decode_no_effect
    built: list[str] = []

    def build_and_note(workload: Any, knobs: Any, device: Any, *rest: Any) -> Any:
        built.append(str(device))
        return build(workload, knobs, device, *rest)

    loaders.build_device_stream = build_and_note
    if on_cpu:
        loaders.decode_no_effect = lambda *args, **kw: {}
    try:
        yield built
    finally:
        loaders.build_device_stream, loaders.decode_no_effect = build, no_effect


def _loader_alone(log: StepLog, key: str, wl: str, knobs: Any, data: Path,
                  tags: dict[str, Any] | None = None) -> None:  # fmt: skip
    """The loader alone (``run_loader_burst``: the diagnosis's ceiling, no model), kept whole
    in ``facts["loader_alone"]`` with its data path."""
    from workbench.analysis.loader_ceiling import run_loader_burst
    from workbench.engine.window import BurstWindow

    with log.measuring(f"loader alone: {key}"):
        r = run_loader_burst(wl, knobs, window=BurstWindow(seconds=log.ctx.seconds),
                             device=log.ctx.device, data_dir=data)  # fmt: skip
    rec = {"label": f"loader alone: {key}", "data_path": key, **(tags or {}), **r.to_dict()}
    log.facts["loader_alone"].append(rec)
    log.expect(f"loader alone, {key}: ok", r.ok, f"{r.status}: {r.error}")
    print(f"{log.name}: loader alone, {key}, {knobs.num_workers} workers: "
          f"{r.samples_per_s or 0:,.1f} samples/s", flush=True)  # fmt: skip
    log.write()


def _predecoded(log: StepLog, data: Path, workers: int) -> None:
    """The set converted to uint8 squares (256 px for resnet50's 224 px crops), sent to the
    device as bytes and cropped there."""
    from workbench import convert_dataset

    t0 = time.perf_counter()
    convert_dataset("predecoded", data / "images", resolution=73 if log.ctx.dry else 256)
    log.facts["predecoded_convert_s"] = round(time.perf_counter() - t0, 1)
    log.write()
    _device_decode(log, data, "predecoded-gpu", workers, overlap=True, data_format="predecoded")


def _dali(log: StepLog, data: Path, workers: int) -> None:
    """DALI's mixed decode (nvJPEG), with ``workers`` CPU threads, where DALI is installed."""
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        log.skip("dali", "not installed")
        return
    if log.ctx.dry:
        log.skip("dali", "no CUDA: DALI's mixed decode needs a GPU")
        return
    wl, knobs = log.ctx.jpeg(loader="dali", dali_decode="mixed", num_workers=workers)
    _loader_alone(log, "dali", wl, knobs, data)
    log.burst("dali mixed decode", wl, knobs, data_dir=data, tags={"data_path": "dali"})


# -- paths that never ran on a GPU -------------------------------------------------------------


def paths(log: StepLog) -> None:
    """Each knob's first contact with a GPU: it runs, acts (not in no_effect), and says so."""
    wl, knobs = log.ctx.reference()
    for label, change in (("activation_checkpointing", {"activation_checkpointing": True}),
                          ("optimizer fused", {"optimizer_impl": "fused"}),
                          ("optimizer foreach", {"optimizer_impl": "foreach"})):  # fmt: skip
        r = log.burst(label, wl, dataclasses.replace(knobs, **change))
        knob = next(iter(change))
        log.expect(f"{label}: acted", knob not in r.no_effect, r.no_effect.get(knob, ""))
    _dict_batch(log)
    _alloc_conf(log, wl, knobs)


def _dict_batch(log: StepLog) -> None:
    from workbench import Knobs, Workload

    wl = Workload(name="dict-batch", model=_DictNet, dataset=_DictItems,
                  forward=_forward_dict)  # fmt: skip
    pin = not log.ctx.dry
    r = log.burst("pinned dict batch", wl, Knobs(batch_size=64, num_workers=2, pin_memory=pin))
    if pin:
        log.expect("pin_memory acted on a dict", "pin_memory" not in r.no_effect,
                   r.no_effect.get("pin_memory", ""))  # fmt: skip


def snapshot(log: StepLog) -> None:
    """A memory snapshot of one burst, a step of its own: the recorder keeps Python stacks only
    (a dump with C++ stacks took 461 s against 4 s in torchtitan's H100 measurements). The
    file stays in the scratch folder (it can be hundreds of MiB): its size and the time of the
    dump are kept, not the file."""
    from workbench import memory_snapshot

    wl, knobs = log.ctx.reference()
    path = log.ctx.workdir / "snapshot.pickle"
    t0 = time.monotonic()
    with log.measuring("memory_snapshot"):
        snap = memory_snapshot(wl, knobs, path=path, seconds=log.ctx.seconds, record=False,
                               device=log.ctx.device, stacks="python")  # fmt: skip
    log.facts["snapshot_s"] = round(time.monotonic() - t0, 1)
    log.add("memory_snapshot", snap.result)
    size = path.stat().st_size if path.exists() else 0
    log.facts["snapshot_bytes"] = size
    log.expect("snapshot file written", log.ctx.dry or size > 0, snap.why_no_file or "no file")


def _alloc_conf(log: StepLog, wl: str, knobs: Any) -> None:
    if log.ctx.dry:
        log.skip(
            "alloc_conf",
            "no CUDA: on a CPU alloc_conf does not act (a one-rank job "
            "costs 25 s here; tests/distributed cover the launch)",
        )
        return
    conf = dataclasses.replace(knobs, alloc_conf="expandable_segments:True")
    r = log.burst("alloc_conf expandable_segments, one-rank job", wl, conf, timeout_s=150)
    why = r.no_effect.get("alloc_conf", "")
    log.expect("alloc_conf acted", "alloc_conf" not in r.no_effect, why)


def tune(log: StepLog) -> None:
    """The tuner on the GPU, judged: a tune at its default budget from PyTorch's defaults on
    the JPEG set (what a user runs today), then its pick against the best of a small grid of
    hand-made configs a GPU engineer would try first, measured interleaved (each once, then
    the pick and the grid's best again side by side), so drift hits both alike. Its start is
    measured first and again in the confirmation: two readings of one config, minutes apart,
    show drift inside a real tune."""
    from workbench import tune as run_tune

    stages: list[str] = []
    # a rehearsal tunes cnn on the CPU, whose bursts start in a second instead of five
    wl, start = log.ctx.jpeg(batch_size=16) if log.ctx.dry else _defaults_on_jpegs()
    budget = 4 if log.ctx.dry else None  # None: tune's default, what a user gets
    data = big_set(log)  # the loader step's, reused
    with log.measuring(f"tune ({budget or 'default'} bursts)"):
        res = run_tune(wl, budget=budget, base=start, seconds=log.ctx.seconds, record=False,
                       device=log.ctx.device, data_dir=data,
                       progress=lambda p: stages.append(p.stage))  # fmt: skip
    for i, (r, stage) in enumerate(zip(res.bursts, stages, strict=False)):
        log.add(f"tune {i + 1}: {stage}", r, must_pass=False)
    starts = [r.samples_per_s for r in res.bursts if r.knobs == start and r.ok]
    log.facts["tune"] = {"speedup": res.speedup, "best": res.best.changes() if res.best else None,
                         "bursts": len(res.bursts),
                         "start_runs_samples_per_s": starts, "noise_pct": res.noise_pct,
                         "drift_pct": res.drift_pct, "drift_pct_per_burst": res.drift_pct_per_burst,
                         "speedup_uncertain": res.speedup_uncertain,
                         "drift_sentence": res.drift_sentence,
                         "summary": res.summary()}  # fmt: skip
    if len(starts) >= 2 and starts[0]:
        log.facts["tune"]["start_again_over_first"] = round(starts[-1] / starts[0], 4)
    log.write()
    if res.best is not None:
        _against_grid(log, wl, res.best, _hand_grid(log, start))


def _defaults_on_jpegs() -> tuple[str, Any]:
    """resnet50 on the JPEG set at PyTorch's defaults (batch 128): the tune's start."""
    from workbench import Knobs

    return "resnet50", Knobs(batch_size=128)


def _hand_grid(log: StepLog, start: Any) -> dict[str, Any]:
    """The configs a GPU engineer tries first by hand, beside the start."""
    if log.ctx.dry:  # a rehearsal: two configs show the layout
        return {"start": start, "1 worker": start.replace(num_workers=1)}
    fast = {"precision": "bf16", "channels_last": True, "pin_memory": True}
    return {
        "start": start,
        "bf16, 8 workers": start.replace(num_workers=8, **fast),
        "bf16, 16 workers": start.replace(num_workers=16, **fast),
        "bf16, decode=gpu, 8 workers": start.replace(num_workers=8, decode="gpu", **fast),
        "tf32, 16 workers": start.replace(num_workers=16, precision="tf32",
                                          channels_last=True, pin_memory=True),
    }  # fmt: skip


def _against_grid(log: StepLog, wl: str, pick: Any, grid: dict[str, Any]) -> None:
    """The tune's pick against the grid's best: every config once, in one round, then the
    pick and the grid's best again (B A): each judged by the median of its readings."""
    import statistics

    readings: dict[str, list[float]] = {name: [] for name in [*grid, "tune pick"]}
    configs = {**grid, "tune pick": pick}
    for name, knobs in configs.items():
        r = log.burst(f"grid: {name}", wl, knobs, tags={"grid": name})
        if r.ok and r.samples_per_s:
            readings[name].append(r.samples_per_s)
    measured = {n: v for n, v in readings.items() if v and n != "tune pick"}
    if not measured or not readings["tune pick"]:
        log.expect("tune pick against the grid: measured", False, "a config failed")
        return
    best = max(measured, key=lambda n: statistics.median(measured[n]))
    for name in ("tune pick", best):  # the second reading, in the other order
        r = log.burst(f"grid again: {name}", wl, configs[name], tags={"grid": name})
        if r.ok and r.samples_per_s:
            readings[name].append(r.samples_per_s)
    pick_sps = statistics.median(readings["tune pick"])
    best_sps = statistics.median(readings[best])
    log.facts["tune_vs_grid"] = {
        "grid_best": best, "grid_best_samples_per_s": round(best_sps, 1),
        "pick_samples_per_s": round(pick_sps, 1),
        "pick_over_grid_best": round(pick_sps / best_sps, 4),
        "readings": {n: [round(v, 1) for v in vs] for n, vs in readings.items()},
        "grid": {n: k.changes() for n, k in grid.items()},
    }  # fmt: skip
    log.write()


class _DictItems:
    """Items ``({"x": features, "mask": bools}, label)``: a dict batch the loader must pin
    leaf by leaf."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> tuple[dict[str, Any], Any]:
        import torch

        g = torch.Generator().manual_seed(i)
        x = torch.randn(256, generator=g)
        return {"x": x, "mask": x > 0}, int(i % 10)


def _DictNet() -> Any:
    from torch import nn

    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))


def _forward_dict(model: Any, batch: dict[str, Any]) -> Any:
    return model(batch["x"] * batch["mask"])


# -- the check, the tests, the lessons ---------------------------------------------------------


CHECK_WRAPUP_S = 5.0
"""Kept from the check step's budget to read gpu_check's rows after it ends or is killed."""
RESUME_MIN_S = 30.0
"""A crashed check is resumed in a fresh process only with this much of its budget left."""


def check(log: StepLog, budget_s: float, rows: str = "first", *,
          script: Path = HERE / "gpu_check.py") -> None:  # fmt: skip
    """gpu_check.py's ``rows`` in a process of their own, within ``budget_s``. Its rows become
    this step's bursts and checks as each row ends (the step's JSON is rewritten then), so a
    check killed by its deadline or dead of a signal keeps every row it finished; the row it
    died in is failed with the reason, and after a crash the rows not yet run go on in a fresh
    process (``--resume``) while the budget allows. A rehearsal (``--dry``) runs the check's
    rehearsal rows on the CPU: the same script, the same writing."""
    rows_json = log.ctx.out.with_suffix(".rows.json")
    rows_json.unlink(missing_ok=True)
    argv = [sys.executable, str(script), "--rows", rows, "--json", str(rows_json)]
    if log.ctx.dry:
        argv += ["--rehearse", "--data-dir", str(log.ctx.workdir / "check-data")]
    deadline = log.ctx.started + budget_s - CHECK_WRAPUP_S
    why, resumed = None, False
    while True:
        left = deadline - time.monotonic()
        cmd = [*argv, "--budget-s", str(int(left))] + (["--resume"] if resumed else [])
        proc = subprocess.Popen(cmd, start_new_session=True)
        rc, timed_out = gpu_proc.watch(proc, rows_json, deadline,
                                       lambda doc: _keep_rows(log, doc))  # fmt: skip
        why = gpu_proc.ended_how(rc, timed_out, budget_s - CHECK_WRAPUP_S)
        if gpu_proc.crashed(rc) and not resumed and deadline - time.monotonic() > RESUME_MIN_S:
            print(f"check: {why}: the rows not yet run go on in a fresh process", flush=True)
            log.facts["resumed_after"] = why
            resumed = True
            continue
        break
    doc = gpu_proc.read_json(rows_json) or {"rows": [], "running": None}
    if why and doc.get("running"):  # died in a row and not resumed: that row failed
        doc["rows"].append(_lost_row(doc["running"], why))
        doc["running"] = None
    _keep_rows(log, doc)
    log.expect("gpu_check ended by itself", why is None, why or "")
    log.write()


def _keep_rows(log: StepLog, doc: dict[str, Any]) -> None:
    """This step's bursts, facts and checks from gpu_check's file as it stands (idempotent:
    called every time the file changes)."""
    log.bursts = [{**b, "label": f"{row['label']}: {b['label']}"}
                  for row in doc["rows"] for b in row.get("bursts", [])]  # fmt: skip
    log.facts["rows"] = [{k: v for k, v in row.items() if k != "bursts"} for row in doc["rows"]]
    log.facts["device"] = doc.get("device")
    log.checks = [c for c in log.checks if not c["name"].startswith("row: ")]
    for row in doc["rows"]:
        ok = row["status"] != "failed"
        detail = row.get("reason") or "; ".join(row.get("problems", []))
        log.checks.append(
            {"name": f"row: {row['label']}", "ok": ok, "detail": "" if ok else detail}
        )
    log.running = doc.get("running")
    log.write()


def _lost_row(label: str, why: str) -> dict[str, Any]:
    return {"label": label, "status": "failed", "wall_s": None,
            "reason": f"{why} in this row; the rows before it are kept"}  # fmt: skip


def max_autotune(log: StepLog, budget_s: float) -> None:
    """compile=max-autotune, a call of its own: its Triton autotuning took 95 s to past 140 s
    on one H200, more than the first call can spare (``gpu_check.py --rows max-autotune``)."""
    if log.ctx.dry:
        raise StepSkipped("no CUDA device: max-autotune's Triton GEMM autotuning needs a GPU")
    check(log, budget_s, rows="max-autotune")


def parity_rows(log: StepLog, budget_s: float) -> None:
    """Loss parity (issue 40), a call of its own: bf16, fp16 with and without its scaler, fp8
    and compile against each model's reference on resnet50 and gpt:124m
    (``gpu_check.py --rows parity``); a rehearsal runs its CPU row (cnn: bf16, a worker)."""
    check(log, budget_s, rows="parity")


def pytest_gpu(log: StepLog, budget_s: float) -> None:
    """The tests marked gpu; DALI's are named as not run where DALI cannot be imported."""
    if log.ctx.dry:
        raise StepSkipped("no CUDA device: every gpu test would skip")
    files, not_run = gpu_test_files()
    log.facts["dali_not_run"] = not_run
    out = log.ctx.out.with_suffix(".pytest.txt")
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *files]
    with out.open("w") as f:
        p = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=budget_s)
    text = out.read_text()
    log.facts["pytest_exit"] = p.returncode
    log.facts["pytest_tail"] = text[-3000:]
    log.expect("pytest -m gpu passed", p.returncode == 0, text.strip().splitlines()[-1:])
    log.write()


def gpu_test_files(root: Path = HERE.parent) -> tuple[list[str], list[str]]:
    """Test files with gpu-marked tests, and DALI's gpu tests listed as not run (without
    DALI they would be collected and skipped, which reads as passed)."""
    files = sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py")
                   if "pytest.mark.gpu" in p.read_text())  # fmt: skip
    try:
        import nvidia.dali  # noqa: F401

        return files, []
    except ImportError:
        pass
    dali = [f for f in files if Path(f).name.startswith("test_dali")]
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu",
            "-p", "no:cacheprovider", *dali]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, cwd=root, timeout=120).stdout
    ids = [line for line in out.splitlines() if "::" in line]
    return [f for f in files if f not in dali], [f"{i}: not run: DALI not installed" for i in ids]


WHEELHOUSE = HERE.parent / ".wheelhouse"
ROOM_IMAGES_PER_CLASS = 300
"""The sample data a GPU room builds before the workshop (notebooks/README.md, "Before the
workshop": 3,000 JPEGs, so that lesson 4 reaches the OOM edge): the lessons run on it here."""
LESSON_GROUPS = {"lessons": "core", "lessons-optional": "optional"}
"""Each lessons step's lessons (``run_lessons.select``), unless ``--lessons`` names others."""
LESSONS_MARGIN_S = 10.0
"""Kept from the step's budget for writing the record after the last lesson."""


def lessons(log: StepLog, budget_s: float, spec: str | None = None, *,
            wheelhouse: Path = WHEELHOUSE, notebooks: Path | None = None,
            images_per_class: int | None = ROOM_IMAGES_PER_CLASS) -> None:  # fmt: skip
    """Lessons on the GPU: the wheelhouse (``make wheelhouse``, carried along) installed
    offline into a folder of its own, the room's sample data built, then ``run_lessons``
    in this process, the box's python as the kernel. Each lesson's record (outcome, time, the
    error's last line, per-cell times) goes into this step's facts as it ends, so a step
    stopped by its timeout keeps the lessons that ended; a failed or timed-out lesson fails
    the step, one skipped for time does not (a later session runs it: ``--lessons
    unmeasured``)."""
    if log.ctx.dry:
        raise StepSkipped("no CUDA device: the lessons run on a CPU in the test suite")
    wheels = sorted(wheelhouse.glob("*.whl"))
    if not wheels:
        raise StepSkipped("no wheelhouse here: run `make wheelhouse`, and carry .wheelhouse")
    site = log.ctx.workdir / "site"
    t0 = time.monotonic()
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
               "--no-cache-dir", "--target", str(site), *map(str, wheels)]  # fmt: skip
    p = subprocess.run(install, capture_output=True, text=True, timeout=120)
    log.facts["install_s"] = round(time.monotonic() - t0, 1)
    if not log.expect("wheelhouse installed offline", p.returncode == 0, p.stderr[-1500:]):
        return
    runner = _lesson_runner(site)
    kept = gpu_record.lesson_runs(gpu_record.load_kept())
    names = runner.select([spec or LESSON_GROUPS[log.name]], kept)
    log.facts["selected"] = names
    paths = runner.find_lessons(notebooks or runner.NOTEBOOKS, names)
    left = budget_s - (time.monotonic() - log.ctx.started) - LESSONS_MARGIN_S
    command = gpu_record.command_line()

    def keep(doc: dict[str, Any]) -> None:
        log.facts["lessons"] = doc
        log.write()

    records = runner.run_lessons(paths, runner.Limits(budget_s=left), command=command,
                                 started=time.monotonic(), kept=kept,
                                 images_per_class=images_per_class, on_update=keep)  # fmt: skip
    for r in records:
        log.expect(f"lesson {r.lesson}: {r.outcome}", r.outcome in ("passed", runner.SKIPPED),
                   r.error or r.outcome)  # fmt: skip


def _lesson_runner(site: Path) -> Any:
    """``run_lessons``, imported with the wheelhouse's folder on this process's path and on the
    kernels' ``PYTHONPATH`` (the kernels import ipykernel from it, and the workbench from the
    checkout)."""
    sys.path.insert(0, str(site))
    paths = [str(site), str(HERE.parent), *filter(None, os.environ.get("PYTHONPATH", "")
                                                   .split(os.pathsep))]  # fmt: skip
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    import run_lessons

    return run_lessons


# -- the entry point ---------------------------------------------------------------------------

STEPS: dict[str, Callable[..., None]] = {
    "environment": environment, "fidelity": gpu_fidelity.fidelity, "drift": drift,
    "loader": loader, "paths": paths, "tune": tune, "check": check, "pytest-gpu": pytest_gpu,
    "transformer": gpu_transformer.transformer, "lessons": lessons,
    "lessons-optional": lessons, "fp8": gpu_fp8.fp8_vs_bf16, "max-autotune": max_autotune,
    "snapshot": snapshot, "parity": parity_rows,
}  # fmt: skip
TIMED = frozenset({"check", "pytest-gpu", "transformer", "fidelity", "max-autotune",
                   "parity", *LESSON_GROUPS})  # fmt: skip
"""Steps that are given their time (the rest of the budget), not just a timeout."""
BUDGETED = TIMED | {"loader"}
"""Steps that read their budget (``--budget-s``): the loader builds its predecoded copy only
when it fits; the transformer step runs the rows that fit."""


def one_burst(args: argparse.Namespace) -> int:
    """The drift step's fresh process: one burst, its record written to ``--json``."""
    from workbench import Knobs, run_burst

    device = "cpu" if args.dry else "cuda"
    r = run_burst(args.workload, Knobs.from_dict(json.loads(args.knobs)), record=False,
                  seconds=args.seconds, device=device)  # fmt: skip
    gpu_record.write_atomic(Path(args.json), gpu_record.burst_record("fresh process", r))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=[*STEPS, "one-burst"])
    ap.add_argument("--json", required=True, help="the step's record, rewritten as it goes")
    ap.add_argument("--dry", action="store_true", help="a CPU rehearsal: cnn, short windows")
    ap.add_argument("--seconds", type=float, default=None, help="each burst's window")
    ap.add_argument("--budget-s", type=float, default=120.0, help="for check/pytest/lessons")
    ap.add_argument("--lessons", default=None, help="the lessons steps' lessons "
                    "(run_lessons.select: numbers, core, optional, all, unmeasured)")  # fmt: skip
    ap.add_argument("--workdir", default=os.environ.get("WORKBENCH_SESSION_DIR", "/tmp/wb-gpu"))
    ap.add_argument("--workload", help=argparse.SUPPRESS)  # one-burst
    ap.add_argument("--knobs", help=argparse.SUPPRESS)  # one-burst
    args = ap.parse_args(argv)
    if args.seconds is None:
        args.seconds = DRY_SECONDS if args.dry else 2.0
    if args.step == "one-burst":
        return one_burst(args)
    ctx = Context(dry=args.dry, seconds=args.seconds, out=Path(args.json),
                  workdir=Path(args.workdir))  # fmt: skip
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    log = StepLog(args.step, ctx)
    log.write("running")
    try:
        step = STEPS[args.step]
        if args.step in LESSON_GROUPS:
            step(log, args.budget_s, args.lessons)
        elif args.step in BUDGETED:
            step(log, args.budget_s)
        else:
            step(log)
    except StepSkipped as why:
        log.reason = str(why)
        log.write("skipped")
        return 0
    except Exception as exc:  # a step that raises is a failed step; the session goes on
        log.expect("ran without raising", False, f"{type(exc).__name__}: {exc}")
        log.write()
        raise
    log.write()
    return 1 if any(not c["ok"] for c in log.checks) else 0


if __name__ == "__main__":
    faulthandler.enable()
    sys.exit(main())
