import dataclasses
import threading

import pandas as pd
import pytest
from workloads_for_tests import tensor_workload

from workbench import Knobs, sweep
from workbench.analysis import sweeps
from workbench.analysis.sweeps import with_knob
from workbench.core.knobs import KNOB_NAMES, KnobError
from workbench.core.results import BurstResult
from workbench.history.store import open_store
from workbench.notebook import plots

FAST = {"seconds": 0.2, "warmup_steps": 1, "min_steps": 3}


def test_one_row_per_value_with_the_knob_varying(store_path):
    seen: list[BurstResult] = []
    df = sweep(tensor_workload(), "batch_size", [8, 16, 32], base=Knobs(num_workers=0),
               store=store_path, progress=seen.append, reference_every=None,
               **FAST)  # fmt: skip
    assert len(df) == 3 and list(df["batch_size"]) == [8, 16, 32]
    assert set(df["status"]) == {"ok"} and (df["samples_per_s"] > 0).all()
    fields = [f.name for f in dataclasses.fields(BurstResult)]
    assert [f for f in fields if f not in df.columns] == []  # every field, as in wb.history()
    assert [k for k in KNOB_NAMES if k not in df.columns] == ["nccl"]  # its variables instead
    assert df.attrs["knob"] == "batch_size"
    assert [r.id for r in seen] == list(df["id"])  # progress got each burst as it landed
    assert [row["id"] for row in open_store(store_path).records()] == list(df["id"])


def test_other_knobs_are_held_and_repeats_interleave():
    base = Knobs(batch_size=8, grad_accum=2)
    df = sweep(tensor_workload(), "num_workers", [0, 1], base=base, repeats=2, record=False,
               **FAST)  # fmt: skip
    assert list(df["num_workers"]) == [0, 1, 0, 1, 0]  # the first value again, for drift
    assert list(df["reference"]) == [False] * 4 + [True]
    assert set(df["batch_size"]) == {8} and set(df["grad_accum"]) == {2}


@pytest.mark.parametrize(
    ("knob", "values", "words"),
    [
        ("batch_size", [], "at least one value"),
        ("warp", [1, 2], "unknown knob"),
        ("batch_size", [16, 0], "batch_size=0 is not allowed: an integer from 1"),
        ("precision", ["default", "fp8"], "precision='fp8' is not allowed: one of default"),
        ("batch_size", "16", "a list of values"),
    ],
)
def test_bad_values_are_refused_before_any_burst(knob, values, words, store_path):
    with pytest.raises(KnobError, match=words):
        sweep(tensor_workload(), knob, values, store=store_path, **FAST)
    assert len(open_store(store_path)) == 0


def test_zero_workers_unsets_what_needs_workers():
    base = Knobs(num_workers=2, prefetch_factor=4, persistent_workers=True)
    k = with_knob(base, "num_workers", 0)
    assert k.num_workers == 0 and k.prefetch_factor is None and not k.persistent_workers
    with pytest.raises(KnobError, match="needs num_workers"):
        with_knob(Knobs(), "prefetch_factor", 4)  # asked for explicitly: an error, not a repair


def test_an_empty_sweep_has_the_columns_of_a_full_one(store_path):
    """A sweep cancelled before its first burst, and an empty history, keep every column."""
    stop = threading.Event()
    stop.set()
    empty = sweep(tensor_workload(), "batch_size", [8, 16], cancel=stop, record=False, **FAST)
    full = sweep(tensor_workload(), "batch_size", [8], record=False, **FAST)
    assert empty.empty and list(empty.columns) == list(full.columns)
    drift = ["reference", "drift_factor", "samples_per_s_corrected"]  # a sweep's own
    assert [*open_store(store_path).frame().columns, *drift] == list(full.columns)
    for frame in (empty, full):  # UTC timestamps in both
        dtype = frame["created_at"].dtype
        assert isinstance(dtype, pd.DatetimeTZDtype) and str(dtype.tz) == "UTC"
    assert plots.sweep(full).to_dict() and plots.comparable(empty, Knobs(), "batch_size").empty


def test_cancel_returns_the_bursts_so_far():
    stop = threading.Event()
    df = sweep(tensor_workload(), "batch_size", [8, 16, 32], cancel=stop, record=False,
               progress=lambda r: stop.set(), **FAST)  # fmt: skip
    assert list(df["batch_size"]) == [8]


def test_sweep_chart_draws_throughput_and_memory_against_the_knob():
    df = sweep(tensor_workload(), "batch_size", [8, 16], record=False, **FAST)
    spec = plots.sweep(df).to_dict()
    titles = [c["title"]["text"] for c in spec["hconcat"]]
    assert titles[0].startswith("Throughput") and titles[1].startswith("Peak memory")
    assert all("batch_size" in t for t in titles)


# -- drift: a machine that slows down between bursts ------------------------------------------

