"""A multi-node job's file: its secret and its store's address; the MACs the secret makes.

The kernel's store (``workbench.distributed.storejob``) is a plain c10d ``TCPStore``: no
authentication, and anyone who reaches its port can read, write, append, list or delete any
key. So the workbench trusts nothing it reads there unless it carries an HMAC-SHA256 made with
a per-job secret (32 random bytes, ``secrets.token_bytes``) that only the kernel and the job's
own ranks know. The MAC covers the job id, the key the value was written to (an event's key
names its rank and its sequence number) and the exact bytes of the value, so a value cannot be
forged, altered, or replayed into another key or another job.

The job's file holds two lines: the secret in hex, then the store's address and the job's id
(``wbstore://HOST:PORT/JOB``). The address is no secret (the port shows in ``ss``), but it is
kept out of every command line all the same: an agent's and a rank's argv name only "the job
in my file" (``wbstore://job-file/TAG``, a random tag that names no key).

How the file travels (never in a command line, never in a variable a launcher forwards):

- ``local``: the kernel writes ``secret`` in the job's private folder (``mkdtemp``, mode
  0700), itself created with ``O_EXCL | O_NOFOLLOW`` and mode 0600; the agents get the file's
  *path* in ``WORKBENCH_JOB_SECRET_FILE``.
- ``ssh``: before the agents start, one ssh per node without a terminal (so nothing echoes)
  reads it from its stdin into a fresh private folder on the node (``mktemp -d``: 0700, a
  name nobody can predict) and prints the folder back; the agent is then given the path.
- ``slurm``: srun hands its stdin to every task; each task's shell reads the file from it
  into a private folder on its node, exports the path and runs the agent (``agent_shell``).
  srun's I/O forwarding is authenticated by munge but not encrypted: on a cluster whose
  network others can sniff, the store's traffic itself is just as readable.

A rank reads the file (refusing one that others may read) once, at start.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

SECRET_FILE_ENV = "WORKBENCH_JOB_SECRET_FILE"
"""The path of the file holding the job's secret (the path is no secret; the file is 0600)."""
SECRET_BYTES = 32
SECRET_HEX_CHARS = 2 * SECRET_BYTES
JOB_TEXT_MAX = 1024
"""The most bytes a job file holds (the secret's line and the address's)."""
_DOMAIN = b"workbench-channel-v1"


class ChannelAuthError(RuntimeError):
    """A value on the job's channel, or the secret itself, could not be authenticated."""


def new_secret() -> bytes:
    return secrets.token_bytes(SECRET_BYTES)


def job_text(secret: bytes, url: str = "") -> str:
    """What a job file holds: the secret in hex, and the store's ``wbstore://`` address."""
    text = secret.hex() + "\n" + (url + "\n" if url else "")
    if len(text) > JOB_TEXT_MAX or "\n" in url:
        raise ValueError(f"a job file holds one address of at most {JOB_TEXT_MAX} bytes")
    return text


def write_secret_file(folder: str | Path, secret: bytes, url: str = "") -> Path:
    """The job's file in ``folder`` (see :func:`write_job_text`)."""
    return write_job_text(folder, job_text(secret, url))


def write_job_text(folder: str | Path, text: str) -> Path:
    """``folder/secret``, created here and now (``O_EXCL``: never an existing file, nor a
    symbolic link planted in its place; ``O_NOFOLLOW``), mode 0600, holding ``text``."""
    path = Path(folder) / "secret"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(text)
    return path


def read_secret_file(path: str | Path) -> bytes:
    """The secret in ``path``; ChannelAuthError when the file is a link, is not this user's,
    may be read by others, or does not hold a secret."""
    return read_job_file(path)[0]


