"""Tests for the test server's own rules (postgres_server.py): skip locally, fail under CI."""

from __future__ import annotations

from pathlib import Path

import postgres_server
import pytest


def test_missing_server_skips_locally_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres_server, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match="initdb"):
        postgres_server.missing("initdb was not found")
    monkeypatch.setattr(postgres_server, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="under CI the class-store tests must run"):
        postgres_server.missing("initdb was not found")


def test_binaries_found_in_debians_versioned_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """CI's Debian package puts initdb under /usr/lib/postgresql/N/bin, not on PATH."""
    found = postgres_server.pg_bin_dir()
    if found is not None:
        assert (found / "initdb").is_file() and (found / "pg_ctl").is_file()
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    for version in ("13", "15"):
        folder = tmp_path / "lib" / version / "bin"
        folder.mkdir(parents=True)
        for name in ("initdb", "pg_ctl"):
            (folder / name).touch()
    monkeypatch.setattr(postgres_server, "_SEARCHED", (str(tmp_path / "nowhere"),))
    monkeypatch.setattr(postgres_server, "_VERSIONED", str(tmp_path / "lib" / "*" / "bin"))
    assert postgres_server.pg_bin_dir() == tmp_path / "lib" / "15" / "bin"  # the newest
