"""Drive a real JupyterLab in headless Chromium, the way a person uses a notebook.

Reusable by any notebook test: start a private JupyterLab server, open a notebook, run all
cells, move ipywidgets sliders, wait for a widget's text, read the point marks of an
``alt.JupyterChart`` and keep screenshots.

Every wait is bounded, and the machine may be a busy 2-core box, so the timeouts are generous
but finite: a test fails with what it saw rather than hanging. Run All sometimes does not take
on a fresh server or page (see /work/shared/FIELD-NOTES.md), so ``run_all_cells`` retries, and
restarts the kernel between tries. The server is stopped, and its kernels and their workers
killed, even when the test fails; ``lab_server`` then checks that no process is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# What a closed network needs: no sandbox (root), no GPU, no background calls home.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
]

# The marks of every browser test: chosen or left out with ``-m browser``, slow, run two at a
# time by ``make test`` (they wait more than they compute), and bounded.
BROWSER_TEST_MARKS = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.concurrent,
    pytest.mark.timeout(300),
]

IDLE = ".jp-NotebookPanel-toolbar .jp-Notebook-ExecutionIndicator[data-status='idle']"

# JupyterLab user settings for the private server. autosave off: the server's root may be the
# repository, and an autosave would write outputs into a tracked notebook. Windowing off: every
# cell stays in the DOM, so widgets below the fold can be found. No news/update pop-ups.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


# --- timings -------------------------------------------------------------------------------


@dataclass
class Timings:
    """Seconds per step, printed as they happen and kept for a report (2-core budget checks)."""

    steps: list[tuple[str, float]] = field(default_factory=list)
    _t0: float = field(default_factory=time.perf_counter)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.steps.append((name, time.perf_counter() - t0))
            print(f"[browser] {name}: {self.steps[-1][1]:.1f} s", flush=True)

    def report(self) -> str:
        lines = [f"{s:7.1f} s  {name}" for name, s in self.steps]
        lines.append(f"{time.perf_counter() - self._t0:7.1f} s  total since start")
        return "\n".join(lines)


# --- tools present? --------------------------------------------------------------------------


def http_status(url: str) -> int:
    """The HTTP status of a GET (0 while nothing listens yet: a lab prints its URL first)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except urllib.error.URLError:
        return 0


def wait_for_status(url: str, want: int = 200, timeout_s: float = 60.0) -> int:
    """``url``'s HTTP status once it is ``want``, or the last one seen when time runs out."""
    status = _poll(lambda: http_status(url) == want, timeout_s, every_s=0.5)
    return want if status else http_status(url)


