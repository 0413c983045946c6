"""``workbench lab``: JupyterLab on the quickstart notebook, bound to 127.0.0.1.

In a checkout it opens ``notebooks/`` in place. An installed wheel carries the lessons as
package data; outside a checkout they are copied into a folder of the user's
(``$WORKBENCH_HOME/notebooks``, or ``--notebooks DIR``) and opened there, never overwriting a
lesson the user has edited. A ``./notebooks`` found where the command runs is opened only when
it is the user's and nobody else may write in it (else a refusal that names ``--notebooks``),
and a lesson is written as a new file (``O_EXCL | O_NOFOLLOW``) renamed into place: a
symbolic link planted in a shared folder under a lesson's name is never followed.

The server runs code as you, so it never runs without a token. Jupyter's own default (a token
it makes up) can be turned off by a user's config (``c.IdentityProvider.token = ""``), so we
make the token ourselves and pass it as a command-line option, which outranks every config
file. It travels to the server process in its environment, which only you can read, and is
moved into the server's argv inside that process: the visible command line (``ps``, which
every user of a shared GPU box can read) never holds it. Jupyter prints an explicit token as
``...``, so we print the URL with the token ourselves.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from workbench.core.errors import InputError
from workbench.core.private import others_can_change, private_dir, workbench_home

QUICKSTART = "01_quickstart.ipynb"
MANIFEST = ".workbench-lessons.json"
"""In a copied lessons folder: the hash of each file as copied (tells an edit from ours)."""
TOKEN_ENV = "WORKBENCH_LAB_TOKEN"
HOST = "127.0.0.1"
_FIRST_PORT = 8888  # Jupyter's usual port, then the next free ones

# Run as ``python -c``: takes the token out of the environment (kernels inherit the server's
# environment and have no use for it) and hands it to JupyterLab as an option.
_LAUNCH = f"""import os, sys
token = os.environ.pop({TOKEN_ENV!r}, "")
if not token:
    sys.exit("workbench lab: no token in ${TOKEN_ENV}; refusing to start an open server")
