"""What a burst measured: ``BurstResult``, and the robust statistics it is summarized with.

Unknown values are ``None`` (``null`` in JSON), never 0: a 0 would plot as a real measurement.
"""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from workbench.core.jsonsafe import jsonable
from workbench.core.knobs import Knobs

STATUSES = ("ok", "oom", "error", "cancelled")
KNOB_ERROR = re.compile(
    r"^(?:(?:node [^,]+, )?rank \d+: )?KnobError: (?P<message>(?P<knob>\w+)=.*)$", re.S
)
"""A failed burst's ``error`` when a knob did not suit the workload: the exception type, then
its message ("KnobError: batch_size=64 is not allowed: ..."), after the rank that failed
first for a torchrun job ("rank 0: KnobError: ...", "node n1, rank 2: ..." across nodes)."""
RENAMED = {"mem_bw_util_pct": "mem_busy_pct"}
"""Fields renamed since results were first stored: old name -> new name (old rows read as new)."""
NOISY_IQR_RATIO = 0.10  # as torch.utils.benchmark: IQR/median above 10% is worth a warning
SHORT_EPOCH_BATCHES = 50
"""An epoch of fewer full batches than this is short: a window over it measures epoch restarts
that a long run pays rarely. Why 50, and what a burst does with a short epoch: the docstring of
``workbench.engine.epochs`` (the number lives here so that the CLI reads it without torch)."""
TRACEBACK_CHARS = 16_000
"""The longest ``traceback`` a result keeps (its end): a deep torch.compile chain runs to tens
of KB, and every result is stored whole in the history (one JSON record per burst)."""


@dataclass(frozen=True, slots=True)
class Spread:
    """Median and interquartile range of per-step samples (milliseconds)."""

    p50: float | None
    iqr: float | None

    @property
    def noisy(self) -> bool | None:
        if self.p50 is None or self.iqr is None or self.p50 <= 0:
            return None
        return self.iqr / self.p50 > NOISY_IQR_RATIO


def utc_now() -> str:
    """The one clock of every result's ``created_at`` (UTC, ISO 8601): set when the result is
    made, and kept as is by the history store, so the result in memory and its row agree."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def spread(values: Sequence[float]) -> Spread:
    """Median and IQR; IQR needs at least 2 samples (inclusive quartiles)."""
    if not values:
        return Spread(None, None)
    p50 = statistics.median(values)
    if len(values) < 2:
        return Spread(p50, None)
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return Spread(p50, q3 - q1)


@dataclass(kw_only=True, slots=True)
class Outcome:
    """How a measurement ended, what ran, where and with which knobs: the first fields of every
    result (a burst's, the loader-only ceiling's), in this order in their JSON."""

    status: str = "ok"
    error: str | None = None
    workload: str = ""
    device: str = ""
    knobs: Knobs = field(default_factory=Knobs)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


NOISY_MEANING = (
    "step times spread more than 10% of their median (IQR/median): one reading of this "
    "config is loose; compare configs over repeated bursts (a tune does)"
)
"""What ``noisy`` means, said once where it is shown (a summary, under a table)."""


class BurstFailed(RuntimeError):
    """A burst that did not end ok (``oom``, ``error``, ``cancelled``), raised by
    ``BurstResult.raise_for_status`` (or ``run_burst(..., check=True)``) for scripts that
    want an exception; the message is the burst's error, ``result`` the whole result, and the
    burst's own traceback (its ``traceback`` field) is kept in ``burst_traceback``."""

    def __init__(self, result: BurstResult) -> None:
        self.result, self.status = result, result.status
        self.burst_traceback = result.traceback
        where = f" (knobs: {result.knobs!r})" if result.knobs.changes() else ""
        told = f"{result.workload} burst {result.status}{where}: {result.error}"
        if result.traceback:
            told += "\nthe burst's traceback (its end):\n" + result.traceback.rstrip()
        super().__init__(told)

    def __reduce__(self) -> tuple[Any, ...]:  # picklable (a job's ranks): Knobs are not
        return (_failed_from_dict, (self.result.to_dict(),))


def _failed_from_dict(data: dict[str, Any]) -> BurstFailed:
    return BurstFailed(BurstResult.from_dict(data))


