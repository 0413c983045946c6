"""A DataLoader that tunes its workers and prefetch on the first steps of the real job.

``cfg.dataloader(dataset, autotune=True)`` (or ``autotune=AutotuneOptions(cap_s=30)``) returns
an :class:`AutotunedLoader`: iterate it as a DataLoader, epoch after epoch. PyTorch's own
request for this (pytorch/pytorch#23048, open since 2019) asks for tf.data's AUTOTUNE; Lightning
declined it (#14961, #2196) because no offline heuristic knows the user's hardware and training
step. So this one measures the user's own loop, on the batches it trains on.

**While tuning, nothing is lost.** Each epoch's order comes from one pass of the loader's own
batch sampler (the user's sampler, a DistributedSampler's ``set_epoch`` included), handed out
through a feed that remembers the batches a loader took but has not delivered yet. A switch
happens at a batch boundary: the old loader's workers are stopped, and the new loader starts
with those batches, then continues the pass. Each batch of the epoch is delivered exactly once,
in the sampler's order; what the old workers had prefetched is recomputed, never skipped.

**What is measured, the keep rule and the order of tries**: ``workbench.config.autotune_search``
(the loop's whole step as it ran, judged by medians over windows, kept only when faster by a
5% margin plus two standard errors; nothing is tried when the data wait is under 5% of a step).

**The time cap**: ``cap_s`` (default 60 s, 5% of a job's first 20 minutes), counted from the
first batch. Tuning trains on real batches, so its only cost is the steps that ran on a slower
try, at most the cap; early rejection keeps that far smaller. Past the cap the best so far is
the answer. After the answer (and, under torch.distributed, the shared decision) every later
epoch iterates a plain ``torch.utils.data.DataLoader`` built with the chosen values:
``iter(loader)`` returns that DataLoader's own iterator, so there is no per-batch overhead.

**The cache** (``workbench.config.autotune_cache``): the answer is saved under
``$WORKBENCH_HOME/autotune/`` keyed by machine, dataset fingerprint and starting knobs; the next
run with the same key starts with it and does not tune (``retune=True`` measures again).

**Never stops or slows the job**: an error of a tried loader (a worker killed for memory, a
dataset that cannot go to a worker process) or of the tuning itself falls back to the saved
values with one warning that says why, and the batch is delivered by the saved loader. An error
that the saved loader raises too is the job's own and propagates, as a plain DataLoader's would.

**torchrun**: rank 0 measures; every rank counts the batches it received and, at batch
``decide_at`` (default 100, counted over epochs), joins one broadcast of a two-integer tensor
that carries rank 0's answer (rank 0 stops tuning there if it had not finished). Until then
ranks other than 0 run the saved (or their cached) values. A fixed index keeps ranks that run at
different speeds out of deadlock: each joins the broadcast when it gets there, as each joins
DDP's all-reduce. Every rank must iterate the loader at least ``decide_at`` batches, or none
past it (the usual case: DDP keeps ranks in step).

**Not a DataLoader**: :class:`AutotunedLoader` has ``len()``, ``dataset``, ``sampler``,
``batch_sampler``, ``batch_size``, ``num_workers``, ``prefetch_factor`` (the values in use),
``decision`` and, for any other attribute, the one of the plain DataLoader with the values in
use (``collate_fn``, ``drop_last``, ...). ``isinstance(loader, DataLoader)`` is False; code that
needs a real DataLoader (a Lightning ``Trainer``) takes ``loader.loader`` after tuning, or
``cfg.dataloader(...)`` with the answer. An IterableDataset is not tuned (it has no sampler to
share between loaders): a plain DataLoader is returned with a warning.

Light imports: torch inside functions only, as ``tuned_config`` does.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from workbench.config import autotune_cache
from workbench.config.autotune_search import Knobs2, Search
from workbench.core.errors import InputError

__all__ = ["AutotuneOptions", "AutotuneWarning", "AutotunedLoader", "LoaderDecision"]

DEFAULT_CAP_S = 60.0
"""min(60 s, 5% of 20 min): a small share of the minutes in which a job's speed is judged."""

log = logging.getLogger("workbench.autotune")


class AutotuneWarning(UserWarning):
    """The self-tuning loader fell back to the saved values (the message says why)."""


