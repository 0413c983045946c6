"""Tests for workbench.core.private: what the workbench creates only its owner can read,
whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.core.private import private_dir, private_file, private_output, workbench_home


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


def test_private_output_replaces_the_target_with_a_0600_file(
    tmp_path: Path, open_umask: None
) -> None:
    """A writer that makes its own file with the umask's mode (0644 here), as Kineto does."""
    target = tmp_path / "traces" / "t.json"
    target.parent.mkdir()
    target.write_text("old")
    target.chmod(0o644)
    with private_output(target) as out:
        assert out.parent != target.parent and mode(out.parent) == 0o700
        out.write_text("new")
        assert mode(out) == 0o644 and target.read_text() == "old"  # not in place yet
    assert (mode(target), target.read_text()) == (0o600, "new")
    assert [p.name for p in target.parent.iterdir()] == ["t.json"]  # no work folder left


def test_private_output_keeps_the_old_file_when_the_writer_fails(tmp_path: Path) -> None:
    target = tmp_path / "s.pickle"
    target.write_text("old")
    with pytest.raises(RuntimeError), private_output(target) as out:
        out.write_text("half")
        raise RuntimeError("writer failed")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["s.pickle"]


def test_workbench_home_follows_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "h"))
    assert workbench_home() == tmp_path / "h"
    monkeypatch.setenv("WORKBENCH_HOME", "")
    assert workbench_home() == Path.home() / ".workbench"
