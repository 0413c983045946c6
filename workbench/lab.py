"""``workbench lab``: JupyterLab on the quickstart notebook, bound to 127.0.0.1.

Jupyter's token authentication stays on: the server runs code as you, so it is never opened
without a token. The URL with the token is printed by Jupyter itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

QUICKSTART = "01_quickstart.ipynb"


def notebooks_dir() -> Path:
    """``./notebooks`` if present, else the one beside the installed package (a checkout)."""
    for candidate in (
        Path.cwd() / "notebooks",
        Path(__file__).resolve().parent.parent / "notebooks",
    ):
        if (candidate / QUICKSTART).is_file():
            return candidate
    raise FileNotFoundError(
        f"cannot find notebooks/{QUICKSTART}: run `workbench lab` from the repository root"
    )


def lab_command(port: int | None = None, open_browser: bool = True) -> list[str]:
    nb_dir = notebooks_dir()
    cmd = [sys.executable, "-m", "jupyterlab", str(nb_dir / QUICKSTART)]
    cmd += ["--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={nb_dir.parent}"]
    # No calls home: many GPU boxes are offline, and the news feed would only time out.
    cmd += ["--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and cloud images often log in as root
    if port is not None:
        cmd.append(f"--ServerApp.port={port}")
    if not open_browser:
        cmd.append("--no-browser")
    return cmd


def open_lab(port: int | None = None, open_browser: bool = True) -> int:
    try:
        return subprocess.call(lab_command(port, open_browser))
    except KeyboardInterrupt:
        return 0
