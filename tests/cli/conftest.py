"""Fixtures of the command's tests."""

import pytest
from workloads_for_tests import tensor_workload

from workbench.engine.workloads import register_workload


@pytest.fixture
def tiny_workload():
    """A workload named ``tiny`` (a few tensors): sweep, diagnose and tune run in a second."""
    register_workload("tiny", lambda data_dir=None: tensor_workload())
