"""Class mode: who is measuring, who may see what, and the exercises' answers.

In a room, every learner's bursts can go to one shared store (``WORKBENCH_STORE=postgresql://...``).
Each row then carries its ``learner`` and ``host``, so the instructor's board can show the room
and the spread of one knob across machines. A learner sees only their own rows, unless
``WORKBENCH_ROLE=instructor`` or the instructor has shared the board (``store.share_board()``,
kept in the store itself so that every learner's kernel sees it without a restart).

This is a courtesy between people in a room, not access control: everyone who can connect
with the room's credentials can read every row with ``psql``. docs/class-mode.md says how to
give learners their own database roles where that matters.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from workbench.core.errors import InputError

if TYPE_CHECKING:
    from workbench.history.base import Store

__all__ = [
    "ANSWER_KEYS",
    "host_name",
    "is_instructor",
    "learner_name",
    "record_answer",
]

ANSWER_KEYS = ("exercise", "ok", "message", "prediction", "measured")
"""What an exercise's checker hands to :func:`record_answer`; ``learner`` and ``host`` are added."""

_ROLES = ("learner", "instructor")
_MAX_NAME = 64


def learner_name() -> str:
    """Who is measuring: ``$WORKBENCH_LEARNER``, else the login name (empty counts as unset)."""
    name = os.environ.get("WORKBENCH_LEARNER", "").strip()
    if name:
        return check_name("WORKBENCH_LEARNER", name)
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container uid without a passwd entry
        return f"uid{os.getuid()}"


def host_name() -> str:
    """The machine the burst ran on, as the room's board shows it."""
    return socket.gethostname() or "unknown"


def is_instructor() -> bool:
    """Whether this process sees every learner's rows (``WORKBENCH_ROLE=instructor``)."""
    role = os.environ.get("WORKBENCH_ROLE", "").strip().lower()
    if role and role not in _ROLES:
        raise InputError.not_allowed("WORKBENCH_ROLE", role, " or ".join(_ROLES) + " (or unset)")
    return role == "instructor"


def check_name(knob: str, name: str) -> str:
    """A learner or host name as stored: printable, at most 64 characters."""
    if not name.isprintable() or len(name) > _MAX_NAME:
        raise InputError.not_allowed(knob, name, f"printable text of at most {_MAX_NAME} chars")
    return name


def record_answer(answer: Mapping[str, Any], *, store: Store | str | None = None) -> int:
    """Store one checked exercise answer (the learner and host are filled in); return its id.

    ``answer`` has ``exercise`` (a name such as ``"03.precision"``), ``ok`` (the checker's
    verdict), ``message`` (what the learner was told), ``prediction`` (what they committed to
    before the burst) and ``measured`` (what the burst gave). ``store`` as in ``open_store``.
    """
    from workbench.history.store import open_store  # the store imports this module

    return open_store(store).record_answer(answer)