TRUE_SPEED = {8: 100.0, 16: 101.5, 32: 103.0}
"""Each doubling of the batch is truly 1.5% faster: 3% from the first value to the last."""


class DriftingBursts:
    """Stands in for run_burst on a machine that loses ``slowdown`` of its speed every burst
    (thermal, another job): burst n reads ``TRUE_SPEED * (1 - slowdown) ** n``."""

    def __init__(self, slowdown: float) -> None:
        self.slowdown, self.calls = slowdown, 0

    def __call__(self, workload, knobs: Knobs, **kwargs) -> BurstResult:
        sps = TRUE_SPEED[knobs.batch_size] * (1 - self.slowdown) ** self.calls
        self.calls += 1
        return BurstResult(workload="tiny", device="cpu", knobs=knobs, samples_per_s=sps,
                           step_ms_p50=1000.0 * knobs.batch_size / sps,
                           peak_mem_mib=10.0 * knobs.batch_size)  # fmt: skip


def _drifting(monkeypatch, slowdown: float, **kw) -> pd.DataFrame:
    monkeypatch.setattr(sweeps, "run_burst", DriftingBursts(slowdown))
    return sweep(tensor_workload(), "batch_size", [8, 16, 32], record=False, **FAST, **kw)


def _ranked(df: pd.DataFrame, column: str) -> list[int]:
    values = df[~df["reference"]].groupby("batch_size")[column].median()
    return list(values.sort_values(ascending=False).index)


def test_a_drift_of_2_percent_a_burst_misranks_the_old_sweep_and_not_the_new(monkeypatch):
    old = _drifting(monkeypatch, 0.02, reference_every=None)
    assert _ranked(old, "samples_per_s") == [8, 16, 32]  # upside down: 32 is truly fastest
    assert old.attrs["drift"]["drift_pct"] is None  # the first value ran once: no reading

    new = _drifting(monkeypatch, 0.02)  # the default: the first value again at the end
    assert list(new["batch_size"]) == [8, 16, 32, 8] and list(new["reference"]) == [0, 0, 0, 1]
    assert _ranked(new, "samples_per_s_corrected") == [32, 16, 8]
    corrected = new.groupby("batch_size")["samples_per_s_corrected"].median()
    assert corrected[32] / corrected[8] == pytest.approx(1.03, abs=0.001)  # linear vs 0.98^n
    assert new["drift_factor"].iloc[-1] == pytest.approx(0.98**3)
    drift = new.attrs["drift"]
    assert drift["drift_pct"] == pytest.approx(100 * (1 - 0.98**3)) and drift["exceeds"]
    assert drift["effect_pct"] == pytest.approx(3.0, abs=0.1)
    assert "drifted 5.9% over the sweep" in drift["sentence"]
    assert (
        "more than the 3.0% between the values: these bursts cannot rank them"
        in (drift["sentence"])
    )


def test_without_drift_the_factors_are_one_and_nothing_is_said(monkeypatch):
    df = _drifting(monkeypatch, 0.0, reference_every=2)
    assert list(df["batch_size"]) == [8, 16, 32, 8] and (df["drift_factor"] == 1.0).all()
    assert list(df["samples_per_s_corrected"]) == list(df["samples_per_s"])
    assert df.attrs["drift"]["drift_pct"] == 0.0 and df.attrs["drift"]["sentence"] == ""
    assert df.attrs["drift"]["exceeds"] is False


def test_the_chart_leaves_out_the_extra_runs_and_draws_corrected_throughput(monkeypatch):
    df = _drifting(monkeypatch, 0.02)
    spec = plots.sweep(df).to_dict()
    assert spec["hconcat"][0]["title"]["text"].startswith("Throughput (samples/s, drift-corrected)")
    assert spec["hconcat"][0]["title"]["subtitle"] == "3 bursts"  # not 4: 8 counted once
    old = _drifting(monkeypatch, 0.02, reference_every=None)
    assert (
        plots.sweep(old)
        .to_dict()["hconcat"][0]["title"]["text"]
        .startswith("Throughput (samples/s) vs")
    )


def test_a_sharding_sweep_on_one_rank_keeps_the_whole_model_and_says_why(tiny_data):
    """fsdp on one rank cannot act: both rows hold the whole model, and the fsdp row says so
    (on two ranks, tests/distributed/test_jobs.py: each holds half)."""
    from workloads_for_tests import tiny_gpt

    from workbench.engine.sharding import ONE_RANK

    df = sweep(tiny_gpt(tiny_data), "sharding", ["ddp", "fsdp"], base=Knobs(batch_size=2),
               record=False, reference_every=None, **FAST)  # fmt: skip
    assert list(df["sharding"]) == ["ddp", "fsdp"] and set(df["status"]) == {"ok"}
    assert df["param_mib_per_rank"].nunique() == 1 and df["param_mib_per_rank"].iloc[0] > 0
    assert [n.get("sharding") for n in df["no_effect"]] == [None, ONE_RANK]
