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

import psutil
import pytest

from workbench.distributed.agent import node_rank
from workbench.distributed.jobs import worker_env
from workbench.distributed.launchers import LocalLauncher
from workbench.distributed.multinode import MultiNodeJob
from workbench.distributed.torchrun import JobSpec


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


@pytest.mark.concurrent  # a real torchrun job: mostly waiting on it
def test_a_second_client_that_knows_argv_runs_nothing_in_a_two_node_job(tmp_path):
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Payload(str(marker)))
    spec = JobSpec(mode="comm", out_dir=str(tmp_path), device="cpu", parent_pid=0,
                   timeout_s=120, sizes_bytes=[8192], nodes=2)  # fmt: skip
    seen: dict = {"written": set()}
    done = threading.Event()

    def attack(port: int, words: set[str]) -> None:
        """A second client that knows every word of the agents' and ranks' argv and the
        port (``ss -ltn`` shows it): it lists the store's keys and writes a pickle to every
        rendezvous key it can name, and over every key the agents keep, until the job ends."""
        client = _client(port)
        while not done.is_set():
            try:
                keys = set(client.list_keys())
            except Exception:  # the store closed: the job has ended
                return
            ours = [k for k in keys if not k.startswith("torch.")]  # not what it wrote itself
            names = words | {part for k in ours for part in k.split("/")}
            targets = {f"torch.rendezvous.{n}" for n in names}
            targets |= {k for k in keys if "/agents/" in k or k.startswith("torch.")}
            for key in targets - seen["written"]:
                value = base64.b64encode(payload) if key.startswith("torch.") else payload
                try:
                    client.set(key, value)
                except Exception:
                    return
                seen["written"].add(key)
            for p in psutil.Process().children(recursive=True):  # the ranks, once they run
                with contextlib.suppress(psutil.Error):
                    words |= set(p.cmdline())
            time.sleep(0.05)

    class Attacked(LocalLauncher):
        def start(self, launch):
            procs = super().start(launch)
            argv = [w for p in procs for w in psutil.Process(p.pid).cmdline()]
            host = job._host
            seen["argv"] = argv
            seen["named"] = [w for w in argv if host.job_id in w or str(host.port) in w]
            thread = threading.Thread(target=attack, args=(host.port, set(argv)), daemon=True)
            thread.start()
            seen["thread"] = thread
            return procs

    job = MultiNodeJob(spec, Attacked(), 2, 1, worker_env({}, 2))
    try:
        outcome = job.run()
    finally:
        done.set()
        if "thread" in seen:
            seen["thread"].join(10)
    time.sleep(0.5)  # a payload run by a process that is ending would show by now
    assert not marker.exists(), f"the attacker's pickle ran in pid {marker.read_text()}"
    assert seen["named"] == []  # neither the store's port nor the job's id is in any argv
    assert any("torch.rendezvous." in k for k in seen["written"])
    assert any("/agents/" in k for k in seen["written"]), seen["written"]
    # the ranks' own keys were left alone, so the job itself still measures
    assert outcome.status == "ok", outcome.error
    assert outcome.result["rows"]
    print(f"\nattacker wrote {len(seen['written'])} keys; nothing ran; job {outcome.status}")
    assert [p for p in psutil.Process().children(recursive=True) if p.is_running()] == []


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
