"""Moved to ``workbench.workshop.board``: this old path warns, for one release."""

from workbench.core.moved import moved
from workbench.workshop.board import *  # noqa: F403  (the same objects)

__all__, __getattr__ = moved(__name__, "workbench.workshop.board")
