"""Start one torchrun agent per node: on this machine (``local``), over ``ssh``, or with SLURM.

A multi-node burst is one torchrun job whose agents meet in the kernel's store
(``workbench.distributed.multinode``, ``workbench.distributed.agent``). Every agent runs the
*same* command line (:func:`agent_command`: no address, no job id, no secret in it); what
differs between nodes is only where it runs and the variables that name the node and its rank
(``WORKBENCH_NODE``, ``WORKBENCH_NODE_RANK``). A launcher is the part that knows how to put one
agent on each node and how to take everything down again:

- ``local``: N agents on this machine, each in a session of its own: a "node" per agent, for
  tests, laptops and the workshop (real rendezvous, real process groups, one host);
- ``ssh``: ``ssh -o BatchMode=yes host`` per host of a list; the agent runs in this process's
  working directory with the job's variables (the same paths must exist there: a shared
  file system, as clusters have);
- ``slurm``: ``srun`` with one task per node inside an allocation
  (``workbench.distributed.slurm``, imported only when asked for).

``stop`` is the part that must never fail: nothing a launcher started may survive it, on any
node.

What reaches the agents, and how (see ``workbench.distributed.jobsecret`` for the secret):

- the job's file (its secret and the store's address) never travels in a command line or a
  forwarded variable: the local agents get the path of a 0600 file in the job's private
  folder; an ssh node gets it on the stdin of an ssh without a terminal, which stores it in a
  private folder there; srun hands it to each task's stdin
  (:func:`workbench.distributed.jobsecret.agent_shell`);
- a local agent gets the same allow-list plus what a process of this machine needs to start
  (PATH, HOME, the locale, TMPDIR, LD_LIBRARY_PATH: :func:`local_env`), never the whole
  environment;
- a remote node gets only the variables a rank needs (:func:`forwarded_env`, an allow-list):
  NCCL_*, GLOO_*, TORCH_*, PYTORCH_*, OMP_*, CUDA_*, the thread counts and import path, and
  the few WORKBENCH_* variables ranks read (``RANK_WORKBENCH_VARS``): never WORKBENCH_STORE
  (it may carry a database password), the history's path, the class identity or a token.
  srun passes the environment whole (a cluster's module system lives in it) less every
  WORKBENCH_* variable outside that list and every variable whose name says it holds a
  password, secret or token (:func:`private_names`);
- an ssh host name may not start with ``-`` (ssh would read ``-Fcfg`` as an option), and the
  ssh command line ends its options with ``--`` before the host.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from workbench.core.errors import InputError
from workbench.distributed.jobsecret import (
    SECRET_FILE_ENV,
    receive_secret_shell,
    write_job_text,
)
from workbench.distributed.nodes import (  # what every launcher shares (slurm.py too)
    NODE_ENV,
    NODE_INDEX_ENV,
    NODE_RANK_ENV,
    RANK_WORKBENCH_VARS,
    AgentLaunch,
    LaunchError,
    private_names,
)
from workbench.distributed.storejob import FROM_FILE
from workbench.distributed.torchrun import stop_process_trees

LAUNCHERS = ("local", "ssh", "slurm")
SSH_CONNECT_TIMEOUT_S = 10
_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"  # never a leading '-': ssh would read an option
_HOST = re.compile(rf"^(?:{_NAME}@)?{_NAME}(?::[0-9]{{1,5}})?$")
_FORWARDED_PREFIXES = ("NCCL_", "PYTORCH_", "TORCH_", "GLOO_", "OMP_", "CUDA_")
_FORWARDED_NAMES = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONSAFEPATH", "MKL_NUM_THREADS",
                    "OPENBLAS_NUM_THREADS")  # fmt: skip
_LOCAL_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
                "LD_LIBRARY_PATH", "XDG_CACHE_HOME", "VIRTUAL_ENV")  # fmt: skip
"""Beyond :func:`forwarded_env`, what a local agent gets: what a process here needs to start
and find its libraries and caches (a remote login sets its own)."""


class Launcher(Protocol):
    """How agents reach the nodes. Implementations take the user's host list (possibly
    empty) as their one constructor argument: ``LocalLauncher()``, ``SshLauncher(hosts)``,
    ``SlurmLauncher(hosts)``."""

    name: str
    """``local``, ``ssh`` or ``slurm``."""

    def hosts(self, nodes: int) -> list[str]:
        """One name per node, the first ``nodes``; InputError when there are fewer."""
        ...

    def start(self, launch: AgentLaunch) -> list[subprocess.Popen]:
        """One agent per node, as ``launch`` says (plus ``WORKBENCH_NODE`` and the node's
        rank). Returns the local processes that stand for the agents (the agents themselves,
        or the ssh/srun clients)."""
        ...

    def run_on(self, host: str, argv: list[str], timeout_s: float) -> str:
        """Run ``argv`` on ``host``; its stdout. LaunchError naming the host on failure."""
        ...

    def stop(self, procs: list[subprocess.Popen]) -> None:
        """Stop what ``start`` started: nothing survives, on any node."""
        ...


def agent_command(*, nnodes: int, nproc_per_node: int, tag: str) -> list[str]:
    """The torchrun agent command line, the same on every node.

    torchrun's own agent (``workbench.distributed.agent`` registers the rendezvous and runs
    ``torch.distributed.run``), told only the job's shape: the store's address and the job's
    id come from the job's private file. ``tag``: a random word that names the job's
    processes (``ssh``'s stop finds them by it) and no key of the store.
    """
    return [
        sys.executable, "-m", "workbench.distributed.agent", f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc_per_node}", "--max-restarts=0", "--monitor-interval=0.1",
        "-m", "workbench.distributed.rank", FROM_FILE + tag,
    ]  # fmt: skip


def parse_hosts(hosts: Sequence[str] | str | None) -> list[str]:
    """``"h1,h2"`` or ``["h1", "h2"]`` -> ``["h1", "h2"]``; ``user@host`` and ``host:port``
    are allowed (ssh reads them). Anything else is refused, naming ``hosts``."""
    if hosts is None:
        return []
    items = hosts.split(",") if isinstance(hosts, str) else list(hosts)
    clean = [h.strip() for h in items if isinstance(h, str) and h.strip()]
    for host in items:
        if isinstance(host, str) and host.strip().startswith("-"):
            raise InputError.not_allowed(
                "hosts", host.strip(), "host names that do not start with '-' (ssh would read "
                "it as an option)"
            )  # fmt: skip
        if not isinstance(host, str) or (host.strip() and not _HOST.match(host.strip())):
            raise InputError.not_allowed(
                "hosts", host, "host names separated by commas, e.g. node1,node2 (user@host "
                "and host:port allowed)"
            )  # fmt: skip
    if len(set(clean)) != len(clean):
        raise InputError.not_allowed("hosts", ",".join(clean), "each host once")
    return clean


def pick_launcher(name: str | None, hosts: Sequence[str] | str | None = None) -> Launcher:
    """The launcher called ``name``; None picks ``slurm`` inside an allocation (SLURM_JOB_ID
    is set), ``ssh`` when hosts are given, else ``local``."""
    host_list = parse_hosts(hosts)
    if name is None:
        name = "slurm" if os.environ.get("SLURM_JOB_ID") else "ssh" if host_list else "local"
    if name not in LAUNCHERS:
        raise InputError.not_allowed("launcher", name, "one of " + ", ".join(LAUNCHERS))
    if name == "local":
        if host_list:
            raise InputError.not_allowed(
                "hosts", ",".join(host_list), "no hosts with launcher=local (its nodes are "
                "this machine); use launcher=ssh for a host list"
            )  # fmt: skip
        return LocalLauncher()
    if name == "ssh":
        if not host_list:
            raise InputError.not_allowed(
                "hosts", "", "one host per node with launcher=ssh, e.g. hosts=node1,node2"
            )
        return SshLauncher(host_list)
    return _slurm_launcher(host_list)


def _slurm_launcher(hosts: list[str]) -> Launcher:
    try:
        module = importlib.import_module("workbench.distributed.slurm")
    except ModuleNotFoundError as exc:
        if exc.name != "workbench.distributed.slurm":
            raise
        raise InputError.not_allowed(
            "launcher", "slurm", "local or ssh: this installation has no SLURM launcher"
        ) from None
    return module.SlurmLauncher(hosts)


def forwarded_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of a job's environment that must reach a remote node (an allow-list): NCCL_*,
    GLOO_*, the allocator's and torch's variables, CUDA_*, thread counts, the import path and
    ``RANK_WORKBENCH_VARS``. The rest (this machine's PATH, display, agent sockets, the class
    store's address with its password) stays here; the remote login provides its own."""
    return {
        k: v for k, v in sorted(env.items())
        if (k.startswith(_FORWARDED_PREFIXES) or k in _FORWARDED_NAMES
            or k in RANK_WORKBENCH_VARS) and not private_names([k])
    }  # fmt: skip


def local_env(env: Mapping[str, str]) -> dict[str, str]:
    """What a local agent gets: :func:`forwarded_env` plus ``_LOCAL_NAMES`` (never a
    password, a token or the store's address, whatever else this process holds)."""
    basics = {k: v for k, v in env.items() if k in _LOCAL_NAMES and not private_names([k])}
    return {**basics, **forwarded_env(env)}


class LocalLauncher:
    """N agents on this machine, each in a session of its own: N "nodes" on one host."""

    name = "local"

    def hosts(self, nodes: int) -> list[str]:
        return [f"local-{i}" for i in range(nodes)]

    def start(self, launch: AgentLaunch) -> list[subprocess.Popen]:
        procs: list[subprocess.Popen] = []
        job_file = write_job_text(launch.log_dir, launch.job_text) if launch.job_text else None
        extra = {SECRET_FILE_ENV: str(job_file)} if job_file else {}
        for index, host in enumerate(self.hosts(launch.nodes)):
            node_env = {**local_env(launch.env), **extra, NODE_ENV: host,
                        NODE_INDEX_ENV: str(index), NODE_RANK_ENV: str(index)}  # fmt: skip
            try:
                with open(Path(launch.log_dir) / f"{host}.log", "wb") as log:
                    procs.append(subprocess.Popen(
                        launch.argv, env=node_env, stdout=log, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, start_new_session=True, cwd=os.getcwd(),
                    ))  # fmt: skip
            except OSError as exc:
                self.stop(procs)
                raise LaunchError(host, f"could not start its agent: {exc}") from exc
        return procs

    def run_on(self, host: str, argv: list[str], timeout_s: float) -> str:
        return _run(host, argv, timeout_s, argv[0] if argv else "")

    def stop(self, procs: list[subprocess.Popen]) -> None:
        stop_process_trees(procs)


class SshLauncher:
    """One agent per host over ssh (keys, no password prompt: ``BatchMode``).

    The agent runs under a pseudo-terminal (``-tt``): when the ssh client is stopped, or the
    connection drops (``ServerAlive``), the remote side hangs up and torchrun, which handles
    SIGHUP, stops its ranks. ``stop`` then also kills, on every host, whatever still carries
    the job's file in its command line (agents and ranks, which run in sessions of their own),
    and removes the private folder that holds the job's secret there.
    """

    name = "ssh"

    def __init__(self, hosts: Sequence[str]) -> None:
        self._hosts = parse_hosts(hosts)
        self._started: list[tuple[str, str]] = []  # (host, job file) per agent started
        self._secret_dirs: dict[str, str] = {}  # host -> its private folder with the secret

    def hosts(self, nodes: int) -> list[str]:
        if len(self._hosts) < nodes:
            given = ",".join(self._hosts)
            raise InputError.not_allowed("hosts", given, f"one host per node: {nodes} for "
                                         f"nodes={nodes}, {len(self._hosts)} given")  # fmt: skip
        return self._hosts[:nodes]

    def ssh_argv(self, host: str, remote: str, *, tty: bool = False) -> list[str]:
        """``ssh`` to ``host`` (``host:port`` becomes ``-p port``) running ``remote``."""
        name, _, port = host.partition(":")
        return [
            "ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
            *(["-tt"] if tty else []), *(["-p", port] if port else []), "--", name, remote,
        ]  # fmt: skip

    def agent_argv(
        self, host: str, agent_argv: list[str], env: Mapping[str, str], secret_file: str = ""
    ) -> list[str]:
        """The local command that runs the agent on ``host``, in this working directory, with
        the forwarded variables, the node's rank (its place in the host list) and the path of
        the node's job file (never what it holds)."""
        rank = self._hosts.index(host) if host in self._hosts else 0
        variables = {**forwarded_env(env), NODE_ENV: node_name(host), NODE_RANK_ENV: str(rank)}
        if secret_file:
            variables[SECRET_FILE_ENV] = secret_file
        assignments = [f"{k}={v}" for k, v in variables.items()]
        remote = (f"cd {shlex.quote(os.getcwd())} && exec env {shlex.join(assignments)} "
                  f"{shlex.join(agent_argv)}")  # fmt: skip
        return self.ssh_argv(host, remote, tty=True)

    def start(self, launch: AgentLaunch) -> list[subprocess.Popen]:
        hosts = self.hosts(launch.nodes)
        if launch.job_text:
            self._send_secret(hosts, launch.job_text)
        procs: list[subprocess.Popen] = []
        for host in hosts:
            folder = self._secret_dirs.get(host)
            secret_file = f"{folder}/secret" if folder else ""
            argv = self.agent_argv(host, launch.argv, launch.env, secret_file)
            try:
                with open(Path(launch.log_dir) / f"{node_name(host)}.log", "wb") as log:
                    procs.append(subprocess.Popen(
                        argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    ))  # fmt: skip
            except OSError as exc:
                self.stop(procs)
                raise LaunchError(host, f"could not run ssh: {exc}") from exc
            self._started.append((host, launch.argv[-1]))
        return procs

    def _send_secret(self, hosts: list[str], job_text: str) -> None:
        """Each node stores the job's file, read from stdin (no terminal: nothing echoes), in
        a private folder of its own; the folder's path comes back."""

        def send(host: str) -> None:
            out = _run(host, self.ssh_argv(host, receive_secret_shell()), SSH_CONNECT_TIMEOUT_S + 5,
                       "mktemp", stdin_text=job_text)  # fmt: skip
            folder = out.strip().splitlines()[-1] if out.strip() else ""
            if not folder.startswith("/"):
                raise LaunchError(host, f"could not store the job's secret: got {out[-200:]!r}")
            self._secret_dirs[host] = folder

        with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
            list(pool.map(send, hosts))

    def run_on(self, host: str, argv: list[str], timeout_s: float) -> str:
        return _run(host, self.ssh_argv(host, shlex.join(argv)), timeout_s, argv[0] if argv else "")

    def stop(self, procs: list[subprocess.Popen]) -> None:
        stop_process_trees(procs)  # the ssh clients: the remote side hangs up
        started, self._started = self._started, []
        folders, self._secret_dirs = self._secret_dirs, {}
        jobs = [(host, job, folders.get(host, "")) for host, job in started]
        jobs += [(host, "", folder) for host, folder in folders.items()
                 if host not in {h for h, _ in started}]  # fmt: skip
        if not jobs:
            return
        with ThreadPoolExecutor(max_workers=min(16, len(jobs))) as pool:
            list(pool.map(lambda hjf: self._clean_up_on(*hjf), jobs))

    def _clean_up_on(self, host: str, job_file: str, folder: str) -> None:
        if job_file:
            self._kill_job_on(host, job_file)
        if folder:
            with contextlib.suppress(LaunchError):
                self.run_on(host, ["rm", "-rf", "--", folder], SSH_CONNECT_TIMEOUT_S + 5)

    def _kill_job_on(self, host: str, job_file: str) -> None:
        """Kill what carries ``job_file`` in its command line on ``host`` (the pattern's first
        character in brackets, so that pkill's own command line does not match)."""
        escaped = re.escape(job_file)
        pattern = f"[{escaped[0]}]{escaped[1:]}" if escaped[0] != "\\" else escaped
        with contextlib.suppress(LaunchError):  # nothing left to kill: pkill exits 1
            self.run_on(host, ["pkill", "-KILL", "-f", pattern], SSH_CONNECT_TIMEOUT_S + 5)


def node_name(host: str) -> str:
    """``user@node1:2222`` -> ``node1``: how a node is named in results."""
    return host.rpartition("@")[2].partition(":")[0]


def _run(
    host: str, argv: list[str], timeout_s: float, what: str, stdin_text: str | None = None
) -> str:
    stdin = {"input": stdin_text} if stdin_text is not None else {"stdin": subprocess.DEVNULL}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              **stdin)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise LaunchError(host, f"{what} did not answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise LaunchError(host, f"could not run {what}: {exc}") from None
    if done.returncode == 0:
        return done.stdout
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    if argv[0] == "ssh" and done.returncode == 255:
        raise LaunchError(host, f"cannot be reached over ssh: {last}")
    raise LaunchError(host, f"{what} exited with code {done.returncode}: {last}")


__all__ = ["LAUNCHERS", "NODE_ENV", "RANK_WORKBENCH_VARS", "AgentLaunch", "LaunchError",
           "Launcher", "LocalLauncher", "SshLauncher", "agent_command", "forwarded_env",
           "local_env", "parse_hosts", "pick_launcher", "private_names"]  # fmt: skip
