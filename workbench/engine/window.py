"""The burst window: how long a burst warms up and measures, defined once and passed along.

Every burst, loader-only run, sweep, diagnosis, tune and profile measures in the same kind of
window (DESIGN.md, "Measurement method"): ``warmup_steps`` unmeasured steps first, then a
time-boxed window of ``seconds`` that ends at the first step boundary where both ``seconds``
have passed and ``min_steps`` steps were measured. A ``BurstWindow`` carries the three numbers
from the entry point that checked them to the loop that uses them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict

import torch

from workbench.core.errors import InputError
from workbench.core.knobs import Knobs, meant_knob, not_an_argument
from workbench.engine import hardware
from workbench.history.store import Store, open_store


@dataclass(frozen=True, kw_only=True, slots=True)
class BurstWindow:
    """How long one burst warms up and measures; refused at construction when it cannot work."""

    seconds: float = 3.0
    """The measured window's length (at least; it ends at a step boundary)."""
    min_steps: int = 5
    """Steps the window measures at the least, however long they take."""
    warmup_steps: int = 3
    """Unmeasured steps before the window: compile, autotuning, worker start-up."""

    def __post_init__(self) -> None:
        s = self.seconds
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise InputError.not_allowed(
                "seconds", s, "a number of seconds > 0 (the measured window)"
            )
        for name, low in (("min_steps", 1), ("warmup_steps", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InputError.not_allowed(name, value, f"an integer >= {low}")

    @classmethod
    def of(cls, base: BurstWindow | None = None, **given: Any) -> BurstWindow:
        """``base`` (default: the standard window) with the numbers given (not None) replacing
        its own: how an entry point that takes ``seconds=`` etc. and ``window=`` builds one."""
        changes = {k: v for k, v in given.items() if v is not None}
        return replace(base or cls(), **changes) if changes else base or cls()

    def settled(self, knobs: Knobs) -> BurstWindow:
        """This window with warm-up long enough to also drain what loader workers prefetch.

        Sweeps, diagnoses and tunes compare configs in their steady state this way; a single
        ``run_burst`` keeps the warm-up it is given.
        """
        return replace(self, warmup_steps=settled_warmup(knobs, self.warmup_steps))


class BurstOptions(TypedDict, total=False):
    """What every entry point that runs bursts takes beside its own arguments (``**options``):
    sweep, diagnose, profile_burst. Written once here; ``BurstSetup.of`` checks it once."""

    window: BurstWindow
    """The whole window at once; ``seconds``/``min_steps``/``warmup_steps`` replace its parts."""
    seconds: float
    """The measured window, in seconds (default 3)."""
    min_steps: int
    """Steps the window measures at the least (default 5)."""
    warmup_steps: int
    """Unmeasured steps before the window (default 3)."""
    device: str | torch.device | None
    """``cpu``, ``cuda`` or ``cuda:N``; None: the GPU where there is one."""
    data_dir: str | Path | None
    """The sample datasets' folder (default: ``WORKBENCH_DATA``)."""
    record: bool
    """Append every burst to the history store (default True)."""
    store: object
    """The history store or its path (default: ``$WORKBENCH_HOME``)."""
    cancel: threading.Event | None
    """Set it from another thread to stop at the next step boundary."""


@dataclass(frozen=True, kw_only=True)
class BurstSetup:
    """``BurstOptions`` checked once: the window, the device, and where the bursts are kept."""

    window: BurstWindow
    device: torch.device
    data_dir: str | Path | None
    record: bool
    store: Store | None
    """The opened history store; None when nothing is recorded."""
    cancel: threading.Event

    @classmethod
    def of(
        cls, caller: str, options: Mapping[str, Any], window: BurstWindow | None = None,
        record: bool = True,
    ) -> BurstSetup:  # fmt: skip
        """Check ``options`` as ``caller`` received them; ``window``/``record``: its defaults."""
        unknown = sorted(set(options) - set(BurstOptions.__annotations__))
        if unknown and meant_knob(unknown[0]):  # a knob goes in Knobs: say which, and where
            base = "base" if caller in ("sweep", "tune") else None  # their start's knobs
            raise not_an_argument(caller, unknown[0], options, (), base)
        if unknown:
            raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
        numbers = {k: options.get(k) for k in ("seconds", "min_steps", "warmup_steps")}
        keep = options.get("record", record)
        return cls(
            window=BurstWindow.of(options.get("window") or window, **numbers),
            device=hardware.resolve_device(options.get("device")),
            data_dir=options.get("data_dir"),
            record=keep,
            store=open_store(options.get("store")) if keep else None,
            cancel=options.get("cancel") or threading.Event(),
        )

    def burst_args(self) -> dict[str, Any]:
        """The keywords ``run_burst`` takes from this setup (the window is passed apart)."""
        return {"device": self.device, "record": self.record, "store": self.store,
                "cancel": self.cancel}  # fmt: skip


def prefetched_batches(knobs: Knobs) -> int:
    """Batches the DataLoader's workers may have ready before the first one is asked for.

    Workers start decoding as soon as the loader is iterated, so by the end of set-up and a
    few warm-up steps the queue is full. A short window that starts there measures how fast
    the model empties the queue, not how fast the workers fill it, and a deep queue looks
    faster than it is: on cnn with 3 workers x prefetch 4 (12 batches of 64), a 1 s window
    read 239 samples/s with 1% data wait where an 8 s window read 183 with 20%.
    """
    if knobs.loader != "torch" or knobs.num_workers == 0:
        return 0
    return knobs.num_workers * (knobs.prefetch_factor or 2)


def settled_warmup(knobs: Knobs, warmup_steps: int) -> int:
    """Warm-up steps that also consume the prefetched queue (a step takes grad_accum batches):
    ``BurstWindow.settled`` for code that holds the number alone."""
    return max(warmup_steps, math.ceil(prefetched_batches(knobs) / knobs.grad_accum))


__all__ = ["BurstOptions", "BurstSetup", "BurstWindow", "prefetched_batches", "settled_warmup"]
