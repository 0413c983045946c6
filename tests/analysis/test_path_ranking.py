"""workbench.analysis.path_ranking: each available data path's loader alone against the model.

The ranking logic runs on injected readings. Those for the GPU paths (decode=gpu, DALI's mixed
decode) are FAKES, not measurements: invented numbers in the shape a data-bound GPU box gives
(the CPU paths far below the model, the device paths near or above it), recorded here so that
the logic is tested on a machine without a GPU. The last tests measure the CPU paths for real.
"""

from __future__ import annotations

import json

import pytest
import torch
from workloads_for_tests import sleepy_workload

from workbench.analysis import data_paths
from workbench.analysis.advice import Suggestion
from workbench.analysis.data_paths import available_paths
from workbench.analysis.diagnosis import Diagnosis, take_paths
from workbench.analysis.loader_ceiling import LoaderResult
from workbench.analysis.path_ranking import REACH_SHARE, measure_paths, rank_paths, reaches
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.engine.convert import convert_dataset
from workbench.engine.window import BurstWindow
from workbench.engine.workloads import resolve_workload

CUDA = torch.device("cuda")
BASE = Knobs(batch_size=64, num_workers=4)
MODEL = 1000.0
"""The model's own ceiling in these fakes (samples/s on one resident batch)."""


@pytest.fixture
def cnn(tiny_data):
    return resolve_workload("cnn", tiny_data)


@pytest.fixture
def gpu_paths(cnn, monkeypatch):
    """The paths on a (named, never touched) CUDA device with 16 cores and DALI installed;
    no predecoded copy is built."""
    monkeypatch.setattr(data_paths, "dali_available", lambda: None)
    return available_paths(cnn, BASE, CUDA, cores=16)


class Recorded:
    """A measure function from fixed readings by path (FAKE numbers: see the module doc);
    records which knobs it was asked for."""

    def __init__(self, paths, readings: dict[str, float | str]):
        self.by_knobs = {p.knobs(BASE): name for p in paths if p.available
                         for name in [p.name] if name in readings}  # fmt: skip
        self.readings, self.asked = readings, []

    def __call__(self, knobs: Knobs) -> LoaderResult:
        self.asked.append(self.by_knobs[knobs])
        out = self.readings[self.by_knobs[knobs]]
        if isinstance(out, str):
            return LoaderResult(status="error", error=out, knobs=knobs)
        return LoaderResult(samples_per_s=out, knobs=knobs)


def _current(sps: float) -> dict[Knobs, LoaderResult]:
    """The diagnosis's own loader-alone reading of BASE."""
    return {BASE: LoaderResult(samples_per_s=sps, knobs=BASE)}


def test_the_first_path_that_reaches_the_model_is_named_with_its_numbers(gpu_paths):
    fake = Recorded(gpu_paths, {"cpu-all-cores": 480.0, "gpu-decode": 960.0, "dali": 1300.0})
    r = rank_paths(gpu_paths, BASE, MODEL, fake, known=_current(130.0))
    # decode=gpu reaches the model (96%) and changes less than DALI, which is faster still
    assert r.winner.path.name == "gpu-decode" and r.best.path.name == "dali"
    assert [x.path.name for x in r.readings] == ["dali", "gpu-decode", "cpu-all-cores", "cpu",
                                                 "predecoded"]  # fmt: skip
    assert "reaches the model's 1,000 samples/s: 960 from the loader alone (96%)" in r.headline()
    assert "(set decode=gpu, num_workers=8)" in r.headline()
    s = r.suggestion()
    assert (s.knob, s.value) == ("decode", "gpu")
    assert "960 samples/s" in s.why and "1,000" in s.why and "num_workers=8" in s.why
    text = "\n".join(r.lines())
    assert "* decode=gpu (files), 8 workers reading bytes" in text
    assert "30 per worker" in text  # 480 from 16 CPU workers; none for the GPU paths
    assert "(the diagnosis's own run)" in text  # the current path: read, not re-measured


def test_an_unavailable_path_is_listed_with_its_reason_and_never_measured(gpu_paths):
    fake = Recorded(gpu_paths, {"cpu-all-cores": 480.0, "gpu-decode": 960.0, "dali": 1300.0})
    r = rank_paths(gpu_paths, BASE, MODEL, fake, known=_current(130.0))
    assert sorted(fake.asked) == ["cpu-all-cores", "dali", "gpu-decode"]  # not cpu: known
    pre = next(x for x in r.readings if x.path.name == "predecoded")
    assert pre.status == "unavailable" and pre.samples_per_s is None
    assert "workbench data --format predecoded" in pre.note
    assert "workbench data --format predecoded" in "\n".join(r.lines())
    assert r.to_dict()["paths"][-1]["status"] == "unavailable"


def test_no_path_reaching_the_model_names_the_fastest_with_its_gap(gpu_paths):
    fake = Recorded(gpu_paths, {"cpu-all-cores": 480.0, "gpu-decode": 610.0, "dali": "boom"})
    r = rank_paths(gpu_paths, BASE, MODEL, fake, known=_current(130.0))
    assert r.winner is None and r.best.path.name == "gpu-decode"
    assert r.headline().startswith("no data path reaches the model's 1,000 samples/s: the "
                                   "fastest, decode=gpu")  # fmt: skip
    assert "610 from the loader alone, 39% short" in r.headline()
    s = r.suggestion()
    assert s.knob == "decode" and "still short of it" in s.why
    dali = next(x for x in r.readings if x.path.name == "dali")
    assert dali.status == "failed" and "boom" in dali.note  # a failed run: listed, never won
    assert [x.status for x in r.readings] == ["ok", "ok", "ok", "failed", "unavailable"]


