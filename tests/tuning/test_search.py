"""The tuner's search logic, on scripted bursts: deterministic, milliseconds per test.

``run_burst`` is replaced by a fake whose throughput, memory and failures are functions of
the knobs (and of how often these knobs ran, to script noise); the real-burst tests are in
test_tuner.py.
"""

import dataclasses
import statistics
import threading
from collections.abc import Callable

import pytest
import torch
from workloads_for_tests import tensor_workload

from workbench import Knobs, tune
from workbench.analysis.loader_ceiling import prefetched_batches, settled_warmup
from workbench.config.saved import ConfigError, save_config
from workbench.core.errors import InputError
from workbench.core.results import BurstResult
from workbench.engine import hardware
from workbench.engine.burst import BurstInterrupted, record_result
from workbench.engine.window import BurstWindow
from workbench.history.store import HistoryStore, StoreError, open_store
from workbench.tuning.search import midpoint
from workbench.tuning.tuner import default_space

Speed = Callable[[Knobs, int], "float | str"]


class FakeBursts:
    """Stands in for run_burst: ``speed(knobs, nth_run)`` gives samples/s or a failed status."""

    def __init__(self, speed: Speed, mem: Callable[[Knobs], float] = lambda k: 100.0,
                 wait: Callable[[Knobs], float] = lambda k: 5.0):  # fmt: skip
        self.speed, self.mem, self.wait = speed, mem, wait
        self.calls: list[Knobs] = []
        self.warmups: list[int] = []

    def __call__(self, workload, knobs: Knobs, **kwargs) -> BurstResult:
        """Records as run_burst does; "ctrl-c" records a cancelled burst and then raises
        BurstInterrupted with it, as run_burst does after a Ctrl-C."""
        nth = self.calls.count(knobs)
        self.calls.append(knobs)
        self.warmups.append(kwargs["window"].warmup_steps)
        out = self.speed(knobs, nth)
        if out == "ctrl-c":
            r = BurstResult(status="cancelled", workload="tiny", device="cpu", knobs=knobs)
            record_result(r, kwargs["record"], kwargs.get("store"))
            raise BurstInterrupted(r)
        if isinstance(out, str):
            r = BurstResult(status=out, error=f"fake {out}", workload="tiny", knobs=knobs)
        else:
            r = BurstResult(workload="tiny", device="cpu", knobs=knobs, samples_per_s=out,
                            peak_mem_mib=self.mem(knobs), data_wait_pct=self.wait(knobs),
                            step_ms_p50=1000.0 / out)  # fmt: skip
        record_result(r, kwargs["record"], kwargs.get("store"))
        return r


@pytest.fixture
def fake(monkeypatch):
    """Install a FakeBursts; the device has 1000 MiB, so the default margin's limit is 900."""
    real = hardware.device_info
    small = lambda d=None: dataclasses.replace(real(d), total_mem_mib=1000.0)  # noqa: E731
    monkeypatch.setattr(hardware, "device_info", small)

    def install(speed: Speed, **kw) -> FakeBursts:
        f = FakeBursts(speed, **kw)
        monkeypatch.setattr("workbench.tuning.tuner.run_burst", f)
        return f

    return install


def _tune(space, **kw):
    return tune(tensor_workload(), space, record=False, seconds=0.1, **kw)


def test_batch_size_grows_to_the_oom_then_bisects_to_a_measured_size(fake):
    f = fake(lambda k, n: "oom" if k.batch_size > 100 else float(k.batch_size))
    t = _tune({"batch_size": [16, 32, 64, 128, 256]}, budget=12)
    assert t.best.batch_size == 96  # between the listed 64 and 128: bisected, and measured
    sizes = [k.batch_size for k in f.calls]
    assert 96 in sizes and 256 not in sizes  # stopped growing at the first OOM
    assert sizes.index(128) < sizes.index(96) < sizes.index(112)
    assert t.best_result.knobs.batch_size == 96 and t.best_result.ok
    assert next(c for c in t.candidates if c.knobs == t.best).runs >= 2  # re-measured


@pytest.mark.parametrize(("margin", "limit", "best"), [(0.1, 900, 80), (0.5, 500, 40)])
def test_the_memory_margin_is_a_hard_limit(fake, margin, limit, best):
    fake(lambda k, n: float(k.batch_size), mem=lambda k: 100.0 + 10 * k.batch_size)
    t = _tune({"batch_size": [16, 32, 64, 128]}, budget=14, memory_margin=margin)
    assert t.limit_mib == pytest.approx(limit)
    assert t.best.batch_size == best and t.best_result.peak_mem_mib <= limit
    over = [c for c in t.candidates if c.status == "over limit"]
    assert over and all(not c.fits and c.knobs.batch_size > best for c in over)


