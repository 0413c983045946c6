"""Moved to ``workbench.workshop.board.figures``: this old path warns, for one release."""

from workbench.core.moved import moved
from workbench.workshop.board.figures import *  # noqa: F403  (the same objects)

__all__, __getattr__ = moved(__name__, "workbench.workshop.board.figures")
