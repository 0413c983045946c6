"""The guided moves (workbench.tuning.bottleneck) on small hand-made landscapes: the order
the bottleneck asks for, the loader re-sized after every compute move, no batch walk on a
curve the loader caps, the start at PyTorch's defaults, close calls compared side by side.

A landscape here is a few lines: the model's speed for a config, the loader's, and the loop
runs at the slower of the two (the loop's wait is the rest); readings are exact unless a test
scripts otherwise, so every assertion is about the order of moves, not about luck.
"""

from collections.abc import Callable

import pytest

from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.tuning.bottleneck import loader_need
from workbench.tuning.search import Measured
from workbench.tuning.tuner import tune_on

GPU_SPACE = {
    "batch_size": [64, 128, 256, 512, 1024],
    "num_workers": [0, 1, 2, 4, 8, 16],
    "prefetch_factor": [2, 4],
    "pin_memory": [False, True],
    "precision": ["default", "tf32", "bf16"],
    "channels_last": [False, True],
}


class Hand:
    """A hand-made landscape: ``model(k)`` and ``loader(k)`` in samples/s; 0 workers load in
    the loop (times add up), workers load beside it (the slower stage sets the pace).
    ``scale(k, nth, t)`` multiplies a reading (noise, a stall, drift), 1 by default."""

    def __init__(self, model: Callable[[Knobs], float], loader: Callable[[Knobs], float],
                 scale: Callable[[Knobs, int, int], float] = lambda k, n, t: 1.0,
                 mem: Callable[[Knobs], float] = lambda k: 1000.0) -> None:  # fmt: skip
        self.model, self.loader, self.scale, self.mem = model, loader, scale, mem
        self.calls: list[Knobs] = []

    def true(self, k: Knobs) -> float:
        c, load = self.model(k), self.loader(k)
        return 1 / (1 / c + 1 / load) if k.num_workers == 0 else min(c, load)

    def __call__(self, k: Knobs) -> BurstResult:
        nth, t = self.calls.count(k), len(self.calls)
        self.calls.append(k)
        true = self.true(k)
        return BurstResult(workload="hand", device="sim-cuda", knobs=k,
                           samples_per_s=true * self.scale(k, nth, t), peak_mem_mib=self.mem(k),
                           data_wait_pct=100.0 * (1 - true / self.model(k)))  # fmt: skip


def _issue_landscape(**kw) -> Hand:
    """The issue's trace: 16 cores, 124 JPEGs/s a worker; PyTorch's default precision 400
    images/s at a large batch, bf16 with channels_last 4.7x that. Batch helps a little (a
    fixed 20 ms a step), pinned memory a little (the copy)."""

    def model(k: Knobs) -> float:
        fast = {"default": 1.0, "tf32": 1.05, "bf16": 3.6}[k.precision]
        fast *= 1.3 if k.channels_last and k.precision == "bf16" else 1.0
        per_sample = 1 / (400 * fast) + (0 if k.pin_memory else 0.00002)
        return k.batch_size / (0.02 + k.batch_size * per_sample)

    def loader(k: Knobs) -> float:
        return 124.0 * (min(k.num_workers, 15) if k.num_workers else 1.05)

    return Hand(model, loader, **kw)


USER_BATCH = Knobs(batch_size=128)


def _tune(hand: Hand, space=GPU_SPACE, budget=16, base=USER_BATCH, device="cuda", **kw):
    return tune_on(hand, space, budget=budget, base=base, device=device, **kw)