def test_close_contenders_are_remeasured_so_a_lucky_burst_cannot_win(fake):
    lucky = {0: 50.0, 1: 130.0, 2: 110.0}  # workers=1 is really 100: its first burst was luck

    def speed(k, n):
        return 100.0 if k.num_workers == 1 and n > 0 else lucky[k.num_workers]

    f = fake(speed)
    t = _tune({"num_workers": [0, 1, 2]}, budget=12)
    assert t.best.num_workers == 2
    # a 30% swing is noise of ~20% per burst: each close contender gets the most runs, 4
    assert f.calls.count(Knobs(num_workers=1)) == 4 and f.calls.count(Knobs(num_workers=2)) == 4
    best = t.candidates[0]
    assert best.samples_per_s == 110.0 and best.spread_pct == 0.0
    assert t.candidates[1].spread_pct == pytest.approx(30.0)  # (130 - 100) / 100


def test_the_budget_counts_every_burst(fake):
    f = fake(lambda k, n: 100.0 + k.batch_size + k.num_workers)
    t = _tune({"batch_size": [8, 16, 32, 64, 128], "num_workers": [0, 1, 2, 3]}, budget=5)
    assert len(t.bursts) == len(f.calls) == 5 and t.stopped == "budget"


def test_a_data_bound_start_tries_data_knobs_first(fake):
    f = fake(lambda k, n: 100.0, wait=lambda k: 80.0 if k.num_workers == 0 else 5.0)
    _tune({"batch_size": [32, 64], "num_workers": [0, 1]}, budget=6)
    assert f.calls[1] == Knobs(num_workers=1)


def test_a_compute_bound_start_tries_compute_knobs_first(fake):
    f = fake(lambda k, n: 100.0, wait=lambda k: 2.0)
    _tune({"num_workers": [0, 1], "batch_size": [32, 64]}, budget=6)
    assert f.calls[1] == Knobs(batch_size=64)


def test_a_climb_stops_past_the_peak(fake):
    speeds = {0: 50.0, 1: 80.0, 2: 100.0, 3: 70.0, 4: 60.0, 6: 50.0, 8: 40.0}
    f = fake(lambda k, n: speeds[k.num_workers])
    t = _tune({"num_workers": list(speeds)}, budget=16)
    assert t.best.num_workers == 2
    # two clearly slower values in a row end the climb: 6 and 8 are never measured
    assert {k.num_workers for k in f.calls} == {0, 1, 2, 3, 4}


def test_a_climb_steps_over_one_dip(fake):
    # On few cores one worker can be slower than none while two are the fastest: a climb
    # that stopped at the first slower value would never see 2.
    speeds = {0: 290.0, 1: 250.0, 2: 330.0, 3: 260.0}
    fake(lambda k, n: speeds[k.num_workers])
    t = _tune({"num_workers": list(speeds)}, budget=12)
    assert t.best.num_workers == 2


@pytest.mark.parametrize("prefetch", [[2, 4, 8], [None, 2, 4, 8]])  # None: torch's default, 2
def test_left_over_budget_finds_a_pair_that_one_knob_moves_miss(fake, prefetch):
    # Measured on the 2-core machine: more workers alone or a deeper queue alone is slower,
    # both together is the fastest. The rounds converge on the start; a joint step finds it.
    speeds = {(1, 2): 100.0, (2, 2): 90.0, (1, 4): 90.0, (2, 4): 130.0, (0, None): 80.0}
    f = fake(lambda k, n: speeds.get((k.num_workers, k.prefetch_factor), 70.0))
    start = Knobs(num_workers=1, prefetch_factor=2)
    t = _tune({"num_workers": [0, 1, 2], "prefetch_factor": prefetch}, budget=16, base=start)
    assert (t.best.num_workers, t.best.prefetch_factor) == (2, 4)
    one_knob_moves = f.calls[: f.calls.index(Knobs(num_workers=2, prefetch_factor=4))]
    assert Knobs(num_workers=2, prefetch_factor=2) in one_knob_moves
    assert Knobs(num_workers=1, prefetch_factor=4) in one_knob_moves


def test_the_summary_says_when_the_runs_cannot_separate_best_and_start(fake):
    noisy_start = [100.0, 90.0, 110.0]
    fake(lambda k, n: 102.0 if k.num_workers == 1 else noisy_start[n % 3])
    t = _tune({"num_workers": [0, 1]}, budget=8)
    assert t.best == Knobs(num_workers=1) and t.start_runs >= 2  # first, and at the end
    assert t.speedup == pytest.approx(1.02, abs=0.06)
    assert t.speedup_low < 1.0 < t.speedup_high and t.separated is False
    assert "the runs cannot separate the best from the start" in t.summary()