sys.argv.append("--IdentityProvider.token=" + token)
from jupyterlab.labapp import main
sys.exit(main())
"""


def lessons_source() -> Path:
    """Where this installation's lessons are: the wheel's package data, else the checkout's.

    A wheel carries them as ``workbench/lessons`` (setup.py maps ``notebooks/`` there); an
    editable install or a checkout on ``PYTHONPATH`` has ``notebooks/`` beside the package.
    """
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "lessons", package.parent / "notebooks"):
        if (candidate / QUICKSTART).is_file():
            return candidate
    raise InputError(
        f"this installation of workbench carries no lessons (looked for {QUICKSTART} in "
        f"{package / 'lessons'} and {package.parent / 'notebooks'}): reinstall the package"
    )


def default_notebooks_dir() -> Path:
    """The user's own copy of the lessons outside a checkout: ``$WORKBENCH_HOME/notebooks``
    (the home made 0700 if it is new, as the history makes it)."""
    return private_dir(workbench_home()) / "notebooks"


def notebooks_dir(target: Path | str | None = None) -> Path:
    """The folder the lab opens; copies the lessons there first when it is the user's own.

    In a checkout (``./notebooks`` here, or beside the package) that folder itself, as
    before. Otherwise, or when ``target`` is given, the lessons are copied into ``target``
    (default ``$WORKBENCH_HOME/notebooks``) without touching a file the user has edited.
    """
    if target is None:
        target = default_notebooks_dir()
        here = Path.cwd() / "notebooks", Path(__file__).resolve().parents[2] / "notebooks"
        for folder in here:
            if (folder / QUICKSTART).is_file():
                if folder == here[0]:  # found where the command runs, not where it is installed
                    _refuse_if_others_can_change(folder)
                if not (folder / MANIFEST).exists():
                    return folder  # a checkout: its lessons are the source, opened in place
                target = folder  # a copy made earlier with --notebooks: refreshed, then opened
                break
    target = Path(target).expanduser().resolve()
    for line in copy_lessons(lessons_source(), target):
        print(line, file=sys.stderr)
    return target


def _refuse_if_others_can_change(folder: Path) -> None:
    """A ``notebooks/`` found where the command runs is opened only when nobody but this
    user can change it: a notebook is code the user runs."""
    why = others_can_change(folder)
    if why is not None:
        raise InputError(
            f"./notebooks ({folder}) is {why}: not opened; pass --notebooks {folder} to copy "
            "the lessons there and open it anyway, or run from another folder"
        )


def copy_lessons(source: Path, target: Path) -> list[str]:
    """Copy each lesson that ``target`` lacks, or still holds as we last copied it.

    ``MANIFEST`` (in ``target``) records the hash of every file as copied, so a newer package
    can refresh a lesson the user has not changed, while a file whose hash differs from the
    record (edited by the user) or that we did not copy is never overwritten: a newer version
    of that lesson is left beside it as ``NAME.new.ipynb`` instead, and said once. Returns
    lines for the user.
    """
    if target.exists() and not target.is_dir():
        raise InputError(f"--notebooks={str(target)!r} is a file, not a folder")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--notebooks={str(target)!r} cannot be created: {exc.strerror}") from exc
    record_path = target / MANIFEST
    record = json.loads(_read(record_path) or b"{}")
    said, copied = [], []
    for src in sorted([*source.glob("*.ipynb"), source / "README.md"]):
        if not src.is_file():
            continue
        dst, new_hash = target / src.name, _sha256(src)
        if dst.is_symlink():  # planted, or the user's: never followed, never replaced
            said.append(_keep(src, dst))
            continue
        if dst.exists():
            old_hash = _sha256(dst)
            if old_hash == new_hash:
                record[src.name] = new_hash
                continue
            if record.get(src.name) == new_hash:  # the user's edit of this very lesson
                continue
            if record.get(src.name) != old_hash:  # edited, or theirs; and this lesson is new
                said.append(_keep(src, dst))
                record[src.name] = new_hash  # said once, not at every start
                continue
        _write_new(dst, src.read_bytes())
        record[src.name] = new_hash
        copied.append(src.name)
    _write_new(record_path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    if copied:
        said.insert(0, f"workbench lab: copied {len(copied)} lesson file(s) into {target}")
    return said


def _keep(src: Path, dst: Path) -> str:
    """Leave the user's ``dst``; put this version's lesson beside it."""
    if src.suffix != ".ipynb":
        return f"workbench lab: kept your {dst}"
    beside = dst.with_suffix(".new.ipynb")
    _write_new(beside, src.read_bytes())
    return f"workbench lab: kept your {dst}; this version's lesson is beside it: {beside.name}"


def _write_new(path: Path, data: bytes) -> None:
    """``path`` holds ``data``: written to a new file of a random name (``O_EXCL |
    O_NOFOLLOW``: never an existing file or a link planted there) and renamed over ``path``
    (a rename replaces a link at ``path``; it never writes through it)."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _read(path: Path) -> bytes | None:
    """``path``'s bytes, never through a symbolic link (None when absent or a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:  # absent, or a link (ELOOP)
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _sha256(path: Path) -> str:
    return hashlib.sha256(_read(path) or b"").hexdigest()


def lab_command(
    port: int | None = None, open_browser: bool = True, nb_dir: Path | None = None
) -> list[str]:
    """The server's command line, as ``ps`` shows it: everything but the token."""
    nb_dir = nb_dir or notebooks_dir()
    cmd = [sys.executable, "-c", _LAUNCH, str(nb_dir / QUICKSTART)]
    cmd += [f"--ServerApp.ip={HOST}", f"--ServerApp.root_dir={nb_dir.parent}"]
    # No calls home: many GPU boxes are offline, and the news feed would only time out.
    cmd += ["--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and cloud images often log in as root
    if port is not None:  # exactly this port: the URL printed for it must be the real one
        cmd += [f"--ServerApp.port={port}", "--ServerApp.port_retries=0"]
    if not open_browser:
        cmd.append("--no-browser")
    return cmd


def lab_env(token: str) -> dict[str, str]:
    """This process's environment plus the token for the server to take."""
    return {**os.environ, TOKEN_ENV: token}


def lab_url(port: int, token: str, nb_dir: Path | None = None) -> str:
    nb_dir = nb_dir or notebooks_dir()
    path = quote(f"{nb_dir.name}/{QUICKSTART}")
    return f"http://{HOST}:{port}/lab/tree/{path}?token={token}"


def free_port(first: int = _FIRST_PORT, tries: int = 50) -> int:
    """The first port from ``first`` that nothing listens on here, else one the OS picks."""
    for port in [*range(first, first + tries), 0]:
        with socket.socket() as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError(f"no free port on {HOST}")


def open_lab(
    port: int | None = None, open_browser: bool = True, notebooks: Path | str | None = None
) -> int:
    """Start JupyterLab with a fresh random token; prints the URL that carries it.

    ``notebooks``: the folder to copy the lessons into and open (default: the checkout's
    ``notebooks/``, else ``$WORKBENCH_HOME/notebooks``).
    """
    nb_dir = notebooks_dir(notebooks)
    port = port or free_port()
    token = secrets.token_urlsafe(32)
    print(f"JupyterLab on the quickstart: {lab_url(port, token, nb_dir)}", flush=True)
    try:
        return subprocess.call(lab_command(port, open_browser, nb_dir), env=lab_env(token))
    except KeyboardInterrupt:
        return 0
