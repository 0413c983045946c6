"""`workbench lab`: JupyterLab on the quickstart, on 127.0.0.1, with token auth left on."""

import json
import os
import stat
import subprocess
import sys

import pytest
from jupyterlab_driver import free_port, http_status, wait_for_status, workbench_lab

from workbench.core.errors import InputError
from workbench.notebook.lab import TOKEN_ENV, copy_lessons, lab_command, lab_env, notebooks_dir


def test_command_binds_loopback_and_keeps_the_token_off_the_command_line():
    cmd = lab_command(port=8899, open_browser=False)
    options = cmd[3:]  # after python -c LAUNCHER: what `ps` shows every user of the machine
    assert options[0].endswith("01_quickstart.ipynb")
    assert "--ServerApp.ip=127.0.0.1" in options
    assert {"--ServerApp.port=8899", "--ServerApp.port_retries=0"} <= set(options)
    assert not [o for o in options if "token" in o.lower() or "password" in o.lower()]


def _fake_jupyterlab(root):
    """A stand-in ``jupyterlab.labapp`` that reports the argv and environment it was given."""
    pkg = root / "jupyterlab"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "labapp.py").write_text(
        "import json, os, sys\n"
        "def main():\n"
        "    print(json.dumps({'argv': sys.argv[1:], 'env': sorted(os.environ)}))\n"
    )


