"""The self-tuning loader's search: which (workers, prefetch) to try next, and when to stop.

Pure bookkeeping, no torch: it is fed one observation per batch the training loop received
(``wait_s``: from the loop asking for the batch to getting it; ``cycle_s``: from the previous
batch's arrival to this one's, i.e. the loop's whole step as it ran) and says which loader
should deliver the next batch. ``workbench.config.autotune`` does the switching.

**What is compared: the step as the loop lived it (cycle), not the wait alone.** The loop's own
compute is unknown, and more workers can slow it (on a CPU they take cores from the model; on a
GPU box they compete with the main thread's kernel launches): a loader that cuts the wait by
5 ms but adds 8 ms to the step is slower, and only the cycle shows that. The wait decides
whether there is anything to gain: when the loop's median wait is under ``IDLE_SHARE`` of its
median step, the job is compute-bound, and the search stops before trying anything (chasing a
few percent of noise with worker counts would cost more than it could win).

**Each try**: the first ``workers + 1`` batches after a loader starts are not counted (the first
waits for worker start-up, then the workers' first batches arrive together, faster than their
steady pace); the first try of the job also skips ``FIRST_SKIP`` more (the job's own warm-up:
allocator growth, cold page cache, first kernels). Then ``window`` batches are measured. A try
whose median step already reads ``EARLY_REJECT`` times the best's after three batches stops
early: it is clearly worse and each batch of it costs the job time.

**The keep rule**: a try replaces the best only when ``log(best / try) > margin + 2 se``, with
``margin`` 5% by default. A try's step time is the median over windows of ``max(1, workers)``
consecutive batches of each window's mean step (at least 3 windows and ``window`` batches).
Why windows: with w workers, batches arrive in rounds (w at once, then a wait), so single
steps are bimodal and their median is not the throughput; a round's mean is. ``se`` is the
combined standard error of the two medians (``1.2533 * IQR/1.349 / median / sqrt(windows)``
each: the standard error of a median from a robust spread). Two standard errors: a try that
is no better reads as better about one time in forty; the margin: below 5% a change is not
worth a different loader than the one the user saved and measured.

**The order**: workers up from the saved count (0 -> 1, then doubling, capped by the CPUs this
rank may use) until two steps in a row are not kept (one is not enough: with a loader far slower
than the step, 0 -> 1 worker only overlaps the short compute, within the margin, while 2
workers halve the wait); if nothing up was kept, down by halving
(the saved count may be too many for this machine); then prefetch doubled once, if workers
are used. The search ends when the order runs out, the best is no longer data-bound, or the time
cap is spent (then the best so far is the answer; the try in flight is dropped).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["FIRST_SKIP", "IDLE_SHARE", "Search", "Trial", "faster"]

IDLE_SHARE = 0.05
"""Below this share of the step spent waiting for data there is nothing for a loader to win."""
FIRST_SKIP = 3
"""Batches of the job's own warm-up left out of the first try, beyond the loader's start-up."""
EARLY_REJECT = 1.5
"""A try whose median step reads this many times the best's (after 3 batches) stops early."""
MAX_PREFETCH = 8
UP_PATIENCE = 2
"""Steps up in a row that may be not kept before the climb ends."""

Knobs2 = tuple[int, int]
"""(num_workers, prefetch_factor); prefetch is kept even at 0 workers, where it is unused."""


@dataclass
class Trial:
    """One loader's measured batches."""

    knobs: Knobs2
    skip: int
    waits: list[float] = field(default_factory=list)
    cycles: list[float] = field(default_factory=list)

    def restart(self, skip: int) -> None:
        """A new loader of the same knobs (a new epoch): skip its start-up again."""
        self.skip = skip

    def add(self, wait_s: float, cycle_s: float) -> None:
        if self.skip > 0:
            self.skip -= 1
            return
        self.waits.append(wait_s)
        self.cycles.append(cycle_s)

    @property
    def group(self) -> int:
        """Batches per window: one round of the workers."""
        return max(1, self.knobs[0])

    def needed(self, window: int) -> int:
        """Batches to measure: ``window`` at least, and 3 windows."""
        return self.group * max(3, math.ceil(window / self.group))

    @property
    def windows(self) -> list[float]:
        g = self.group
        return [sum(self.cycles[i : i + g]) / g for i in range(0, len(self.cycles) - g + 1, g)]

    @property
    def cycle(self) -> float:
        """The median over windows of the mean step (the whole cycles so far without one)."""
        means = self.windows
        return statistics.median(means) if means else statistics.fmean(self.cycles)

    @property
    def wait_share(self) -> float:
        total = sum(self.cycles)
        return sum(self.waits) / total if total > 0 else 0.0

    def rel_se(self) -> float:
        """Standard error of the median step, relative to it (robust: from the windows' IQR)."""
        means = self.windows
        if len(means) < 2 or self.cycle <= 0:
            return math.inf
        q1, _, q3 = statistics.quantiles(means, n=4, method="inclusive")
        return 1.2533 * ((q3 - q1) / 1.349) / self.cycle / math.sqrt(len(means))

    def summary(self) -> dict[str, float | int]:
        return {
            "num_workers": self.knobs[0],
            "prefetch_factor": self.knobs[1],
            "batches": len(self.cycles),
            "step_ms": round(1e3 * self.cycle, 3) if self.cycles else float("nan"),
            "wait_share": round(self.wait_share, 4),
        }


