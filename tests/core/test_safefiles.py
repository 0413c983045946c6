"""workbench.core.safefiles: writes into shared folders that follow no planted symlink."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from workbench.core.safefiles import locked, scratch_file, write_atomic


def test_write_atomic_replaces_the_file_with_the_usual_permissions(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    write_atomic(target, "new")
    assert target.read_text() == "new"
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_write_atomic_leaves_no_temporary_file_when_writing_fails(tmp_path):
    with pytest.raises(TypeError):
        write_atomic(tmp_path / "out.txt", 42)  # type: ignore[arg-type]
    assert not list(tmp_path.iterdir())


def test_a_lock_file_that_is_a_symlink_is_refused_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / ".lock").symlink_to(victim)
    with pytest.raises(OSError), locked(tmp_path / ".lock"):
        pass
    assert victim.read_text() == "mine"


def test_locked_excludes_a_second_holder_until_the_first_lets_go(tmp_path):
    order = []
    inside = threading.Event()

    def second() -> None:
        inside.wait()
        with locked(tmp_path / ".lock"):
            order.append("second")

    thread = threading.Thread(target=second)
    thread.start()
    with locked(tmp_path / ".lock"):
        inside.set()
        thread.join(0.3)  # it waits on the lock meanwhile
        order.append("first")
    thread.join(5)
    assert order == ["first", "second"]


def test_a_scratch_file_is_new_private_and_removed(tmp_path):
    with scratch_file(tmp_path, ".probe-", ".bin") as path:
        assert path.parent == tmp_path and path.name.startswith(".probe-")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not path.exists()
