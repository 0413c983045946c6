"""The GPU session's ``fidelity`` step: a burst against the user's own loop, on the GPU.

    bash benchmarks/gpu_session.sh "$OUT"                         # call 1, after environment
    python benchmarks/gpu_steps.py fidelity --json FILE [--dry]   # the step alone

The workbench promises that a burst's samples/s is what the user's own training loop gets with
the same knobs. On a GPU the two do not even run on the same thread: a burst runs on a fresh
thread (cuDNN keeps its plans per thread: ``workbench.engine.burst_thread``), a user's loop on
the main one. So on a GPU this comparison is the only evidence that the two agree. Each row is a
``fid.Recipe`` (model, dataset, loss, optimizer, knobs) run both ways by
``benchmarks/fidelity.py``: its hand loop (``hand_loop``, on this process's main thread: torch's
DataLoader, ``.to(device)``, autocast, the optimizer, the clock read after a synchronize) and
the burst (``run_recipe``: ``wb.run_burst`` on a Workload of the same pieces):

- ``images``: resnet50 (torchvision, random init), bf16, channels_last, batch 128, from JPEGs:
  the session's set (12,800 images under its work folder, the loader step's too: drawn by
  whichever step runs first; ``data`` names another), decoded with Pillow in the workers a user sets
  on a GPU box: 16, as NVIDIA's ResNet-50 recipe does (``dle-a100-loader-workers`` in
  ``notebooks/reference/resnet50.json``), or one a usable core where the box has fewer; pinned
  memory, persistent workers;
- ``tokens``: gpt:124m (GPT-2 small at 1,024 tokens), bf16, batch 16, from the token file
  through 4 workers, pinned.

Order, ABBA: the pairs alternate which side runs first (burst then hand, hand then burst, ...),
so the runs go B H H B B H H B. Under plain alternation (B H B H ...) a drift steady in time
(clocks and temperature settling, the page cache filling, a neighbour's load) falls on the
second run of every pair the same way and biases every ratio alike; with ABBA its share changes
sign from one pair to the next, and over an even number of pairs the median leaves it out. The
first run of the step also pays what a first run pays (the data's first read); ABBA gives that
to the burst once and to the hand loop once. Each pair's ratio is burst / hand of two adjacent
runs, and the medians of the burst-first and hand-first pairs are kept apart (``order_gap``),
so an order effect shows instead of hiding in the median.

What the step keeps in ``facts["fidelity"]``, written after every run (a step stopped by its
timeout keeps its finished pairs): per row its recipe, each pair's order, both samples/s, the
ratio and each side's wall seconds, then (:func:`summary`) the median ratio, its range and
spread, the two orders' medians and whether the median falls in the goal, 0.97-1.03. The
bursts are kept whole in ``log.bursts``, labelled by row and pair. A row that does not fit
``MIN_PAIRS`` pairs in what is left of ``budget_s`` is skipped and said; a pair past that
minimum that does not fit too.

``--dry`` (a CPU): the small stand-ins (``fidelity``'s convnet on 64 px JPEGs, a 2-layer gpt
at 64 tokens) with tiny windows, so the rehearsal finishes in seconds; no goal is judged there.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fidelity as fid  # benchmarks/fidelity.py: the hand loop and the Recipe
import gpu_record
import gpu_transformer

GOAL = (0.97, 1.03)
"""burst / hand, median of the pairs: the two agree within 3%."""
PAIRS = 4
"""Pairs a row on a GPU: even, so each side runs first as often (ABBA)."""
MIN_PAIRS = 3
"""A row starts only when this many pairs fit; fewer say nothing about agreement. A CPU
rehearsal runs this many (its figures are the 2-core test machine's noise, not a verdict)."""
WINDOW_S = 3.0
"""Each side's measured window on a GPU (at least the session's ``--seconds``)."""
WARMUP = 5
"""Steps before each side's window: the model's first steps and the workers' first batches."""
DRY_WARMUP, DRY_MIN_STEPS = 2, 3
"""A rehearsal's: a small convnet step is ~0.2 s on the 2-core test machine."""
BIG_SET = "big"
BIG_SET_BATCH = 256
"""The loader step's JPEG set (``gpu_steps.big_set``: the work folder's ``big``, built for
batch 256 at 50 batches an epoch, 12,800 images): the same folder, so a session that ran the
loader step reuses it."""
MAX_WORKERS = 16
TOKEN_WORKERS = 4
MARGIN_S = 10.0
"""Kept from the step's budget for writing the record after the last pair."""


@dataclass(frozen=True)
class Row:
    """One recipe of the step: ``key`` tags its bursts and keys its facts."""

    key: str
    workload: str  # what it trains on a GPU (the rehearsal's stand-in is named in its label)
    build: Callable[[Any, Path], fid.Recipe]  # (ctx, data root) -> the recipe


def _images(ctx: Any, root: Path) -> fid.Recipe:
    """resnet50 bf16 channels_last on the JPEGs with the workers a user sets; the small convnet
    on a CPU rehearsal."""
    from workbench import Knobs

    images = root / "images"
    if ctx.dry:
        recipe = fid.cnn_recipe(images, workers=1, batch=8)
        return _named(recipe, "cnn (64 px JPEGs), batch 8, 1 worker",
                      recipe.knobs.replace(persistent_workers=True))  # fmt: skip
    from torch.nn import functional as F

    classes = len(fid.JpegFolder(images).classes)
    workers = min(MAX_WORKERS, gpu_record.cores()["usable"] or 1)
    knobs = Knobs(batch_size=128, num_workers=workers, pin_memory=True, persistent_workers=True,
                  precision="bf16", channels_last=True)  # fmt: skip
    return fid.Recipe(
        name=f"resnet50, bf16, channels_last, batch 128, JPEGs, {workers} workers",
        model=lambda: _resnet50(classes), dataset=lambda: fid.JpegFolder(images, 224),
        loss=F.cross_entropy, optimizer=fid.make_optimizer, knobs=knobs, device=ctx.device,
    )  # fmt: skip


def _resnet50(classes: int) -> Any:
    from torchvision.models import resnet50

    return resnet50(weights=None, num_classes=classes)


def _tokens(ctx: Any, root: Path) -> fid.Recipe:
    """gpt:124m bf16 on the token file (the workbench's model and token windows, as a user's
    own); a 2-layer gpt at 64 tokens in the default precision on a CPU rehearsal (bf16
    autocast is ~20x slower than fp32 on the test machine's CPU)."""
    from workbench import Knobs
    from workbench.engine.workloads.gpt import GPTShape, gpt, gpt_124m

    if ctx.dry:
        wl = gpt(root, GPTShape(layers=2, heads=2, width=64, block=64))
        knobs, label = Knobs(batch_size=4, num_workers=1, persistent_workers=True), \
            "gpt (2 layers x 64, 64 tokens), batch 4, 1 worker"  # fmt: skip
    else:
        wl = gpt_124m(root)
        knobs = Knobs(batch_size=16, num_workers=TOKEN_WORKERS, pin_memory=True,
                      persistent_workers=True, precision="bf16")  # fmt: skip
        label = f"gpt:124m, bf16, batch 16 x 1,024 tokens, {TOKEN_WORKERS} workers"
    return fid.Recipe(
        name=label, model=wl.model, dataset=wl.dataset, loss=wl.loss, optimizer=wl.optimizer,
        knobs=knobs, device=ctx.device,
        about={"flops_per_sample": wl.flops_per_sample,
               "tokens_per_sample": wl.tokens_per_sample},
    )  # fmt: skip


def _named(recipe: fid.Recipe, name: str, knobs: Any) -> fid.Recipe:
    import dataclasses

    return dataclasses.replace(recipe, name=name, knobs=knobs)


ROWS: tuple[Row, ...] = (Row("images", "resnet50", _images), Row("tokens", "gpt:124m", _tokens))


# -- the estimates -----------------------------------------------------------------------------

SETUP_S = 26.0
"""The step's process: Python, torch, CUDA and NVML ~6 s (the check's set-up row, measured);
the JPEG set ~20 s where the loader step has not built it (its estimate: 12,800 images drawn
over 16 cores) and the token file."""
REAL_DATA_BURST_S = 5.0
"""A resnet50 burst on JPEGs with 8 workers and a 2 s window: 5 s measured on an H200 (the
first session's real-data row, ``gpu_rows``: "NVML, real data")."""
WORKER_START_S = 1.0
"""16 workers instead of 8 to fork and fill: a guess."""
TOKENS_SIDE_S = gpu_transformer.EAGER_S
"""An eager gpt:124m burst with a 2 s window: ``gpu_transformer``'s guess (no run has measured
one yet)."""


@dataclass(frozen=True)
class Estimate:
    seconds: float  # one side (a burst or a hand loop)
    why: str


def side_estimate(key: str, runs: Sequence[tuple[Path, Mapping[str, Any]]]) -> Estimate:
    """One side's seconds on a GPU: 1.25x the mean of both sides' wall times in the newest kept
    run that measured the row, else from the measured JPEG burst (images) or a guess (tokens),
    with the window changed to ``WINDOW_S``."""
    for path, run in runs:
        walls = [p[w] for p in _kept_pairs(run, key) for w in ("burst_wall_s", "hand_wall_s")
                 if p.get(w)]  # fmt: skip
        if walls:
            mean = statistics.fmean(walls)
            return Estimate(1.25 * mean, f"1.25x its own in {path.name}, {mean:.1f} s a side")
    if key == "images":
        s = REAL_DATA_BURST_S - 2.0 + WINDOW_S + WORKER_START_S
        return Estimate(s, f"~{s:.0f} s a side: the first session's JPEG burst, "
                        f"{REAL_DATA_BURST_S:.0f} s measured on an H200 with a 2 s window and 8 "
                        f"workers, the window at {WINDOW_S:.0f} s and 16 workers' start (a "
                        "guess)")  # fmt: skip
    s = TOKENS_SIDE_S - 2.0 + WINDOW_S
    return Estimate(s, f"~{s:.0f} s a side: a guess (no run has measured gpt:124m: "
                    f"gpu_transformer's eager burst, {TOKENS_SIDE_S:.0f} s)")  # fmt: skip


def _kept_pairs(run: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    step = step_of(run)
    rows = ((step or {}).get("facts") or {}).get("fidelity", {}).get("rows") or {}
    return list((rows.get(key) or {}).get("pairs") or [])


def plan(runs: Sequence[tuple[Path, Mapping[str, Any]]] | None = None) -> tuple[float, float, str]:
    """The step's (est_s, min_s, why) for ``gpu_session.PLAN``: every pair of every row, or at
    the least the set-up and the first row's ``MIN_PAIRS`` pairs (it skips by row and pair what
    does not fit)."""
    runs = gpu_record.load_kept() if runs is None else runs
    est = {row.key: side_estimate(row.key, runs) for row in ROWS}
    total = SETUP_S + sum(2 * PAIRS * e.seconds for e in est.values())
    first = SETUP_S + 2 * MIN_PAIRS * est[ROWS[0].key].seconds
    parts = "; ".join(f"{row.workload} {est[row.key].why}" for row in ROWS)
    why = (f"start-up ~6 s and the JPEG set ~20 s (the loader step's, reused where it ran); "
           f"per row {PAIRS} ABBA pairs (burst and hand loop, {WINDOW_S:.0f} s windows): "
           f"{parts}; a row that does not fit {MIN_PAIRS} pairs is skipped and said")  # fmt: skip
    return total, first, why


# -- the step ----------------------------------------------------------------------------------


def fidelity(log: Any, budget_s: float, *, data: Path | None = None) -> None:
    """Every row's pairs in order (module docstring), each run kept in ``log`` (a
    ``gpu_steps.StepLog``) as it ends; a row or pair that does not fit what is left of
    ``budget_s`` is skipped and said. ``data``: a data root with ``images/`` and ``tokens/``
    (default: the loader step's set under the work folder, built if missing)."""
    ctx = log.ctx
    runs = gpu_record.load_kept()
    root = Path(data) if data is not None else data_root(ctx)
    window = ctx.seconds if ctx.dry else max(ctx.seconds, WINDOW_S)
    warmup = DRY_WARMUP if ctx.dry else WARMUP
    facts = log.facts.setdefault("fidelity", {})
    facts.update(goal=list(GOAL), order="ABBA", pairs_wanted=MIN_PAIRS if ctx.dry else PAIRS,
                 window_s=window,
                 warmup_steps=warmup, device=gpu_record.device_name(), data=str(root),
                 rows={})  # fmt: skip
    log.write()
    for row in ROWS:
        recipe = row.build(ctx, root)
        rec = facts["rows"][row.key] = {"label": recipe.name, "workload": row.workload,
                                        "knobs": recipe.knobs.changes(), "status": "running",
                                        "pairs": []}  # fmt: skip
        _measure(log, row, recipe, rec, budget_s, runs, window, warmup)
        rec.update(summary(rec["pairs"]))
        _judge(log, row, rec)
        log.write()


def data_root(ctx: Any) -> Path:
    """The loader step's data root (``BIG_SET``), built when missing: a rehearsal's 80 images,
    as ``gpu_steps.big_set`` draws them."""
    from workbench.engine.datasets import ensure_datasets, ensure_datasets_for_batch

    root = ctx.workdir / BIG_SET
    if ctx.dry:
        return ensure_datasets(root, images_per_class=8).root
    return ensure_datasets_for_batch(root, BIG_SET_BATCH).root


def _left(log: Any, budget_s: float) -> float:
    return budget_s - (time.monotonic() - log.ctx.started) - MARGIN_S


def _measure(log: Any, row: Row, recipe: fid.Recipe, rec: dict[str, Any], budget_s: float,
             runs: Sequence[tuple[Path, Mapping[str, Any]]], window: float,
             warmup: int) -> None:  # fmt: skip
    pair_s = 2 * side_estimate(row.key, runs).seconds
    dry = log.ctx.dry
    if not dry and _left(log, budget_s) < MIN_PAIRS * pair_s:
        rec["status"] = "skipped"
        rec["note"] = (f"would not fit: {MIN_PAIRS} pairs need ~{MIN_PAIRS * pair_s:.0f} s, "
                       f"{max(_left(log, budget_s), 0):.0f} s of the step's {budget_s:.0f} s "
                       "were left")  # fmt: skip
        log.skip(row.key, rec["note"])
        return
    for i in range(MIN_PAIRS if dry else PAIRS):
        if i >= MIN_PAIRS and not dry and _left(log, budget_s) < pair_s:
            log.skip(f"{row.key} pair {i + 1}", f"would not fit (~{pair_s:.0f} s, "
                     f"{max(_left(log, budget_s), 0):.0f} s left)")  # fmt: skip
            break
        pair = {"pair": i + 1, "order": ["burst", "hand"] if i % 2 == 0 else ["hand", "burst"]}
        rec["pairs"].append(pair)
        for side in pair["order"]:
            failed = _run_side(log, row, recipe, pair, side, window, warmup)
            if failed:
                rec["status"], rec["note"] = "failed", failed
                return
        pair["ratio"] = round(pair["burst"] / pair["hand"], 4)
        rec.update(summary(rec["pairs"]))
        log.write()
    rec["status"] = "measured"


def _run_side(log: Any, row: Row, recipe: fid.Recipe, pair: dict[str, Any], side: str,
              window: float, warmup: int) -> str | None:  # fmt: skip
    """One side of a pair, its samples/s and wall seconds put in ``pair``; why it failed, or
    None."""
    t0 = time.monotonic()
    label = f"{row.key} pair {pair['pair']}: {side}"
    if side == "burst":
        r = fid.run_recipe(recipe, window, warmup, DRY_MIN_STEPS if log.ctx.dry else 5)
        log.add(label, r, tags={"fidelity": row.key, "pair": pair["pair"],
                                "first": pair["order"][0]})  # fmt: skip
        pair["burst"] = r.samples_per_s if r.ok else None
        why = None if r.ok and r.samples_per_s else f"burst {r.status}: {r.error}"
    else:
        try:
            pair["hand"] = fid.hand_loop(recipe, window, warmup)
            why = None
            print(f"{log.name}: {label}: {pair['hand']:,.1f} samples/s", flush=True)
        except Exception as exc:  # an OOM or a worker's crash: the row's answer, kept
            pair["hand"], why = None, f"hand loop: {type(exc).__name__}: {exc}"
            log.expect(f"{label}: ran", False, why)
            _free_device()
    pair[f"{side}_wall_s"] = round(time.monotonic() - t0, 1)
    log.write()
    return why


def _free_device() -> None:
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _judge(log: Any, row: Row, rec: dict[str, Any]) -> None:
    """The row's checks: enough pairs measured, and on a GPU the median in the goal."""
    if rec["status"] == "skipped":
        return
    n = rec["pairs_measured"]
    log.expect(f"{row.key}: {MIN_PAIRS}+ pairs measured", n >= MIN_PAIRS,
               f"{n} pairs; {rec.get('note') or ''}")  # fmt: skip
    if log.ctx.dry or rec["in_goal"] is None:
        return
    said = f"median {rec['ratio_median']}, range {rec['ratio_min']}-{rec['ratio_max']}"
    log.expect(f"{row.key}: burst/hand in {GOAL[0]}-{GOAL[1]}", rec["in_goal"], said)


def summary(pairs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a row's pairs say (a pure function: the step, ``publish_gpu`` and the tests read it):
    ``pairs_measured``, the median ratio burst/hand with its range and spread (range over
    median, %), the medians of the burst-first and hand-first pairs and their gap
    (``order_gap``: burst-first over hand-first), each side's median samples/s, and
    ``in_goal`` (None below ``MIN_PAIRS`` pairs: too few to say)."""
    done = [p for p in pairs if p.get("ratio")]
    ratios = [p["ratio"] for p in done]
    if not ratios:
        return {"pairs_measured": 0, "ratio_median": None, "ratio_min": None, "ratio_max": None,
                "spread_pct": None, "burst_first_median": None, "hand_first_median": None,
                "order_gap": None, "burst_median": None, "hand_median": None,
                "in_goal": None}  # fmt: skip
    med = statistics.median(ratios)
    by_first = {o: [p["ratio"] for p in done if p["order"][0] == o] for o in ("burst", "hand")}
    firsts = {o: round(statistics.median(v), 4) if v else None for o, v in by_first.items()}
    gap = firsts["burst"] / firsts["hand"] if firsts["burst"] and firsts["hand"] else None
    return {
        "pairs_measured": len(ratios), "ratio_median": round(med, 4),
        "ratio_min": round(min(ratios), 4), "ratio_max": round(max(ratios), 4),
        "spread_pct": round(100 * (max(ratios) - min(ratios)) / med, 1),
        "burst_first_median": firsts["burst"], "hand_first_median": firsts["hand"],
        "order_gap": round(gap, 4) if gap else None,
        "burst_median": round(statistics.median(p["burst"] for p in done), 1),
        "hand_median": round(statistics.median(p["hand"] for p in done), 1),
        "in_goal": GOAL[0] <= med <= GOAL[1] if len(ratios) >= MIN_PAIRS else None,
    }  # fmt: skip


# -- reading the record ------------------------------------------------------------------------


def step_of(run: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A kept run's fidelity step, the newest with a row that measured a pair."""
    for step in reversed(run.get("steps") or []):
        rows = ((step.get("facts") or {}).get("fidelity") or {}).get("rows") or {}
        if step.get("name") == "fidelity" and any(r.get("pairs_measured") for r in rows.values()):
            return step
    return None