def test_a_clear_speedup_is_stated_with_its_interval(fake):
    start, best = [50.0, 51.0, 49.0], [100.0, 98.0, 102.0]
    fake(lambda k, n: (best if k.num_workers == 1 else start)[n % 3])
    t = _tune({"num_workers": [0, 1]}, budget=8)
    assert t.speedup == pytest.approx(2.0, rel=0.02)
    assert 1.8 < t.speedup_low < t.speedup < t.speedup_high < 2.2
    runs = f"{t.candidates[0].ok_runs} and {t.start_runs} runs"
    line = f"{t.speedup:.2f}x ({t.speedup_low:.2f}-{t.speedup_high:.2f}, 95%) the start, {runs}"
    assert line in t.summary() and t.start_runs >= 2
    assert "cannot separate" not in t.summary()


def test_the_start_is_re_measured_among_the_contenders_at_the_end(fake):
    """The speed-up divides by a start run interleaved with the winner's last runs, not only
    by the first burst of a cold process (which read 28% high in a real tune)."""
    f = fake(lambda k, n: (100.0 + 10 * k.num_workers) * (1.0 + 0.02 * (n % 2)))
    t = _tune({"num_workers": [0, 1, 2, 3, 4]}, budget=12)
    last_start = max(i for i, k in enumerate(f.calls) if k == Knobs())
    assert last_start > f.calls.index(Knobs(num_workers=4))  # after the search reached it
    assert t.start_runs >= 2 and t.to_dict()["start_runs"] == t.start_runs
    assert {"speedup", "speedup_low", "speedup_high", "start_runs"} <= set(t.to_dict())


def test_failed_bursts_are_recorded_and_skipped(fake):
    def speed(k, n):
        if k.num_workers == 1:
            return "error"
        if k.precision == "bf16":
            raise RuntimeError("refused before it ran")
        return 100.0 + k.batch_size

    fake(speed)
    space = {"num_workers": [0, 1], "precision": ["default", "bf16"], "batch_size": [32, 64]}
    t = _tune(space, budget=10)
    assert t.best == Knobs(batch_size=64)
    failed = [r for r in t.bursts if r.status == "error"]
    assert {r.knobs.num_workers for r in failed} == {0, 1}
    assert "RuntimeError: refused before it ran" in {r.error for r in failed}
    assert all(not c.fits for c in t.candidates if c.status == "error")


def test_cancel_returns_the_best_so_far(fake):
    stop = threading.Event()
    f = fake(lambda k, n: float(k.batch_size))
    t = _tune({"batch_size": [32, 64, 128, 256]}, budget=20, cancel=stop,
              progress=lambda p: p.bursts == 2 and stop.set())  # fmt: skip
    assert len(f.calls) == 2 and t.stopped == "cancelled"
    assert t.best.batch_size == 64 and t.speedup == pytest.approx(2.0)


def test_ctrl_c_returns_the_best_so_far(fake):
    def speed(k, n):
        if k.batch_size == 128:
            raise KeyboardInterrupt  # before the burst recorded anything (a second Ctrl-C)
        return float(k.batch_size)

    fake(speed)
    t = _tune({"batch_size": [32, 64, 128]}, budget=20)
    assert t.stopped == "interrupted" and t.best.batch_size == 64
    assert [r.knobs.batch_size for r in t.bursts] == [32, 64]


@pytest.mark.parametrize("record", [True, False])
def test_ctrl_c_keeps_the_burst_it_stopped(fake, store_path, record):
    """run_burst raises BurstInterrupted with the burst a Ctrl-C stopped: the tune keeps it
    and stores it with the others."""
    fake(lambda k, n: "ctrl-c" if k.batch_size == 128 else float(k.batch_size))
    t = tune(tensor_workload(), {"batch_size": [32, 64, 128, 256]}, budget=20, seconds=0.1,
             record=record, store=store_path)  # fmt: skip
    assert t.stopped == "interrupted" and t.best.batch_size == 64
    assert [(r.knobs.batch_size, r.status) for r in t.bursts] == [
        (32, "ok"), (64, "ok"), (128, "cancelled")]  # fmt: skip
    stored = [row["id"] for row in open_store(store_path).records()] if record else []
    assert stored == ([r.id for r in t.bursts] if record else [])
    assert "3 of 20 bursts" in t.summary()


class FailingStore(HistoryStore):
    """A history whose every write fails, as a full disk or a lost network mount does."""

    writes = 0

    def append(self, record):
        self.writes += 1
        raise StoreError(f"{self.path} cannot be used (database or disk is full)")


