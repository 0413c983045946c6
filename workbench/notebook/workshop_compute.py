"""Moved to ``workbench.workshop.compute_lesson``: this old path warns, for one release."""

from workbench.core.moved import moved
from workbench.workshop.compute_lesson import *  # noqa: F403  (the same objects)

__all__, __getattr__ = moved(__name__, "workbench.workshop.compute_lesson")
