"""A real SQLite history whose writes fail while ``down``: a lost network mount, a full disk."""

from __future__ import annotations

from typing import Any

from workbench.history.store import HistoryStore, StoreError


class FlakyStore(HistoryStore):
    """Appends raise the ``StoreError`` a lost mount gives while ``down``, and work otherwise."""

    down = False

    def append(self, record: Any) -> int:
        if self.down:
            raise StoreError(f"history store {self.path} cannot be used (disk I/O error)")
        return super().append(record)