@dataclass(frozen=True, kw_only=True)
class AutotuneOptions:
    """How ``cfg.dataloader(dataset, autotune=AutotuneOptions(...))`` tunes."""

    cap_s: float = DEFAULT_CAP_S
    """Seconds of the job (from its first batch) in which tries may run."""
    window: int = 8
    """Batches measured per try (after its start-up batches)."""
    margin: float = 0.05
    """A try is kept only when faster than the best by this share plus two standard errors."""
    max_workers: int | None = None
    """Most workers tried; default: the CPUs this process may use over the ranks on its node."""
    decide_at: int = 100
    """Under torch.distributed: the batch at which every rank takes rank 0's answer."""
    retune: bool = False
    """Measure again even when the cache has an answer."""
    cache: bool = True
    """Read and write the answer under ``$WORKBENCH_HOME/autotune``."""
    clock: Callable[[], float] = field(default=time.perf_counter, compare=False, repr=False)
    """The clock (tests swap in a fake one)."""

    def __post_init__(self) -> None:
        checks = (
            ("cap_s", self.cap_s, self.cap_s > 0 and math.isfinite(self.cap_s), "seconds > 0"),
            ("window", self.window, self.window >= 3, "an integer >= 3"),
            ("margin", self.margin, 0 <= self.margin < 1, "a share in [0, 1)"),
            ("decide_at", self.decide_at, self.decide_at >= 1, "an integer >= 1"),
        )
        for name, value, ok, allowed in checks:
            if not ok:
                raise InputError.not_allowed(f"autotune.{name}", value, allowed)
        if self.max_workers is not None and self.max_workers < 0:
            raise InputError.not_allowed(
                "autotune.max_workers", self.max_workers, "an integer >= 0"
            )


@dataclass(frozen=True)
class LoaderDecision:
    """What the loader runs with, and why."""

    num_workers: int
    prefetch_factor: int
    source: str
    """``saved`` (the config's), ``cache``, ``tuned``, ``fallback`` (after an error), ``rank0``."""
    reason: str
    trials: tuple[dict[str, Any], ...] = ()
    """Each try: workers, prefetch, batches measured, median step and wait (ms)."""


def autotuned_loader(cfg: Any, dataset: Any, autotune: Any, overrides: dict[str, Any]) -> Any:
    """What ``TunedConfig.dataloader(dataset, autotune=...)`` returns (module docstring)."""
    options = autotune if isinstance(autotune, AutotuneOptions) else AutotuneOptions()
    if autotune is not True and not isinstance(autotune, AutotuneOptions):
        raise InputError.not_allowed("autotune", autotune, "True, False or AutotuneOptions(...)")
    from torch.utils.data import IterableDataset  # asked for: load_config stays torch-free

    why_not = None
    if isinstance(dataset, IterableDataset):
        why_not = "an IterableDataset has no sampler to share between loaders"
    elif overrides.get("in_order") is False:
        why_not = "in_order=False delivers batches out of the sampler's order"
    if why_not:
        _warn(f"autotune: not tuning ({why_not}); using the saved loader values")
        return cfg.dataloader(dataset, **overrides)
    return AutotunedLoader(cfg, dataset, options, overrides)


