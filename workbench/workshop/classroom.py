"""Class mode: who is measuring, who may see what, and the exercises' answers.

In a room, every learner's bursts can go to one shared store (``WORKBENCH_STORE=postgresql://...``).
Each row then carries its ``learner`` and ``host``, so the instructor's board can show the room
and the spread of one knob across machines. A learner sees only their own rows, unless
``WORKBENCH_ROLE=instructor`` or the instructor has shared the board (``store.share_board()``,
kept in the store itself so that every learner's kernel sees it without a restart).

Where the instructor set the store up with ``workbench class init`` (``roles.py``), each learner
logs in as themselves and the server enforces all of this (row-level security keyed on the
login): a learner's name is their login, the instructor is the instructor's login, and
``WORKBENCH_LEARNER``/``WORKBENCH_ROLE`` are ignored; the server sets each row's id and time.
Without it (one shared login for the room) the rules above are a courtesy between people in a
room, not access control: everyone who holds that login can read and change every row with
``psql``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.history.base import Store
from workbench.history.identity import host_name, is_instructor, learner_name
from workbench.history.store import open_store

__all__ = [
    "ANSWER_KEYS",
    "host_name",
    "is_instructor",
    "learner_name",
    "record_answer",
]

ANSWER_KEYS = ("exercise", "ok", "message", "prediction", "measured", "kind", "late",
               "changed_to")  # fmt: skip
"""What an exercise's checker (or a prediction's commit) hands to :func:`record_answer`;
``learner`` and ``host`` are added."""


def record_answer(answer: Mapping[str, Any], *, store: Store | str | None = None) -> int:
    """Store one checked exercise answer (the learner and host are filled in); return its id.

    ``answer`` has ``exercise`` (a name such as ``"03-precision"``), ``ok`` (the checker's
    verdict; None for a commit; in a class store the server computes it where the instructor
    kept the exercise's rule, ``history.roles.define_check``, and marks it ``verified``),
    ``message`` (what the learner was told), ``prediction`` (the first prediction committed
    before the burst), ``measured`` (what the burst gave), ``kind``
    (``"check"``, the default, or ``"prediction"``: a prediction committed as its burst
    started), ``late`` (that first prediction came after a burst of the exercise had run) and
    ``changed_to`` (a later, different prediction: an edit; the first still counts).
    ``store`` as in ``open_store``.
    """
    return open_store(store).record_answer(answer)
