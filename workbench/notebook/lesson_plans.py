"""Moved to ``workbench.workshop.lesson_plans``: this old path warns, for one release."""

from workbench.core.moved import moved
from workbench.workshop.lesson_plans import *  # noqa: F403  (the same objects)

__all__, __getattr__ = moved(__name__, "workbench.workshop.lesson_plans")