@dataclass(kw_only=True, slots=True)
class BurstResult(Outcome):
    """One burst: the contract's fields first, then what users need beside them."""

    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    step_ms_p50: float | None = None
    step_ms_iqr: float | None = None
    steps: int = 0
    measured_s: float | None = None
    warmup_s: float | None = None
    data_wait_pct: float | None = None
    peak_mem_mib: float | None = None
    peak_reserved_mib: float | None = None
    gpu_util_pct: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    mfu_pct: float | None = None
    noisy: bool | None = None
    no_effect: dict[str, str] = field(default_factory=dict)
    suspect: list[str] = field(default_factory=list)
    """Self-checks this burst failed (``engine.selfcheck``), each a sentence: a number here
    is not to be trusted. Empty when every check passed."""
    # -- beyond the contract --
    id: int | None = None
    created_at: str | None = None
    device_name: str | None = None
    seconds: float | None = None
    samples: int = 0
    samples_from: str | None = None
    """Which tensor's leading dimension counted ``samples`` (decided on the first batch,
    ``workbench.engine.batches.sample_rule``): "all tensors" (every tensor's agreed), "target"
    (they disagreed and the target's decided, as for an EmbeddingBag's flattened bags),
    "samples_of" (the workload's hook); None where no batch was counted."""
    setup_s: float | None = None
    compile_s: float | None = None
    compile_graphs: int | None = None
    """Graphs torch.compile compiled in this burst (each compile burst starts from a clean
    compiler); 0 means it ran eagerly, and ``no_effect["compile"]`` says why."""
    compile_graph_breaks: int | None = None
    compile_window_graphs: int | None = None
    """Graphs compiled inside the measured window (a recompile there is a self-check failure)."""
    data_wait_ms_p50: float | None = None
    h2d_ms_p50: float | None = None
    compute_ms_p50: float | None = None
    step_ms: list[float] = field(default_factory=list)
    flops_per_sample: float | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    device_mem_mib: float | None = None
    mig: dict[str, Any] | None = None
    """The MIG slice the burst ran on (``workbench.engine.mig``): ``name``, ``gpu_name``,
    ``profile`` ("3g.40gb"), ``sms`` and ``gpu_sms`` (the slice's and its GPU's SMs) and
    ``sm_share``, the share of the GPU's peak ``mfu_pct`` is measured against. On a slice
    ``gpu_util_pct`` and ``mem_busy_pct`` are None (NVML has none per slice; ``notes`` says so).
    None on a whole GPU or a CPU."""
    gpu_mem_used_mib: float | None = None
    mem_busy_pct: float | None = None
    """NVML's memory utilization: the share of *time* device memory was being read or
    written, not a share of the bandwidth (stored history's ``mem_bw_util_pct`` reads as this)."""
    loader_device_mem_mib: float | None = None
    """Device memory the loader's own pools held (DALI's), outside PyTorch's allocator and so
    outside ``peak_mem_mib``; None where the loader holds none or cannot say."""
    decode: str | None = None
    """Where the images were decoded and augmented: "cpu" (the loader's workers) or "gpu" (the
    device: ``decode=gpu`` with nvJPEG, or DALI's mixed decode). None without an image folder
    or with the synthetic loader. The ``decode`` knob asks; this says what ran."""
    attention_backend: str | None = None
    """The kernel that ran the model's ``F.scaled_dot_product_attention`` calls, as PyTorch
    chose it for their inputs in set-up: "flash", "efficient", "cudnn" or "math" ("flash,
    math" where calls differed). None where the model made no such call or this torch cannot
    say. The ``attention`` knob asks (``auto``: PyTorch's choice); this says what ran."""
    pad_share_pct: float | None = None
    """With ``packing`` (pad or pack): the share of the window's token positions that were
    padding, in %; ``tokens_per_s`` then counts real tokens only and ``samples_per_s``
    samples of ``tokens_per_sample`` real tokens (``engine.packing``). None without."""
    fp8_linears: int | None = None
    """Linear layers that trained in float8 (torchao's ``Float8Linear``, ``engine.fp8``): all
    but the output head and those with a dimension not a multiple of 16. None where ``fp8``
    is off or could not act (``no_effect`` says why). The ``fp8`` knob asks; this says what
    ran."""
    h2d_bytes_per_sample: float | None = None
    """Bytes a sample sent from host memory to the device: its float32 crop and label with
    ``decode=cpu`` (602 KB at 224 px), its stored JPEG or uint8 square with ``decode=gpu``.
    None on a CPU burst (nothing crosses), and where the loader is already on the device."""
    sm_clock_mhz: float | None = None
    throttle_reasons: list[str] = field(default_factory=list)
    mem_clock_mhz: float | None = None
    """NVML's memory clock, window median; None without NVML."""
    clock_drop_pct: float | None = None
    """How far the SM clock fell inside the window, from its highest sustained reading to a
    later lowest (a rolling median of 3 NVML readings, so one 50 ms dip does not count), in %
    of the high; 0.0 when it held, None without NVML or with under 3 readings. Past
    ``selfcheck.CLOCK_DROP_SHARE`` the burst is suspect."""
    nvml: dict[str, Any] | None = None
    """What NVML read at the window's edges and inside it (``workbench.engine.nvml_record``):
    ``start`` and ``end`` (``t_s``, ``sm_clock_mhz``, ``mem_clock_mhz``, ``temp_c``,
    ``power_w``, ``throttle_reasons``), ``window`` (the same as columns, with ``throttle_mask``
    ints, at most 100 points), ``samples``, ``stride`` and ``clock_drop`` (``from_mhz``,
    ``to_mhz``, ``pct``). None where NVML gave nothing (a CPU burst)."""
    cpu_util_pct: float | None = None
    telemetry: str | None = None
    peak_mem_kind: str | None = None
    """What ``peak_mem_mib`` is: "allocated" (CUDA: torch's allocator), "pss" (a CPU burst: the
    proportional set size of the process and its loader workers, each shared page counted
    once) or "rss" (summed RSS where PSS cannot be read: an upper bound)."""
    setup_peak_mem_mib: float | None = None
    """CUDA: the most memory torch's allocator held during set-up (MiB allocated: the model
    built, the first batch checked through it, the attention probe, compile's first trace,
    fp8's conversion). The peak counters restart after it, just before warm-up, so
    ``peak_mem_mib`` and ``peak_reserved_mib`` are the training peak (warm-up and window):
    set-up's eager passes are not what training runs, and left in they hid what compile or
    fp8 save. None on a CPU (a process's resident memory has no counter to restart: there
    ``peak_mem_mib`` covers the whole burst, set-up included) and where set-up did not
    finish (an OOM in set-up: ``peak_mem_mib`` is then set-up's)."""
    loader_epochs: int | None = None
    """Times the loader ran out and restarted at an epoch's end during the burst (set-up and
    warm-up included); 0 when a short epoch is continued (``short_epochs``)."""
    step_ms_mean: float | None = None
    """Mean of the window's step times (``step_ms``): far above ``step_ms_p50`` when a few
    steps are much slower than the rest (epoch restarts, a stall)."""
    short_epochs: dict[str, Any] | None = None
    """An epoch shorter than ``SHORT_EPOCH_BATCHES`` (``workbench.engine.epochs``):
    ``handling`` ("continued": the loader ran on across epochs, as in a long epoch; "measured":
    a user's own data, restarts measured as their loop has them), ``batches_per_epoch``,
    ``threshold_batches``, ``restarts_in_window``, ``epochs_in_window``, ``step_ms_p50`` and
    ``step_ms_mean``. None when the epoch is not short or the loader has no countable epoch
    (an IterableDataset, DALI, synthetic, a Lightning Trainer's loop)."""
    final_loss: float | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    workload_source: dict[str, str | None] | None = None
    """How to build this run again by name (``engine.workloads.source_names``): ``workload``
    (a built-in name or ``module:function``; None when it has none), and the ``module:qualname``
    of the workload's ``collate_fn``, ``loss`` and ``optimizer`` (a lambda's or ``__main__``'s
    spelled as such, an object without a name as ``<partial object>``; ``collate_fn`` None:
    torch's default). ``save_config`` writes a config from it. None when no Workload was known."""
    # -- distributed bursts (world_size > 1, or NCCL variables on a GPU) --
    backend: str | None = None
    """"nccl" or "gloo" for a torchrun job; None for a burst in this process."""
    ranks: list[dict[str, Any]] = field(default_factory=list)
    """Per rank: steps, samples, step_ms_p50/iqr, data_wait_pct, peak_mem_mib, the NCCL_*
    variables it saw. A rank much slower than the others is a straggler."""
    nodes: list[dict[str, Any]] = field(default_factory=list)
    """Per node of a distributed burst: ``node`` (its name), ``host``, ``ranks``, and its ranks'
    ``samples_per_s``, ``step_ms_p50``, ``data_wait_pct``, ``peak_mem_mib``: a slow node shows."""
    launch_s: float | None = None
    """Wall time of the whole torchrun job, start-up included."""
    nccl_flags: dict[str, str] = field(default_factory=dict)
    """NCCL variables that change numerics or that NCCL documents as debug-only."""
    ambient_env: dict[str, str] = field(default_factory=dict)
    """Variables of the starting process's environment that shape a burst and that no knob
    set (``PYTORCH_CUDA_ALLOC_CONF``, ``NCCL_*``, ``OMP_NUM_THREADS``, ...): the burst, and its
    torchrun ranks, ran with them (``workbench.core.ambient``)."""
    ambient_notes: list[str] = field(default_factory=list)
    """One warning per ``ambient_env`` variable (what it changes, whether it acted here), and
    one per ambient value a knob of the same name replaced."""
    # -- memory and money (workbench.engine.memory, workbench.core.cost, workbench.engine.oom) --
    memory_breakdown: dict[str, Any] | None = None
    """The peak's parts in MiB: params, grads, optimizer state, activations (saved for
    backward), the rest (CUDA: activations and workspace), the peak
    (``workbench.engine.memory``). In a distributed burst, rank 0's; a sharded model's parts
    are the rank's shards."""
    param_mib_per_rank: float | None = None
    """MiB of parameters one rank holds at rest: the whole model on every rank with ``ddp`` (or
    in one process), about 1/world_size of it with ``sharding=fsdp`` (FSDP2's local shards;
    the block it gathers while it runs is in the peak, not here). A job's figure is its
    largest rank's; each rank's is in ``ranks``. None where no model was built."""
    grad_mib_per_rank: float | None = None
    """MiB of gradients one rank holds after a backward (one per trainable parameter, sharded
    like them with ``fsdp``); as ``param_mib_per_rank`` for a job."""
    optimizer_state_mib_per_rank: float | None = None
    """MiB of optimizer state one rank holds (Adam's two moments and step counts; built on the
    shards with ``fsdp``, so split like them); as ``param_mib_per_rank`` for a job."""
    fragmentation_pct: float | None = None
    """CUDA: (peak reserved - peak allocated) / peak reserved, in %: mostly free blocks the
    allocator keeps cached, an upper bound on fragmentation (``workbench.engine.memory``); None
    on a CPU."""
    mem_timeline: list[list[float]] = field(default_factory=list)
    """CPU: ``[seconds since the burst started, MiB]`` of the process tree's memory (PSS, or
    summed RSS where PSS cannot be read), at most about 100 points."""
    cost: dict[str, Any] | None = None
    """With a price per device hour: ``price_per_hour``, ``per_million_samples``,
    ``idle_share_pct`` and more (``workbench.core.cost``); None without a price."""
    oom_report: dict[str, Any] | None = None
    """An OOM explained (``workbench.engine.oom``): what was tried, the largest batch that
    fitted, the breakdown at the failure and the knobs that freed memory in measured bursts."""
    # -- what a person should read beside the numbers --
    notes: list[str] = field(default_factory=list)
    """What the burst noticed about the workload that leaves its numbers right but deserves
    a look, each a sentence: the default cross-entropy given a binary model's output (1-D
    logits, float targets), which trains without an error and learns nothing. Unlike
    ``suspect``, the throughput is to be trusted."""
    traceback: str | None = None
    """A failed burst's (``error``, ``oom``) formatted traceback, the exception chain
    included; at most ``TRACEBACK_CHARS`` characters, its end kept (the raising frame and the
    message), so a stored result stays small. The CLI's ``--json`` shows it with ``--debug``."""
    plan: dict[str, Any] | None = None
    """What the burst decided before it built anything (``workbench.engine.plan.Plan``): where
    it ran and why, the loader and decode path, the attention kernel, sharding, fp8, the math
    switches and each knob that could not act here with its reason. None for a burst that never
    planned (a job that failed before its ranks did, one superseded while it waited)."""

    @property
    def bad_knob(self) -> str | None:
        """The knob a failed burst refused, when it failed because a knob does not suit the
        workload (a batch bigger than the dataset): found only once the data is read, so it
        is a result, yet it is bad input rather than a crash. None for any other outcome."""
        match = self._knob_error()
        return match["knob"] if match else None

    @property
    def bad_knob_message(self) -> str | None:
        """With ``bad_knob``: the KnobError's own message ("batch_size=64 is not allowed:
        ..."), as bad input is reported everywhere else."""
        match = self._knob_error()
        return match["message"] if match else None

    def _knob_error(self) -> re.Match[str] | None:
        return KNOB_ERROR.match(self.error or "") if self.status == "error" else None

    def raise_for_status(self) -> BurstResult:
        """This result when the burst ended ok; else raise :class:`BurstFailed` with its
        error (a failed burst is a result, not an exception, until a script asks):
        ``r = wb.run_burst("cnn", k).raise_for_status()``."""
        if self.status != "ok":
            raise BurstFailed(self)
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; non-finite floats become None."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["knobs"] = self.knobs.to_dict()
        return jsonable(out, "result")

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BurstResult:
        """Rebuild from ``to_dict()`` output (e.g. a history row); unknown keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        data = {**{new: data[old] for old, new in RENAMED.items() if old in data}, **data}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["knobs"] = Knobs.from_dict(data.get("knobs") or {})
        return cls(**kwargs)

    def summary(self) -> str:
        """One line a person can read."""
        if self.status != "ok":
            failed = f"{self.workload} {self.status}: {self.error}"
            if self.oom_report:
                failed += "\n" + self.oom_report["summary"]
            return failed + "".join(f"\nSUSPECT: {s}" for s in self.suspect) + self._env_lines()
        parts = [f"{self.workload} on {self.device}: {readable(self.samples_per_s)} samples/s"]
        if self.tokens_per_s is not None:
            parts.append(f"{readable(self.tokens_per_s)} tokens/s")
        parts.append(f"step {readable(self.step_ms_p50)} ms (IQR {readable(self.step_ms_iqr)})")
        parts.append(f"data wait {readable(self.data_wait_pct)}%")
        parts.append(f"peak mem {readable(self.peak_mem_mib)} MiB")
        if self.mfu_pct is not None:
            parts.append(f"MFU {self.mfu_pct:.1f}%")
        if self.fragmentation_pct is not None:
            parts.append(f"reserved unused {self.fragmentation_pct:.1f}%")
        if self.cost and self.cost.get("per_million_samples") is not None:
            parts.append(f"{readable(self.cost['per_million_samples'])} per million samples "
                         f"({readable(self.cost['idle_share_pct'])}% idle)")  # fmt: skip
        if self.samples_from not in (None, "all tensors"):
            parts.append(f"samples counted by {self.samples_from}")
        if self.noisy:
            spread_pct = 100 * (self.step_ms_iqr or 0) / (self.step_ms_p50 or 1)
            parts.append(f"NOISY ({spread_pct:.0f}%: {NOISY_MEANING})")
        line = ", ".join(parts)
        if self.suspect:
            line += "\nSUSPECT (do not trust these numbers): " + "; ".join(self.suspect)
        short = short_epochs_line(self.short_epochs, self.knobs.to_dict())
        line += f"\n{short}" if short else ""
        return line + "".join(f"\nNOTE: {note}" for note in self.notes) + self._env_lines()

    def _env_lines(self) -> str:
        """The ambient environment's warnings, one line each (``ambient_notes``)."""
        return "".join(f"\nENVIRONMENT: {note}" for note in self.ambient_notes)


