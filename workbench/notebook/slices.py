"""Moved to ``workbench.workshop.slices``: this old path warns, for one release."""

from workbench.core.moved import moved
from workbench.workshop.slices import *  # noqa: F403  (the same objects)

__all__, __getattr__ = moved(__name__, "workbench.workshop.slices")
