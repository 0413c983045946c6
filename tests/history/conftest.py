"""Fixtures of the history tests: a real PostgreSQL started once per session and stopped at
the end (postgres_server.py says how), a fresh database per test
(tests/conftest.py unsets the class-mode variables for every test)."""

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
    """One PostgreSQL for the session (each test gets its own database from ``pg_db``)."""
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
    pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(data)]
    try:
        run(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", user, "--pwfile",
             str(root / "pwfile"), "--auth=scram-sha-256", "--encoding=UTF8", "--no-sync"],
            root, env=env, **sudo,
        )  # fmt: skip
        port = free_port()
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -F"
        run(
            [*pg_ctl, "-l", str(log), "-o", options, "-w", "-t", str(START_TIMEOUT_S), "start"],
            root, env=env, **sudo,
        )  # fmt: skip
        yield PgServer(user=user, password=password, port=port)
    finally:  # stopped (if it started) and its folder removed, whatever happened
        subprocess.run(
            [*pg_ctl, "-m", "fast", "-w", "stop"],
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
