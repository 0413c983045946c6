"""One burst at a time in a process: the burst slot.

Two bursts measured side by side are both wrong: they share the cores, the device and its
memory. Bursts come from many places in one kernel (a panel's runner, a second panel made by
re-running a cell, a diagnosis or tune on a task thread, a ``wb.run_burst`` typed in another
cell), so the rule lives here, below all of them, and ``run_burst`` itself takes the slot.

The newest request wins: taking the slot cancels its holder (through the holder's cancel
event, so a burst stops at its next step boundary, a tune after its current burst) and waits
until the holder has let go. The slot is re-entrant for the thread that holds it: a tune
holding it calls ``run_burst``, which takes it again without waiting for itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Holder:
    """Who holds the slot: its thread, the event that stops it, the one it sets on leaving."""

    cancel: threading.Event
    thread_id: int = field(default_factory=threading.get_ident)
    released: threading.Event = field(default_factory=threading.Event)


_lock = threading.Lock()
_holder: _Holder | None = None


def _take(me: _Holder) -> bool:
    """Cancel and wait for the holder until the slot is ours; False if we were cancelled while
    waiting (a newer request superseded us: we must not cancel anyone then)."""
    global _holder
    while True:
        if me.cancel.is_set():
            return False
        with _lock:
            holder = _holder
            if holder is None:
                _holder = me
                return True
        holder.cancel.set()
        holder.released.wait()


def _release(me: _Holder) -> None:
    global _holder
    with _lock:
        if _holder is me:
            _holder = None
    me.released.set()


def _held_by_this_thread() -> bool:
    with _lock:
        return _holder is not None and _holder.thread_id == threading.get_ident()


@contextmanager
def exclusive(cancel: threading.Event) -> Iterator[bool]:
    """Hold the process's burst slot for the calling thread's work (a burst, a tune).

    Yields False, holding nothing, when ``cancel`` was set before the slot came free. Inside
    a thread that already holds the slot, yields True at once (and leaves it held).
    """
    if _held_by_this_thread():
        yield not cancel.is_set()
        return
    me = _Holder(cancel)
    got = _take(me)
    try:
        yield got
    finally:
        _release(me)