def test_a_failing_store_costs_a_warning_not_the_measurements(fake, tmp_path):
    fake(lambda k, n: float(k.batch_size))
    store = FailingStore(tmp_path / "h.sqlite")
    with pytest.warns(RuntimeWarning, match="disk is full.*keeps its bursts") as caught:
        t = tune(tensor_workload(), {"batch_size": [32, 64]}, budget=4, seconds=0.1,
                 store=store)  # fmt: skip
    assert [r.status for r in t.bursts] == ["ok"] * len(t.bursts) and len(t.bursts) >= 2
    assert t.best.batch_size == 64 and t.best_result.samples_per_s == 64.0
    assert store.writes == len(t.bursts)  # each burst tried once: no second, "error" copy
    assert all(r.id is None for r in t.bursts) and len(caught) >= 1
    assert f"{len(t.bursts)} burst(s) measured but not stored" in t.summary()


def test_progress_reports_each_burst_and_the_best_so_far(fake):
    fake(lambda k, n: float(k.batch_size))
    seen = []
    t = _tune({"batch_size": [32, 64]}, budget=4, progress=seen.append)
    assert [p.bursts for p in seen] == list(range(1, len(t.bursts) + 1))
    assert seen[0].stage == "start" and seen[0].best == Knobs() and seen[0].knob is None
    assert seen[1].stage == "batch_size=64" and seen[1].knob == "batch_size"
    assert seen[-1].best.batch_size == 64 and seen[-1].budget == 4


def test_knobs_without_effect_here_are_not_measured(fake):
    f = fake(lambda k, n: 100.0)
    t = _tune({"pin_memory": [False, True]}, budget=5)
    assert all(not k.pin_memory for k in f.calls)
    assert any("pin_memory=True: no effect on cpu" in n for n in t.notes)


def test_prefetch_values_without_workers_are_skipped_not_fatal(fake):
    f = fake(lambda k, n: 100.0 + k.num_workers)
    t = _tune({"prefetch_factor": [2, 4], "num_workers": [0, 1]}, budget=8)
    assert all(k.prefetch_factor is None or k.num_workers > 0 for k in f.calls)
    assert t.best.num_workers == 1


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"space": {}}, "space=\\{\\} is not allowed: at least one knob"),
        ({"space": {"warp": [1]}}, "warp=1 is not allowed: unknown knob"),
        ({"space": {"batch_size": []}}, "at least one value"),
        ({"space": {"batch_size": [16, 0]}}, "batch_size=0 is not allowed: an integer from 1"),
        ({"space": {"world_size": [1, 2]}}, "world_size=\\[1, 2\\] is not allowed: one value"),
        ({"budget": 0}, "budget=0 is not allowed: an integer >= 1"),
        ({"budget": True}, "budget=True is not allowed"),
        ({"memory_margin": -0.1}, "memory_margin=-0.1 is not allowed: a number from 0 to 0.9"),
        ({"memory_margin": 0.95}, "memory_margin=0.95 is not allowed"),
        ({"seconds": 0}, "seconds=0 is not allowed"),
    ],
)
def test_bad_input_is_refused_before_any_burst(fake, kwargs, words):
    f = fake(lambda k, n: 100.0)
    args = {"space": {"batch_size": [16, 32]}, "budget": 4, **kwargs}
    space = args.pop("space")
    with pytest.raises(InputError, match=words):
        tune(tensor_workload(), space, record=False, **args)
    assert f.calls == []


@pytest.mark.parametrize(
    ("good", "bad", "mid"), [(64, 128, 96), (96, 112, 104), (64, 72, 68), (5, 7, 6)]
)
def test_midpoints_land_on_multiples_of_8_when_the_gap_allows(good, bad, mid):
    assert midpoint(good, bad) == mid


def test_warm_up_consumes_what_the_workers_prefetch(fake):
    f = fake(lambda k, n: 100.0 + k.num_workers)
    _tune({"num_workers": [0, 2, 3]}, base=Knobs(prefetch_factor=None), budget=3, warmup_steps=2)
    assert dict(zip([k.num_workers for k in f.calls], f.warmups, strict=True)) == {0: 2, 2: 4, 3: 6}


@pytest.mark.parametrize(
    ("knobs", "batches", "steps"),
    [(Knobs(), 0, 3), (Knobs(num_workers=3, prefetch_factor=4), 12, 12),
     (Knobs(num_workers=2, grad_accum=4), 4, 3), (Knobs(num_workers=4, grad_accum=3), 8, 3),
     (Knobs(num_workers=4, prefetch_factor=8, loader="synthetic"), 0, 3)],
)  # fmt: skip
def test_settled_warmup_covers_the_prefetch_queue(knobs, batches, steps):
    assert prefetched_batches(knobs) == batches
    assert settled_warmup(knobs, 3) == steps


