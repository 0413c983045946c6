"""Fixtures of the notebook tests: every test starts with an empty prediction book, as a fresh
kernel does (``workbench.notebook.predictions.BOOK`` is this process's)."""

from __future__ import annotations

import pytest

from workbench.notebook.predictions import BOOK


@pytest.fixture(autouse=True)
def _fresh_prediction_book():
    BOOK.clear()
    yield
    BOOK.clear()
