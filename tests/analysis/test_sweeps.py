import dataclasses
import threading

import pandas as pd
import pytest
from workloads_for_tests import tensor_workload

from workbench import Knobs, sweep
from workbench.analysis.sweeps import with_knob
from workbench.core.knobs import KNOB_NAMES, KnobError
from workbench.core.results import BurstResult
from workbench.history.store import open_store
from workbench.notebook import plots

FAST = {"seconds": 0.2, "warmup_steps": 1, "min_steps": 3}


def test_one_row_per_value_with_the_knob_varying(store_path):
    seen: list[BurstResult] = []
    df = sweep(tensor_workload(), "batch_size", [8, 16, 32], base=Knobs(num_workers=0),
               store=store_path, progress=seen.append, **FAST)  # fmt: skip
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
    assert list(df["num_workers"]) == [0, 1, 0, 1]
    assert set(df["batch_size"]) == {8} and set(df["grad_accum"]) == {2}


@pytest.mark.parametrize(
    ("knob", "values", "words"),
    [
        ("batch_size", [], "at least one value"),
        ("warp", [1, 2], "unknown knob"),
        ("batch_size", [16, 0], "batch_size=0 is not allowed: an integer from 1"),
        ("precision", ["fp32", "fp8"], "precision='fp8' is not allowed: one of fp32"),
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
    assert list(open_store(store_path).frame().columns) == list(full.columns)
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