def test_the_default_space_on_a_cpu_searches_batch_and_loader_knobs(monkeypatch):
    real = hardware.device_info
    cores = lambda d=None: dataclasses.replace(real(d), cpu_count=2)  # noqa: E731
    monkeypatch.setattr(hardware, "device_info", cores)
    space = default_space(torch.device("cpu"), tensor_workload(), Knobs(batch_size=32))
    assert space == {"batch_size": [16, 32, 64, 128, 256], "num_workers": [0, 1, 2],
                     "prefetch_factor": [2, 4]}  # fmt: skip


def test_a_job_of_several_ranks_searches_sharding_where_its_model_has_blocks(tiny_data):
    from workloads_for_tests import tiny_gpt

    cpu, two = torch.device("cpu"), Knobs(world_size=2)
    assert default_space(cpu, tiny_gpt(tiny_data), two)["sharding"] == ["ddp", "fsdp"]
    assert "sharding" not in default_space(cpu, tiny_gpt(tiny_data), Knobs())  # one rank
    assert "sharding" not in default_space(cpu, tensor_workload(), two)  # no blocks to shard


def test_the_default_space_on_a_gpu_starts_from_pytorchs_own_math(monkeypatch):
    real = hardware.device_info
    monkeypatch.setattr(hardware, "device_info", lambda d=None: real(torch.device("cpu")))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))
    space = default_space(torch.device("cuda"), tensor_workload(), Knobs())
    # default is what a script gets untouched; fp32-strict is a numerics choice, never faster
    assert space["precision"] == ["default", "tf32", "bf16"]


def test_a_start_batch_that_ooms_shrinks_to_a_measured_size_that_fits(fake):
    f = fake(lambda k, n: "oom" if k.batch_size > 100 else float(k.batch_size))
    t = _tune({"batch_size": [16, 32, 64, 128]}, base=Knobs(batch_size=128), budget=12)
    sizes = [k.batch_size for k in f.calls]
    assert sizes[:2] == [128, 64]  # the start ran out of memory: the next size down
    assert t.best.batch_size == 96 and t.best_result.ok  # then bisected up towards the OOM
    assert t.best in {r.knobs for r in t.bursts if r.ok}  # measured, not extrapolated
    assert t.start_result.status == "oom" and t.speedup is None  # no speed-up over an OOM


def test_a_start_batch_that_ooms_keeps_shrinking_past_sizes_that_also_oom(fake):
    f = fake(lambda k, n: "oom" if k.batch_size > 20 else float(k.batch_size))
    t = _tune({"batch_size": [16, 32, 64, 128]}, base=Knobs(batch_size=128), budget=12)
    assert [k.batch_size for k in f.calls][:4] == [128, 64, 32, 16]
    assert t.best.batch_size == 20 and t.best_result.ok  # between 16 (fits) and 24 (OOM)
    assert max(r.knobs.batch_size for r in t.bursts if r.ok) == 20


def test_when_no_batch_size_fits_the_tune_says_so(fake, tmp_path):
    f = fake(lambda k, n: "oom")
    t = _tune({"batch_size": [16, 32, 64]}, base=Knobs(batch_size=64), budget=12)
    assert sorted({k.batch_size for k in f.calls}) == [16, 32, 64]  # every smaller size tried
    assert len(f.calls) == 3 and t.stopped == "converged"
    assert t.best is None and t.best_result is None
    assert "no config fit" in t.summary()
    with pytest.raises(ConfigError, match="no config that ran and fits"):
        save_config(t, tmp_path / "tuned.yaml")


def test_the_saved_config_quotes_the_median_and_its_runs_not_the_luckiest_burst(fake, tmp_path):
    from workbench.config.saved import load_config

    best_runs = [196.1, 199.6, 195.0, 196.5]
    fake(lambda k, n: best_runs[n % 4] if k.num_workers == 1 else 100.0 + n)
    t = _tune({"num_workers": [0, 1]}, budget=10)
    runs = [r.samples_per_s for r in t.bursts if r.knobs == t.best]
    assert len(runs) >= 2 and max(runs) == 199.6
    cfg = load_config(save_config(t, tmp_path / "t.yaml"), check_machine=False)
    assert cfg.provenance["source"] == "tune"
    assert cfg.provenance["measured"]["samples_per_s"] == pytest.approx(statistics.median(runs))
    assert cfg.provenance["tune"]["samples_per_s_runs"] == pytest.approx(runs)
    assert cfg.provenance["tune"]["start_runs"] == t.start_runs >= 2
    assert cfg.provenance["tune"]["speedup_low"] == pytest.approx(t.speedup_low, abs=1e-3)
    assert f"(median of {len(runs)} runs)" in cfg.describe()


