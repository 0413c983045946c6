"""Whether the tests run under CI (``CI=true``): there, a test whose system package or server is
missing fails instead of skipping. One module with a name of its own, so a test file imports it
wherever it lives (``from conftest import ...`` would find whichever conftest came first)."""

import os

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
