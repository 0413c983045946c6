"""Fixtures of the workshop tests: every test starts with an empty prediction book and no
record of its seat's noise, as a fresh learner's kernel does (``predictions.BOOK`` and
``noise.SEAT`` are this process's)."""

from __future__ import annotations

import pytest

from workbench.workshop.noise import SEAT
from workbench.workshop.predictions import BOOK


@pytest.fixture(autouse=True)
def _fresh_prediction_book():
    BOOK.clear()
    SEAT.clear()
    yield
    BOOK.clear()
    SEAT.clear()
