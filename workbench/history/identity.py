"""Who is measuring, on which machine, and whether this process is the instructor's.

Read from the environment at each call (never cached), so a notebook that sets
``WORKBENCH_LEARNER`` or ``WORKBENCH_ROLE`` sees the change at its next read. Class mode's
rules are in ``classroom.py``; the stores stamp and filter rows with these.
"""

from __future__ import annotations

import getpass
import os
import socket

from workbench.core.errors import InputError

__all__ = ["check_name", "host_name", "is_instructor", "learner_name"]

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
