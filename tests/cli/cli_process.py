"""`workbench ARGS` in a fresh interpreter, as a user runs it (``python -m workbench``)."""

import os
import subprocess
import sys


def run_workbench(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