def test_the_default_space_never_offers_more_workers_than_cores(monkeypatch):
    real = hardware.device_info
    for cores in (1, 2, 3, 6, 64):
        few = lambda d=None, c=cores: dataclasses.replace(real(d), cpu_count=c)  # noqa: E731
        monkeypatch.setattr(hardware, "device_info", few)
        space = default_space(torch.device("cpu"), tensor_workload(), Knobs())
        assert max(space["num_workers"]) == min(cores, 16) and 0 in space["num_workers"]


def test_a_users_space_with_more_workers_than_cores_warns_and_runs(fake, monkeypatch):
    f = fake(lambda k, n: 100.0 + k.num_workers)
    real = hardware.device_info
    two = lambda d=None: dataclasses.replace(real(d), cpu_count=2, total_mem_mib=1000.0)  # noqa: E731
    monkeypatch.setattr(hardware, "device_info", two)
    with pytest.warns(RuntimeWarning, match=r"num_workers=\[4\] in the space: more loader"):
        _tune({"num_workers": [0, 2, 4]}, budget=6)
    assert Knobs(num_workers=4) in f.calls


def _loader_bound(k: Knobs) -> tuple[float, float]:
    """A model that runs 400 samples/s fed by workers that decode 100 each: (sps, wait %)."""
    model, per_worker = 400.0, 100.0
    if k.num_workers == 0:  # the loop loads, then trains: times add up
        sps = 1.0 / (1.0 / model + 1.0 / per_worker)
        return sps, 100.0 * (1.0 / per_worker) / (1.0 / model + 1.0 / per_worker)
    sps = min(model, per_worker * k.num_workers)
    return sps, 100.0 * (1.0 - sps / model)


def test_a_starved_loop_jumps_to_the_workers_its_data_wait_asks_for(fake, monkeypatch):
    monkeypatch.setattr(hardware, "_cpu_count", lambda: 16)
    f = fake(lambda k, n: _loader_bound(k)[0], wait=lambda k: _loader_bound(k)[1])
    space = {"num_workers": [0, 1, 2, 3, 4, 6, 8], "prefetch_factor": [2, 4]}
    t = _tune(space, budget=8)
    # 80 samples/s with 80% wait: the model alone runs 400, the loop loads 100: 4 workers,
    # 5.2 with headroom, so the smallest listed count above it, 6, with the deepest queue
    assert f.calls[1] == Knobs(num_workers=6, prefetch_factor=4)
    assert t.best.num_workers >= 4 and t.best_result.samples_per_s == 400.0


def test_the_batch_walk_picks_off_its_curve_not_its_luckiest_burst(fake):
    # The true curve rises to a plateau; 64 read 25% high once (luck). The raw maximum would
    # be 64; the parabola through all five sizes puts the top at the large sizes.
    readings = {16: 100.0, 32: 140.0, 64: 230.0, 128: 190.0, 256: 200.0, 512: 205.0}
    f = fake(lambda k, n: readings[k.batch_size] if n == 0 else readings[k.batch_size] * 0.99)
    from workbench.tuning.search import Search, smoothed_batch

    no_warmup = BurstWindow(warmup_steps=0)
    search = Search(lambda k: f(None, k, window=no_warmup, record=False), space={},
                    budget=10, limit_mib=None, device=torch.device("cpu"), workload=None,
                    cancel=threading.Event())  # fmt: skip
    walked = [Knobs(batch_size=b) for b in readings]
    for k in walked:
        search.measure(k, "walk")
    assert smoothed_batch(search, walked).batch_size >= 256
    assert smoothed_batch(search, walked[:2]) is None  # two sizes are no curve


def test_drift_larger_than_the_speedup_is_said_plainly(fake):
    """A machine that loses 2% a burst under a knob worth 3%: the start's runs (first, and
    again in the confirmation) read the drift, and the result says it exceeds the speed-up."""
    true = {0: 100.0, 1: 103.0}
    f = fake(lambda k, n: true[k.num_workers] * 0.98 ** (len(f.calls) - 1))
    t = _tune({"num_workers": [0, 1]}, budget=8)
    starts = [i for i, k in enumerate(f.calls) if k == Knobs()]
    assert len(starts) >= 2 and t.start_runs == len(starts)
    assert t.drift_pct == pytest.approx(100 * (1 - 0.98 ** (starts[-1] - starts[0])))
    assert t.drift_pct_per_burst == pytest.approx(-2.0)
    assert t.speedup_uncertain is True and t.drift_pct > 100 * abs(t.speedup - 1)
    assert "the runs cannot tell the speed-up from drift" in t.drift_sentence
    assert f"  drift: {t.drift_sentence}" in t.summary().splitlines()
    doc = t.to_dict()
    assert doc["drift_pct_per_burst"] == t.drift_pct_per_burst and doc["speedup_uncertain"]


