import dataclasses
import json
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset
from workloads_for_tests import heavy_workload, sleepy_workload, tensor_workload

from workbench import Knobs, Workload, diagnose
from workbench.analysis.advice import OVERLAP_SHARE, advise, compute_advice, data_advice
from workbench.analysis.diagnosis import (
    ABOVE_CEILING_FLOOR,
    WAIT_EXPLAINED_PCT,
    _why_it_waited,
    ceiling_problems,
    classify,
    judge,
    noise_margin,
)
from workbench.analysis.loader_ceiling import LoaderResult, run_loader_burst
from workbench.core.knobs import KnobError
from workbench.core.results import BurstResult
from workbench.engine import hardware
from workbench.engine.window import BurstWindow
from workbench.history.store import open_store

FAST = {"seconds": 0.3, "warmup_steps": 1, "min_steps": 3}
CPU = torch.device("cpu")


def test_a_loader_that_sleeps_per_item_is_data_bound(store_path):
    stages: list[str] = []
    d = diagnose(sleepy_workload(delay_s=0.01), Knobs(batch_size=8), store=store_path,
                 progress=lambda stage, r: stages.append(stage), **FAST)  # fmt: skip
    # data-bound: the loader alone again on the one other path a tensor dataset has here
    assert stages == ["full", "loader", "compute", "path cpu-all-cores"]
    assert d.verdict == "data-bound"
    assert d.loader_sps < d.compute_sps and d.full_sps > 0
    knobs = [s.knob for s in d.suggestions]
    assert knobs[0] == "num_workers" and "measured: the loader alone" in d.suggestions[0].why
    assert knobs.count("num_workers") == 1  # the measured path replaced the rule's guess
    assert [r.path.name for r in d.paths.readings if r.measured] == ["cpu-all-cores", "cpu"]
    assert d.to_dict()["paths"]["paths"][0]["name"] == "cpu-all-cores"
    assert "batch_size" not in knobs and "precision" not in knobs
    assert "pin_memory" not in knobs  # cannot act on a CPU: never suggested here
    text = d.summary()
    assert text.startswith("data-bound:") and "loader alone" in text
    assert "Data paths" in text and "not available: workload" in text  # no JPEGs to decode
    assert "raise the batch" not in text.lower() and "batch_size=" not in text
    # the two training bursts are recorded (compute-only as loader=synthetic), the loader run not
    rows = open_store(store_path).records()
    assert [r["knobs"]["loader"] for r in rows] == ["torch", "synthetic"]


def test_a_heavy_model_on_in_memory_tensors_is_compute_bound():
    d = diagnose(heavy_workload(), Knobs(batch_size=16), record=False, **FAST)
    assert d.verdict == "compute-bound"
    assert d.compute_sps < d.loader_sps
    knobs = [s.knob for s in d.suggestions]
    assert {"precision", "batch_size", "compile"} <= set(knobs)
    assert "num_workers" not in knobs  # loading is a rounding error here
    assert "compute-bound" in d.summary()
    doc = json.loads(json.dumps(d.to_dict()))
    assert doc["verdict"] == "compute-bound" and doc["compute"]["knobs"]["loader"] == "synthetic"


@pytest.mark.parametrize(
    ("loader", "compute", "verdict"),
    [(100, 400, "data-bound"), (400, 100, "compute-bound"), (100, 110, "balanced"),
     (110, 100, "balanced"), (None, 100, "unknown"), (100, 0.0, "unknown")],
)  # fmt: skip
def test_classify_by_the_slower_ceiling(loader, compute, verdict):
    assert classify(loader, compute) == verdict


@pytest.mark.parametrize("nw", [0, 1, 4])
@pytest.mark.parametrize("verdict", ["data-bound", "balanced"])
def test_no_batch_size_advice_unless_compute_bound(verdict, nw):
    knobs = Knobs(num_workers=nw)
    got = advise(verdict, knobs, CPU, tensor_workload(), 100.0, 100.0)
    assert got and all(s.knob != "batch_size" for s in got)


