"""SLURM: the allocation a kernel runs in, and ``srun`` to start one torchrun agent per node.

Inside an allocation (``salloc`` or an ``sbatch`` script) SLURM tells its processes what they
were given through environment variables: ``SLURM_JOB_ID``, the node list in SLURM's compressed
form (``SLURM_JOB_NODELIST=gpu[01-04]``), tasks and GPUs per node. :func:`allocation` reads
them and expands the node list with ``scontrol show hostnames`` (SLURM's own parser: the
syntax has ranges, zero padding and several bracket groups per name).

Why ``srun`` and not ssh into the nodes: a job step is what the cluster accounts, confines
(cgroups) and cleans up. ``srun`` places exactly one task per node (``--ntasks-per-node=1``:
the task is torchrun's agent, which starts the node's ranks itself), passes our environment
(``--export=ALL``, so NCCL_* reach every rank) and, with ``--kill-on-bad-exit=1``, ends the
whole step when one agent fails: a dead node never leaves the others waiting in a collective.
``--overlap`` lets the step share CPUs with a step the kernel may itself run in (``srun --pty
jupyter ...``), which would otherwise leave our step pending forever.

The job's secret reaches each agent on its stdin (srun hands its stdin to every task): a
small shell stores it in a private folder of the node and runs the agent
(``workbench.distributed.jobsecret.agent_shell``). The environment goes whole (modules, PATH)
less the variables no rank may see (``nodes.private_names``: WORKBENCH_STORE and the
like, anything named as a password, secret or token).

Each agent learns its node's name from ``SLURMD_NODENAME``, which srun sets per task; the
ranks report it (``workbench.distributed.rank``).

Stopping: the srun client is asked to end (SIGTERM, which srun forwards to its tasks), then
the step is cancelled by id (``scancel JOB.STEP``): slurmstepd then signals every process the
step's process tracker knows, torchrun's ranks too. Only after ``squeue`` no longer lists the
step is it gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from workbench.core.errors import InputError
from workbench.distributed.jobsecret import agent_shell
from workbench.distributed.nodes import (
    NODE_ENV,
    NODE_RANK_ENV,
    AgentLaunch,
    LaunchError,
    private_names,
)

__all__ = [
    "SlurmAllocation",
    "SlurmLauncher",
    "allocation",
    "expand_nodelist",
    "srun_command",
]

STOP_GRACE_S = 5.0
_SCONTROL_TIMEOUT_S = 10.0
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


@dataclass(frozen=True, slots=True)
class SlurmAllocation:
    """What SLURM granted the job this process runs in."""

    job_id: str
    nodes: list[str]
    """Every node of the allocation, expanded (``gpu[01-02]`` -> gpu01, gpu02)."""
    ntasks_per_node: list[int] | None = None
    """Tasks per node, one entry per node (SLURM_TASKS_PER_NODE ``2(x3),1`` expanded)."""
    cpus_on_node: int | None = None
    """CPUs of this allocation on the node this process runs on (SLURM_CPUS_ON_NODE)."""
    gpus_per_node: str | None = None
    """SLURM_GPUS_PER_NODE as SLURM wrote it (``4`` or ``a100:4``), None without GPUs."""
    partition: str | None = None
    this_node: str | None = None
    """SLURMD_NODENAME: the node this process runs on (set in steps and batch scripts)."""


def allocation(environ: Mapping[str, str] | None = None) -> SlurmAllocation | None:
    """The allocation this process runs in, or None outside one (no SLURM_JOB_ID)."""
    env = os.environ if environ is None else environ
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job_id:
        return None
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise InputError.not_allowed(
            "SLURM_JOB_NODELIST", nodelist, "a node list: SLURM_JOB_ID is set without it"
        )
    return SlurmAllocation(
        job_id=job_id,
        nodes=expand_nodelist(nodelist),
        ntasks_per_node=_counts(env.get("SLURM_TASKS_PER_NODE")),
        cpus_on_node=_int_or_none(env.get("SLURM_CPUS_ON_NODE")),
        gpus_per_node=env.get("SLURM_GPUS_PER_NODE") or None,
        partition=env.get("SLURM_JOB_PARTITION") or None,
        this_node=env.get("SLURMD_NODENAME") or None,
    )


def expand_nodelist(nodelist: str) -> list[str]:
    """``gpu[01-02],cpu7`` -> ``["gpu01", "gpu02", "cpu7"]``, by ``scontrol show hostnames``."""
    if shutil.which("scontrol") is None:
        raise InputError.not_allowed(
            "launcher", "slurm", "a machine with SLURM's client commands: scontrol is not on PATH"
        )
    try:
        done = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                              text=True, timeout=_SCONTROL_TIMEOUT_S)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise InputError.not_allowed(
            "SLURM_JOB_NODELIST",
            nodelist,
            f"a list scontrol expands within {_SCONTROL_TIMEOUT_S:g} s",
        ) from None
    names = done.stdout.split()
    if done.returncode != 0 or not names:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError.not_allowed(
            "SLURM_JOB_NODELIST", nodelist, f"a node list scontrol can expand ({why})"
        )
    return names


def _counts(text: str | None) -> list[int] | None:
    """SLURM's repeat form: ``2(x3),1`` -> [2, 2, 2, 1]; None when absent or unreadable."""
    if not text:
        return None
    out: list[int] = []
    for item in text.split(","):
        m = _COUNT.match(item.strip())
        if m is None:
            return None
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def srun_command(
    nodes: int,
    agent_argv: Sequence[str],
    *,
    nodelist: Sequence[str] | None = None,
    job_name: str = "workbench",
    output: str | None = None,
    cpus_per_task: int | None = None,
) -> list[str]:
    """``srun`` running ``agent_argv`` once on each of ``nodes`` nodes of the allocation.

    ``nodelist``: exactly these nodes (``-w``); ``output``: srun's per-task output pattern
    (``%N`` is the node's name); ``cpus_per_task``: CPUs for each agent and its ranks (on a
    cluster that confines steps with cgroups, the default of one CPU would squeeze every rank
    of the node onto one core).
    """
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise InputError.not_allowed("nodes", nodes, "an integer >= 1")
    if not agent_argv:
        raise InputError.not_allowed("agent_argv", list(agent_argv), "a command to run")
    words = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--export=ALL",
        "--overlap",
        f"--job-name={job_name}",
    ]
    if nodelist:
        if len(nodelist) != nodes:
            raise InputError.not_allowed(
                "hosts", ",".join(nodelist), f"one node per agent: {nodes} names for {nodes} nodes"
            )
        words.append("--nodelist=" + ",".join(nodelist))
    if cpus_per_task is not None:
        words.append(f"--cpus-per-task={cpus_per_task}")
    if output is not None:
        words.append(f"--output={output}")
    return [*words, *agent_argv]


