"""workbench.distributed.agent: a multi-node job's rendezvous runs nothing that a second
client of the kernel's store writes (the attack of issue 41, against a real two-node job)."""

import base64
import contextlib
import os
import pickle
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import psutil
import pytest

from workbench.distributed.agent import node_rank
from workbench.distributed.jobs import worker_env
from workbench.distributed.launchers import LocalLauncher
from workbench.distributed.multinode import MultiNodeJob
from workbench.distributed.torchrun import JobSpec, TorchrunJob


class _Payload:
    """What the attacker stores: unpickled anywhere, it writes ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (exec, (f"open({self.path!r}, 'w').write(str(__import__('os').getpid()))",))


def _client(port: int):
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                         timeout=timedelta(seconds=5))  # fmt: skip


def test_torchruns_c10d_rendezvous_runs_a_pickle_a_second_client_writes(tmp_path):
    # The control: the write the test below makes is the one that ran code in torchrun's
    # own c10d rendezvous (its state is a pickle in the store; every agent loads it).
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    marker = tmp_path / "ran"
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    run_id = uuid.uuid4().hex
    params = RendezvousParameters("c10d", f"127.0.0.1:{store.port}", run_id, 1, 1,
                                  join_timeout=5)  # fmt: skip
    handler = create_handler(store, C10dRendezvousBackend(store, run_id), params)
    attacker = _client(store.port)
    attacker.set(f"torch.rendezvous.{run_id}",
                 base64.b64encode(pickle.dumps(_Payload(str(marker)))))  # fmt: skip
    with pytest.raises(Exception):  # noqa: B017 (the state it loaded is no state)
        handler.next_rendezvous()
    assert marker.read_text() == str(os.getpid())


class _Attacker:
    """A second client that knows every word of the job's processes' argv and the store's port
    (``ss -ltn`` shows it): it lists the store's keys and writes a pickle to every rendezvous key
    it can name (``torch.rendezvous.<name>``: where torchrun's c10d rendezvous keeps its state)
    and over every key the agents keep, until the job ends."""

    def __init__(self, port: int, words: set[str], marker: Path) -> None:
        self.port, self.words = port, set(words)
        self.payload = pickle.dumps(_Payload(str(marker)))
        self.written: set[str] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        client = _client(self.port)
        while not self._done.is_set():
            try:
                self._round(client)
            except Exception:  # the store closed: the job has ended
                return
            for p in psutil.Process().children(recursive=True):  # the ranks, once they run
                with contextlib.suppress(psutil.Error):
                    self.words |= set(p.cmdline())
            time.sleep(0.05)

    def _round(self, client) -> None:
        keys = set(client.list_keys())
        ours = [k for k in keys if not k.startswith("torch.")]  # not what it wrote itself
        names = self.words | {part for k in ours for part in k.split("/")}
        targets = {f"torch.rendezvous.{n}" for n in names}
        targets |= {k for k in keys if "/agents/" in k or "torchelastic" in k
                    or k.startswith("torch.rendezvous.")}  # fmt: skip
        for key in targets - self.written:
            value = base64.b64encode(self.payload) if key.startswith("torch.") else self.payload
            client.set(key, value)
            self.written.add(key)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(10)


def _nothing_ran(marker: Path) -> None:
    time.sleep(0.5)  # a payload run by a process that is ending would show by now
    assert not marker.exists(), f"the attacker's pickle ran in pid {marker.read_text()}"
    assert [p for p in psutil.Process().children(recursive=True) if p.is_running()] == []


@pytest.mark.concurrent  # a real torchrun job: mostly waiting on it
def test_a_second_client_that_knows_argv_runs_nothing_in_a_two_node_job(tmp_path):
    marker, seen = tmp_path / "ran", {}
    spec = JobSpec(mode="comm", out_dir=str(tmp_path), device="cpu", parent_pid=0,
                   timeout_s=120, sizes_bytes=[8192], nodes=2)  # fmt: skip

    class Attacked(LocalLauncher):
        def start(self, launch):
            procs = super().start(launch)
            argv = [w for p in procs for w in psutil.Process(p.pid).cmdline()]
            host = job._host
            seen["named"] = [w for w in argv if host.job_id in w or str(host.port) in w]
            seen["attacker"] = _Attacker(host.port, set(argv), marker)
            return procs

    job = MultiNodeJob(spec, Attacked(), 2, 1, worker_env({}, 2))
    try:
        outcome = job.run()
    finally:
        if "attacker" in seen:
            seen["attacker"].stop()
    _nothing_ran(marker)
    written = seen["attacker"].written
    assert seen["named"] == []  # neither the store's port nor the job's id is in any argv
    assert any("torch.rendezvous." in k for k in written)
    assert any("/agents/" in k for k in written), written
    # the ranks' own keys were left alone, so the job itself still measures
    assert outcome.status == "ok", outcome.error
    assert outcome.result["rows"]
    print(f"\ntwo nodes: the attacker wrote {len(written)} keys; nothing ran; job ok")


@pytest.mark.concurrent  # a real torchrun job: mostly waiting on it
def test_a_one_node_jobs_store_listens_on_loopback_and_runs_nothing_written_to_it(tmp_path):
    marker, seen = tmp_path / "ran", {}
    spec = JobSpec(mode="comm", out_dir=str(tmp_path), device="cpu", parent_pid=os.getpid(),
                   timeout_s=120, sizes_bytes=[8192])  # fmt: skip
    job = TorchrunJob(spec, 2, worker_env({}, 2))

    def watch() -> None:  # the agent's listening socket, as ss shows it to anyone
        deadline = time.monotonic() + 60
        while "attacker" not in seen and time.monotonic() < deadline:
            for p in psutil.Process().children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "workbench.distributed.agent" not in " ".join(p.cmdline()):
                        continue
                    listening = [c.laddr for c in p.net_connections("tcp")
                                 if c.status == psutil.CONN_LISTEN]  # fmt: skip
                    if listening:
                        seen["hosts"] = sorted({a.ip for a in listening})
                        seen["attacker"] = _Attacker(listening[0].port, set(p.cmdline()), marker)
                        return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        outcome = job.run()
    finally:
        watcher.join(10)
        if "attacker" in seen:
            seen["attacker"].stop()
    _nothing_ran(marker)
    assert seen["hosts"] == ["127.0.0.1"]  # torchrun's --standalone store: every interface
    assert any("torch.rendezvous." in k for k in seen["attacker"].written)
    assert outcome.status == "ok", outcome.error
    print(f"\none node: the attacker wrote {len(seen['attacker'].written)} keys; nothing ran")


def test_a_node_rank_comes_from_the_launcher_or_srun_and_is_checked(monkeypatch):
    monkeypatch.delenv("SLURM_NODEID", raising=False)
    monkeypatch.setenv("WORKBENCH_NODE_RANK", "1")
    assert node_rank(2) == 1
    monkeypatch.delenv("WORKBENCH_NODE_RANK")
    monkeypatch.setenv("SLURM_NODEID", "0")
    assert node_rank(2) == 0
    for bad in ("2", "-1", "x"):
        monkeypatch.setenv("WORKBENCH_NODE_RANK", bad)
        with pytest.raises(ValueError, match=rf"WORKBENCH_NODE_RANK='{bad}': a node rank 0..1"):
            node_rank(2)