@contextlib.contextmanager
def workbench_lab(command: list, log: Path, **popen) -> Iterator[str]:
    """``workbench lab`` run by ``command`` in a session of its own, its output in ``log``:
    yields the access token it printed (fails with the log's tail when none came in 60 s);
    its process group is sent SIGTERM after the block."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **popen
        )
    try:
        found = _poll(lambda: re.search(r"token=([A-Za-z0-9_-]+)", log.read_text()), 60.0, 0.5)
        assert found, log.read_text()[-2000:]
        yield found.group(1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def chromium_path() -> str | None:
    """The system Chromium (apt's ``chromium``); Playwright's own downloads are not used."""
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def require_browser() -> str:
    """Chromium's path; skip when it or Playwright is missing, but fail under CI=true.

    CI must not go green by skipping the only test that looks at the UI the way a person does.
    """
    problems = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problems.append("Playwright is not installed (pip install -e '.[dev]')")
    exe = chromium_path()
    if exe is None:
        problems.append("Chromium is not installed (apt-get install -y chromium)")
    if problems:
        reason = "; ".join(problems)
        if IN_CI:
            pytest.fail(f"browser test cannot run under CI=true: {reason}", pytrace=False)
        pytest.skip(reason)
    return exe


# --- the JupyterLab server -----------------------------------------------------------------


@dataclass
class LabServer:
    """A running private JupyterLab; ``stop()`` ends it and everything it started."""

    proc: subprocess.Popen
    url: str
    base_dir: Path
    log_path: Path

    @property
    def runtime_dir(self) -> Path:
        return self.base_dir / "runtime"

    def log_tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    def processes(self) -> list[psutil.Process]:
        """The server, its descendants, and anything whose command line names this runtime dir.

        Kernels run in their own session (jupyter_client starts them with setsid), and a
        kernel's DataLoader workers are forks that keep its command line, which names the
        connection file in our runtime dir: the second rule finds them even when orphaned.
        """
        found: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.proc.pid)
            for p in [root, *root.children(recursive=True)]:
                found[p.pid] = p
        marker = str(self.runtime_dir)
        for p in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if any(marker in arg for arg in p.info["cmdline"] or []):
                    found[p.pid] = p
        return [p for p in found.values() if _alive(p)]

    def stop(self, grace_s: float = 15.0) -> list[psutil.Process]:
        """SIGTERM (the server shuts its kernels down), then SIGKILL what is left; return leftovers.

        The grace period is bounded: a kernel busy in a burst may not answer its shutdown
        request on a loaded machine, and a test must not wait for it.
        """
        procs = self.processes()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        for p in alive:
            _kill(p)
        psutil.wait_procs(alive, timeout=5)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        return [p for p in [*procs, *self.processes()] if _alive(p)]


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _kill(p: psutil.Process) -> None:
    """SIGKILL one process, and its group when it leads one (a kernel and its forked workers)."""
    with contextlib.suppress(psutil.Error, OSError):
        if p.is_running() and os.getpgid(p.pid) == p.pid:
            os.killpg(p.pid, signal.SIGKILL)
    with contextlib.suppress(psutil.Error):
        p.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_lab_config(base: Path) -> dict[str, str]:
    """Private Jupyter dirs, test settings, and a ``python3`` kernelspec for this interpreter.

    The kernelspec in the private data dir comes first on Jupyter's path, so the notebook's
    ``python3`` kernel is the test process's own venv, whatever else is installed.
    """
    dirs = {
        "JUPYTER_CONFIG_DIR": base / "config",
        "JUPYTER_RUNTIME_DIR": base / "runtime",
        "JUPYTER_DATA_DIR": base / "data",
        "IPYTHONDIR": base / "ipython",
        "JUPYTERLAB_SETTINGS_DIR": base / "config" / "lab" / "user-settings",
        "JUPYTERLAB_WORKSPACES_DIR": base / "config" / "lab" / "workspaces",
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    for plugin, settings in LAB_SETTINGS.items():
        path = dirs["JUPYTERLAB_SETTINGS_DIR"] / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    spec = dirs["JUPYTER_DATA_DIR"] / "kernels" / "python3" / "kernel.json"
    spec.parent.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec.write_text(json.dumps({"argv": argv, "display_name": "Python 3", "language": "python"}))
    return {k: str(v) for k, v in dirs.items()}


def lab_command(root_dir: Path, port: int, base_dir: Path) -> list[str]:
    """JupyterLab on 127.0.0.1 without a token: acceptable only for this private test server.

    Checkpoints go to the private dir too: the root may be the repository, and opening a
    notebook would otherwise leave a ``.ipynb_checkpoints`` folder beside it.
    """
    return [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        "--IdentityProvider.token=", "--ServerApp.password=",
        f"--ServerApp.root_dir={root_dir}",
        f"--FileCheckpoints.checkpoint_dir={base_dir / 'checkpoints'}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.expose_app_in_browser=True",
    ]  # fmt: skip


def start_lab(
    root_dir: Path, base_dir: Path, env: dict[str, str] | None = None, timeout: float = 90.0
) -> LabServer:
    """Start the server and wait until ``/api/status`` answers (about 5 s idle, more when busy).

    A free port can be taken between the check and the bind (``port_retries=0`` makes that a
    clean exit rather than another port), so a start that exits early is tried again.
    """
    full_env = {**os.environ, **_write_lab_config(base_dir), **(env or {})}
    full_env["JUPYTER_PLATFORM_DIRS"] = "1"
    full_env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    for attempt in range(3):
        port = free_port()
        log_path = base_dir / f"jupyter-server-{attempt}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                lab_command(root_dir, port, base_dir), cwd=root_dir, env=full_env, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        server = LabServer(proc, f"http://127.0.0.1:{port}", base_dir, log_path)
        if _wait_until_up(server, timeout):
            return server
        exited = proc.poll() is not None  # exited early: maybe the port was taken; try again
        server.stop(grace_s=5)
        if not exited:
            break
    raise AssertionError(f"JupyterLab did not start in {timeout:.0f} s:\n{server.log_tail()}")


def _wait_until_up(server: LabServer, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            return False
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{server.url}/api/status", timeout=5) as r,
        ):
            if r.status == 200:
                return True
        time.sleep(0.5)
    return False


@contextlib.contextmanager
def lab_server(
    root_dir: Path, base_dir: Path, env: dict[str, str] | None = None,
    log_copy: Path | None = None,
) -> Iterator[LabServer]:  # fmt: skip
    """A server for the ``with`` block, stopped after it; fails if any process outlives it."""
    server = start_lab(root_dir, base_dir, env)
    try:
        yield server
    finally:
        leftovers = server.stop()
        if log_copy is not None:
            log_copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(server.log_path, log_copy)
        if leftovers:
            desc = [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in leftovers if _alive(p)]
            if desc:
                raise AssertionError(
                    "processes outlived the JupyterLab server:\n" + "\n".join(desc)
                )


@contextlib.contextmanager
def notebook_server(
    repo: Path, notebook: str, base_dir: Path, artifacts: Path, data: Path, env: dict[str, str]
) -> Iterator[LabServer]:
    """A server rooted at the repository for a browser test of one of its notebooks.

    Its kernels read the dataset at ``data`` and a private home under ``base_dir``, plus
    ``env``. ``artifacts`` is emptied first (no stale pictures from an earlier run) and keeps
    the server's log. The notebook must come out of the test as it went in: autosave is off
    in the driver, and this checks it (and restores the file) because the root is the real
    repository.
    """
    shutil.rmtree(artifacts, ignore_errors=True)
    env = {"WORKBENCH_DATA": str(data), "WORKBENCH_HOME": str(base_dir / "wbhome"), **env}
    path = repo / notebook
    original = path.read_bytes()
    with lab_server(repo, base_dir, env, log_copy=artifacts / "jupyter-server.log") as server:
        yield server
    if path.read_bytes() != original:
        path.write_bytes(original)
        pytest.fail(f"{notebook} was modified through the browser (restored)")


# --- the browser -----------------------------------------------------------------------------


@contextlib.contextmanager
def chromium_page(executable: str, artifacts: Path, timeout_ms: int = 30_000) -> Iterator:
    """A headless Chromium page; its console log is kept in ``artifacts/browser-console.log``.

    Chromium's processes are children of Playwright's driver and end with it; the check after
    the ``with`` block makes sure of that.
    """
    from playwright.sync_api import sync_playwright

    artifacts.mkdir(parents=True, exist_ok=True)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    console: list[str] = []
    started = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)
        started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(timeout_ms)
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            yield page
        finally:
            (artifacts / "browser-console.log").write_text("\n".join(console) + "\n")
            browser.close()
    _, alive = psutil.wait_procs(started, timeout=10)
    alive = [p for p in alive if _alive(p)]
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    assert not alive, f"browser processes outlived Playwright: {[p.pid for p in alive]}"


def screenshot(page, path: Path, locator=None) -> Path:
    """Save what the page shows (or one element); failures to screenshot never fail a test."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        (locator or page).screenshot(path=str(path))
    except Exception as exc:  # a screenshot is evidence, not a check
        print(f"[browser] screenshot {path.name} failed: {exc}", flush=True)
    return path


@contextlib.contextmanager
def screenshot_on_failure(page, path: Path) -> Iterator[None]:
    """Keep a picture of the page when the block raises: the quickest way to see why."""
    try:
        yield
    except BaseException:
        screenshot(page, path)
        raise


@contextlib.contextmanager
def recorded_steps(page, artifacts: Path) -> Iterator[Timings]:
    """A test's timed steps: a screenshot if they fail, their timings printed and kept in
    ``artifacts/timings.txt`` either way (the 2-core budget checks read them)."""
    timings = Timings()
    try:
        with screenshot_on_failure(page, artifacts / "failure.png"):
            yield timings
    finally:
        artifacts.mkdir(parents=True, exist_ok=True)
        (artifacts / "timings.txt").write_text(timings.report() + "\n")
        print(timings.report())


# --- notebooks -------------------------------------------------------------------------------


def open_notebook(page, server: LabServer, path: str, timeout_s: float = 90.0) -> None:
    """Open ``/lab/tree/<path>`` and wait until its kernel is connected and idle (5-20 s).

    The toolbar's execution indicator says "idle" before the session has a kernel at all; a
    Run All fired then is lost, and later pops up a "Select Kernel" dialog that blocks the mouse
    (seen here: the "first Run All did not take" of FIELD-NOTES). So wait for the kernel itself.
    """
    page.goto(f"{server.url}/lab/tree/{path}", timeout=timeout_s * 1000)
    page.wait_for_selector(IDLE, timeout=timeout_s * 1000)
    wait_for_kernel(page, timeout_s)


def wait_for_kernel(page, timeout_s: float = 60.0) -> None:
    """Wait until the open notebook's session is ready and its kernel connected and idle."""
    page.wait_for_function(
        f"""() => {{
        const sc = window.jupyterapp && {_js_panel()}?.sessionContext;
        const k = sc?.session?.kernel;
        return !!(sc?.isReady && k && k.connectionStatus === 'connected' && k.status === 'idle');
    }}""",
        timeout=timeout_s * 1000,
    )


def open_dialogs(page) -> list[str]:
    """The text of any modal JupyterLab dialog: one blocks every click, so name it in failures."""
    return [t.strip() for t in page.locator(".jp-Dialog").all_text_contents()]


def accept_dialogs(page) -> list[str]:
    """Press the default button of open dialogs (e.g. "Select Kernel" -> the notebook's own
    kernel, "Restart Kernel?" -> Restart); return their texts so the test can report them."""
    texts = open_dialogs(page)
    for _ in texts:
        with contextlib.suppress(Exception):  # it may close by itself meanwhile
            page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept").first.click(timeout=5000)
    if texts:
        print(f"[browser] accepted dialogs: {texts}", flush=True)
    return texts


def _js_panel() -> str:
    return "window.jupyterapp.shell.currentWidget"


def notebook_errors(page) -> list[str]:
    """Error outputs of the open notebook, read from its model (not from rendered HTML)."""
    return page.evaluate(
        f"""() => {{
        const nb = {_js_panel()}.content, out = [];
        for (const cell of nb.widgets) {{
            if (cell.model.type !== 'code') continue;
            for (const o of cell.model.outputs.toJSON())
                if (o.output_type === 'error') out.push(o.ename + ': ' + o.evalue);
        }}
        return out;
    }}"""
    )


def kernel_output(page, code: str, timeout_s: float = 30.0) -> str:
    """Run ``code`` in the open notebook's kernel, outside any cell (as a cell would, but
    nothing is added to the notebook), and return what it printed to stdout."""
    return page.evaluate(
        f"""async ([code, ms]) => {{
        const kernel = {_js_panel()}.sessionContext.session.kernel;
        const future = kernel.requestExecute({{ code, store_history: false }});
        let out = '';
        future.onIOPub = (msg) => {{
            const c = msg.content, kind = msg.header.msg_type;
            if (kind === 'stream') out += c.text;
            if (kind === 'error') out += c.ename + ': ' + c.evalue;
        }};
        await Promise.race([future.done, new Promise((r) => setTimeout(r, ms))]);
        return out;
    }}""",
        [code, timeout_s * 1000],
    )


def _execution_started(page) -> bool:
    """Has any code cell a prompt of ``[*]`` or ``[n]``: did Run All reach the kernel?"""
    return page.evaluate(
        """() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
            .some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))"""
    )


def restart_kernel(page, timeout_s: float = 60.0) -> None:
    """Restart the kernel without the confirmation dialog, then wait until it is idle."""
    page.evaluate(
        f"""(ms) => Promise.race([
            {_js_panel()}.sessionContext.restartKernel(),
            new Promise(r => setTimeout(r, ms))])""",
        timeout_s * 1000,
    )
    settle(page, timeout_s)


def settle(page, timeout_s: float = 60.0) -> None:
    """Accept pending dialogs until none is left, then wait for a connected, idle kernel.

    Accepting "Select Kernel" starts a kernel a moment later; a Run All fired before that
    ran its first cells in one kernel and the rest in another (NameError), so pause after
    each accept before trusting "idle".
    """
    deadline = time.monotonic() + timeout_s
    while open_dialogs(page) and time.monotonic() < deadline:
        accept_dialogs(page)
        time.sleep(2.0)
    wait_for_kernel(page, max(1.0, deadline - time.monotonic()))
    assert not open_dialogs(page), f"dialogs keep opening: {open_dialogs(page)}"


def run_all_cells(
    page,
    ready: str,
    *,
    attempts: int = 3,
    start_timeout_s: float = 20.0,
    ready_timeout_s: float = 180.0,
) -> int:
    """Run All, then wait for ``ready`` (a CSS selector); return how many tries it took.

    The command is fired, not awaited: once its promise never settled. A try that shows no
    execution within ``start_timeout_s`` did not take: restart the kernel and fire again.
    An error output fails at once, with the error, instead of waiting for ``ready``.
    """
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            print(f"[browser] Run All did not take; kernel restart, try {attempt}", flush=True)
            settle(page)
            restart_kernel(page)
        settle(page)
        page.evaluate(
            """() => { const c = window.jupyterapp.commands;
                c.execute('notebook:clear-all-cell-outputs');
                c.execute('notebook:run-all-cells'); }"""
        )
        if not _poll(lambda: _execution_started(page), start_timeout_s):
            continue
        _wait_ready(page, ready, ready_timeout_s)
        return attempt
    raise AssertionError(f"Run All never started executing cells in {attempts} tries")


def _wait_ready(page, ready: str, timeout_s: float, grace_s: float = 15.0) -> None:
    """Wait for ``ready``; fail at once on an error output, and ``grace_s`` after every cell
    has run (widgets render a moment after their cell ends) rather than at the full timeout.
    """
    deadline = time.monotonic() + timeout_s
    finished_at = None
    while page.locator(ready).count() == 0:
        errors = notebook_errors(page)
        assert not errors, f"notebook cells raised: {errors}"
        now = time.monotonic()
        if finished_at is None and _all_cells_ran(page):
            finished_at = now
        if finished_at is not None and now - finished_at > grace_s:
            raise AssertionError(f"every cell ran but {ready} is not on the page")
        if now > deadline:
            raise AssertionError(f"{ready} did not appear within {timeout_s:.0f} s of Run All")
        time.sleep(0.25)


def _all_cells_ran(page) -> bool:
    """Every code cell has an execution number (``[n]:``), so Run All is over."""
    return page.evaluate(
        r"""() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
            .every(p => /\[\d+\]/.test(p.textContent))"""
    )


def _poll(check: Callable[[], object], timeout_s: float, every_s: float = 0.25) -> object:
    """Call ``check`` until it returns something truthy or the time is up (then falsy)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(every_s)


# --- widgets ---------------------------------------------------------------------------------


def text_of(page, selector: str) -> str:
    """An element's textContent (works for widgets scrolled out of view, unlike innerText)."""
    loc = page.locator(selector).first
    return (loc.text_content(timeout=5000) or "").strip() if loc.count() else ""


def wait_for_text(
    page,
    selector: str,
    pattern: str,
    *,
    timeout_s: float,
    accept: Callable[[re.Match], bool] = lambda m: True,
    fail: str | None = None,
) -> tuple[re.Match, list[str]]:
    """Wait until the text matches ``pattern`` (and ``accept``); fail early on ``fail``.

    Returns the match and every distinct text seen on the way (e.g. warm-up, measuring, done),
    which goes into the failure message: a status that stopped at "measuring" says a lot.
    """
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = text_of(page, selector)
        if not seen or seen[-1] != text:
            seen.append(text)
        m = re.search(pattern, text)
        if m and accept(m):
            return m, seen
        if fail and re.search(fail, text):
            raise AssertionError(f"{selector} says {text!r}; texts seen: {seen}")
        time.sleep(0.2)
    raise AssertionError(f"{selector} never matched {pattern!r} in {timeout_s:.0f} s: {seen}")


# Marks the tab (ipywidgets Tab) or header (Accordion) that hides the element; a person
# clicks it, and so does ``reveal``.
_MARK_HIDER = """(el) => {
    for (let n = el; n && n.parentElement; n = n.parentElement) {
        const up = n.parentElement;
        if (up.classList.contains('widget-tab-contents') && n.classList.contains('lm-mod-hidden')) {
            const i = [...up.children].indexOf(n);
            const tabs = up.parentElement
                .querySelectorAll(':scope > .widget-tab-bar .lm-TabBar-tab');
            if (tabs[i]) { tabs[i].setAttribute('data-reveal', '1'); return tabs[i].textContent; }
        }
        if (n.classList.contains('jupyter-widget-Collapse-contents')
                && n.classList.contains('lm-mod-hidden')) {
            const head = up.querySelector(':scope > .jupyter-widget-Collapse-header');
            if (head) { head.setAttribute('data-reveal', '1'); return head.textContent; }
        }
    }
    return null;
}"""


def reveal(page, selector: str, depth: int = 3) -> list[str]:
    """Click the tabs/accordion headers that hide ``selector`` (outermost last); return their
    labels. A knob on a tab that is not selected has no size, and cannot be dragged."""
    clicked: list[str] = []
    target = page.locator(selector).first
    for _ in range(depth):
        label = target.evaluate(_MARK_HIDER)
        if label is None:
            break
        page.locator("[data-reveal='1']").first.click()
        page.evaluate("() => document.querySelectorAll('[data-reveal]')"
                      ".forEach(e => e.removeAttribute('data-reveal'))")  # fmt: skip
        clicked.append(label.strip())
        print(f"[browser] clicked {label.strip()!r} to show {selector}", flush=True)
    target.scroll_into_view_if_needed()
    return clicked


@dataclass
class SliderState:
    """An ipywidgets slider as noUiSlider shows it: index/value range and the readout text."""

    now: float
    min: float
    max: float
    readout: str


def slider_state(page, selector: str) -> SliderState:
    handle = page.locator(f"{selector} .noUi-handle").first
    return SliderState(
        now=float(handle.get_attribute("aria-valuenow")),
        min=float(handle.get_attribute("aria-valuemin")),
        max=float(handle.get_attribute("aria-valuemax")),
        readout=text_of(page, f"{selector} .widget-readout"),
    )


def drag_slider(page, selector: str, target: float) -> SliderState:
    """Drag the handle with the mouse to ``target`` (noUiSlider's value: an index for a
    SelectionSlider) and release: with ``continuous_update=False`` the release sends the value.
    """
    handle = page.locator(f"{selector} .noUi-handle").first
    reveal(page, selector)
    state = slider_state(page, selector)
    base = page.locator(f"{selector} .noUi-base").first.bounding_box()
    box = handle.bounding_box()
    frac = (target - state.min) / (state.max - state.min)
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(base["x"] + base["width"] * frac, box["y"] + box["height"] / 2, steps=12)
    page.mouse.up()
    return _wait_slider_at(page, selector, target)


def press_slider(page, selector: str, key: str = "ArrowRight", times: int = 1) -> SliderState:
    """Focus the handle and press a key, as a keyboard user would (one step per press)."""
    handle = page.locator(f"{selector} .noUi-handle").first
    reveal(page, selector)
    start = slider_state(page, selector).now
    handle.focus()
    for _ in range(times):
        handle.press(key)
    step = times if key in ("ArrowRight", "ArrowUp") else -times
    return _wait_slider_at(page, selector, start + step)


def _wait_slider_at(page, selector: str, target: float, timeout_s: float = 5.0) -> SliderState:
    ok = _poll(lambda: slider_state(page, selector).now == target, timeout_s, every_s=0.1)
    state = slider_state(page, selector)
    dialogs = open_dialogs(page)
    blocked = f" (a dialog is open: {dialogs})" if dialogs else ""
    assert ok, f"{selector} handle is at {state.now}, not {target}, after the move{blocked}"
    return state


# --- charts ----------------------------------------------------------------------------------


def chart_points(page, selector: str) -> list[dict[str, str]]:
    """The data points of a Vega SVG chart, each as its aria-label's ``field: value`` pairs.

    Vega's SVG renderer draws point/circle/square marks as ``g.mark-symbol.role-mark > path``
    and Vega-Lite gives each one ``aria-label="field: value; field: value"`` (legend symbols
    have another role and are not counted). The canvas renderer has no such elements.
    """
    labels = page.evaluate(
        """(sel) => [...document.querySelectorAll(
                sel + ' svg g.mark-symbol.role-mark path')]
            .map(p => p.getAttribute('aria-label') || '')""",
        selector,
    )
    return [parse_aria_label(label) for label in labels]


def parse_aria_label(label: str) -> dict[str, str]:
    """``"batch_size: 16; samples/s: 152.3"`` -> ``{"batch_size": "16", "samples/s": "152.3"}``."""
    pairs = (part.split(": ", 1) for part in label.split("; ") if ": " in part)
    return {k.strip(): v.strip() for k, v in pairs}


def wait_for_points(
    page, selector: str, ok: Callable[[list[dict]], bool], want: str, timeout_s: float = 20.0
) -> list[dict[str, str]]:
    """Poll a chart's points until ``ok(points)``: the chart is re-embedded after each update,
    a moment after the widget's text changed, so a single read would race it."""
    deadline = time.monotonic() + timeout_s
    while True:
        points = chart_points(page, selector)
        if ok(points):
            return points
        if time.monotonic() > deadline:
            svg = page.locator(f"{selector} svg").count()
            raise AssertionError(
                f"{selector} never showed {want} in {timeout_s:.0f} s ({svg} <svg>: Vega's SVG "
                f"renderer is what puts marks in the DOM); points: {points}"
            )
        time.sleep(0.25)
