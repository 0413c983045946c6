"""Tests for workbench.history.filesystems and the journal the history chooses from it: a
history on a network file system (faked: a mountinfo that says so) keeps the rollback journal."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from workbench.history import filesystems
from workbench.history.filesystems import filesystem_type, is_network_fs
from workbench.history.store import HistoryStore


def mountinfo(tmp_path: Path, mounts: dict[str, str]) -> Path:
    """A mountinfo file (proc(5) format) with ``{mount point: type}``, "/" as ext4 first."""
    lines = ["22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw"]
    for i, (point, fstype) in enumerate(mounts.items(), start=30):
        escaped = point.replace("\\", "\\134").replace(" ", "\\040")
        lines.append(f"{i} 22 0:{i} / {escaped} rw,relatime shared:{i} - {fstype} srv:/x rw")
    path = tmp_path / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return path


def fake_mounts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fstype: str) -> Path:
    """A folder under tmp_path that this process's (faked) mountinfo says is ``fstype``."""
    home = tmp_path / "home dir"
    home.mkdir()
    monkeypatch.setattr(
        filesystems, "MOUNTINFO", mountinfo(tmp_path, {str(home.resolve()): fstype})
    )
    return home


def journal(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


def test_longest_mount_point_wins_and_escapes_are_read(tmp_path: Path) -> None:
    info = mountinfo(tmp_path, {"/home": "nfs4", "/home/a b": "xfs", "/homework": "lustre"})
    assert filesystem_type("/home/ada", info) == "nfs4"
    assert filesystem_type("/home/a b/x", info) == "xfs"
    assert filesystem_type("/homework/x", info) == "lustre"  # not under /home
    assert filesystem_type("/srv", info) == "ext4"


def test_a_later_mount_on_the_same_point_hides_the_earlier(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "30 22 0:30 / /scratch rw - xfs /dev/sdb rw\n"
        "31 30 0:31 / /scratch rw master:4 - nfs srv:/s rw\n"
    )
    assert filesystem_type("/scratch/x", info) == "nfs"


def test_unreadable_mountinfo_is_unknown(tmp_path: Path) -> None:
    assert filesystem_type("/", tmp_path / "absent") is None


def test_this_machines_own_root_has_a_type() -> None:
    if not filesystems.MOUNTINFO.exists():
        pytest.skip("no /proc/self/mountinfo (not Linux)")
    assert filesystem_type("/") not in (None, "")


@pytest.mark.parametrize(
    "fstype",
    ["nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "ceph", "beegfs", "fuse.sshfs",
     "fuse.glusterfs", "9p"],
)  # fmt: skip
def test_network_types(fstype: str) -> None:
    assert is_network_fs(fstype)


@pytest.mark.parametrize("fstype", ["ext4", "xfs", "tmpfs", "btrfs", "overlay", "fuseblk", None])
def test_local_types(fstype: str | None) -> None:
    assert not is_network_fs(fstype)


@pytest.mark.parametrize("fstype", ["nfs4", "lustre", "gpfs", "fuse.sshfs"])
def test_history_on_a_network_fs_keeps_the_rollback_journal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fstype: str
) -> None:
    home = fake_mounts(monkeypatch, tmp_path, fstype)
    store = HistoryStore(home / "history.sqlite")
    store.append({"workload": "cnn", "status": "ok"})
    assert (store.filesystem, store.journal_mode) == (fstype, "delete")
    assert journal(home / "history.sqlite") == "delete"
    assert not (home / "history.sqlite-wal").exists()


@pytest.mark.parametrize("fstype", ["ext4", "xfs", "tmpfs"])
def test_history_on_a_local_fs_uses_wal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fstype: str
) -> None:
    home = fake_mounts(monkeypatch, tmp_path, fstype)
    store = HistoryStore(home / "history.sqlite")
    assert (store.filesystem, store.journal_mode) == (fstype, "wal")
    assert journal(home / "history.sqlite") == "wal"


def test_a_wal_history_moved_to_nfs_goes_back_to_the_rollback_journal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """WAL is persistent in the file: one written on a local disk, then opened from an NFS
    home (copied there, or the mount changed), is switched back."""
    home = fake_mounts(monkeypatch, tmp_path, "ext4")
    first = HistoryStore(home / "history.sqlite")
    first.append({"workload": "cnn", "status": "ok"})
    assert journal(home / "history.sqlite") == "wal"
    fake_mounts_again = mountinfo(tmp_path, {str(home.resolve()): "nfs4"})
    monkeypatch.setattr(filesystems, "MOUNTINFO", fake_mounts_again)
    again = HistoryStore(home / "history.sqlite")
    assert again.journal_mode == "delete" and journal(home / "history.sqlite") == "delete"
    assert len(again.records()) == 1
