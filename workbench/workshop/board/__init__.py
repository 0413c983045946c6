"""The instructor's class board: the room's tables (``figures``), their charts (``charts``) and
the widget that reads the store and shows them (``widget``: ``Board``, re-exported here)."""

from workbench.workshop.board.widget import (
    Board,
    BoardView,
    fill_demo_store,
    read_board,
    store_note,
)

__all__ = ["Board", "BoardView", "fill_demo_store", "read_board", "store_note"]
