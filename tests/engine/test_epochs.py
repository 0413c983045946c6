"""Short epochs: continued for the sample sets, measured as they are for a user's data."""

import itertools

import pytest
import torch
from torch.utils.data import Dataset, DistributedSampler, IterableDataset
from workloads_for_tests import tensor_workload

from workbench import Knobs, run_burst
from workbench.core.results import SHORT_EPOCH_BATCHES, BurstResult, short_epochs_line
from workbench.engine.epochs import (
    ContinuingSampler,
    batches_per_epoch,
    epoch_handling,
    short_epochs_report,
)
from workbench.engine.loaders.torch_loader import TorchStream

CPU = torch.device("cpu")


class _Labelled(Dataset):
    """Item i: the "image" i and its label i % 3, so a batch shows which index each row was."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.tensor([float(i)]), i % 3


class _Stream(IterableDataset):
    def __iter__(self):
        return iter((torch.zeros(1), 0) for _ in range(8))


def _passes(sampler: ContinuingSampler, n: int, count: int) -> list[list[int]]:
    flat = list(itertools.islice(iter(sampler), n * count))
    return [flat[i * n : (i + 1) * n] for i in range(count)]


def test_the_continuing_sampler_yields_every_index_once_per_pass_in_a_new_order():
    passes = _passes(ContinuingSampler(10, seed=3), 10, 4)
    assert all(sorted(p) == list(range(10)) for p in passes)
    assert len({tuple(p) for p in passes}) == 4  # reshuffled each pass
    assert _passes(ContinuingSampler(10, seed=3), 10, 4) == passes  # seeded


def test_a_ranks_passes_are_what_distributed_sampler_gives_it_each_epoch():
    n, world = 11, 2  # odd: DistributedSampler pads, and the continuing passes keep that
    ours = [ContinuingSampler(n, seed=5, shard=(r, world)) for r in range(world)]
    for epoch in range(3):
        both = []
        for rank, sampler in enumerate(ours):
            theirs = DistributedSampler(range(n), num_replicas=world, rank=rank, seed=5)
            theirs.set_epoch(epoch)
            assert sampler.pass_order(epoch) == list(theirs)
            both += sampler.pass_order(epoch)
        assert set(both) == set(range(n))  # the ranks together cover the data every pass


def test_a_continued_stream_never_restarts_and_keeps_each_label_with_its_item():
    n, batch = 20, 6  # 3 full batches an epoch; batches cross the passes' boundaries
    stream = TorchStream(_Labelled(n), Knobs(batch_size=batch), CPU, sample_set=True)
    try:
        rows = [next(stream) for _ in range(20)]  # 120 items: 6 passes
    finally:
        stream.close()
    assert stream.epoch_handling == "continued" and stream.batches_per_epoch == 3
    assert stream.epochs == 0
    xs = torch.cat([x for x, _ in rows]).flatten().long()
    ys = torch.cat([y for _, y in rows])
    assert torch.equal(ys, xs % 3)  # each label with its own item
    for p in range(6):
        assert sorted(xs[p * n : (p + 1) * n].tolist()) == list(range(n))


def test_a_continued_stream_with_workers_keeps_one_iterator():
    k = Knobs(batch_size=4, num_workers=2)
    stream = TorchStream(_Labelled(10), k, CPU, sample_set=True)
    try:
        for _ in range(12):  # 48 items: almost 5 passes over 10
            x, y = next(stream)
            assert torch.equal(y, x.flatten().long() % 3)
        assert stream.epochs == 0
    finally:
        stream.close()


def test_a_users_short_epoch_restarts_as_their_own_loop_would():
    stream = TorchStream(_Labelled(20), Knobs(batch_size=6), CPU)
    try:
        for _ in range(7):
            next(stream)
    finally:
        stream.close()
    assert stream.epoch_handling == "measured" and stream.epochs == 2  # batches 4 and 7


@pytest.mark.parametrize(
    ("sample_set", "per_epoch", "handling"),
    [
        (True, 6, "continued"),
        (False, 6, "measured"),
        (True, SHORT_EPOCH_BATCHES, None),  # long enough: nothing to do
        (False, SHORT_EPOCH_BATCHES - 1, "measured"),
        (True, 0, None),  # no full batch: the loader refuses the batch size itself
        (True, None, None),  # nothing to count batches by
    ],
)
def test_the_decision(sample_set, per_epoch, handling):
    assert epoch_handling(sample_set, per_epoch) == handling


def test_an_iterable_dataset_has_no_short_epoch_handling():
    stream = TorchStream(_Stream(), Knobs(batch_size=2), CPU, sample_set=True)
    stream.close()
    assert stream.batches_per_epoch is None and stream.epoch_handling is None


def test_batches_per_epoch_takes_a_ranks_padded_share():
    assert batches_per_epoch(800, 128) == 6  # the H200 JPEG row
    assert batches_per_epoch(11, 2, world_size=2) == 3  # ceil(11 / 2) = 6 per rank


def test_the_report_and_the_summary_line():
    report = short_epochs_report("measured", 6, 3, 24, [30.0, 31.0, 32.0, 300.0])
    assert report == {
        "handling": "measured", "batches_per_epoch": 6, "threshold_batches": SHORT_EPOCH_BATCHES,
        "restarts_in_window": 3, "epochs_in_window": 4.0, "step_ms_p50": 31.5,
        "step_ms_mean": 98.25,
    }  # fmt: skip
    line = short_epochs_line(report, Knobs(batch_size=128, num_workers=8).to_dict())
    assert "6 batches an epoch" in line and "3 epoch restarts" in line
    assert "p50 31.5 ms against mean 98.2 ms" in line
    assert "workbench data --for-batch 128" in line and "persistent_workers=True" in line
    kept = Knobs(batch_size=128, num_workers=8, persistent_workers=True).to_dict()
    assert "persistent_workers" not in short_epochs_line(report, kept)
    assert short_epochs_line({**report, "handling": "continued"}, kept) is None
    assert short_epochs_line({**report, "restarts_in_window": 0}, kept) is None
    assert "crossed 1 epoch restart," in short_epochs_line(
        {**report, "restarts_in_window": 1}, kept
    )
    assert short_epochs_report(None, 60, 0, 10, [1.0]) is None


FAST = {"seconds": 0.05, "warmup_steps": 1, "record": False}


def test_a_burst_on_a_sample_set_continues_across_epochs(tiny_data):
    # 36 images at batch 8: 4 batches an epoch; the window's 10+ steps cross 2+ epochs
    r = run_burst("cnn", Knobs(batch_size=8), data_dir=tiny_data, min_steps=10, **FAST)
    assert r.ok, r.error
    short = r.short_epochs
    assert short["handling"] == "continued" and short["batches_per_epoch"] == 4
    assert short["restarts_in_window"] == 0 and r.loader_epochs == 0
    assert short["epochs_in_window"] >= 2.5
    assert short["step_ms_mean"] == pytest.approx(r.step_ms_mean)
    assert "SHORT EPOCHS" not in r.summary()


def test_a_burst_on_a_users_data_measures_its_short_epochs_and_says_so():
    # 64 samples at batch 16: 4 batches an epoch. Set-up's check batch and 1 warm-up step come
    # first, so batch k (counted from 1) starts a new epoch when k - 1 is a multiple of 4.
    r = run_burst(tensor_workload(n=64), Knobs(batch_size=16), min_steps=9, **FAST)
    assert r.ok, r.error
    short = r.short_epochs
    assert short["handling"] == "measured" and short["batches_per_epoch"] == 4
    assert short["restarts_in_window"] == (r.steps + 1) // 4 == r.loader_epochs >= 2
    assert short["step_ms_p50"] == pytest.approx(r.step_ms_p50)
    assert r.step_ms_mean == pytest.approx(sum(r.step_ms) / len(r.step_ms), rel=1e-3)
    assert "SHORT EPOCHS: 4 batches an epoch" in r.summary()
    assert BurstResult.from_dict(r.to_dict()).short_epochs == short


def test_a_long_epoch_has_no_short_epochs_but_a_mean_step():
    r = run_burst(tensor_workload(n=64 * SHORT_EPOCH_BATCHES), Knobs(batch_size=64), **FAST)
    assert r.ok and r.short_epochs is None and r.step_ms_mean > 0


def test_the_synthetic_loader_has_no_epochs_to_report(tiny_data):
    k = Knobs(batch_size=8, loader="synthetic")
    r = run_burst("cnn", k, data_dir=tiny_data, **FAST)
    assert r.ok and r.short_epochs is None


def test_a_built_in_workload_continues_on_a_sample_set_only(tiny_data, tmp_path):
    import shutil

    from workbench.engine.epochs import SAMPLE_SET
    from workbench.engine.workloads import resolve_workload

    mine = tmp_path / "photos"
    shutil.copytree(tiny_data / "images", mine)  # a user's folder: no build's manifest
    assert resolve_workload("cnn", tiny_data).extras[SAMPLE_SET] is True
    assert resolve_workload("gpt", tiny_data).extras[SAMPLE_SET] is True
    assert resolve_workload("cnn", mine).extras[SAMPLE_SET] is False
