"""Tests for workbench.history.identity: who is measuring, where, and the instructor's role."""

from __future__ import annotations

import getpass
import socket

import pytest

from workbench.core.errors import InputError
from workbench.history.identity import host_name, is_instructor, learner_name


def test_learner_name_from_the_variable_else_the_login(monkeypatch: pytest.MonkeyPatch) -> None:
    assert learner_name() == getpass.getuser()
    monkeypatch.setenv("WORKBENCH_LEARNER", "  ada ")
    assert learner_name() == "ada"
    monkeypatch.setenv("WORKBENCH_LEARNER", "")  # empty counts as unset
    assert learner_name() == getpass.getuser()


@pytest.mark.parametrize("bad", ["a\nb", "x" * 65])
def test_learner_name_refuses_unprintable_or_long(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv("WORKBENCH_LEARNER", bad)
    with pytest.raises(InputError, match="WORKBENCH_LEARNER"):
        learner_name()


def test_learner_name_without_a_passwd_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_user() -> str:
        raise KeyError("getpwuid(): uid not found: 4242")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert learner_name().startswith("uid")


def test_host_name() -> None:
    assert host_name() == socket.gethostname()


def test_is_instructor(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not is_instructor()
    monkeypatch.setenv("WORKBENCH_ROLE", "Instructor")
    assert is_instructor()
    monkeypatch.setenv("WORKBENCH_ROLE", "learner")
    assert not is_instructor()
    monkeypatch.setenv("WORKBENCH_ROLE", "teacher")
    with pytest.raises(InputError, match=r"WORKBENCH_ROLE.*learner or instructor"):
        is_instructor()
