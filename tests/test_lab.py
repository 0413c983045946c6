"""`workbench lab`: JupyterLab on the quickstart, on 127.0.0.1, with token auth left on."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from workbench.lab import lab_command


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_command_binds_loopback_and_keeps_the_token():
    cmd = " ".join(lab_command(port=8899, open_browser=False))
    assert "01_quickstart.ipynb" in cmd
    assert "--ServerApp.ip=127.0.0.1" in cmd
    assert "token" not in cmd and "password" not in cmd


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.slow
def test_a_real_server_refuses_requests_without_the_token(tmp_path):
    port = _free_port()
    dirs = {"JUPYTER_CONFIG_DIR": "cfg", "JUPYTER_RUNTIME_DIR": "rt", "JUPYTER_DATA_DIR": "d"}
    env = {**os.environ, **{k: str(tmp_path / v) for k, v in dirs.items()}}
    log = tmp_path / "lab.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workbench", "lab", "--no-browser", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        token = None
        for _ in range(120):
            found = re.search(r"token=([0-9a-f]+)", log.read_text())
            if found:
                token = found.group(1)
                break
            time.sleep(0.5)
        assert token, log.read_text()[-2000:]
        base = f"http://127.0.0.1:{port}/api/contents/notebooks"
        for _ in range(40):
            if _get(f"{base}?token={token}") == 200:
                break
            time.sleep(0.5)
        assert _get(f"{base}?token={token}") == 200
        assert _get(base) == 403
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
