"""The workshop: the classroom tier, on top of the library and imported by nothing below it.

The library (``core`` up to ``notebook`` and ``cli``) is what a user imports to tune their own
training; this package is what a class needs besides: the lessons' helpers, the predictions
that count, the class board and the room's set-up. A learner's notebook imports both; the
library never imports this (an import-linter contract in ``pyproject.toml`` says so).

- ``checks``: the exercises' checks of lessons 1-9 (``Check``, ``commit_prediction``,
  ``record``); the lessons import it as ``workshop``. ``memory_lesson``, ``compute_lesson`` and
  ``transformer_lesson``: the own helpers and checks of lessons 10, 11 and 12.
- ``lesson_plans``: each lesson's workload and starting knobs; ``predictions``: the book of
  first predictions (kept in the learner's ``WORKBENCH_HOME``; no burst starts without one or an
  explicit skip); ``noise``: this seat's noise, read before a check grades; ``reference``: the
  lessons' cited GPU figures; ``format_charts``: lesson 9's chart; ``transformer_sizing``:
  lesson 12's batch from the device's free memory.
- ``board/``: the instructor's class board, one concept in one package where it was spread over
  three layers: ``figures`` (the room's tables, pure pandas; was ``analysis/board.py``),
  ``charts`` (Altair; was ``notebook/board_charts.py``) and ``widget`` (the ``Board``; was
  ``notebook/board.py``), whose names the package re-exports.
- ``classroom``: the class-store glue, an exercise's answer written with the learner and host
  (was ``history/classroom.py``). It is its own module, not part of ``board/``, because the
  lessons' checks write answers without loading the board's widgets.
- ``room``: the JupyterHub spawner hook's GPU per person; ``slices``: which MIG slices run the
  lessons.

What stayed in the library, and why: the store itself (``history``: ``record_answer``,
``answers``, ``share_board``, the ``learner``/``host`` columns and ``identity``) is the one
store every burst writes to, class or not, so the classroom's columns and methods stay there;
``history/roles.py`` stays because ``workbench class init`` (the CLI) creates the class's
roles with it, and the CLI imports nothing from here. The old paths
(``workbench.notebook.workshop``, ``workbench.notebook.board``, ``workbench.history.classroom``
and the rest) are shims that warn and re-export, for one release.
"""