def faster(candidate: Trial, best: Trial, margin: float) -> bool:
    """The keep rule (module docstring): faster by more than the margin and two standard
    errors of the difference."""
    se = math.hypot(candidate.rel_se(), best.rel_se())
    return math.log(best.cycle / candidate.cycle) > margin + 2 * se


class Search:
    """Which loader delivers the next batch, from the batches seen so far."""

    def __init__(
        self,
        start: Knobs2,
        *,
        max_workers: int,
        window: int,
        margin: float,
        cap_s: float,
        clock: Callable[[], float],
    ):
        self._max_workers = max(max_workers, start[0])
        self._window, self._margin, self._cap_s, self._clock = window, margin, cap_s, clock
        self._t0: float | None = None
        self._start = start
        self.trials: list[Trial] = []
        self._best: Trial | None = None
        self._phase = "up"
        self._kept_in_phase = False
        self._misses = 0
        self.current = Trial(start, skip=start[0] + 1 + FIRST_SKIP)
        self.done = False
        self.reason = ""

    @property
    def chosen(self) -> Knobs2:
        """The best measured so far (the start until something beat it)."""
        return self._best.knobs if self._best else self._start

    def loader_started(self) -> None:
        """The current knobs' loader was (re)built: skip its start-up batches."""
        self.current.restart(self.current.knobs[0] + 1 + (FIRST_SKIP if not self.trials else 0))

    def observe(self, wait_s: float, cycle_s: float) -> None:
        """One batch as the loop got it; may move ``current`` to a new try or end the search."""
        if self.done:
            return
        now = self._clock()
        self._t0 = now if self._t0 is None else self._t0
        if now - self._t0 >= self._cap_s:
            self.stop(f"time cap of {self._cap_s:g} s reached")
            return
        trial = self.current
        trial.add(wait_s, cycle_s)
        rejected = (
            self._best is not None
            and len(trial.cycles) >= 3
            and statistics.fmean(trial.cycles) > EARLY_REJECT * self._best.cycle
        )
        if len(trial.cycles) >= trial.needed(self._window) or rejected:
            self._judge(trial)

    def stop(self, reason: str) -> None:
        """End the search now with the best so far (a try in flight is dropped)."""
        if not self.done:
            self.done, self.reason = True, reason
            self.current = Trial(self.chosen, skip=0)

    def _judge(self, trial: Trial) -> None:
        self.trials.append(trial)
        if self._best is None:
            self._best = trial
        elif faster(trial, self._best, self._margin):
            self._best, self._kept_in_phase, self._misses = trial, True, 0
        else:
            self._misses += 1
            if self._phase != "up" or self._misses >= UP_PATIENCE:
                self._next_phase()
        best = self._best
        if best.wait_share < IDLE_SHARE:
            why = "nothing to gain" if best is trial and len(self.trials) == 1 else "done"
            self.stop(f"data wait {100 * best.wait_share:.1f}% of a step: {why}")
            return
        proposal = self._propose()
        if proposal is None:
            self.stop("every candidate measured")
        else:
            self.current = Trial(proposal, skip=proposal[0] + 1)

    def _next_phase(self) -> None:
        if self._phase == "up":
            down = not self._kept_in_phase and self._start[0] > 1
            self._phase = "down" if down else "prefetch"
        elif self._phase == "down":
            self._phase = "prefetch"
        else:
            self._phase = "end"
        self._kept_in_phase, self._misses = False, 0

    def _propose(self) -> Knobs2 | None:
        tried = {t.knobs for t in self.trials}
        while self._phase != "end":
            w, p = self.chosen
            nxt: Knobs2 | None = None
            if self._phase == "up":
                top = max(t.knobs[0] for t in self.trials)  # past a try not kept, too
                up = 1 if top == 0 else min(2 * top, self._max_workers)
                nxt = (up, p) if up > top else None
            elif self._phase == "down":
                nxt = (w // 2, p) if w > 0 else None
            elif w > 0 and 2 * p <= MAX_PREFETCH:
                nxt = (w, 2 * p)
            if nxt is not None and nxt not in tried:
                return nxt
            self._next_phase()
        return None
