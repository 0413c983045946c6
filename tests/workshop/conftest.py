"""Fixtures of the workshop tests: every test starts with an empty prediction book, as a fresh
kernel does (``workbench.workshop.predictions.BOOK`` is this process's)."""

from __future__ import annotations

import pytest

from workbench.workshop.predictions import BOOK


@pytest.fixture(autouse=True)
def _fresh_prediction_book():
    BOOK.clear()
    yield
    BOOK.clear()
