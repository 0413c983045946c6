"""A real SLURM cluster in a temp folder: munged, slurmctld and two slurmd on this host.

Debian's slurm-wlm (22.05) runs several slurmd on one host when each node has its own name
(``slurmd -N``) and port (``NodeName=... Port=...``), so the tests get two real "nodes" of two
CPUs each. Everything lives in the given folder: munge's key, socket, pid, log and seed files;
slurm.conf, state, spool and logs. ``SLURM_CONF`` points the client commands (srun, sbatch,
squeue, scontrol) at this cluster; the machine's /etc/slurm and /etc/munge are never read.

Settings chosen so it runs in a container as root with no cgroup support: proctrack/linuxproc
(tracks a step's processes by parentage, so torchrun's ranks, which run in sessions of their
own, are still found; proctrack/pgid would miss them), task/none, no accounting.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "salloc", "squeue", "scontrol", "scancel", "sinfo")
READY_TIMEOUT_S = 30.0


def missing_binaries() -> list[str]:
    """The SLURM and munge programs this machine lacks (empty: a cluster can start)."""
    paths = {name: shutil.which(name) or _sbin(name) for name in (*DAEMONS, *CLIENTS)}
    return sorted(name for name, path in paths.items() if path is None)


def _sbin(name: str) -> str | None:
    path = Path("/usr/sbin") / name
    return str(path) if path.exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """Start with :meth:`start`, stop with :meth:`stop` (which never leaves a daemon)."""

    def __init__(
        self, base: Path, node_names: tuple[str, ...] = ("wb1", "wb2"), cpus: int = 2, gpus: int = 2
    ):
        assert gpus <= 2, "two character devices stand for GPUs"
        self.base, self.node_names, self.cpus, self.gpus = Path(base), node_names, cpus, gpus
        self.conf = self.base / "slurm.conf"
        self.procs: dict[str, subprocess.Popen] = {}
        self.start_s: float | None = None

    @property
    def env(self) -> dict[str, str]:
        """What a client command needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def client_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    # -- start -------------------------------------------------------------------------------
    def start(self) -> SlurmCluster:
        t0 = time.monotonic()
        try:
            self._start_munge()
            self._write_conf()
            self._spawn("slurmctld", [_sbin("slurmctld") or "slurmctld", "-D", "-i", "-f",
                                      str(self.conf)])  # fmt: skip
            for name in self.node_names:
                self._spawn(f"slurmd-{name}", [_sbin("slurmd") or "slurmd", "-D", "-f",
                                               str(self.conf), "-N", name])  # fmt: skip
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - t0
        return self

    def _start_munge(self) -> None:
        key_dir = self.base / "munge"
        run_dir = self.base / "munge-run"  # the socket's folder: others may search it
        key_dir.mkdir(mode=0o700)
        run_dir.mkdir(mode=0o755)
        os.chmod(run_dir, 0o755)
        key = key_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self.munge_socket = run_dir / "munge.socket"
        # -F: foreground, so the Popen is the daemon; -f: munged refuses root unless forced
        argv = [
            _sbin("munged") or "munged",
            "-F",
            "-f",
            f"--key-file={key}",
            f"--socket={self.munge_socket}",
            f"--pid-file={run_dir / 'munged.pid'}",
            f"--log-file={key_dir / 'munged.log'}",
            f"--seed-file={key_dir / 'munged.seed'}",
        ]
        self._spawn("munged", argv)
        _wait_for(lambda: self.munge_socket.exists(), 10.0, "munged did not create its socket",
                  self._logs)  # fmt: skip

    def _write_conf(self) -> None:
        host = socket.gethostname().split(".")[0]
        for sub in ("state", "log", *(f"spool/{n}" for n in self.node_names)):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        b = self.base
        lines = [
            "ClusterName=wbtest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={b / 'state'}",
            f"SlurmdSpoolDir={b / 'spool'}/%n",
            f"SlurmctldPidFile={b / 'slurmctld.pid'}",
            f"SlurmdPidFile={b / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={b / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={b / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",  # CPUs as written, whatever the host has
            "MailProg=/bin/true",
            "KillWait=2",
            "InactiveLimit=0",
            "GresTypes=gpu",  # counted GPUs (no device files): enough for --gpus-per-node
        ]
        for name in self.node_names:
            lines.append(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 "
                         f"Port={_free_port()} CPUs={self.cpus} Gres=gpu:{self.gpus} "
                         "State=UNKNOWN")  # fmt: skip
        lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        # Counted "GPUs" for --gpus-per-node: slurmd wants one character device per GPU and
        # every container has these two; nothing opens them (no test runs CUDA)
        devices = ["/dev/null", "/dev/zero"][: self.gpus]
        gres = [f"NodeName={n} Name=gpu File={d}" for n in self.node_names for d in devices]
        (self.base / "gres.conf").write_text("AutoDetect=off\n" + "\n".join(gres) + "\n")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.base / f"{name}.out", "wb")  # noqa: SIM115 (closed with the process)
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self.client_env(),
                                            start_new_session=True)  # fmt: skip
        log.close()

    def _wait_idle(self) -> None:
        want = f"idle {len(self.node_names)}"

        def ready() -> bool:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}\n{self._logs()}")
            return self.run(["sinfo", "--noheader", "--format=%T %D"], check=False).strip() == want

        _wait_for(ready, READY_TIMEOUT_S, f"the nodes did not come up ({want})", self._logs)

    # -- use ---------------------------------------------------------------------------------
    def run(
        self,
        argv: list[str],
        check: bool = True,
        timeout: float = 30.0,
        env: dict[str, str] | None = None,
    ) -> str:
        """A client command against this cluster; its stdout (RuntimeError with the daemons'
        logs when it fails and ``check``)."""
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env={**self.client_env(), **(env or {})})  # fmt: skip
        if check and done.returncode != 0:
            raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr}\n{self._logs()}")
        return done.stdout

    def jobs(self) -> list[str]:
        return self.run(["squeue", "--noheader", "--format=%i"], check=False).split()

    def _logs(self) -> str:
        parts = []
        for path in sorted([*self.base.glob("*.out"), *self.base.glob("log/*.log"),
                            *self.base.glob("munge/*.log")]):  # fmt: skip
            with contextlib.suppress(OSError):
                parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-1500:]}")
        return "\n".join(parts)

    # -- stop --------------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel every job, then stop slurmd, slurmctld and munged (TERM, then KILL)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                self.run(["scancel", "--full", "--quiet", "--user=root"], check=False)
                _wait_for(lambda: not self.jobs(), 10.0, "", None, raise_=False)
        order = [n for n in self.procs if n.startswith("slurmd")] + ["slurmctld", "munged"]
        for name in order:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_for(ok, timeout_s: float, what: str, logs, raise_: bool = True) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ok():
            return True
        time.sleep(0.05)
    if raise_:
        raise RuntimeError(f"{what} within {timeout_s:g} s\n{logs() if logs else ''}")
    return False
