"""Hold the panel's first burst until the browser has drawn the panel.

Displaying the panel makes the browser build about 200 widget views and draw four Vega charts,
each loading its own copy of the chart bundle (about 900 KB of JavaScript). On a small machine
the browser shares the cores with the burst, so a burst that measured while the browser drew
would read low for reasons that have nothing to do with its knobs. The panel's first burst
(the one ``panel()`` starts by itself) therefore waits for a message from the browser.

``DrawnSignal`` is a tiny anywidget placed last in the panel. In the browser, its model's
``initialize`` says "frontend" at once (a widget frontend exists and reads this panel), and its
view says "drawn" once the panel's charts show an ``<svg>`` or ``<canvas>`` and the page has
been idle for a few frames in a row (``requestIdleCallback`` with time to spare: nothing left
to lay out or paint). ``FirstDraw`` turns those messages into the moment the burst may start:

- no kernel at all (a script, a test): at once; nothing can draw the panel;
- a kernel but no "frontend" message within ``hello_s`` (nbclient, papermill, a frontend
  without widgets): after ``hello_s``, so headless runs pay a second or two per panel;
- a frontend: on "drawn", or after ``drawn_s`` at the latest (a browser tab in the background,
  a notebook scrolled so that the panel is never laid out, a frontend that never answers).

Measured in JupyterLab + headless Chromium on a 2-core machine (benchmarks/panel_vs_cell.py
--browser, cnn, batch 32, runs with the other cores quiet): without the wait, the charts were
drawn between 0.2 s before and 0.3 s after the first window opened, Chromium took up to 0.26
cores of that window (0.03-0.10 in cell bursts' windows), and the first burst read 0.88-0.97x
the later panel bursts on the small dataset; with it, the charts were drawn 0.4-0.8 s before
the window, Chromium took 0.01-0.03 cores of it, the first burst read 0.97-1.02x the later
ones, and the burst started 0.95-1.5 s after the panel was shown.

A message is handled by the kernel's main thread when it is idle: while a later cell runs, the
timeouts decide. Whatever released the burst is kept in ``FirstDraw.how`` (and the waits in
``frontend_s`` / ``waited_s``), so a measurement can say what it waited for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import anywidget
import traitlets

HELLO_S = 1.5  # no "frontend" by then: nobody draws (JupyterLab here answered in 0.01-0.1 s)
DRAWN_S = 10.0  # a frontend said hello but never "drawn" (seen here: drawn in 0.7-1.4 s)

_ESM = """
const IDLE_FRAMES = 3;     // idle callbacks in a row, each with most of a frame to spare
const SPARE_MS = 40;       // of the 50 ms an idle period may last
const GIVE_UP_MS = 8000;   // the kernel gives up at drawn_s (10 s) anyway

function charts_drawn(el, charts) {
  const root = el.closest(".wb-panel") || document;
  return charts.every((c) => root.querySelector(`.${c} svg, .${c} canvas`));
}

export default {
  initialize({ model }) {
    model.send({ event: "frontend" });
  },
  render({ model, el }) {
    const t0 = performance.now();
    const charts = model.get("charts");
    let quiet = 0;
    let sent = false;
    const later = (cb) => window.requestIdleCallback
      ? window.requestIdleCallback(cb, { timeout: 500 })
      : setTimeout(() => cb(null), 50);
    const check = (deadline) => {
      if (sent) return;
      const idle = deadline && !deadline.didTimeout && deadline.timeRemaining() >= SPARE_MS;
      quiet = idle ? quiet + 1 : 0;
      const ms = performance.now() - t0;
      if ((quiet >= IDLE_FRAMES && charts_drawn(el, charts)) || ms > GIVE_UP_MS) {
        sent = true;
        model.send({ event: "drawn", ms, gave_up: ms > GIVE_UP_MS });
      } else {
        later(check);
      }
    };
    later(check);
    return () => { sent = true; };
  },
};
"""


class DrawnSignal(anywidget.AnyWidget):
    """Invisible; tells the kernel that a frontend exists and when it has drawn the panel."""

    _esm = traitlets.Unicode(_ESM).tag(sync=True)
    charts = traitlets.List(traitlets.Unicode()).tag(sync=True)  # CSS classes to wait for


def kernel_present() -> bool:
    """Is this code running in a Jupyter kernel (where a frontend may draw widgets)?"""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class FirstDraw:
    """When may the held first burst start? ``release`` is called exactly once: on the
    browser's "drawn", or when a timeout says no frontend (or no answer) is coming."""

    def __init__(
        self,
        release: Callable[[], None],
        *,
        hello_s: float = HELLO_S,
        drawn_s: float = DRAWN_S,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self._release, self._clock = release, clock
        self.hello_s, self.drawn_s = hello_s, drawn_s
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._t0 = clock()
        self.how: str | None = None  # "drawn", "no kernel", "no frontend", "not drawn in time"
        self.frontend_s: float | None = None  # when the frontend said hello, after arm()
        self.waited_s: float | None = None  # when the burst was let go, after arm()
        self.browser_ms: float | None = None  # the browser's own count, render to "drawn"

    @property
    def released(self) -> bool:
        return self.how is not None

    def arm(self, frontend_possible: bool) -> None:
        """Start waiting; without a kernel nothing can draw, so let the burst go now."""
        self._t0 = self._clock()
        if not frontend_possible:
            self._let_go("no kernel")
            return
        self._start_timer(self.hello_s, "no frontend")

    def on_message(self, content: Any) -> None:
        """A custom message from ``DrawnSignal`` in the browser."""
        event = content.get("event") if isinstance(content, dict) else None
        if event == "frontend":
            with self._lock:
                if self.how is not None or self.frontend_s is not None:
                    return
                self.frontend_s = self._clock() - self._t0
            self._start_timer(self.drawn_s, "not drawn in time")
        elif event == "drawn":
            self.browser_ms = content.get("ms")
            self._let_go("drawn")

    def cancel(self) -> None:
        """The held burst was superseded: stop the timer, release nothing."""
        with self._lock:
            if self.how is None:
                self.how = "cancelled"
            self._stop_timer()

    def _start_timer(self, after_s: float, how: str) -> None:
        with self._lock:
            if self.how is not None:
                return
            self._stop_timer()
            self._timer = threading.Timer(after_s, self._let_go, args=(how,))
            self._timer.daemon = True
            self._timer.start()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _let_go(self, how: str) -> None:
        with self._lock:
            if self.how is not None:
                return
            self.how, self.waited_s = how, self._clock() - self._t0
            self._stop_timer()
        self._release()


def drawn_signal(charts: Sequence[str]) -> DrawnSignal:
    """The signal widget for a panel whose charts carry these CSS classes."""
    import ipywidgets as w

    return DrawnSignal(charts=list(charts), layout=w.Layout(display="none"))
