"""Ctrl-C / kernel interrupt that stops a burst at a step boundary instead of mid-step.

Stopping mid-step can leave DataLoader workers orphaned and a CUDA stream half-full; stopping
at a boundary lets the burst shut its workers down and free memory. The first SIGINT sets the
burst's stop event; a second one (the user insists) restores the previous handler and raises
KeyboardInterrupt at once. Only the main thread may install signal handlers: elsewhere (the
notebook panel runs bursts on a background thread, and cancels through the event) this is a
no-op.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class _Sigint:
    fired = False


@contextlib.contextmanager
def graceful_sigint(stop: threading.Event) -> Iterator[_Sigint]:
    state = _Sigint()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        if state.fired:
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        state.fired = True
        stop.set()

    signal.signal(signal.SIGINT, handler)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)