def test_compute_bound_with_serial_loading_suggests_workers_first():
    got = advise("compute-bound", Knobs(), CPU, tensor_workload(), 200.0, 100.0)
    assert got[0].knob == "num_workers"  # loading is a third of each step: overlap it first
    measured = advise("compute-bound", Knobs(), CPU, tensor_workload(), 900.0, 100.0,
                      data_wait_pct=33.8)  # fmt: skip
    assert measured[0].knob == "num_workers"  # the estimate says 10%, the burst waited 33.8%
    some = advise("compute-bound", Knobs(), CPU, tensor_workload(), 900.0, 100.0,
                  data_wait_pct=12.0)  # fmt: skip
    assert some[-1].knob == "num_workers"  # worth it, after the step's own rules
    fed = advise("compute-bound", Knobs(), CPU, tensor_workload(), 200.0, 100.0, data_wait_pct=3.0)
    assert "num_workers" not in [s.knob for s in fed]  # measured: loading costs nothing here


def test_the_loader_alone_is_measured_and_not_recorded(store_path):
    window = BurstWindow(seconds=0.2, min_steps=3)
    r = run_loader_burst(tensor_workload(), Knobs(batch_size=16), window=window)
    assert r.status == "ok" and r.samples_per_s > 0 and r.batches >= 3
    assert r.samples == r.batches * 16 and r.batch_ms_p50 > 0
    assert len(open_store(store_path)) == 0


def test_a_failing_full_burst_gives_an_unknown_verdict_with_the_reason():
    from workloads_for_tests import hungry_workload

    d = diagnose(hungry_workload(limit=4), Knobs(batch_size=8), record=False, **FAST)
    assert d.verdict == "unknown" and "oom" in d.reason
    assert [s.knob for s in d.suggestions] == ["batch_size"]


def test_the_synthetic_loader_cannot_be_diagnosed():
    with pytest.raises(KnobError, match="loader='synthetic' is not allowed"):
        diagnose(tensor_workload(), Knobs(loader="synthetic"), record=False)


def test_workers_advice_says_when_the_model_already_fills_every_core():
    busy = advise("data-bound", Knobs(), CPU, tensor_workload(), 100.0, 300.0, 1e6)
    idle = advise("data-bound", Knobs(), CPU, tensor_workload(), 100.0, 300.0, 10.0)
    assert busy[0].knob == idle[0].knob == "num_workers"
    assert "take cores from it" in busy[0].why and "take cores" not in idle[0].why


# -- advice that fits the workload ---------------------------------------------------------------


class _Tokenizing(Dataset):
    """Short strings turned into byte tokens on the CPU, ``delay_s`` per item (a tokenizer's
    cost): a text pipeline whose loading is real work but cheaper than the model's step."""

    def __init__(self, n: int = 512, block: int = 32, delay_s: float = 0.002) -> None:
        self.n, self.block, self.delay_s = n, block, delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.delay_s)
        text = f"review {i}: {'good ' * (i % 7)}{'bad ' * (i % 5)}".encode()[: self.block]
        ids = torch.zeros(self.block, dtype=torch.long)
        ids[: len(text)] = torch.tensor(list(text))
        return ids, torch.tensor(i % 4)