def test_the_issues_trap_returns_to_the_loader_after_the_compute_moves():
    """Start at 0 workers -> workers sized from the default model's wait -> bf16 and
    channels_last make the model 4.7x faster -> the loader must be re-sized at once, from
    the new wait, before any batch size is measured; the pick is the fed fast config."""
    hand = _issue_landscape()
    t = _tune(hand)
    calls = hand.calls
    first_jump = calls[1]
    assert first_jump.num_workers > 0 and first_jump.precision == "default"
    fast = next(i for i, k in enumerate(calls) if k.precision == "bf16" and k.channels_last)
    assert calls[fast].num_workers == first_jump.num_workers  # the compute move, alone
    assert calls[fast + 1].num_workers > first_jump.num_workers  # then the loader, at once
    assert calls[fast + 1].batch_size == calls[fast].batch_size  # before any batch size
    assert t.best.precision == "bf16" and t.best.channels_last and t.best.num_workers == 16
    best = max(hand.true(k) for k in calls)
    assert hand.true(t.best) >= 0.97 * best
    assert hand.true(t.best) > 1.8 * hand.true(first_jump)  # what the trap left on the table


def test_the_loader_is_fed_after_every_compute_move_kept_one_at_a_time():
    """bf16 and channels_last together do not gain here (channels_last is far slower on
    this model), so each is tried alone: bf16 kept, and the loader fed at once."""

    def model(k: Knobs) -> float:
        return {"default": 300.0, "tf32": 320.0, "bf16": 900.0}[k.precision] * (
            0.3 if k.channels_last else 1.0
        )

    hand = Hand(model, lambda k: 100.0 * max(k.num_workers, 1))
    _tune(hand, budget=14)
    calls = hand.calls
    bf16 = calls.index(next(k for k in calls if k.precision == "bf16" and not k.channels_last))
    assert calls[bf16 - 1].precision == "bf16" and calls[bf16 - 1].channels_last  # joint first
    assert calls[bf16 + 1].num_workers > calls[bf16].num_workers  # then the loader
    assert "tf32" not in {k.precision for k in calls[: bf16 + 1]}  # bf16 held: tf32 not tried


def test_no_batch_walk_on_a_curve_the_loader_caps():
    """The most workers listed feed a third of what the model runs: the loop waits two
    thirds of its window at any batch; no burst is spent on another batch size."""
    hand = Hand(lambda k: 3000.0 * k.batch_size / (k.batch_size + 32), lambda k: 60.0 * max(
        k.num_workers, 1))  # fmt: skip
    space = {n: GPU_SPACE[n] for n in ("batch_size", "num_workers", "prefetch_factor")}
    t = _tune(hand, space=space, budget=12)
    assert {k.batch_size for k in hand.calls} == {128}
    assert t.best.num_workers == 16


def test_a_batch_walk_stops_where_the_loader_starts_to_cap_it_and_feeds_it_first():
    """2 workers feed the model at batch 64; from 512 on the loop waits half its window:
    the walk stops there, the loader is fed at that size, and only then does it go on."""

    def model(k: Knobs) -> float:
        return 4000.0 * k.batch_size / (k.batch_size + 128)

    hand = Hand(model, lambda k: 800.0 * (k.num_workers or 1))
    space = {n: GPU_SPACE[n] for n in ("batch_size", "num_workers", "prefetch_factor")}
    t = _tune(hand, space=space, budget=16, base=Knobs(batch_size=64, num_workers=2,
                                                       prefetch_factor=4))  # fmt: skip
    calls = hand.calls
    assert [k.batch_size for k in calls[:4]] == [64, 128, 256, 512]  # fed enough to walk
    assert all(k.num_workers == 2 for k in calls[:4])
    assert calls[4] == calls[3].replace(num_workers=8)  # waited half: fed before walking on
    assert calls[5].batch_size == 1024 and calls[5].num_workers == 8
    assert t.best == Knobs(batch_size=1024, num_workers=8, prefetch_factor=4)


def test_a_starved_loop_only_adds_to_the_loader_in_the_rounds():
    """The loop waits for data at the most workers listed and no data path is offered: the
    rounds try a deeper queue and pinned memory, never fewer workers or a shallower queue."""
    hand = Hand(lambda k: 2000.0, lambda k: 100.0 * max(k.num_workers, 1))
    space = {"num_workers": [0, 2, 4], "prefetch_factor": [2, 4, 8], "pin_memory": [False, True]}
    _tune(hand, space=space, budget=10, base=Knobs(num_workers=4, prefetch_factor=4))
    assert all(k.num_workers == 4 for k in hand.calls)
    assert all((k.prefetch_factor or 2) >= 4 for k in hand.calls)