class SlurmLauncher:
    """One torchrun agent per node of the current allocation, through ``srun``."""

    name = "slurm"

    def __init__(self, hosts: Sequence[str] = ()) -> None:
        self._chosen = list(hosts)
        self._steps: list[tuple[str, str]] = []  # (job id, step name) per start

    def _allocation(self) -> SlurmAllocation:
        alloc = allocation()
        if alloc is None:
            raise InputError.not_allowed(
                "launcher", "slurm", "inside a SLURM allocation (salloc or sbatch): SLURM_JOB_ID "
                "is not set here; use launcher=local or ssh"
            )  # fmt: skip
        return alloc

    def hosts(self, nodes: int) -> list[str]:
        """The first ``nodes`` nodes of the allocation (or of the hosts given, which must
        belong to it); InputError naming ``nodes`` when it has fewer."""
        alloc = self._allocation()
        if self._chosen:
            stray = [h for h in self._chosen if h not in alloc.nodes]
            if stray:
                raise InputError.not_allowed(
                    "hosts", ",".join(self._chosen), f"nodes of allocation {alloc.job_id} "
                    f"({','.join(alloc.nodes)}); not in it: {','.join(stray)}"
                )  # fmt: skip
        pool = self._chosen or alloc.nodes
        if len(pool) < nodes:
            raise InputError.not_allowed(
                "nodes", nodes, f"at most {len(pool)}: allocation {alloc.job_id} has "
                f"{','.join(pool)}; ask salloc/sbatch for --nodes={nodes}"
            )  # fmt: skip
        return pool[:nodes]

    def start(self, launch: AgentLaunch) -> list[subprocess.Popen]:
        """One ``srun`` step, one agent per node; each node's output in ``log_dir/<node>.log``
        and srun's own in ``log_dir/srun.log``; the job's file on each task's stdin."""
        hosts = self.hosts(launch.nodes)
        agent_argv = agent_shell(launch.argv) if launch.job_text else launch.argv
        alloc = self._allocation()
        step_name = f"workbench-{uuid.uuid4().hex[:8]}"
        argv = srun_command(launch.nodes, agent_argv, nodelist=hosts, job_name=step_name,
                            output=str(Path(launch.log_dir) / "%N.log"),
                            cpus_per_task=_cpus_per_agent(alloc))  # fmt: skip
        # the node's name and rank come from SLURMD_NODENAME and SLURM_NODEID, which srun sets
        # per task; a WORKBENCH_NODE(_RANK) inherited from here would be every node's
        full_env = {k: v for k, v in {**os.environ, **launch.env}.items()
                    if k not in (NODE_ENV, NODE_RANK_ENV)}  # fmt: skip
        for name in private_names(list(full_env)):
            del full_env[name]
        try:
            with open(Path(launch.log_dir) / "srun.log", "wb") as log:
                proc = subprocess.Popen(
                    argv,
                    env=full_env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.PIPE if launch.job_text else subprocess.DEVNULL,
                    start_new_session=True,
                )
        except OSError as exc:
            raise LaunchError(hosts[0], f"could not run srun: {exc}") from exc
        if launch.job_text and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):  # srun gone: its exit code says why
                proc.stdin.write(launch.job_text.encode())
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
            proc.stdin = None  # closed: communicate() later must not flush it
        self._steps.append((alloc.job_id, step_name))
        return [proc]

    def run_on(self, host: str, argv: list[str], timeout_s: float) -> str:
        """``argv`` on ``host`` as a one-task step; its stdout. LaunchError naming the host."""
        words = [
            "srun",
            "--nodes=1",
            "--ntasks=1",
            f"--nodelist={host}",
            "--overlap",
            "--quiet",
            "--kill-on-bad-exit=1",
            "--job-name=workbench-run-on",
            *argv,
        ]
        what = argv[0] if argv else ""
        try:
            proc = subprocess.Popen(words, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, text=True,
                                    start_new_session=True)  # fmt: skip
        except OSError as exc:
            raise LaunchError(host, f"could not run srun: {exc}") from None
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _end_srun(proc)
            raise LaunchError(host, f"{what} did not answer within {timeout_s:g} s") from None
        if proc.returncode != 0:
            last = (err.strip().splitlines() or ["no output"])[-1]
            raise LaunchError(host, f"{what} exited with code {proc.returncode}: {last}")
        return out

    def stop(self, procs: list[subprocess.Popen]) -> None:
        """End the srun clients and cancel their steps; returns once SLURM lists none."""
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)  # srun forwards it to the agents
        steps, self._steps = self._steps, []
        for job_id, step_name in steps:
            for step_id in _step_ids(job_id, step_name):
                subprocess.run(["scancel", "--quiet", step_id], capture_output=True,
                               timeout=_SCONTROL_TIMEOUT_S)  # fmt: skip
        for proc in procs:
            _end_srun(proc)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            if not any(_step_ids(job, name) for job, name in steps):
                return
            time.sleep(0.1)


def _cpus_per_agent(alloc: SlurmAllocation) -> int | None:
    """All of this node's CPUs in the allocation for the one agent (and its ranks)."""
    return alloc.cpus_on_node


def _step_ids(job_id: str, step_name: str) -> list[str]:
    """``JOB.STEP`` ids of the steps called ``step_name`` that SLURM still lists."""
    try:
        done = subprocess.run(
            ["squeue", "--steps", f"--jobs={job_id}", "--noheader", "--format=%i %j"],
            capture_output=True, text=True, timeout=_SCONTROL_TIMEOUT_S,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    out = []
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == step_name:
            out.append(parts[0])
    return out


def _end_srun(proc: subprocess.Popen) -> None:
    """srun ends its step when it gets SIGTERM; a client that hangs on is killed."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(STOP_GRACE_S)
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=STOP_GRACE_S)
