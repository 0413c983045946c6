"""``workbench lab``: JupyterLab on the quickstart notebook, bound to 127.0.0.1.

The server runs code as you, so it never runs without a token. Jupyter's own default (a token
it makes up) can be turned off by a user's config (``c.IdentityProvider.token = ""``), so we
make the token ourselves and pass it as a command-line option, which outranks every config
file. It travels to the server process in its environment, which only you can read, and is
moved into the server's argv inside that process: the visible command line (``ps``, which
every user of a shared GPU box can read) never holds it. Jupyter prints an explicit token as
``...``, so we print the URL with the token ourselves.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

QUICKSTART = "01_quickstart.ipynb"
TOKEN_ENV = "WORKBENCH_LAB_TOKEN"
HOST = "127.0.0.1"
_FIRST_PORT = 8888  # Jupyter's usual port, then the next free ones

# Run as ``python -c``: takes the token out of the environment (kernels inherit the server's
# environment and have no use for it) and hands it to JupyterLab as an option.
_LAUNCH = f"""import os, sys
token = os.environ.pop({TOKEN_ENV!r}, "")
if not token:
    sys.exit("workbench lab: no token in ${TOKEN_ENV}; refusing to start an open server")
sys.argv.append("--IdentityProvider.token=" + token)
from jupyterlab.labapp import main
sys.exit(main())
"""


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
    """The server's command line, as ``ps`` shows it: everything but the token."""
    nb_dir = notebooks_dir()
    cmd = [sys.executable, "-c", _LAUNCH, str(nb_dir / QUICKSTART)]
    cmd += [f"--ServerApp.ip={HOST}", f"--ServerApp.root_dir={nb_dir.parent}"]
    # No calls home: many GPU boxes are offline, and the news feed would only time out.
    cmd += ["--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and cloud images often log in as root
    if port is not None:  # exactly this port: the URL printed for it must be the real one
        cmd += [f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
    if not open_browser:
        cmd.append("--no-browser")
    return cmd


def lab_env(token: str) -> dict[str, str]:
    """This process's environment plus the token for the server to take."""
    return {**os.environ, TOKEN_ENV: token}


def lab_url(port: int, token: str) -> str:
    nb_dir = notebooks_dir()
    path = quote(f"{nb_dir.name}/{QUICKSTART}")
    return f"http://{HOST}:{port}/lab/tree/{path}?token={token}"


def free_port(first: int = _FIRST_PORT, tries: int = 50) -> int:
    """The first port from ``first`` that nothing listens on here, else one the OS picks."""
    for port in [*range(first, first + tries), 0]:
        with socket.socket() as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError(f"no free port on {HOST}")


def open_lab(port: int | None = None, open_browser: bool = True) -> int:
    """Start JupyterLab with a fresh random token; prints the URL that carries it."""
    port = port or free_port()
    token = secrets.token_urlsafe(32)
    print(f"JupyterLab on the quickstart: {lab_url(port, token)}", flush=True)
    try:
        return subprocess.call(lab_command(port, open_browser), env=lab_env(token))
    except KeyboardInterrupt:
        return 0
