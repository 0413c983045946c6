"""The instructor's board, seen as the instructor sees it: a real JupyterLab, headless Chromium.

Opens notebooks/00_instructor_board.ipynb with no class store configured (so it previews the
board over a temporary SQLite store filled with real tiny bursts and two checked answers), runs
all cells, and checks that each view renders: the answers table with the exercises and the
share-correct bars, the best config per learner with its bar, the knob's effect with its point
and sentence; then presses Refresh and checks that the board read the store again. Screenshots
go to artifacts/browser-board/ (gitignored) for a person to look at.

Without Chromium or Playwright the test is skipped, except under CI=true, where it fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import jupyterlab_driver as lab

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = "notebooks/00_instructor_board.ipynb"
ARTIFACTS = REPO / "artifacts" / "browser-board"
KERNEL_ENV = {"WORKBENCH_STORE": ""}  # no class store: the notebook previews the board
BOARD, STATUS = ".wb-board", ".wb-board-status"
EXERCISES = ("demo-best-batch", "demo-speedup")  # the preview's two checked answers

pytestmark = lab.BROWSER_TEST_MARKS


def test_the_board_notebook_renders_every_view_and_refreshes(server, page):
    with lab.recorded_steps(page, ARTIFACTS) as timings:
        with timings.step("open the notebook, kernel idle"):
            lab.open_notebook(page, server, NOTEBOOK)
        with timings.step("Run All until the board's effect chart has its point"):
            lab.run_all_cells(page, ".wb-board-chart-effect svg g.mark-symbol path")
        check_views(page)
        lab.screenshot(page, ARTIFACTS / "board.png", page.locator(BOARD).first)
        with timings.step("Refresh pressed, store read again"):
            page.locator(".wb-board-refresh button, button.wb-board-refresh").first.click()
            lab.wait_for_text(page, STATUS, r"^read 2 at", timeout_s=20)
        assert not lab.notebook_errors(page)


def check_views(page) -> None:
    """Each view shows the preview's real figures, not its empty-state text."""
    store = lab.text_of(page, ".wb-board-store")
    assert "not a class store" in store, f"the board did not say it reads local SQLite: {store}"
    status, _ = lab.wait_for_text(page, STATUS, r"(\d+) answer\(s\) from 1 learner\(s\), "
                                  r"(\d+) burst\(s\)", timeout_s=20)  # fmt: skip
    assert int(status[1]) == 2 and int(status[2]) == 2, status.string

    answers = lab.text_of(page, ".wb-board-answers table")
    assert all(name in answers for name in EXERCISES), answers
    bars = page.locator(".wb-board-chart-correct svg g.mark-rect path").count()
    # each exercise's bar stacks two segments: the server's correct share, then the claims
    # the server could not verify (grey)
    assert bars == 2 * len(EXERCISES), f"expected a two-part bar per exercise, found {bars}"
    learners = lab.chart_points(page, ".wb-board-chart-answers")
    assert learners, "the exercise chart shows no learner's measurement"

    best = lab.text_of(page, ".wb-board-best table")
    assert "cnn" in best and "loader=synthetic" in best, best
    assert page.locator(".wb-board-chart-best svg g.mark-rect path").count() == 1

    effect = lab.text_of(page, ".wb-board-effect")
    assert re.search(r"batch_size=8 over batch_size=4 on 1 machine\(s\): median [\d.]+x", effect)
    ratio = [p for p in lab.chart_points(page, ".wb-board-chart-effect") if "ratio" in p]
    assert len(ratio) == 1 and float(ratio[0]["ratio"]) > 0, ratio
