"""The self-tuning loader: every batch once while tuning, fallbacks, the cache, the cap, ranks.

What the tuner decides from timings is tested on a :class:`FakeClock` (recorded load and step
times), never on how busy the machine is; the one test on the real clock asserts only what holds
for any timings.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import stat
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.utils.data import BatchSampler, Dataset, RandomSampler, get_worker_info

from workbench.config import TunedConfig, autotune_cache
from workbench.config.autotune import AutotunedLoader, AutotuneOptions, AutotuneWarning
from workbench.config.autotune_search import Search
from workbench.core.errors import InputError
from workbench.core.knobs import Knobs

N, BATCH = 64, 4


class FakeClock:
    """Time that moves only when told, so a test sets the timings the tuner judges.

    ``sleep(s)`` stands for a load or a step of recorded length; ``per_read_s`` moves it at
    every reading (the loop's own bookkeeping). A worker process moves its own copy: a load in a
    worker costs the loop nothing, as a perfectly overlapped one would.
    """

    def __init__(self, per_read_s: float = 0.0):
        self.now, self.per_read_s = 0.0, per_read_s

    def __call__(self) -> float:
        self.now += self.per_read_s
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Indices(Dataset):
    """Item i is i; ``delay_s`` of loading per item (spent by ``sleep``), optionally failing in
    worker processes."""

    def __init__(
        self,
        n: int = N,
        delay_s: float = 0.0,
        fail_in_workers: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.n, self.delay_s, self.fail_in_workers = n, delay_s, fail_in_workers
        self.sleep = sleep

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if self.fail_in_workers and get_worker_info() is not None:
            raise RuntimeError("this dataset cannot load in a worker")
        if self.delay_s:
            self.sleep(self.delay_s)
        return i


def _cfg(workers: int = 0) -> TunedConfig:
    return TunedConfig(Knobs(batch_size=BATCH, num_workers=workers))


def _fast_options(**kw) -> AutotuneOptions:
    return AutotuneOptions(**{"window": 3, "max_workers": 2, "cache": False, **kw})


def _epoch(loader, compute_s: float = 0.0, sleep=time.sleep) -> list[list[int]]:
    got = []
    for batch in loader:
        got.append(batch.tolist())
        if compute_s:
            sleep(compute_s)
    return got


def _ticking() -> AutotuneOptions:
    """Options whose clock moves 1 ms per reading: every loader reads alike, waiting for data a
    large share of each step, so the search switches loaders mid-epoch on any machine (and
    keeps none: the saved loader stays the answer)."""
    return _fast_options(clock=FakeClock(per_read_s=1e-3))


def test_every_batch_once_in_the_samplers_order_while_tuning():
    data = Indices(n=160)  # 40 batches: the search ends within the epoch
    sampler = RandomSampler(data, generator=torch.Generator().manual_seed(7))
    loader = _cfg().dataloader(data, autotune=_ticking(), sampler=sampler)
    first = _epoch(loader)
    assert loader.decision.source == "tuned"
    assert len(loader.decision.trials) >= 2  # it switched loaders during the epoch
    expected = list(BatchSampler(RandomSampler(data, generator=torch.Generator().manual_seed(7)),
                                 BATCH, drop_last=False))  # fmt: skip
    assert first == expected
    second = _epoch(loader)  # the next epoch: a new order, every item once
    assert sorted(i for b in second for i in b) == list(range(160)) and second != first
    assert len(loader) == 160 // BATCH


def test_a_failing_try_falls_back_with_a_warning_and_the_loop_goes_on():
    data = Indices(fail_in_workers=True)  # 0 workers work, any other fails
    loader = _cfg().dataloader(data, autotune=_ticking())  # data-bound: 1 worker is tried
    with pytest.warns(AutotuneWarning, match="num_workers=1.*failed.*saved values"):
        got = _epoch(loader)
    assert [i for b in got for i in b] == list(range(N))  # the failed batch came from the saved
    assert (loader.decision.source, loader.num_workers) == ("fallback", 0)


def test_an_error_inside_tuning_falls_back(monkeypatch):
    def broken(self, wait_s, cycle_s):
        raise ZeroDivisionError("a bug in the search")

    monkeypatch.setattr(Search, "observe", broken)
    loader = _cfg(workers=1).dataloader(Indices(), autotune=_fast_options())
    with pytest.warns(AutotuneWarning, match="tuning failed.*ZeroDivisionError.*num_workers=1"):
        got = _epoch(loader)
    assert [i for b in got for i in b] == list(range(N))
    assert loader.decision.source == "fallback"


def test_the_saved_loaders_own_error_propagates():
    class Broken(Indices):
        def __getitem__(self, i: int) -> int:
            raise KeyError(i)

    loader = _cfg().dataloader(Broken(), autotune=_fast_options())
    with pytest.raises(KeyError):
        _epoch(loader)


def test_the_answer_is_cached_privately_and_the_next_run_starts_from_it(tmp_path):
    options = _fast_options(cache=True, clock=FakeClock(per_read_s=1e-3))  # as _ticking()
    first = _cfg().dataloader(Indices(160), autotune=options)
    _epoch(first)
    assert first.decision.source == "tuned"
    files = list((tmp_path / "wbhome" / "autotune").glob("loader-*.json"))
    assert len(files) == 1
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(files[0].parent.stat().st_mode) == 0o700
    saved = json.loads(files[0].read_text())
    assert saved["num_workers"] == first.decision.num_workers
    assert saved["key"]["dataset"]["len"] == 160

    again = _cfg().dataloader(Indices(160), autotune=options)
    assert again.decision.source == "cache" and again.num_workers == saved["num_workers"]
    assert isinstance(iter(again), type(iter(again.loader)))  # the plain iterator: no tuning
    assert again.loader.num_workers == saved["num_workers"]
    retuned = _cfg().dataloader(Indices(160), autotune=_fast_options(retune=True))
    assert retuned.decision.source == "saved"  # retune: measures again


def test_a_loader_the_loop_never_waits_for_is_left_as_saved():
    clock = FakeClock()  # recorded timings: 5 us to load an item, 3 ms for the loop's step
    data = Indices(delay_s=5e-6, sleep=clock.sleep)
    loader = _cfg().dataloader(data, autotune=_fast_options(clock=clock))
    _epoch(loader, compute_s=0.003, sleep=clock.sleep)
    d = loader.decision
    assert (d.source, d.num_workers, len(d.trials)) == ("tuned", 0, 1)
    assert "data wait 0.7% of a step: nothing to gain" in d.reason  # 20 us of 3.02 ms

    clock = FakeClock()  # the same step, 1 ms per item: the loop waits 4 ms of every 7
    data = Indices(160, delay_s=1e-3, sleep=clock.sleep)
    loader = _cfg().dataloader(data, autotune=_fast_options(clock=clock))
    _epoch(loader, compute_s=0.003, sleep=clock.sleep)
    d = loader.decision
    assert (d.source, d.num_workers, [t["num_workers"] for t in d.trials]) == ("tuned", 1, [0, 1])


def test_on_the_machines_clock_tuning_runs_end_to_end():
    """The real clock: what it decides depends on the machine's load, so only what holds for
    any timings is asserted."""
    loader = _cfg().dataloader(Indices(160), autotune=_fast_options(cap_s=3600.0))
    got = _epoch(loader, compute_s=0.002)
    assert [i for b in got for i in b] == list(range(160))
    d = loader.decision
    assert d.source == "tuned"  # whatever it measures, this search ends by batch 39 (of 40)
    assert (d.trials[0]["num_workers"], d.trials[0]["batches"]) == (0, 3)  # the saved first
    assert d.num_workers in {t["num_workers"] for t in d.trials}  # the answer was measured
    assert isinstance(iter(loader), type(iter(loader.loader)))  # settled: plain from now on


def test_the_time_cap_is_respected_with_a_fake_clock():
    clock = FakeClock(per_read_s=1.0)  # every reading is one second later
    options = _fast_options(cap_s=10.0, clock=clock, window=50)
    loader = _cfg().dataloader(Indices(), autotune=options)
    got = _epoch(loader)
    assert "time cap of 10 s" in loader.decision.reason
    assert clock.now <= 10.0 + 3 * len(got)  # sanity: the clock was read per batch
    stopped_at = loader.decision
    assert isinstance(iter(loader), type(iter(loader.loader)))  # settled: plain from now on
    assert stopped_at.num_workers == 0  # no try finished within the cap: the saved values


def test_options_name_the_bad_value():
    with pytest.raises(InputError, match=r"autotune\.cap_s"):
        AutotuneOptions(cap_s=0)
    with pytest.raises(InputError, match="autotune"):
        _cfg().dataloader(Indices(), autotune="yes")


def test_the_dataset_fingerprint_is_cheap_and_tells_datasets_apart(tmp_path):
    assert autotune_cache.dataset_fingerprint(Indices(10))["item"] == "int"
    folder = type("Folder", (Indices,), {"root": str(tmp_path)})(10)
    found = autotune_cache.dataset_fingerprint(folder)
    assert found["root"] == str(tmp_path.resolve()) and "item" not in found


def _rank(rank: int, init: str, out: str) -> None:
    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    options = _fast_options(decide_at=20)
    loader = _cfg().dataloader(Indices(160, delay_s=0.002), autotune=options)
    epochs = [_epoch(loader, compute_s=0.002 if rank == 1 else 0.0) for _ in range(2)]
    d = loader.decision
    doc = {"decision": [d.num_workers, d.prefetch_factor, d.source], "epochs": epochs}
    Path(out, f"rank{rank}.json").write_text(json.dumps(doc))
    torch.distributed.destroy_process_group()


def test_two_gloo_ranks_take_rank_zeros_decision(tmp_path):
    init = f"file://{tmp_path / 'rendezvous'}"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_rank, args=(r, init, str(tmp_path))) for r in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    zero, one = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert zero["decision"][:2] == one["decision"][:2]
    assert zero["decision"][2] in {"tuned", "fallback"} and one["decision"][2] == "rank0"
    for doc in (zero, one):
        for epoch in doc["epochs"]:
            assert sorted(i for b in epoch for i in b) == list(range(160))


def test_an_iterable_dataset_is_not_tuned():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(8))

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loader = _cfg().dataloader(Stream(), autotune=True)
    assert not isinstance(loader, AutotunedLoader)
    assert any("IterableDataset" in str(w.message) for w in seen)