def short_epochs_line(short: dict[str, Any] | None, knobs: dict[str, Any]) -> str | None:
    """The summary's line for a window that measured epoch restarts (``short_epochs``
    "measured", at least one restart in the window): the median step against the mean, and
    what to do. None otherwise: a continued loader, or no restart inside the window."""
    if not short or short.get("handling") != "measured" or not short.get("restarts_in_window"):
        return None
    threshold = short.get("threshold_batches", SHORT_EPOCH_BATCHES)
    fixes = [
        f"an epoch of {threshold}+ batches (the built-in workloads' sample images: "
        f"workbench data --for-batch {knobs.get('batch_size')})"
    ]
    if knobs.get("num_workers") and not knobs.get("persistent_workers"):
        fixes.append("persistent_workers=True (the workers survive each restart)")
    return (
        f"SHORT EPOCHS: {short['batches_per_epoch']} batches an epoch (under {threshold}): the "
        f"window crossed {_restarts(short['restarts_in_window'])}, step p50 "
        f"{readable(short['step_ms_p50'])} ms against mean {readable(short['step_ms_mean'])} ms; "
        f"a long run restarts rarely. To measure its steady state: {' or '.join(fixes)}"
    )


def _restarts(n: int) -> str:
    return f"{n} epoch restart" + ("" if n == 1 else "s")


def readable(x: float | None) -> str:
    """A measured number as the summaries print it: thousands separated from 100 up, three
    significant digits below, ``n/a`` for unknown."""
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