class AutotunedLoader:
    """A DataLoader's stand-in that tunes workers and prefetch on the job's first batches."""

    def __init__(self, cfg: Any, dataset: Any, options: AutotuneOptions, overrides: dict):
        self._cfg, self._options, self._overrides = cfg, options, dict(overrides)
        self._loader = cfg.dataloader(dataset, **overrides)  # the saved values, as asked
        saved = (self._loader.num_workers, self._loader.prefetch_factor or 2)
        self._saved: Knobs2 = saved
        self._loader_knobs = saved
        self._rank, self._world = _distributed()
        self._count = 0
        self._search: Search | None = None
        self._key: str | None = None
        self._parts: dict[str, Any] = {}
        self.decision = LoaderDecision(*saved, "saved", "not tuned yet")
        self._current: Knobs2 = saved
        if self._loader.batch_sampler is None:  # batch_size=None: the dataset batches itself
            _warn("autotune: not tuning (batch_size=None: no batch sampler to share between "
                  "loaders); using the saved loader values")  # fmt: skip
            self._settled = True
            return
        self._start()
        self._settled = self._search is None and self._world == 1

    # -- what a loop sees -------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[Any]:
        if self._settled:
            return iter(self._loader)  # a plain DataLoader's own iterator: nothing added
        return self._tuning_epoch()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    @property
    def loader(self) -> Any:
        """The plain DataLoader with the values in use (the answer, once decided)."""
        return self._loader

    @property
    def num_workers(self) -> int:
        return self._current[0]

    @property
    def prefetch_factor(self) -> int | None:
        return self._current[1] if self._current[0] > 0 else None

    # -- start: the cache, or a search -------------------------------------------------------
    def _start(self) -> None:
        try:
            cached = self._from_cache()
        except Exception as exc:  # a cache problem must not stop the job
            _warn(f"autotune: the cache could not be used ({exc!r}); tuning without it")
            cached, self._key = None, None
        if cached is not None:
            self._use(cached, "cache", f"cached answer {autotune_cache.cache_path(self._key)}")
            return
        if self._rank == 0:
            opt = self._options
            self._search = Search(self._saved, max_workers=self._max_workers(),
                                  window=opt.window, margin=opt.margin, cap_s=opt.cap_s,
                                  clock=opt.clock)  # fmt: skip

    def _from_cache(self) -> Knobs2 | None:
        if not self._options.cache:
            return None
        self._parts = {
            "machine": autotune_cache.machine(_local_ranks()),
            "dataset": autotune_cache.dataset_fingerprint(self._loader.dataset),
            "knobs": {"batch_size": self._loader.batch_size, "num_workers": self._saved[0],
                      "prefetch_factor": self._saved[1], "pin_memory": self._loader.pin_memory,
                      "collate_fn": getattr(self._cfg, "collate_fn", None),
                      "max_workers": self._max_workers()},
        }  # fmt: skip
        self._key = autotune_cache.cache_key(self._parts)
        doc = None if self._options.retune else autotune_cache.read(self._key)
        return (doc["num_workers"], doc["prefetch_factor"]) if doc else None

    def _max_workers(self) -> int:
        if self._options.max_workers is not None:
            return self._options.max_workers
        return max(1, autotune_cache.usable_cpus() // _local_ranks())

    # -- an epoch while tuning (or until the shared decision) --------------------------------
    def _tuning_epoch(self) -> Iterator[Any]:
        feed = _Feed(iter(self._loader.batch_sampler))
        it = self._open(feed)
        clock = self._options.clock
        last = None
        try:
            while True:
                asked = clock()
                try:
                    batch = next(it)
                except StopIteration:
                    return
                except Exception as exc:
                    if self._current == self._saved:
                        raise  # the saved loader fails too: the job's own error
                    self._fall_back(f"the loader with {_describe(self._current)} failed: {exc!r}")
                    it = self._reopen(it, feed)
                    continue
                got = clock()
                feed.delivered()
                self._count += 1
                before = self._current
                self._after_batch(got - asked, got - last if last is not None else got - asked)
                last = got
                if self._current != before:
                    it = self._reopen(it, feed)
                if self._settled:
                    feed.stop_recording()
                    yield batch
                    yield from it  # the rest of this epoch, untouched
                    return
                yield batch
        finally:
            _shut_down(it)

    def _open(self, feed: _Feed) -> Iterator[Any]:
        order = {"batch_size": 1, "shuffle": False, "sampler": None, "drop_last": False,
                 "batch_sampler": feed.sampler()}  # fmt: skip
        loader = self._build(self._current, persistent=False, **order)
        if self._search is not None and not self._search.done:
            self._search.loader_started()
        return iter(loader)

    def _reopen(self, it: Iterator[Any], feed: _Feed) -> Iterator[Any]:
        _shut_down(it)
        return self._open(feed)

    def _after_batch(self, wait_s: float, cycle_s: float) -> None:
        """Measure, move to the next try, and at ``decide_at`` share rank 0's answer."""
        try:
            search = self._search
            if search is not None and not search.done:
                search.observe(wait_s, cycle_s)
                if self._world > 1 and self._count >= self._options.decide_at:
                    search.stop(f"batch {self._options.decide_at} reached (decide_at)")
                if search.done:
                    self._finish(search)
                else:
                    self._current = search.current.knobs
            if self._world > 1 and self._count == self._options.decide_at:
                self._share()
        except Exception as exc:  # tuning must never stop the job
            self._fall_back(f"tuning failed: {exc!r}")
        self._settled = (self._search is None or self._search.done) and (
            self._world == 1 or self._count >= self._options.decide_at
        )

    def _finish(self, search: Search) -> None:
        trials = tuple(t.summary() for t in search.trials)
        self._use(search.chosen, "tuned", search.reason, trials)
        log.info("autotune: %s (%s)", _describe(search.chosen), search.reason)
        if self._key is not None and self._rank == 0:
            try:
                autotune_cache.write(
                    self._key, self._cache_doc(search.chosen, search.reason, trials)
                )
            except OSError as exc:
                _warn(f"autotune: the answer could not be cached ({exc!r}); it holds for this run")

    def _cache_doc(self, knobs: Knobs2, reason: str, trials: tuple) -> dict[str, Any]:
        return {"num_workers": knobs[0], "prefetch_factor": knobs[1], "reason": reason,
                "trials": list(trials), "key": self._parts,
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}  # fmt: skip

    def _share(self) -> None:
        """Every rank takes rank 0's answer (one broadcast at batch ``decide_at``)."""
        answer = _broadcast(self.decision.num_workers, self.decision.prefetch_factor)
        if self._rank != 0:
            self._use(answer, "rank0", f"rank 0's answer at batch {self._options.decide_at}")

    def _use(self, knobs: Knobs2, source: str, reason: str, trials: tuple = ()) -> None:
        self.decision = LoaderDecision(*knobs, source, reason, trials)
        self._current = knobs
        if knobs != self._loader_knobs:
            self._loader = self._build(knobs, persistent=True)
            self._loader_knobs = knobs

    def _build(self, knobs: Knobs2, *, persistent: bool, **order: Any) -> Any:
        """A plain DataLoader as ``cfg.dataloader`` builds it, with these workers and prefetch
        (and, for a try, the feed's batches and no persistent workers)."""
        w, p = knobs
        kwargs = {k: v for k, v in self._overrides.items() if k not in _WORKER_ARGS}
        kwargs.update(order, num_workers=w)
        if w > 0:
            kwargs["prefetch_factor"] = p
            if not persistent:
                kwargs["persistent_workers"] = False
            elif "persistent_workers" in self._overrides:
                kwargs["persistent_workers"] = self._overrides["persistent_workers"]
        return self._cfg.dataloader(self._loader.dataset, **kwargs)

    def _fall_back(self, why: str) -> None:
        """The saved values from here on, with one warning that says why."""
        _warn(f"autotune: {why}; continuing with the saved values ({_describe(self._saved)})")
        if self._search is not None:
            self._search.stop(why)
        self._use(self._saved, "fallback", why, ())


class _Feed:
    """One pass of a batch sampler shared by the loaders that deliver an epoch in turn.

    A loader takes batches ahead of what it delivered (its workers prefetch); the feed keeps
    those until delivered, so the next loader starts with them: nothing skipped, nothing twice.
    DataLoaders deliver in the order they took (``in_order=True``, the default).
    """

    def __init__(self, source: Iterator[list[int]]):
        self._source = source
        self._pending: deque[list[int]] = deque()  # taken, not yet delivered, in order
        self._first = 0  # sequence number of _pending[0]: batches delivered so far
        self._recording = True

    def sampler(self) -> _FeedSampler:
        return _FeedSampler(self, self._first)

    def delivered(self) -> None:
        if self._recording:
            self._pending.popleft()
            self._first += 1

    def stop_recording(self) -> None:
        """The current loader runs to the epoch's end: no later loader needs what it takes
        from now on (what it has yet to take from the pending batches stays there)."""
        self._recording = False

    def batches_from(self, seq: int) -> Iterator[list[int]]:
        while True:
            if seq - self._first < len(self._pending):
                batch = self._pending[seq - self._first]
            else:
                batch = next(self._source, None)
                if batch is None:
                    return
                if self._recording:
                    self._pending.append(batch)
            seq += 1
            yield batch


class _FeedSampler:
    """A batch sampler over a feed, from the first batch not yet delivered."""

    def __init__(self, feed: _Feed, start: int):
        self._feed, self._start = feed, start

    def __iter__(self) -> Iterator[list[int]]:
        return self._feed.batches_from(self._start)

    def __len__(self) -> int:
        raise TypeError("a tuning loader's share of an epoch has no length")


_WORKER_ARGS = ("num_workers", "prefetch_factor", "persistent_workers")


def _describe(knobs: Knobs2) -> str:
    w, p = knobs
    return f"num_workers={w}" + (f", prefetch_factor={p}" if w > 0 else "")


def _warn(message: str) -> None:
    warnings.warn(message, AutotuneWarning, stacklevel=3)


def _shut_down(it: Any) -> None:
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        with contextlib.suppress(Exception):
            shutdown()


def _distributed() -> tuple[int, int]:
    """(rank, world size) of an initialized process group; (0, 1) without one."""
    import torch.distributed as dist  # torch only when a loader is built: load_config stays light

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _local_ranks() -> int:
    """Ranks on this node (torchrun's LOCAL_WORLD_SIZE): they share its CPUs."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _broadcast(workers: int, prefetch: int) -> Knobs2:
    """Rank 0's (workers, prefetch) on every rank: a two-integer tensor, on the GPU for NCCL."""
    # torch only when a loader is built: load_config stays light
    import torch
    import torch.distributed as dist

    on_gpu = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    values = torch.tensor([workers, prefetch], dtype=torch.int64, device=device)
    dist.broadcast(values, src=0)
    return int(values[0]), int(values[1])
