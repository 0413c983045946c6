"""A real PostgreSQL for the class-store tests (the fixtures in conftest.py use it).

initdb + pg_ctl in a temp dir, listening on 127.0.0.1 on a free port, with password (SCRAM)
authentication, so that the tests that look for a leaked password look at a real server's real
errors. PostgreSQL refuses to run as root, and CI runs as root: there the server runs as
``nobody`` (subprocess's ``user=``/``group=``), in a temp dir handed to that user. Without the
binaries or psycopg the tests skip locally and fail under CI=true (.ci/run installs them).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
_UNPRIVILEGED = "nobody"
START_TIMEOUT_S = 60


@dataclass(frozen=True)
class PgServer:
    """A running test server: its superuser, password and port."""

    user: str
    password: str
    port: int
    database: str = "postgres"

    def url(self, password: str | None = None, port: int | None = None) -> str:
        """The server's URL; ``password``/``port`` override the real ones (for bad-input tests)."""
        secret = quote(self.password if password is None else password, safe="")
        return f"postgresql://{self.user}:{secret}@127.0.0.1:{port or self.port}/{self.database}"

    def url_without_password(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"


def missing(what: str) -> None:
    message = f"{what}; install it ('postgresql' in .ci/run's apt list, psycopg in the dev extra)"
    if IN_CI:
        pytest.fail(f"under CI the class-store tests must run: {message}")
    pytest.skip(message)


_SEARCHED = ("/usr/local/bin",)
_VERSIONED = "/usr/lib/postgresql/*/bin"  # Debian's postgresql package (CI)


def pg_bin_dir() -> Path | None:
    """Where initdb and pg_ctl are: PATH, /usr/local/bin, then Debian's versioned folders
    (newest first)."""
    on_path = shutil.which("initdb")
    candidates = [Path(on_path).parent] if on_path else []
    candidates += [Path(folder) for folder in _SEARCHED]
    versioned = [Path(folder) for folder in glob.glob(_VERSIONED)]
    candidates += sorted(versioned, key=_version, reverse=True)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


def _version(folder: Path) -> int:
    name = folder.parent.name
    return int(name) if name.isdigit() else -1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def as_server_user(root: Path) -> dict[str, object]:
    """subprocess arguments that run the server as ``nobody`` when we are root; none otherwise."""
    if os.geteuid() != 0:
        return {}
    account = pwd.getpwnam(_UNPRIVILEGED)
    for parent in root.parents:  # the server user must reach its folder
        if not parent.stat().st_mode & 0o001:
            pytest.fail(f"{parent} is not searchable by {_UNPRIVILEGED}: set TMPDIR elsewhere")
    for path in [root, *root.rglob("*")]:
        os.chown(path, account.pw_uid, account.pw_gid)
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def run(args: list[str], root: Path, **kwargs: object) -> None:
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=START_TIMEOUT_S, cwd=root, **kwargs
    )
    if done.returncode != 0:
        log = root / "server.log"
        tail = log.read_text()[-2000:] if log.exists() else ""
        pytest.fail(f"{args[0]} failed ({done.returncode}): {done.stderr[-2000:]}\n{tail}")