def test_when_the_current_path_is_the_fastest_nothing_is_suggested(gpu_paths):
    fake = Recorded(gpu_paths, {"cpu-all-cores": 120.0, "gpu-decode": 90.0, "dali": 100.0})
    r = rank_paths(gpu_paths, BASE, MODEL, fake, known=_current(130.0))
    assert r.best.path.name == "cpu" and r.best.reused and r.suggestion() is None
    assert "(the knobs as they are)" in r.headline()


def test_no_run_starts_once_the_time_budget_is_spent(gpu_paths):
    fake = Recorded(gpu_paths, {"cpu-all-cores": 480.0, "gpu-decode": 960.0, "dali": 1300.0})
    now = iter(range(0, 1000, 40))  # each look at the clock: 40 s later
    r = rank_paths(gpu_paths, BASE, MODEL, fake, known=_current(130.0), budget_s=60.0,
                   clock=lambda: float(next(now)))  # fmt: skip
    assert fake.asked == ["cpu-all-cores"]  # 40 s in, the next two would start past 60 s
    skipped = [x for x in r.readings if x.status == "skipped"]
    assert [x.path.name for x in skipped] == ["gpu-decode", "dali"]
    assert all("60 s were spent" in x.note for x in skipped)


def test_reaching_is_a_share_of_the_model():
    assert reaches(REACH_SHARE * MODEL, MODEL) and not reaches(REACH_SHARE * MODEL - 1, MODEL)
    assert not reaches(None, MODEL)


def test_the_measured_path_replaces_the_rules_guess_in_the_advice(gpu_paths):
    fake = Recorded(gpu_paths, {"cpu-all-cores": 480.0, "gpu-decode": 960.0, "dali": 1300.0})
    r = rank_paths(gpu_paths, BASE, MODEL, fake, known=_current(130.0))
    d = Diagnosis(verdict="data-bound", reason="", workload="cnn", device="cuda", knobs=BASE,
                  full=BurstResult(), loader=None, compute=None)  # fmt: skip
    d.suggestions = [Suggestion("num_workers", 8, "rule"), Suggestion("loader", "dali", "rule"),
                     Suggestion("pin_memory", True, "rule")]  # fmt: skip
    take_paths(d, r)
    assert [(s.knob, s.value) for s in d.suggestions] == [("decode", "gpu"), ("pin_memory", True)]
    doc = json.loads(json.dumps(d.to_dict()))  # what `workbench diagnose --json` prints
    assert doc["paths"]["winner"] == "gpu-decode" and doc["paths"]["reach_share"] == REACH_SHARE
    assert doc["paths"]["paths"][0] == {**r.readings[0].path.to_dict(), "status": "ok",
                                        "samples_per_s": 1300.0, "note": "", "workers": 8,
                                        "per_worker": None, "reused": False}  # fmt: skip
    assert "Data paths" in d.summary() and "-> decode=gpu" in d.summary()


# -- measured for real, on the CPU -------------------------------------------------------------


def test_on_a_cpu_the_workers_and_a_built_predecoded_copy_are_measured(
    cnn, tiny_data, tmp_path, monkeypatch
):
    monkeypatch.setattr(data_paths, "dali_available", lambda: "NVIDIA DALI is not installed")
    monkeypatch.setenv("WORKBENCH_FORMATS", str(tmp_path))
    convert_dataset("predecoded", tiny_data / "images", tmp_path, workers=1)
    stages = []
    window = BurstWindow(seconds=0.3, warmup_steps=1, min_steps=2)
    r = measure_paths(cnn, Knobs(batch_size=8), torch.device("cpu"), 1e9, window=window,
                      progress=lambda stage, res: stages.append((stage, res.status)))  # fmt: skip
    assert stages == [("path cpu", "ok"), ("path cpu-all-cores", "ok"), ("path predecoded", "ok")]
    measured = {x.path.name: x for x in r.readings if x.measured}
    assert set(measured) == {"cpu", "cpu-all-cores", "predecoded"}
    assert all(x.samples_per_s > 0 for x in measured.values())
    cores = data_paths.usable_cores()
    assert measured["cpu"].workers == 0 and measured["predecoded"].workers == cores
    assert r.winner is None and r.best in measured.values()  # nothing reaches 10^9 samples/s
    assert {x.status for x in r.readings if not x.measured} == {"unavailable"}


def test_the_diagnosis_own_loader_run_is_reused_not_repeated(monkeypatch):
    monkeypatch.setattr(data_paths, "usable_cores", lambda: 2)
    wl = sleepy_workload(delay_s=0.002)
    mine = LoaderResult(samples_per_s=123.0, knobs=Knobs(batch_size=8))
    stages = []
    r = measure_paths(wl, Knobs(batch_size=8), torch.device("cpu"), 1e9, loader=mine,
                      window=BurstWindow(seconds=0.2, warmup_steps=1, min_steps=2),
                      progress=lambda stage, res: stages.append(stage))  # fmt: skip
    assert stages == ["path cpu-all-cores"]
    cpu = next(x for x in r.readings if x.path.name == "cpu")
    assert cpu.reused and cpu.samples_per_s == 123.0