def test_a_steady_machine_reads_no_drift(fake):
    fake(lambda k, n: 200.0 if k.num_workers == 1 else 100.0)
    t = _tune({"num_workers": [0, 1]}, budget=8)
    assert t.drift_pct == 0.0 and t.drift_pct_per_burst == 0.0 and t.speedup_uncertain is False
    assert t.drift_sentence == "" and "  drift: the start held within 0.0% over the tune" in (
        t.summary().splitlines()
    )


# -- the data path (decode, data_format, loader) ----------------------------------------------


@pytest.fixture
def fake_cuda(monkeypatch):
    """A CUDA device named, never touched: the host's facts, an sm_90 capability."""
    real = hardware.device_info
    monkeypatch.setattr(hardware, "device_info", lambda d=None: real(torch.device("cpu")))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))
    return torch.device("cuda")


@pytest.fixture
def cnn_predecoded(tiny_data, tmp_path, monkeypatch):
    """The cnn workload with a predecoded copy built (where only this test looks), no other."""
    from workbench.engine.convert import convert_dataset
    from workbench.engine.workloads import resolve_workload

    monkeypatch.setenv("WORKBENCH_FORMATS", str(tmp_path))
    convert_dataset("predecoded", tiny_data / "images", tmp_path, workers=1)
    return resolve_workload("cnn", tiny_data)


@pytest.mark.parametrize("dali", [True, False])
def test_the_default_space_on_cuda_holds_the_data_paths_built_and_installed(
    fake_cuda, cnn_predecoded, monkeypatch, dali
):
    from workbench.analysis import data_paths

    monkeypatch.setattr(data_paths, "dali_available", lambda: None if dali else "not installed")
    space = default_space(fake_cuda, cnn_predecoded, Knobs())
    assert space["decode"] == ["cpu", "gpu"]
    assert space["data_format"] == ["files", "predecoded"]  # shards and lmdb: not built
    assert space.get("loader") == (["torch", "dali"] if dali else None)
    assert "decode" not in default_space(fake_cuda, tensor_workload(), Knobs())  # no JPEGs


def test_the_default_space_on_a_cpu_has_no_data_path_even_for_images(cnn_predecoded, monkeypatch):
    real = hardware.device_info
    cores = lambda d=None: dataclasses.replace(real(d), cpu_count=2)  # noqa: E731
    monkeypatch.setattr(hardware, "device_info", cores)
    space = default_space(torch.device("cpu"), cnn_predecoded, Knobs(batch_size=32))
    assert space == {"batch_size": [16, 32, 64, 128, 256], "num_workers": [0, 1, 2],
                     "prefetch_factor": [2, 4]}  # fmt: skip


def _path_bursts(speed: Callable[[Knobs], tuple[float, float]]) -> tuple[list[Knobs], Callable]:
    """A scripted run for tune_on: ``speed(knobs)`` -> (samples/s, data wait %)."""
    calls: list[Knobs] = []

    def run(knobs: Knobs) -> BurstResult:
        calls.append(knobs)
        sps, wait = speed(knobs)
        return BurstResult(knobs=knobs, samples_per_s=sps, data_wait_pct=wait,
                           step_ms_p50=1000.0 / sps)  # fmt: skip

    return calls, run


def test_a_loop_still_waiting_after_the_workers_jump_tries_the_data_path_next():
    from workbench.tuning.tuner import tune_on

    def speed(k: Knobs) -> tuple[float, float]:
        if k.decode == "gpu":  # decoded on the device: fed, at the model's speed
            return 900.0 + k.batch_size, 1.0
        return 100.0 * min(k.num_workers + 1, 3), 60.0  # CPU decode: starved however many

    calls, run = _path_bursts(speed)
    space = {"batch_size": [32, 64, 128], "num_workers": [0, 1, 2], "decode": ["cpu", "gpu"]}
    t = tune_on(run, space, budget=12, base=Knobs(batch_size=32))
    assert calls[:3] == [Knobs(batch_size=32), Knobs(batch_size=32, num_workers=2),
                         Knobs(batch_size=32, num_workers=2, decode="gpu")]  # fmt: skip
    assert t.best.decode == "gpu" and t.best.batch_size == 128  # then the batch, fed


