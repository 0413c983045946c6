"""Fixtures of the history tests: a real PostgreSQL started once per session and stopped at
the end (postgres_server.py says how), a fresh database per test, no class-mode variables."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres_server import (
    START_TIMEOUT_S,
    PgServer,
    as_server_user,
    free_port,
    missing,
    pg_bin_dir,
    run,
)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL for the session; each test gets its own database from ``pg_url``."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing("psycopg (the PostgreSQL driver) is not installed")
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        missing("PostgreSQL's initdb and pg_ctl were not found")
    assert bin_dir is not None

    root = Path(tempfile.mkdtemp(prefix="wb-pg-"))  # not under pytest's 0700 basetemp
    data, log = root / "data", root / "server.log"
    user, password = "wb_admin", f"Pw-{secrets.token_hex(8)}@:/"  # odd characters on purpose
    (root / "pwfile").write_text(password + "\n")
    sudo = as_server_user(root)
    env = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}
    run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", user, "--pwfile", str(root / "pwfile"),
         "--auth=scram-sha-256", "--encoding=UTF8", "--no-sync"],
        root, env=env, **sudo,
    )  # fmt: skip
    port = free_port()
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c max_connections=100 -F"
    run(
        [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options,
         "-w", "-t", str(START_TIMEOUT_S), "start"],
        root, env=env, **sudo,
    )  # fmt: skip
    try:
        yield PgServer(user=user, password=password, port=port)
    finally:
        subprocess.run(
            [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
            capture_output=True, timeout=START_TIMEOUT_S, cwd=root, env=env, **sudo,
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_db(pg_server: PgServer) -> Iterator[PgServer]:
    """A fresh database on the session's server for one test (dropped after it)."""
    import psycopg

    name = f"t_{secrets.token_hex(6)}"
    admin = pg_server.url()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield PgServer(pg_server.user, pg_server.password, pg_server.port, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(autouse=True)
def _no_class_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's shell may be in class mode; these tests set what they need."""
    for name in ("WORKBENCH_STORE", "WORKBENCH_ROLE", "WORKBENCH_LEARNER"):
        monkeypatch.delenv(name, raising=False)
