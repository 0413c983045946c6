"""The panel's charts carry a small loader, not Vega itself: a notebook saved with the panel
stays well under 1 MB (it was 4.9 MB), and the kernel still serves Vega to the page offline."""

import json

from ipywidgets.embed import dependency_state
from workloads_for_tests import tensor_workload

from workbench import Knobs
from workbench.notebook.chart_widget import PanelChart, loader_source, offline_bundle
from workbench.notebook.ui import Bench


def test_the_loader_is_small_and_asks_the_kernel_first():
    src = loader_source()
    assert len(src) < 20_000 and "wb-need-vega" in src and "esm.sh/vega-embed" in src
    assert PanelChart._esm == src


def test_the_chart_answers_the_pages_request_with_the_offline_bundle(monkeypatch):
    chart = PanelChart(None)
    sent: list[dict] = []
    monkeypatch.setattr(chart, "send", lambda content, buffers=None: sent.append(content))
    chart._answer(chart, {"type": "something else"}, [])
    assert sent == []
    chart._answer(chart, {"type": "wb-need-vega"}, [])
    assert sent == [{"type": "wb-vega", "src": offline_bundle()}]
    assert len(sent[0]["src"]) > 500_000 and "export{__default as default}" in sent[0]["src"]


def test_the_panels_widget_state_stays_under_1_mb(store_path):
    """What JupyterLab saves in the notebook: every widget's state (ipywidgets' embed)."""
    bench = Bench(tensor_workload(), Knobs(batch_size=8), seconds=0.2, warmup_steps=1,
                  min_steps=2, store=store_path)  # fmt: skip
    root = bench.panel(autorun=False)
    state = dependency_state([root], drop_defaults=True)
    sizes = {k: len(json.dumps(v)) for k, v in state.items()}
    assert sum(sizes.values()) < 1_000_000, sorted(sizes.values())[-5:]
    assert max(sizes.values()) < 100_000  # no widget carries a JavaScript bundle
    assert sum(1 for v in state.values() if v["model_name"] == "AnyModel") >= 4  # the charts
