"""Moved to ``workbench.workshop.predictions``: this old path warns, for one release."""

from workbench.core.moved import moved
from workbench.workshop.predictions import *  # noqa: F403  (the same objects)

__all__, __getattr__ = moved(__name__, "workbench.workshop.predictions")
