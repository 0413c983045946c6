"""Child processes of the GPU session that may hang or crash, and files they rewrite as they go.

The session runs each step in a process of its own, and the ``check`` step runs
``gpu_check.py`` the same way: a hang or a segfault inside a library costs only that process.
Both parents need the same three things, here once:

- ``watch``: wait for the child while reading the file it rewrites after every burst or row
  (``on_change`` gets it whenever it changed), and kill its process group at a deadline;
- ``kill_group``: SIGTERM, a grace period, then SIGKILL, to the whole group (a DataLoader's
  workers and a compile's helpers die with their parent);
- ``ended_how``: why a child ended other than by itself. ``subprocess`` reports a signal as a
  *negative* return code (-11 for SIGSEGV); a shell reports it as 128+N. Both are crashes.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

POLL_S = 1.0
KILL_GRACE_S = 5.0
REHEARSE_FAIL_ENV = "WORKBENCH_REHEARSE_FAIL"
FAIL_AFTER = 2
"""A rehearsal's planted failure strikes as a step starts its third burst (the check: as
``gpu_check.py`` starts its second row), so there are rows before it to keep and one to lose."""

OnChange = Callable[[dict[str, Any]], None]


def read_json(path: Path) -> dict[str, Any] | None:
    """The file as last written (writers replace it atomically: never half a file)."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def watch(
    proc: subprocess.Popen,
    path: Path,
    deadline: float,
    on_change: OnChange | None = None,
    *,
    poll_s: float = POLL_S,
) -> tuple[int | None, bool]:
    """Wait for ``proc``, handing ``path`` to ``on_change`` each time it changed; kill the
    process group at ``deadline`` (monotonic seconds). Returns (return code, timed out)."""
    seen: tuple[float, int] | None = None
    while True:
        try:
            rc = proc.wait(timeout=max(min(poll_s, deadline - time.monotonic()), 0.01))
        except subprocess.TimeoutExpired:
            rc = None
        seen = _changed(path, seen, on_change)
        if rc is not None:
            return rc, False
        if time.monotonic() >= deadline:
            kill_group(proc)
            _changed(path, seen, on_change)
            return None, True


def _changed(path: Path, seen: tuple[float, int] | None,
             on_change: OnChange | None) -> tuple[float, int] | None:  # fmt: skip
    try:
        st = path.stat()
    except FileNotFoundError:
        return seen
    now = (st.st_mtime, st.st_size)
    if now != seen and on_change is not None:
        doc = read_json(path)
        if doc is not None:
            on_change(doc)
    return now


def kill_group(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def crashed(rc: int | None) -> bool:
    """A return code that means a signal ended the process."""
    return rc is not None and (rc < 0 or rc > 128)


def ended_how(rc: int | None, timed_out: bool, seconds: float) -> str | None:
    """Why a child ended other than by itself, or None when it exited on its own."""
    if timed_out:
        return f"stopped by its timeout after {seconds:.0f} s"
    if not crashed(rc):
        return None
    sig = -rc if rc < 0 else rc - 128
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    return f"the process died of {name} (exit {rc})"


def rehearse_fault(step: str, done: int, dry: bool, *, after: int = FAIL_AFTER) -> None:
    """On a rehearsal only (``dry``), with ``WORKBENCH_REHEARSE_FAIL=STEP=timeout|segv``: hang
    (until a deadline kills the process) or segfault, once ``after`` bursts or rows of ``step``
    are kept. Never on a GPU run: ``dry`` is false there."""
    wanted, _, how = os.environ.get(REHEARSE_FAIL_ENV, "").partition("=")
    if not dry or wanted != step or done < after:
        return
    print(f"{step}: rehearsal: planted {how} now", flush=True)
    if how == "segv":
        faulthandler.disable()  # a planted crash: no stack to print
        os.kill(os.getpid(), signal.SIGSEGV)
    while how == "timeout":
        time.sleep(60)
