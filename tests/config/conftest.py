"""Fixtures of the config tests."""

from __future__ import annotations

import pytest

from workbench.engine.training import _read_flags, _restore_flags


@pytest.fixture
def restored_backend_flags():
    """The process's math switches (TF32, cuDNN) as they were before the test, after it: a
    config's ``apply_backend_flags`` writes process-wide state."""
    saved = _read_flags()
    yield
    _restore_flags(saved)
