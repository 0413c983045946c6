"""The notebook UI: the only layer that imports ipywidgets (and, with plots, altair)."""

from workbench.notebook.ui.panel import Bench

__all__ = ["Bench"]
