"""What every burst store does, whichever database keeps the rows.

The SQLite file (one person's history) and the PostgreSQL server (a room's) differ only in how
they connect, their SQL placeholders and how they create their schema. Everything a caller
sees is here once: appending, reading with filters, the learner's view of a shared store,
exercise answers and the board switch.

Visibility: a learner's ``records()``, ``get()``, ``frame()``, ``answers()`` and ``len()``
cover their own rows (and rows written before class mode, which have no learner), unless this
process is the instructor's (``is_instructor()``: ``WORKBENCH_ROLE=instructor``, or in a class
store the instructor's login) or the board is shared. In a class store set up by ``workbench
class init`` the server applies the same rule to each login (``roles.py``); here it is applied
again, harmlessly, and it is all there is for a store without class logins. The board
switch is a row in the store, not a variable, so every learner's kernel sees it at its next
read. It is append-only like the rest: the newest switch row wins, and the rows say who shared
the board and when.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from workbench.core.results import utc_now
from workbench.history import identity
from workbench.history.identity import host_name
from workbench.history.records import (
    answer_row,
    burst_row,
    decode_answer,
    decode_burst,
    records_frame,
    with_current_knobs,
)

if TYPE_CHECKING:
    import pandas

__all__ = ["Store", "StoreError"]

_ANSWER_COLUMNS = "id, created_at, learner, host, exercise, ok, message, kind, late"


class StoreError(RuntimeError):
    """The history store cannot be used as it is; the message says why and what to do."""


class Store(ABC):
    """Append-only burst history with a learner's view; see the module docstring."""

    _P: ClassVar[str] = "?"
    """The driver's placeholder for one parameter."""
    _JSON_IN: ClassVar[str] = "?"
    """The placeholder for a JSON text parameter (PostgreSQL casts it to ``json``)."""
    _JSON_OUT: ClassVar[str] = "{}"
    """How a JSON column is selected as text."""
    _PREFIX: ClassVar[str] = ""
    """Where the tables live (PostgreSQL: the ``workbench.`` schema)."""

    # -- what each database does its own way --------------------------------------------------

    @abstractmethod
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of one read-only statement, on a connection of its own."""

    @abstractmethod
    def _insert(self, sql: str, params: Sequence[Any]) -> int:
        """Run one ``INSERT`` in a transaction of its own and return the new row's id."""

    @abstractmethod
    def where(self) -> str:
        """Where the rows are, safe to show (a path, or a URL without its password)."""

    # -- who this process is ---------------------------------------------------------------------

    def learner_name(self) -> str:
        """The name this process writes and reads as: ``identity.learner_name()``; a class store
        set up by ``workbench class init`` answers with the database login instead."""
        return identity.learner_name()

    def is_instructor(self) -> bool:
        """Whether this process sees every row: ``identity.is_instructor()``; a class store set
        up by ``workbench class init`` answers from the login's role instead."""
        return identity.is_instructor()

    # -- writing -----------------------------------------------------------------------------

    def append(self, record: Mapping[str, Any]) -> int:
        """Store one burst result (a JSON-serializable dict) and return its new id.

        NaN and infinite floats are stored as null. ``id`` is assigned here, and so are
        ``learner`` and ``host`` (this process's); ``created_at`` is the record's own (a
        result's, set once when it was made), or now for a record without one.
        """
        created, workload, device, status, sps, peak, text = burst_row(record)
        t = self._table("bursts")
        sql = (
            f"INSERT INTO {t} (created_at, learner, host, workload, device, status,"
            f" samples_per_s, peak_mem_mib, record) VALUES ({self._marks(8)}, {self._JSON_IN})"
        )
        params = (
            created,
            self.learner_name(),
            host_name(),
            workload,
            device,
            status,
            sps,
            peak,
            text,
        )
        return self._insert(sql, params)

    def record_answer(self, answer: Mapping[str, Any]) -> int:
        """Store one exercise answer (a check's verdict, or a prediction committed as its burst
        started: ``kind``) with this learner and host; return its id."""
        exercise, ok, message, kind, late, *texts = answer_row(answer)
        t = self._table("answers")
        json_in = ", ".join([self._JSON_IN] * 3)
        sql = (
            f"INSERT INTO {t} (created_at, learner, host, exercise, ok, message, kind, late,"
            f" prediction, measured, changed_to) VALUES ({self._marks(8)}, {json_in})"
        )
        params = (utc_now(), self.learner_name(), host_name(), exercise, ok, message, kind, late)
        return self._insert(sql, (*params, *texts))

    def share_board(self, shared: bool = True) -> None:
        """Let every learner see the whole room's rows (``shared=False`` takes it back).

        The instructor's switch: refused unless ``WORKBENCH_ROLE=instructor``, so that a
        learner's stray call does not show the room everyone's rows.
        """
        if not isinstance(shared, bool):
            raise TypeError(f"share_board(shared=...) takes True or False, got {shared!r}")
        if not self.is_instructor():
            raise StoreError(
                "share_board() is the instructor's switch; set WORKBENCH_ROLE=instructor in the "
                "instructor's environment to use it"
            )
        t = self._table("board")
        sql = f"INSERT INTO {t} (created_at, learner, host, shared) VALUES ({self._marks(4)})"
        self._insert(sql, (utc_now(), self.learner_name(), host_name(), shared))

    # -- reading -----------------------------------------------------------------------------

    def board_shared(self) -> bool:
        """Whether the instructor has shared the board (the newest switch row)."""
        rows = self._query(f"SELECT shared FROM {self._table('board')} ORDER BY id DESC LIMIT 1")
        return bool(rows[0][0]) if rows else False

    def sees_all(self) -> bool:
        """Whether this process sees every learner's rows (instructor, or a shared board)."""
        return self.is_instructor() or self.board_shared()

    def __len__(self) -> int:
        where, params = self._where({})
        return int(
            self._query(f"SELECT COUNT(*) FROM {self._table('bursts')}{where}", params)[0][0]
        )

    def records(
        self,
        *,
        workload: str | None = None,
        status: str | None = None,
        device: str | None = None,
        learner: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Stored bursts this process may see, oldest first, each as appended plus ``id``,
        ``created_at``, ``learner`` and ``host``.

        Filters are exact matches; ``limit`` keeps the newest ``limit`` of the matches.
        """
        if limit is not None and (isinstance(limit, bool) or limit < 0):
            raise ValueError(f"limit must be >= 0 or None, got {limit}")
        filters = {"workload": workload, "status": status, "device": device, "learner": learner}
        where, params = self._where(filters)
        sql = f"SELECT {self._burst_columns()} FROM {self._table('bursts')}{where} ORDER BY id DESC"
        if limit is not None:
            sql, params = f"{sql} LIMIT {self._P}", (*params, limit)
        rows = [decode_burst(*row) for row in reversed(self._query(sql, params))]
        return with_current_knobs(rows, self.where())

    def get(self, burst_id: int) -> dict[str, Any]:
        """One burst by id; ``KeyError`` if there is none (or it is another learner's)."""
        where, params = self._where({"id": burst_id})
        rows = self._query(
            f"SELECT {self._burst_columns()} FROM {self._table('bursts')}{where}", params
        )
        if not rows:
            raise KeyError(f"no burst with id {burst_id} in history store {self.where()}")
        return with_current_knobs([decode_burst(*rows[0])], self.where())[0]

    def frame(self, **filters: Any) -> pandas.DataFrame:
        """One row per burst (filters as in ``records``), ready for plots.

        Columns: ``id, created_at`` (UTC timestamps), ``workload, device, status, learner,
        host``, then one column per knob (``knob_<name>`` where a knob shares a result field's
        name) and one per NCCL variable (``NCCL_ALGO`` ...), then the other result fields
        (``knobs`` kept whole). An empty history has the same columns (but no NCCL ones).
        """
        return records_frame(self.records(**filters))

    def answers(
        self, exercise: str | None = None, *, learner: str | None = None
    ) -> list[dict[str, Any]]:
        """Exercise answers this process may see, oldest first; each has ``id, created_at,
        learner, host, exercise, ok, message, kind, late, prediction, measured, changed_to,
        verified`` (``records.decode_answer``). ``verified`` is True where the class store's
        server computed ``ok`` by the exercise's rule, False where it kept the client's, and
        None where no server judges (the SQLite file, a store without class roles)."""
        where, params = self._where({"exercise": exercise, "learner": learner})
        texts = ", ".join(self._json(c) for c in ("prediction", "measured", "changed_to"))
        columns = f"{_ANSWER_COLUMNS}, {texts}, {self._verified_column()}"
        rows = self._query(
            f"SELECT {columns} FROM {self._table('answers')}{where} ORDER BY id", params
        )
        return [decode_answer(row) for row in rows]

    # -- SQL pieces --------------------------------------------------------------------------

    def _verified_column(self) -> str:
        """What ``answers`` selects as ``verified``: no server judges here (PostgreSQL's class
        store says otherwise)."""
        return "NULL"

    def _table(self, name: str) -> str:
        return f"{self._PREFIX}{name}"

    def _marks(self, n: int) -> str:
        return ", ".join([self._P] * n)

    def _json(self, column: str) -> str:
        return self._JSON_OUT.format(column)

    def _burst_columns(self) -> str:
        return f"id, created_at, learner, host, {self._json('record')}"

    def _where(self, filters: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
        """Exact-match filters, plus the learner's view unless this process sees all."""
        used = {column: value for column, value in filters.items() if value is not None}
        clauses = [f"{column} = {self._P}" for column in used]
        params: tuple[Any, ...] = tuple(used.values())
        if not self.is_instructor():  # the board switch is read in the same statement
            shared = f"SELECT shared FROM {self._table('board')} ORDER BY id DESC LIMIT 1"
            clauses.append(
                f"(learner = {self._P} OR learner IS NULL OR COALESCE(({shared}), FALSE))"
            )
            params = (*params, self.learner_name())
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params