def test_the_data_path_is_tried_when_the_workers_run_out_a_copy_first():
    def loader(k: Knobs) -> float:
        per = {"files": 50.0, "predecoded": 800.0}[k.data_format]
        return per * (3.0 if k.decode == "gpu" else 1.0) * max(k.num_workers, 1)

    hand = Hand(lambda k: 2000.0 * (0.8 if k.decode == "gpu" else 1.0), loader)
    space = {"num_workers": [0, 4, 8], "prefetch_factor": [2, 4], "decode": ["cpu", "gpu"],
             "data_format": ["files", "predecoded"]}  # fmt: skip
    t = _tune(hand, space=space, budget=10, base=Knobs())
    paths = [(k.decode, k.data_format) for k in hand.calls if k.num_workers == 8]
    assert paths[:2] == [("cpu", "files"), ("cpu", "predecoded")]  # the copy first, it feeds
    assert t.best.data_format == "predecoded" and t.best.decode == "cpu"


def test_the_start_is_pytorchs_defaults():
    hand = _issue_landscape()
    t = tune_on(hand, GPU_SPACE, budget=6, device="cuda")
    assert hand.calls[0] == Knobs() and t.start == Knobs()
    assert hand.calls[0].precision == "default" and hand.calls[0].num_workers == 0


def test_a_stalled_reading_of_a_faster_model_is_run_again_not_believed():
    """bf16's first run stalls (reads 65% low); a move expected to be faster that reads
    clearly slower gets a second run, and is kept on its better one."""

    def scale(k: Knobs, nth: int, t: int) -> float:
        return 0.35 if k.precision == "bf16" and nth == 0 else 1.0

    hand = Hand(lambda k: {"default": 400.0, "tf32": 420.0, "bf16": 1000.0}[k.precision],
                lambda k: 5000.0, scale=scale)  # fmt: skip
    space = {"precision": ["default", "tf32", "bf16"]}
    t = _tune(hand, space=space, budget=8, base=Knobs(num_workers=8, prefetch_factor=2))
    assert hand.calls[1:3] == [hand.calls[1]] * 2 and hand.calls[1].precision == "bf16"
    assert t.best.precision == "bf16"


def test_on_a_cpu_nothing_is_expected_of_bf16_each_precision_is_measured():
    """bf16 autocast on a CPU without AMX ran 23x slower here: the GPU's expected order
    (bf16 first, a second run when it reads slower, the rest skipped) does not apply; each
    value is measured once and the fastest kept."""
    hand = Hand(lambda k: {"default": 400.0, "tf32": 400.0, "bf16": 20.0}[k.precision],
                lambda k: 5000.0)  # fmt: skip
    space = {"precision": ["default", "tf32", "bf16"], "channels_last": [False, True]}
    t = _tune(hand, space=space, budget=10, base=Knobs(num_workers=2, prefetch_factor=2),
              device="cpu")  # fmt: skip
    guided = hand.calls[:4]
    assert [k.precision for k in guided[:3]] == ["default", "tf32", "bf16"]  # space order
    assert sum(k.precision == "bf16" for k in hand.calls) == 1  # no second opinion
    assert not any(k.precision == "bf16" and k.channels_last for k in hand.calls)  # no joint
    assert t.best.precision in ("default", "tf32")


@pytest.mark.parametrize(
    ("workers", "sps", "wait", "need"),
    [(0, 80.0, 80.0, 1.3 * 400 / 100), (2, 200.0, 50.0, 1.3 * 400 / 100), (4, 400.0, 5.0, None)],
)
def test_loader_need_reads_the_model_speed_and_one_workers_rate_off_the_wait(
    workers, sps, wait, need
):
    r = BurstResult(knobs=Knobs(num_workers=workers), samples_per_s=sps, data_wait_pct=wait)
    m = Measured(r.knobs, (r,), sps, True)
    assert loader_need(m) == (pytest.approx(need) if need else None)
