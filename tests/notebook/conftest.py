"""Fixtures of the browser tests: Chromium, a private JupyterLab, and a page in Chromium.

A browser test module names the notebook it opens (``NOTEBOOK``, relative to the repository),
the folder for its screenshots, logs and timings (``ARTIFACTS``) and what its kernel's
environment adds to the tiny dataset and a private home (``KERNEL_ENV``).
"""

from __future__ import annotations

from pathlib import Path

import jupyterlab_driver as lab
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def chromium() -> str:
    return lab.require_browser()


@pytest.fixture(scope="module")
def server(request, chromium, tiny_data, tmp_path_factory):
    """JupyterLab rooted at the repo, its kernel on the tiny dataset and a private home."""
    test = request.module
    base = tmp_path_factory.mktemp("jupyterlab")
    with lab.notebook_server(
        REPO, test.NOTEBOOK, base, test.ARTIFACTS, tiny_data, test.KERNEL_ENV
    ) as srv:
        yield srv


@pytest.fixture
def page(request, chromium, server):
    with lab.chromium_page(chromium, request.module.ARTIFACTS) as pg:
        yield pg
