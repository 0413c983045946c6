"""The panel's chart widget: ``alt.JupyterChart`` without 0.9 MB of JavaScript in every chart.

``alt.JupyterChart.enable_offline()`` puts the whole of Vega, Vega-Lite and vega-embed (about
925 KB, bundled by vl-convert) into each chart's ``_esm``, a synced trait: a notebook saved
with the panel's five charts (and their widget state, as JupyterLab saves it) weighed 4.9 MB,
4.6 of it five copies of that bundle. Without it, the charts load Vega from a CDN, which a
classroom network or a GPU box without internet may not reach.

:class:`PanelChart` keeps both: its ``_esm`` is a loader of about 10 KB that asks the kernel
for the bundle once per page, by a custom message (never stored in the notebook), and falls
back to the CDN where no kernel answers (a saved notebook opened without one). Altair's own
renderer then draws the chart, so everything else is ``alt.JupyterChart``'s.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import altair as alt
from altair.jupyter.jupyter_chart import load_js_src

_ASK, _ANSWER = "wb-need-vega", "wb-vega"

_LOADER = """\
// workbench: Altair's chart renderer, loaded once per page: from the kernel (it works offline),
// else from a CDN (a saved notebook opened without a kernel): workbench/notebook/chart_widget.py
const CDN_SOURCE = %(cdn)s;
const KERNEL_WAIT_MS = 10000;

function fromKernel(model) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      model.off("msg:custom", answer);
      reject(new Error("no kernel answered"));
    }, KERNEL_WAIT_MS);
    function answer(msg) {
      if (msg && msg.type === %(answer)s) {
        clearTimeout(timer);
        model.off("msg:custom", answer);
        resolve(msg.src);
      }
    }
    model.on("msg:custom", answer);
    model.send({ type: %(ask)s });
  });
}

async function importSource(source) {
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  try {
    return await import(url);
  } finally {
    URL.revokeObjectURL(url);
  }
}

function renderer(model) {
  if (!globalThis.__workbenchChartRenderer) {
    globalThis.__workbenchChartRenderer = fromKernel(model)
      .then(importSource)
      .catch(() => importSource(CDN_SOURCE));
  }
  return globalThis.__workbenchChartRenderer;
}

export default {
  async render({ model, el }) {
    const altair = await renderer(model);
    return altair.default.render({ model, el });
  },
};
"""


def loader_source() -> str:
    """The ``_esm`` of every PanelChart: the loader, with Altair's online renderer inside."""
    return _LOADER % {
        "cdn": json.dumps(load_js_src()),
        "ask": json.dumps(_ASK),
        "answer": json.dumps(_ANSWER),
    }


@functools.cache
def offline_bundle() -> str:
    """Altair's renderer with Vega bundled in (vl-convert), built once per kernel."""
    alt.JupyterChart.enable_offline()  # the same bundle plain JupyterCharts get
    return str(alt.JupyterChart._esm)


class PanelChart(alt.JupyterChart):
    """An ``alt.JupyterChart`` whose front end gets Vega from the kernel (module docstring)."""

    _esm = loader_source()

    def __init__(self, chart: Any = None, **kwargs: Any) -> None:
        super().__init__(chart, **kwargs)
        self.on_msg(self._answer)

    def _answer(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("type") == _ASK:
            self.send({"type": _ANSWER, "src": offline_bundle()})


__all__ = ["PanelChart", "loader_source", "offline_bundle"]
