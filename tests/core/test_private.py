"""Tests for workbench.core.private: what the workbench creates only its owner can read,
whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.core.private import private_dir, private_file, workbench_home


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The umask many systems give (022), so that a plain create would be world-readable."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_every_missing_folder_is_0700(tmp_path: Path, open_umask: None) -> None:
    deep = private_dir(tmp_path / "a" / "b" / "c")
    for folder in (tmp_path / "a", tmp_path / "a" / "b", deep):
        assert mode(folder) == 0o700, folder


def test_an_existing_folder_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    private_dir(shared)
    assert mode(shared) == 0o755


def test_a_new_file_is_0600_and_an_existing_one_is_untouched(
    tmp_path: Path, open_umask: None
) -> None:
    new = private_file(tmp_path / "home" / "f.txt")
    assert mode(new) == 0o600 and mode(new.parent) == 0o700
    old = tmp_path / "old.txt"
    old.write_text("kept")
    old.chmod(0o644)
    private_file(old)
    assert (mode(old), old.read_text()) == (0o644, "kept")


def test_truncate_empties_and_tightens_a_file_about_to_be_replaced(tmp_path: Path) -> None:
    old = tmp_path / "trace.json"
    old.write_text("stale")
    old.chmod(0o644)
    private_file(old, truncate=True)
    assert (mode(old), old.read_text()) == (0o600, "")


def test_workbench_home_follows_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "h"))
    assert workbench_home() == tmp_path / "h"
    monkeypatch.setenv("WORKBENCH_HOME", "")
    assert workbench_home() == Path.home() / ".workbench"