def read_job_file(path: str | Path) -> tuple[bytes, str]:
    """The secret and the store's address (``""`` when the file names none) in ``path``;
    ChannelAuthError as :func:`read_secret_file` says."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ChannelAuthError(f"{SECRET_FILE_ENV}={path}: cannot open the job's secret: "
                               f"{exc.strerror}") from None  # fmt: skip
    with os.fdopen(fd, "r", encoding="ascii", errors="replace") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise ChannelAuthError(f"{SECRET_FILE_ENV}={path}: not a file of this user")
        if info.st_mode & 0o077:
            raise ChannelAuthError(f"{SECRET_FILE_ENV}={path}: mode "
                                   f"{stat.S_IMODE(info.st_mode):o}, allowed: 600")  # fmt: skip
        lines = f.read(JOB_TEXT_MAX + 1).splitlines()
    try:
        secret = bytes.fromhex(lines[0].strip()) if lines else b""
    except ValueError:
        secret = b""
    if len(secret) != SECRET_BYTES:
        raise ChannelAuthError(f"{SECRET_FILE_ENV}={path}: does not hold a job secret")
    return secret, (lines[1].strip() if len(lines) > 1 else "")


def job_from_env() -> tuple[bytes, str]:
    """The secret and the store's address this rank's (or agent's) launcher gave it
    (ChannelAuthError without them)."""
    path = os.environ.get(SECRET_FILE_ENV)
    if not path:
        raise ChannelAuthError(f"{SECRET_FILE_ENV} is not set: a multi-node rank needs the "
                               "job's secret to trust its job")  # fmt: skip
    return read_job_file(path)


def secret_from_env() -> bytes:
    """The secret this rank's agent was given (ChannelAuthError without one)."""
    return job_from_env()[0]


def mac(secret: bytes, job_id: str, key: str, payload: bytes) -> str:
    """HMAC-SHA256 over the job id, the key and the value's exact bytes, in hex."""
    message = b"\0".join([_DOMAIN, job_id.encode(), key.encode(), payload])
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def seal(secret: bytes, job_id: str, key: str, payload: bytes) -> bytes:
    """What is stored at ``key``: the MAC, a newline, the payload."""
    return mac(secret, job_id, key, payload).encode() + b"\n" + payload


def unseal(secret: bytes, job_id: str, key: str, value: bytes) -> bytes:
    """The payload of a sealed value; ChannelAuthError when its MAC is missing or wrong."""
    tag, sep, payload = value.partition(b"\n")
    if not sep or len(tag) != 64:
        raise ChannelAuthError("no MAC")
    expected = mac(secret, job_id, key, payload).encode()
    if not hmac.compare_digest(tag, expected):
        raise ChannelAuthError("bad MAC")
    return payload


def agent_shell(agent_argv: list[str]) -> list[str]:
    """``sh -c`` that reads the job's file from stdin into a private folder of this node,
    points ``WORKBENCH_JOB_SECRET_FILE`` at it, runs ``agent_argv`` and removes the folder.

    For launchers whose stdin reaches the agent with no terminal in between (srun): the
    secret never appears in any command line or forwarded variable.
    """
    script = (
        f'umask 077; d=$(mktemp -d "${{TMPDIR:-/tmp}}/workbench-job-XXXXXXXX") || exit 97; '
        f"trap 'rm -rf \"$d\"' EXIT; trap 'exit 143' HUP INT TERM; "
        f'head -c {JOB_TEXT_MAX} > "$d/secret" || exit 97; '
        f'{SECRET_FILE_ENV}="$d/secret"; export {SECRET_FILE_ENV}; "$@"'
    )
    return ["sh", "-c", script, "workbench-agent", *agent_argv]


def receive_secret_shell() -> str:
    """A remote shell command (ssh, no terminal) that reads the job's file from stdin into a
    new private folder and prints the folder's path."""
    return (
        f'umask 077 && d=$(mktemp -d "${{TMPDIR:-/tmp}}/workbench-job-XXXXXXXX") && '
        f'head -c {JOB_TEXT_MAX} > "$d/secret" && printf "%s\\n" "$d"'
    )