class _SlowClassifier(nn.Module):
    """A bag-of-tokens classifier whose step takes ``step_s`` (a sleep: the verdict then does
    not ride on how busy the test machine is)."""

    def __init__(self, step_s: float = 0.03) -> None:
        super().__init__()
        self.step_s = step_s
        self.embed, self.head = nn.Embedding(256, 32), nn.Linear(32, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        time.sleep(self.step_s)
        return self.head(self.embed(ids).mean(dim=1))


def text_workload() -> Workload:
    return Workload(name="text", model=_SlowClassifier, dataset=_Tokenizing, tokens_per_sample=32)


def image_workload() -> Workload:
    """Only what the advice reads: an ImageFolder behind the dataset."""
    return dataclasses.replace(tensor_workload(), image_dir=Path("img"))


IMAGE_WORDS = ("decode", "jpeg", "image")


def test_a_text_pipeline_that_waits_is_told_why_in_its_own_words():
    # Loading 16 ms per batch of 8, the model 30 ms or more (clearly slower, beyond the 15%
    # a loaded machine can move either ceiling): compute-bound, and with
    # num_workers=0 the loading runs between steps, so the full pipeline waits for it.
    d = diagnose(text_workload(), Knobs(batch_size=8), record=False, **FAST)
    assert d.verdict == "compute-bound", d.summary()
    assert d.full.data_wait_pct >= WAIT_EXPLAINED_PCT
    assert f"waited for data {d.full.data_wait_pct:.1f}%" in d.reason
    assert "num_workers=0" in d.reason and "add up instead of overlapping" in d.reason
    workers = next(s for s in d.suggestions if s.knob == "num_workers")  # as the reason says
    assert "__getitem__ and collate" in workers.why
    first = d.suggestions[0].knob == "num_workers"
    assert first == (d.full.data_wait_pct >= 100 * OVERLAP_SHARE)  # first where it gains most
    text = d.summary().lower()
    assert not [w for w in IMAGE_WORDS if w in text], text
    # The measured peak where a peak is expected; the capacity only as the capacity.
    batch = next(s for s in d.suggestions if s.knob == "batch_size")
    total = hardware.device_info(CPU).total_mem_mib
    peak = f"watch peak memory: {d.full.peak_mem_mib:,.0f} MiB at batch_size=8 now"
    assert peak in batch.why and f"of system RAM {total:,.0f} MiB" in batch.why


def test_an_image_pipeline_hears_of_decoding_and_a_text_one_of_preprocessing():
    expected = [
        (image_workload(), "decode in "),
        (text_workload(), "run the dataset's __getitem__ and collate in "),
        (tensor_workload(), "run the dataset's __getitem__ and collate in "),
    ]
    for wl, words in expected:
        workers = {s.knob: s.why for s in data_advice(Knobs(), CPU, wl)}["num_workers"]
        assert workers.startswith(words)
    image = {s.knob: s.why for s in data_advice(Knobs(), CPU, image_workload(), 1e6)}
    text = {s.knob: s.why for s in data_advice(Knobs(), CPU, text_workload(), 1e6)}
    own = {s.knob: s.why for s in data_advice(Knobs(), CPU, tensor_workload(), 1e6)}
    assert "cheaper decoding (smaller stored images" in image["num_workers"]
    assert "cheaper preprocessing (tokenize once ahead of time" in text["num_workers"]
    assert "cheaper preprocessing (do the dataset's per-item work once" in own["num_workers"]
    assert "loader" in image and "loader" not in text  # DALI reads image folders only


def test_watch_peak_memory_quotes_the_peak_never_the_capacity_in_its_place():
    total = hardware.device_info(CPU).total_mem_mib
    measured = {s.knob: s.why for s in compute_advice(Knobs(), CPU, text_workload(), 738.4)}
    assert measured["batch_size"].endswith(
        f"watch peak memory: 738 MiB at batch_size=32 now, of system RAM {total:,.0f} MiB"
    )
    unknown = {s.knob: s.why for s in compute_advice(Knobs(), CPU, text_workload())}
    assert (
        f"watch peak memory (not measured here; system RAM {total:,.0f} MiB)"
        in (unknown["batch_size"])
    )


def _ok(sps: float, **fields) -> BurstResult:
    return BurstResult(status="ok", workload="text", device="cpu", samples_per_s=sps, **fields)


def _judged(wl: Workload, knobs: Knobs, wait_pct: float, compute_sps: float = 100.0):
    full = _ok(70.0, data_wait_pct=wait_pct, peak_mem_mib=738.0)
    loader = LoaderResult(status="ok", samples_per_s=300.0)
    return judge(wl, knobs, CPU, full, loader, _ok(compute_sps, cpu_util_pct=150.0))


def test_workers_that_share_the_cores_explain_a_compute_bound_wait():
    d = _judged(text_workload(), Knobs(num_workers=2), wait_pct=25.0)
    assert d.verdict == "compute-bound"
    assert "waited for data 25.0%" in d.reason and "share" in d.reason
    assert "2 loader worker(s)" in d.reason
    assert "Cheaper preprocessing (tokenize once ahead of time" in d.reason
    assert d.suggestions[-1].knob in ("prefetch_factor", "persistent_workers")  # after compute's
    assert d.suggestions[0].knob != "num_workers"
    image = _judged(image_workload(), Knobs(num_workers=2), wait_pct=25.0)
    assert "Cheaper decoding (smaller stored images" in image.reason


def test_a_pipeline_fed_in_time_or_data_bound_gets_no_wait_explanation():
    fed = _judged(text_workload(), Knobs(num_workers=2), wait_pct=WAIT_EXPLAINED_PCT - 1)
    assert fed.verdict == "compute-bound" and "Yet" not in fed.reason
    slow_loader = _judged(text_workload(), Knobs(), wait_pct=60.0, compute_sps=1000.0)
    assert slow_loader.verdict == "data-bound" and "Yet" not in slow_loader.reason


def test_balanced_with_serial_loading_says_the_two_add_up():
    d = _judged(text_workload(), Knobs(), wait_pct=45.0, compute_sps=290.0)
    assert d.verdict == "balanced"
    assert "num_workers=0" in d.reason and "about 147 samples/s expected that way" in d.reason
    assert "toward the slower ceiling's 290 samples/s" in d.reason


def test_a_gpu_pipeline_with_workers_hears_of_uneven_batches():
    full = BurstResult(status="ok", samples_per_s=700.0, data_wait_pct=30.0)
    why = _why_it_waited(text_workload(), Knobs(num_workers=4), torch.device("cuda"), full,
                         2000.0, 1000.0)  # fmt: skip
    assert "arrive unevenly" in why and "4 worker(s)" in why and "prefetch" in why
    assert "cheaper preprocessing" in why and "decod" not in why


# --- a full pipeline faster than its compute-only ceiling is suspect (issue 25) ---


def _steady(sps: float, iqr_share: float = 0.02, **fields) -> BurstResult:
    """An ok burst whose steps spread ``iqr_share`` of their median."""
    return _ok(sps, step_ms_p50=10.0, step_ms_iqr=10.0 * iqr_share, **fields)


def _ceiling_judged(full: BurstResult, compute: BurstResult):
    loader = LoaderResult(status="ok", samples_per_s=900_000.0)
    return judge(tensor_workload(), Knobs(), CPU, full, loader, compute)


def test_a_full_pipeline_faster_than_its_compute_ceiling_is_suspect():
    # the recommender: samples counted from the flattened item ids
    d = _ceiling_judged(_steady(382_652.0, samples_from="all tensors"), _steady(217_653.0))
    (problem,) = d.suspect
    assert "the full pipeline (382,652 samples/s) is 76% faster than its compute-only " in problem
    assert "ceiling (217,653), beyond the bursts' noise (10%)" in problem
    assert "samples are miscounted (counted by all tensors" in problem
    assert "Workload(samples_of=...)" in problem and "ran slowed" in problem
    assert "SUSPECT (do not trust this diagnosis): the full pipeline" in d.summary()
    assert json.loads(json.dumps(d.to_dict()))["suspect"] == [problem]
    throttled = _ceiling_judged(_steady(200.0), _steady(100.0, throttle_reasons=["hw_slowdown"]))
    assert "(its throttle reasons: hw_slowdown)" in throttled.suspect[0]


@pytest.mark.parametrize(
    ("full_sps", "iqr_share", "suspect"),
    [(100.0, 0.02, False), (109.0, 0.02, False), (112.0, 0.02, True),  # beyond the 10% floor
     (130.0, 0.20, False), (145.0, 0.20, True)],  # two spreads of 20%: a 40% margin
)  # fmt: skip
def test_the_margin_is_the_bursts_own_noise_and_at_least_the_floor(full_sps, iqr_share, suspect):
    full, compute = _steady(full_sps, iqr_share), _steady(100.0, iqr_share)
    assert noise_margin(full, compute) == pytest.approx(max(ABOVE_CEILING_FLOOR, 2 * iqr_share))
    assert bool(_ceiling_judged(full, compute).suspect) is suspect


def test_a_slower_full_pipeline_or_a_failed_ceiling_is_not_suspect():
    assert _ceiling_judged(_steady(80.0), _steady(100.0)).suspect == []
    failed = BurstResult(status="error", error="boom")
    assert _ceiling_judged(_steady(200.0), failed).suspect == []
    assert ceiling_problems(_steady(200.0), None) == []
    assert ceiling_problems(_ok(200.0), _ok(100.0))  # no step spread known: the floor alone