def test_the_server_gets_the_token_as_an_option_that_outranks_config_files(tmp_path):
    _fake_jupyterlab(tmp_path)
    cmd = lab_command(port=8899, open_browser=False)
    env = {**lab_env("s3cret-TOKEN_1"), "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(out.stdout)
    assert seen["argv"][-1] == "--IdentityProvider.token=s3cret-TOKEN_1"
    assert seen["argv"][:-1] == cmd[3:]
    assert TOKEN_ENV not in seen["env"]  # kernels inherit the server's environment: not this


def test_the_server_refuses_to_start_without_a_token(tmp_path):
    _fake_jupyterlab(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop(TOKEN_ENV, None)
    out = subprocess.run(lab_command(port=8899), env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert out.returncode != 0 and "refusing to start an open server" in out.stderr
    assert "argv" not in out.stdout


def test_open_lab_prints_the_url_with_a_fresh_random_token(monkeypatch, capsys):
    import workbench.notebook.lab as lab

    launched = []
    monkeypatch.setattr(lab.subprocess, "call", lambda cmd, env: launched.append((cmd, env)))
    lab.open_lab(port=8899, open_browser=False)
    lab.open_lab(port=8899, open_browser=False)
    tokens = [env[TOKEN_ENV] for _cmd, env in launched]
    assert len(set(tokens)) == 2 and all(len(t) >= 32 for t in tokens)
    printed = capsys.readouterr().out.splitlines()
    for line, token in zip(printed, tokens, strict=True):
        assert line.endswith(f"http://127.0.0.1:8899/lab/tree/notebooks/01_quickstart.ipynb"
                             f"?token={token}")  # fmt: skip


@pytest.mark.slow
def test_a_real_server_refuses_requests_without_the_token_whatever_the_user_config(tmp_path):
    port = free_port()
    dirs = {"JUPYTER_CONFIG_DIR": "cfg", "JUPYTER_RUNTIME_DIR": "rt", "JUPYTER_DATA_DIR": "d"}
    env = {**os.environ, **{k: str(tmp_path / v) for k, v in dirs.items()}}
    (tmp_path / "cfg").mkdir()  # a user config that would open the server to anyone
    (tmp_path / "cfg" / "jupyter_server_config.py").write_text('c.IdentityProvider.token = ""\n')
    command = [sys.executable, "-m", "workbench", "lab", "--no-browser", "--port", str(port)]
    with workbench_lab(command, tmp_path / "lab.log", env=env) as token:
        base = f"http://127.0.0.1:{port}/api/contents/notebooks"
        assert wait_for_status(f"{base}?token={token}") == 200
        assert http_status(base) == 403


def _lessons(folder, version="1"):
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("01_quickstart.ipynb", "02_data_pipeline.ipynb", "README.md"):
        (folder / name).write_text(f"{name} v{version}\n")
    return folder


def test_lessons_are_copied_into_a_users_folder_and_a_second_start_changes_nothing(tmp_path):
    source, mine = _lessons(tmp_path / "pkg"), tmp_path / "mine"
    said = copy_lessons(source, mine)
    assert said == [f"workbench lab: copied 3 lesson file(s) into {mine}"]
    assert (mine / "01_quickstart.ipynb").read_text() == "01_quickstart.ipynb v1\n"
    assert copy_lessons(source, mine) == []  # nothing to say, nothing rewritten


def test_the_users_edits_are_never_overwritten_and_a_newer_lesson_lands_beside_them(tmp_path):
    source, mine = _lessons(tmp_path / "pkg"), tmp_path / "mine"
    copy_lessons(source, mine)
    (mine / "01_quickstart.ipynb").write_text("my notes\n")
    assert copy_lessons(source, mine) == []  # an edit of this very lesson: kept, silently
    _lessons(source, version="2")  # a newer package
    said = copy_lessons(source, mine)
    assert (mine / "01_quickstart.ipynb").read_text() == "my notes\n"
    assert (mine / "01_quickstart.new.ipynb").read_text() == "01_quickstart.ipynb v2\n"
    assert (mine / "02_data_pipeline.ipynb").read_text() == "02_data_pipeline.ipynb v2\n"
    assert any("kept your" in line and "01_quickstart.new.ipynb" in line for line in said)
    assert copy_lessons(source, mine) == []  # said once, not at every start


def test_a_file_of_the_users_with_a_lessons_name_is_kept(tmp_path):
    source, mine = _lessons(tmp_path / "pkg"), tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("my own readme\n")
    copy_lessons(source, mine)
    assert (mine / "README.md").read_text() == "my own readme\n"
    assert (mine / "01_quickstart.ipynb").is_file()


def test_outside_a_checkout_the_lab_opens_a_copy_under_workbench_home(tmp_path, monkeypatch):
    import workbench.notebook.lab as lab

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(lab, "__file__", str(tmp_path / "site" / "workbench" / "notebook" / "x"))
    with pytest.raises(InputError, match="carries no lessons"):
        notebooks_dir()  # an installation without its package data: said, not a traceback
    _lessons(tmp_path / "site" / "workbench" / "lessons")  # as a wheel installs them
    assert notebooks_dir() == tmp_path / "home" / "notebooks"
    assert (tmp_path / "home" / "notebooks" / "01_quickstart.ipynb").is_file()
    assert notebooks_dir(tmp_path / "elsewhere") == tmp_path / "elsewhere"
    (tmp_path / "notebooks").mkdir()  # a copy made here earlier with --notebooks notebooks
    copy_lessons(tmp_path / "site" / "workbench" / "lessons", tmp_path / "notebooks")
    assert notebooks_dir() == tmp_path / "notebooks"


def test_lab_with_a_file_as_its_notebooks_folder_exits_2_with_one_line(tmp_path, capsys):
    from workbench.cli import main

    (tmp_path / "f").write_text("")
    assert main(["lab", "--no-browser", "--notebooks", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"workbench lab: error: --notebooks={str(tmp_path / 'f')!r} is a file, not a folder"
    ]


def test_the_users_lessons_folder_makes_a_new_workbench_home_private(
    tmp_path, monkeypatch, usual_umask
):
    home = tmp_path / ".workbench"
    monkeypatch.setenv("WORKBENCH_HOME", str(home))
    from workbench.notebook import lab

    assert lab.default_notebooks_dir() == home / "notebooks"
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_a_notebooks_folder_others_can_write_is_refused_naming_it_and_the_override(
    tmp_path, monkeypatch, capsys
):
    from workbench.cli import main

    monkeypatch.chdir(tmp_path)
    shared = _lessons(tmp_path / "notebooks")
    shared.chmod(0o777)  # a folder anyone may plant a notebook in
    with pytest.raises(InputError, match=r"writable by every user \(mode 777\): not opened"):
        notebooks_dir()
    assert main(["lab", "--no-browser"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"workbench lab: error: ./notebooks ({shared}) is writable by every user "
                   f"(mode 777): not opened; pass --notebooks {shared} to copy the lessons "
                   "there and open it anyway, or run from another folder"]  # fmt: skip
    shared.chmod(0o755)
    assert notebooks_dir() == shared  # the user's own: opened in place, as before


def test_a_link_planted_under_a_lessons_name_is_never_followed(tmp_path):
    source, shared = _lessons(tmp_path / "pkg"), tmp_path / "shared"
    shared.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("not yours\n")
    for name in ("01_quickstart.ipynb", "02_data_pipeline.new.ipynb", ".workbench-lessons.json"):
        (shared / name).symlink_to(victim)
    said = copy_lessons(source, shared)
    assert victim.read_text() == "not yours\n"  # nothing written through any link
    assert (shared / "01_quickstart.ipynb").is_symlink()  # left, never followed
    assert (shared / "01_quickstart.new.ipynb").read_text() == "01_quickstart.ipynb v1\n"
    assert (shared / "02_data_pipeline.ipynb").read_text() == "02_data_pipeline.ipynb v1\n"
    assert not (shared / ".workbench-lessons.json").is_symlink()  # replaced, not written through
    assert any("kept your" in line for line in said)
    assert not list(shared.glob(".*.tmp"))
