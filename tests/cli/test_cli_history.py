"""`workbench history`: the bursts of a store, a room's by learner. The class store's password:
a password on the command line is warned about (never echoed); WORKBENCH_STORE_FILE keeps it
out of argv and the environment; kept bursts are noted by `workbench history` and stored by
`--retry`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.history.store import HistoryStore, StoreError, StoreWarning, record_result


def test_history_of_an_empty_store(tmp_path, capsys):
    assert main(["history", "--store", str(tmp_path / "h.sqlite"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_history_of_a_room_names_each_learner(tmp_path, capsys, monkeypatch):
    from workbench.history.store import HistoryStore

    store = tmp_path / "h.sqlite"
    for learner in ("ada", "bob"):
        monkeypatch.setenv("WORKBENCH_LEARNER", learner)
        HistoryStore(store).append({"workload": "cnn", "status": "ok", "samples_per_s": 10.0})
    assert main(["history", "--store", str(store)]) == 0  # bob, a learner: his row only
    out = capsys.readouterr().out
    assert "learner" not in out and len(out.splitlines()) == 2

    monkeypatch.setenv("WORKBENCH_ROLE", "instructor")
    assert main(["history", "--store", str(store)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "learner" in lines[0] and " ada " in lines[1] and " bob " in lines[2]
    assert main(["history", "--store", str(store), "--learner", "ada", "--json"]) == 0
    assert [r["learner"] for r in json.loads(capsys.readouterr().out)] == ["ada"]


def test_a_password_in_store_is_warned_about_and_not_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["history", "--store", "postgresql://ada:Pw-Argv-41@127.0.0.1:1/class"])
    err = capsys.readouterr().err
    assert code == 2  # nothing listens on port 1
    assert "visible to every user of this host in the process list" in err
    assert "~/.pgpass" in err and "WORKBENCH_STORE_FILE" in err
    assert "Pw-Argv-41" not in err


def test_a_url_without_a_password_is_not_warned_about(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["history", "--store", "postgresql://ada@127.0.0.1:1/class"])
    assert "process list" not in capsys.readouterr().err


def test_the_store_url_from_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from workbench.history.store import store_url_from_environment

    url_file = tmp_path / "store-url"
    url_file.write_text("\npostgresql://ada:Pw-File-9@127.0.0.1:1/class\n")
    url_file.chmod(0o600)
    monkeypatch.setenv("WORKBENCH_STORE_FILE", str(url_file))
    assert store_url_from_environment() == "postgresql://ada:Pw-File-9@127.0.0.1:1/class"
    assert main(["history"]) == 2  # it is the store now: port 1 refuses
    err = capsys.readouterr().err
    assert "ada:***@127.0.0.1:1/class" in err and "Pw-File-9" not in err

    url_file.chmod(0o644)
    with pytest.raises(StoreError, match=r"mode 0o644: other users can read.*chmod 600"):
        store_url_from_environment()


class Down(HistoryStore):
    down = True

    def append(self, record):  # type: ignore[no-untyped-def]
        if self.down:
            raise StoreError("disk I/O error")
        return super().append(record)


class Result:
    id = None

    def to_dict(self) -> dict[str, object]:
        return {"status": "ok", "workload": "cnn", "samples_per_s": 9.0}


def test_history_notes_kept_bursts_and_retry_stores_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "h.sqlite"
    with pytest.warns(StoreWarning):
        record_result(Result(), True, Down(path))
    assert main(["history", "--store", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == [] and "1 burst(s) measured while this store" in err
    assert main(["history", "--store", str(path), "--retry", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [r["samples_per_s"] for r in json.loads(out)] == [9.0]
    assert "stored 1 kept burst(s)" in err and "measured while" not in err
