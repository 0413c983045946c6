"""Reference results: every shipped figure carries its provenance, and the lessons' sweeps on a
GPU measure what they teach (not the loader), judged from the recorded figures on a CPU."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from workbench.core.knobs import Knobs
from workbench.workshop import reference


def test_every_shipped_entry_has_its_provenance_and_the_lessons_have_figures():
    refs = reference.load()
    assert {r.kind for r in refs} == {"published", "measured", "derived"}
    for lesson in ("01", "02", "03", "04", "05", "06", "07", "08"):
        assert len(reference.table(lesson, refs)), lesson
    a100 = reference.find("dle-a100-amp-1gpu", refs)
    assert (a100.value, a100.batch_size, a100.units) == (2470.0, 256, "images/s")
    assert "DeepLearningExamples" in a100.cited() and "2026-12-03" in a100.cited()


def test_an_entry_without_provenance_is_refused(tmp_path):
    entry = json.loads((reference.reference_dir() / "resnet50.json").read_text())["entries"][0]
    good = dict(entry, id="x")
    (tmp_path / "a.json").write_text(json.dumps({"entries": [good]}))
    assert reference.find("x", reference.load(tmp_path)).value == entry["value"]
    bad = {k: v for k, v in entry.items() if k != "url"}
    (tmp_path / "a.json").write_text(json.dumps({"entries": [bad]}))
    with pytest.raises(ValueError, match="lacks url"):
        reference.load(tmp_path)
    with pytest.raises(ValueError, match="kind='guess'"):
        reference.parse(dict(entry, kind="guess"))
    own = dict(entry, kind="measured", id="h200", command="workbench sweep ...")
    assert reference.parse(own).kind == "measured"  # a GPU session's figure fits the format


def test_mfu_is_derived_from_the_throughput_the_flops_and_the_datasheet_peak():
    mfu = reference.find("dle-a100-amp-1gpu-mfu")
    # 2,470 images/s x 24.29 GFLOP / 312 TFLOP/s (A100 dense fp16) = 19.2 %
    assert mfu.value == pytest.approx(19.2, abs=0.1) and mfu.kind == "derived"
    assert "07" in mfu.lessons and "312 TFLOP/s" in mfu.formula


def test_the_flops_constant_is_what_the_workbench_counts_for_resnet50():
    import torch
    from torchvision.models import resnet50

    from workbench.engine.workloads.base import Workload, count_train_flops

    wl = Workload(name="r50", model=lambda: resnet50(weights=None, num_classes=1000),
                  dataset=lambda: None)  # fmt: skip
    x, y = torch.zeros(2, 3, 224, 224), torch.zeros(2, dtype=torch.long)
    assert count_train_flops(wl, (x, y)) == pytest.approx(reference.RESNET50_TRAIN_FLOPS, rel=0.01)


def test_beside_puts_the_sweep_over_the_references():
    df = pd.DataFrame({"precision": ["default", "bf16", "bf16"], "samples_per_s": [40.0, 10, 12],
                       "status": ["ok", "ok", "ok"]})  # fmt: skip
    table = reference.beside(df, "precision", "03")
    mine = table[table["source"] == "your sweep"]
    assert mine["value"].tolist() == [40.0, 11.0]
    assert (table["source"] != "your sweep").sum() == len(reference.table("03"))
    again = pd.concat([df, df.iloc[:1].assign(samples_per_s=20.0)], ignore_index=True)
    again["reference"] = [False, False, False, True]  # default run again, for drift
    mine = reference.beside(again, "precision", "03")
    assert mine[mine["source"] == "your sweep"]["value"].tolist() == [40.0, 11.0]


def test_a_cpu_ratio_opposite_to_the_gpu_is_called_out():
    note = reference.direction_note(0.4, "dle-a100-amp-1gpu", "dle-a100-tf32-1gpu", "bf16")
    assert "OPPOSITE of a GPU" in note and "2.63x" in note
    same = reference.direction_note(1.5, "dle-a100-amp-1gpu", "dle-a100-tf32-1gpu", "bf16")
    assert "same direction" in same
    assert "No ratio" in reference.direction_note(None, "dle-a100-amp-1gpu", "dle-a100-tf32-1gpu",
                                                  "bf16")  # fmt: skip


def test_on_a_gpu_the_compute_lessons_are_never_data_bound_and_lesson_2_reaches_the_model():
    """The recorded figures: one CPU core decodes 265 JPEGs/s at 224 px (this project); the kept
    H200 run trains resnet50 in channels_last fastest in fp16, and at PyTorch's default math
    near its TF32 row (the lessons' GPU setting). Strict fp32 is slower than TF32, so these
    bound every precision the lessons sweep."""
    from workbench.workshop import checks as workshop

    decode = reference.find("wb-cpu-decode-1worker").value
    fastest = reference.find("wb-gpu-r50-fp16").value
    for lesson in ("03", "04", "06"):
        plan = workshop.lesson_plan(lesson, gpu=True)
        assert plan.teaches == "compute" and plan.workload == "resnet50"
        assert "data-bound" not in workshop.gpu_verdicts(plan, fastest, decode), lesson
    # what lessons 3 and 4 did before: resnet50 fed by num_workers=0 is data-bound at every point
    old = workshop.LessonPlan("resnet50", Knobs(batch_size=64), "precision", ("default", "bf16"),
                              "compute")  # fmt: skip
    assert set(workshop.gpu_verdicts(old, fastest, decode)) == {"data-bound"}
    # lesson 2 (default math, channels_last: TF32 is the nearest kept row) starts data-bound and
    # its sweep reaches the model
    data = workshop.gpu_verdicts(workshop.lesson_plan("02", gpu=True),
                                 reference.find("wb-gpu-r50-tf32").value, decode)  # fmt: skip
    assert data[0] == "data-bound" and data[-1] == "compute-bound"
    assert workshop.lesson_plan("03", gpu=False).workload == "cnn"


def _path_entry(ref_id: str, what: str, value: float, notes: str = "") -> dict:
    """A data-path entry as benchmarks/publish_gpu.py generates it (figures made up here)."""
    return {"id": ref_id, "lessons": ["02", "05"], "kind": "measured", "workload": "resnet50",
            "what": what, "value": value, "units": "images/s", "hardware": "1x NVIDIA H200",
            "precision": "bf16", "batch_size": 128, "source": "workbench GPU run gpu-x.json",
            "command": "bash benchmarks/gpu_session.sh", "url": "docs/development.md#gpu-runs",
            "run": "benchmarks/results/gpu-x.json", "notes": notes}  # fmt: skip


def test_the_data_paths_wait_for_a_gpu_session_then_table_each_path_beside_the_ceiling(tmp_path):
    waiting = reference.data_paths()  # the shipped files: no GPU session has measured them yet
    assert waiting["path"].tolist() == [reference.DATA_PATHS_WAITING]
    assert waiting.drop(columns="path").isna().all().all()
    train = "training throughput through one data path: "
    alone = "the loader alone (no model) on one data path: "
    entries = [
        _path_entry("wb-gpu-path-ceiling", train + "one resident batch (loader=synthetic): the "
                    "ceiling", 4000.0),
        _path_entry("wb-gpu-path-cpu-few", train + "decode=cpu, 8 workers", 1000.0),
        _path_entry("wb-gpu-loader-cpu-few", alone + "decode=cpu, 8 workers", 1200.0,
                    "150 images/s a worker"),
        _path_entry("wb-gpu-loader-gpu-inline", alone + "decode=gpu, overlap off", 9000.0,
                    "9,000 images/s a GPU"),
    ]  # fmt: skip
    (tmp_path / "gpu_runs.json").write_text(json.dumps({"entries": entries}))
    refs = reference.load(tmp_path)
    table = reference.data_paths(refs)
    assert table["path"].tolist() == [
        "one resident batch (loader=synthetic): the ceiling",
        "decode=cpu, 8 workers",
        "decode=gpu, overlap off",
    ]
    cpu = table.iloc[1]
    assert (cpu["loader_alone_images_per_s"], cpu["training_images_per_s"]) == (1200.0, 1000.0)
    assert cpu["of_ceiling_pct"] == 25.0 and cpu["loader_alone_per"] == "150 images/s a worker"
    assert pd.isna(table.iloc[0]["of_ceiling_pct"])  # the ceiling is not a share of itself
    inline = table.iloc[2]  # measured alone, no training burst: no share to give
    assert inline["loader_alone_images_per_s"] == 9000.0 and pd.isna(inline["of_ceiling_pct"])
    assert "gpu-x.json" in inline["source"]
    assert reference.table("02", refs).empty  # tabled once, by data_paths
    assert reference.beside(pd.DataFrame(), "num_workers", "05", refs=refs).empty


def _gpu_sweep(knob: str, values: list, **held) -> pd.DataFrame:
    """A sweep's frame as a GPU would give it: one row per value, every held knob a column."""
    setting = {"workload": "resnet50", "batch_size": 128, "loader": "synthetic",
               "channels_last": True, "precision": "default", "status": "ok", **held}  # fmt: skip
    rows = [{**setting, knob: v, "samples_per_s": 1000.0 + i} for i, v in enumerate(values)]
    return pd.DataFrame(rows)


def test_beside_says_which_reference_ran_your_setting_and_puts_those_first():
    table = reference.beside(_gpu_sweep("precision", ["default", "bf16"]), "precision", "03")
    mine, refs = table[table["source"] == "your sweep"], table[table["source"] != "your sweep"]
    assert mine["setting"].iloc[1] == ("precision=bf16 (workload=resnet50, batch_size=128, "
                                       "channels_last=True, loader=synthetic)")  # fmt: skip
    words = dict(zip(refs["setting"], refs["like_yours"], strict=True))
    bf16 = words["bf16 (autocast), batch 128, channels_last"]
    assert bf16 == "same setting as yours at precision=bf16"
    tf32 = words["TF32, batch 128, channels_last"]
    assert tf32.startswith("nearest to yours at precision=default") and "stands in" in tf32
    strict = words["fp32-strict (IEEE: TF32 off), batch 128, channels_last"]
    assert strict == "for scale: differs from yours in precision=fp32-strict"
    assert words["TF32, batch 256"].startswith("for scale: a published figure")
    assert refs["like_yours"].tolist()[:2] == [bf16, tf32]  # like yours first
    both = reference.beside(_gpu_sweep("precision", ["default", "tf32"]), "precision", "03")
    tf32 = both.set_index("setting").loc["TF32, batch 128, channels_last", "like_yours"]
    assert tf32.startswith("same setting as yours at precision=tf32; nearest to yours at "
                           "precision=default: TF32 stands in")  # fmt: skip


def test_beside_on_a_cpu_or_in_nchw_compares_with_no_kept_row():
    cpu = _gpu_sweep("precision", ["default", "bf16"], workload="cnn")
    table = reference.beside(cpu, "precision", "03")
    kept = table[table["source"].str.contains("workbench GPU run")]
    assert kept["like_yours"].eq("for scale: resnet50, yours ran cnn").all()
    nchw = _gpu_sweep("precision", ["bf16"], channels_last=False)
    words = reference.beside(nchw, "precision", "03").set_index("setting")["like_yours"]
    bf16 = words["bf16 (autocast), batch 128, channels_last"]
    assert bf16 == "for scale: differs from yours in channels_last=True"


def _kept(ref_id: str, value: float, **fields) -> reference.Reference:
    base = {"lessons": ("11",), "kind": "measured", "workload": "resnet50", "what": "x",
            "units": "images/s", "hardware": "1x NVIDIA H200", "precision": "bf16 (autocast)",
            "batch_size": 128, "source": "workbench GPU run gpu-x.json", "command": "c",
            "url": "docs/development.md#gpu-runs", "device_name": "NVIDIA H200",
            "run": "benchmarks/results/gpu-x.json"}  # fmt: skip
    return reference.Reference(id=ref_id, value=value, **{**base, **fields})


def test_the_cudnn_note_sets_the_knobs_effect_beside_the_orders():
    shipped = reference.cudnn_benchmark_note()
    # the kept run: (3,990 + 3,819) / (4,306 + 3,816) on over off; the two offs 12% apart
    assert "0.96x" in shipped and "12% apart" in shipped and "more than the lessons' 5%" in shipped
    assert "no gain that the run can tell" in shipped
    ids = reference.CUDNN_ORDER
    real = [_kept(i, v) for i, v in zip(ids, (1000.0, 1300.0, 1310.0, 1010.0), strict=True)]
    note = reference.cudnn_benchmark_note(band=0.05, refs=real)
    assert "+30% from the knob" in note and "1% apart" in note and "less than" in note


def test_the_mfu_note_computes_the_gap_from_the_entries():
    note = reference.mfu_note()
    kept = reference.find("wb-gpu-r50-bf16-mfu")
    assert f"{kept.value:.1f}%" in note and kept.id in note and "dle-a100-amp-1gpu-mfu" in note
    peak = reference.ratio("nvidia-h200-bf16-dense", "nvidia-a100-bf16-dense")
    bandwidth = reference.ratio("nvidia-h200-sxm-bandwidth", "nvidia-a100-80gb-sxm-bandwidth")
    assert f"grew {peak:.1f}x" in note and f"bandwidth {bandwidth:.1f}x" in note
    assert peak > bandwidth  # the reason: the peak outgrew what paces a convnet


def test_the_mfu_note_reads_the_datasheets_of_the_gpu_the_kept_run_measured():
    refs = [r for r in reference.load() if r.id != "wb-gpu-r50-bf16-mfu"]
    on_h100 = _kept("wb-gpu-r50-bf16-mfu", 12.0, units="% of peak",
                    device_name="NVIDIA H100 80GB HBM3")  # fmt: skip
    note = reference.mfu_note([*refs, on_h100])
    peak = reference.ratio("nvidia-h100-bf16-dense", "nvidia-a100-bf16-dense")
    bandwidth = reference.ratio("nvidia-h100-sxm-bandwidth", "nvidia-a100-80gb-sxm-bandwidth")
    assert "12.0% of the NVIDIA H100 80GB HBM3 dense bf16 peak" in note
    assert f"From the A100 to the H100 the datasheets' dense bf16 peak grew {peak:.1f}x" in note
    assert f"memory bandwidth {bandwidth:.1f}x (2,039 to 3,350 GB/s)" in note and "H200" not in note
    pcie = reference.mfu_note([*refs, _kept("wb-gpu-r50-bf16-mfu", 9.0, device_name="NVIDIA H100 "
                                            "PCIe")])  # fmt: skip
    assert "no datasheet entries for the NVIDIA H100 PCIe" in pcie and "grew" not in pcie
    assert reference.datasheets_of("NVIDIA H200 NVL") is None  # not the SXM's figures


def test_the_published_h100_and_h200_anchors_carry_their_sources():
    refs = reference.load()
    for ref_id in ("mlperf-train-v3.0-r50-8xh100", "mlperf-train-v4.0-r50-8xh200"):
        r = reference.find(ref_id, refs)
        assert r.gpus == 8 and r.units == "images/s per GPU" and "01" in r.lessons
        assert "github.com/mlcommons/training_results_v" in r.url and r.read_on == "2026-12-07"
        assert "Not confirmed here" in r.notes  # the rate is approximate, and says so
    assert not any(r.id.startswith("mlperf-") for r in reference.mfu_references(refs))
    h100 = reference.find("llmc-gpt2-124m-h100-step-ms", refs)
    assert (h100.value, h100.gpus, h100.published) == (139.0, 8, "2024-10-13")
    assert "modded-nanogpt" in h100.url and "not confirmed here" in h100.notes
    titan = [reference.find(f"torchtitan-llama31-8b-h100-{k}", refs).value
             for k in ("bf16", "compile", "compile-fp8")]  # fmt: skip
    assert titan == [5762.0, 6667.0, 8532.0]
    assert set(reference.table("12", refs)["what"]) >= {h100.what}


def test_the_datasheet_entries_are_the_peaks_the_workbench_computes_mfu_with():
    from workbench.engine import hardware

    for ref_id in ("nvidia-a100-bf16-dense", "nvidia-h100-bf16-dense", "nvidia-h200-bf16-dense"):
        r = reference.find(ref_id)
        assert r.value * 1e12 == pytest.approx(hardware.peak_flops(r.hardware, "bf16")), ref_id
        assert r.batch_size is None and r.url.startswith("https://www.nvidia.com/")


def test_an_entry_must_name_its_batch_size_even_when_it_has_none():
    entry = json.loads((reference.reference_dir() / "datasheets.json").read_text())["entries"][0]
    assert reference.parse(entry).batch_size is None
    with pytest.raises(ValueError, match="lacks batch_size"):
        reference.parse({k: v for k, v in entry.items() if k != "batch_size"})
    with pytest.raises(ValueError, match="lacks value"):
        reference.parse(dict(entry, value=None))


def test_the_kept_direction_note_says_tf32_stands_in_for_default():
    note = reference.direction_note(0.3, "wb-gpu-r50-bf16", "wb-gpu-r50-tf32", "bf16 / default",
                                    old_stands_for="default")  # fmt: skip
    ratio = reference.ratio("wb-gpu-r50-bf16", "wb-gpu-r50-tf32")
    assert f"at {ratio:.2f}x TF32" in note and "OPPOSITE of a GPU" in note
    assert reference.NEAREST_TO_DEFAULT in note and "wb-gpu-r50-bf16 / wb-gpu-r50-tf32" in note
    table = reference.precision_ratios()
    assert table.set_index("id").loc["wb-gpu-r50-bf16", "x wb-gpu-r50-tf32"] == round(ratio, 2)


def test_the_feeding_note_divides_the_kept_rate_by_what_its_own_workers_delivered():
    """The kept H200 run's bf16 rate over its own JPEG run's rate a worker (699 images/s over
    8 workers: about 50 cores), and over the test VM's faster core (about 16) as a bound."""
    fed = reference.find("wb-gpu-r50-jpeg-8workers")
    workers = fed.knobs["num_workers"]
    cores = reference.find("wb-gpu-r50-bf16").value / (fed.value / workers)
    note = reference.feeding_note()
    assert f"so about {cores:.0f} cores" in note and f"with {workers} workers" in note
    vm = reference.ratio("wb-gpu-r50-bf16", "wb-cpu-decode-1worker")
    assert f"still about {vm:.0f}" in note and round(cores) > round(vm)
