"""How a burst's loop is driven: its window, who stops it, who hears of its progress, its clock
and the ranks it agrees with. Shared by the burst's own loop (``engine.burst``) and Lightning's
(``engine.lightning_fit``), which both read it and neither owns it. What the burst does (the
knobs' decisions) is its plan's (``engine.plan``), not this."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from workbench.engine.coordinator import Coordinator, Solo
from workbench.engine.window import BurstWindow

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class BurstProgress:
    """Reported to ``progress`` callbacks: the panel's status line and progress bar."""

    phase: str  # "setup", "warmup", "measuring", "done"
    elapsed_s: float
    window_s: float
    steps: int


@dataclass
class LoopControl:
    """How to run one burst's loop: the window, who stops it, who hears about progress."""

    window: BurstWindow
    stop: threading.Event
    progress: Callable[[BurstProgress], None] | None
    clock: Clock
    coord: Coordinator = field(default_factory=Solo)

    def report(self, phase: str, elapsed_s: float, steps: int) -> None:
        """Tell ``progress``, if anyone listens, where the loop is."""
        if self.progress is not None:
            self.progress(BurstProgress(phase, elapsed_s, self.window.seconds, steps))


__all__ = ["BurstProgress", "Clock", "LoopControl"]