def test_a_fed_loop_meets_the_data_path_in_the_rounds_only():
    from workbench.tuning.tuner import tune_on

    calls, run = _path_bursts(lambda k: (100.0 + k.batch_size + (5 if k.decode == "gpu" else 0),
                                         2.0))  # fmt: skip
    space = {"batch_size": [32, 64, 128], "decode": ["cpu", "gpu"]}
    tune_on(run, space, budget=12, base=Knobs(batch_size=32))
    first_gpu = next(i for i, k in enumerate(calls) if k.decode == "gpu")
    assert first_gpu > next(i for i, k in enumerate(calls) if k.batch_size != 32)


def test_a_close_call_is_measured_side_by_side_not_against_an_old_reading():
    """The machine drifts 3% a burst. The rival (prefetch 4) is truly 2% faster than the
    current config, whose only run is from four bursts before: against that old reading it
    would lose. The current config runs again beside the rival, and the rival wins."""
    from workbench.tuning.search import Search

    def run(k: Knobs) -> BurstResult:
        true = 1020.0 if k.prefetch_factor == 4 else 1000.0
        sps = true * 0.97 ** len(search.bursts)
        return BurstResult(knobs=k, samples_per_s=sps, peak_mem_mib=1.0, data_wait_pct=0.0)

    search = Search(run, space={}, budget=20, limit_mib=None, device=torch.device("cpu"),
                    workload=None, cancel=threading.Event())  # fmt: skip
    current = Knobs(num_workers=8, prefetch_factor=2)
    rival = current.replace(prefetch_factor=4)
    search.measure(current, "start")
    for size in (8, 16, 24):  # other moves in between
        search.measure(current.replace(batch_size=size), "elsewhere")
    search.measure(rival, "rival")
    assert search.score(rival) < search.score(current)  # the old reading would win
    assert search.prefer(current, rival) == rival
    assert [r.knobs for r in search.bursts[-2:]] == [rival, current]  # run beside it
    # a rival far behind (more than drift could explain) costs no burst
    far = Knobs(num_workers=8, prefetch_factor=8)
    search.measure(far, "far")
    search.runs[far][-1].samples_per_s = 500.0
    for size in (8, 16, 24, 40):
        search.measure(current.replace(batch_size=size, num_workers=4), "elsewhere")
    before = len(search.bursts)
    assert search.prefer(current, far) == current and len(search.bursts) == before


def test_the_bisection_goes_straight_to_the_edge_the_walks_peaks_point_at(fake):
    """Peaks of 100 + 4 MiB a sample put the 900 MiB limit at batch 200: the first size the
    bisection measures is 200 (a multiple of 8 at the edge), and no size above it runs."""
    f = fake(lambda k, n: float(k.batch_size), mem=lambda k: 100.0 + 4 * k.batch_size)
    t = _tune({"batch_size": [32, 64, 128, 256]}, budget=12, base=Knobs(batch_size=32))
    sizes = [k.batch_size for k in f.calls]
    assert sizes[:4] == [32, 64, 128, 256]  # 256 peaks at 1124 MiB: over the limit
    assert sizes[4] == 200 and max(s for s in sizes if s != 256) == 200
    assert t.best.batch_size == 200


def test_the_default_space_on_cuda_holds_fp8_where_float8_can_act(fake_cuda, monkeypatch):
    pytest.importorskip("torchao")  # the dev extra installs it
    fp8 = ["off", "tensorwise", "rowwise"]
    assert default_space(fake_cuda, tensor_workload(), Knobs())["fp8"] == fp8  # a 16x32 Linear
    assert "fp8" not in default_space(fake_cuda, tensor_workload(features=10), Knobs())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (8, 0))
    assert "fp8" not in default_space(fake_cuda, tensor_workload(), Knobs())  # no float8 cores


def test_the_tuner_tries_fp8_once_precision_is_bf16(fake, monkeypatch):
    from workbench.engine import fp8

    monkeypatch.setattr(fp8, "device_refusal", lambda device: None)  # as if it had float8 cores
    gains = {("default", "off"): 100.0, ("bf16", "off"): 200.0, ("bf16", "tensorwise"): 260.0,
             ("bf16", "rowwise"): 240.0}  # fmt: skip
    f = fake(lambda k, n: gains[(k.precision, k.fp8)])
    t = _tune({"precision": ["default", "bf16"], "fp8": ["off", "tensorwise", "rowwise"]},
              budget=10)  # fmt: skip
    assert (t.best.precision, t.best.fp8) == ("bf16", "tensorwise")
    assert ("bf16", "rowwise") in {(k.precision, k.fp8) for k in f.calls}  # each recipe measured
