"""Every published GPU figure comes from a kept run: benchmarks/publish_gpu.py and its checks.

The test reads the real README.md, docs/ and notebooks/reference/ against the real kept runs
(benchmarks/results/gpu-*.json), then shows on copies that a figure edited by hand, a figure
typed outside a generated block, and an entry naming a command its run did not record are
each caught."""

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
_ROOT = _BENCH.parent
UNRECORDED = "gpu-20261204-nvidia-h200-unrecorded.json"


@pytest.fixture(scope="module")
def publish():
    spec = importlib.util.spec_from_file_location("publish_gpu", _BENCH / "publish_gpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["publish_gpu"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def copy(tmp_path):
    """The published files and the kept runs, copied: a root to edit."""
    for rel in ("README.md", "docs", "notebooks", "benchmarks/results"):
        src, dst = _ROOT / rel, tmp_path / rel
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.ipynb_checkpoints"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    return tmp_path


def test_the_published_gpu_figures_are_the_kept_runs(publish):
    assert publish.problems() == []


def test_the_first_run_is_marked_unrecorded_wherever_it_is_quoted(publish):
    readme = (_ROOT / "README.md").read_text()
    assert f"`benchmarks/results/{UNRECORDED}`: unrecorded: " in readme
    entries = json.loads(publish.REFERENCE.read_text())["entries"]
    assert entries and all(e["command"].startswith("unrecorded: ") for e in entries)
    assert all(e["run"] == f"benchmarks/results/{UNRECORDED}" for e in entries)
    assert not any(e["command"] == "bash benchmarks/gpu_session.sh" for e in entries)


def test_a_figure_edited_by_hand_is_stale(publish, copy):
    readme = copy / "README.md"
    text = readme.read_text()
    assert "| bf16 | 4,325 |" in text
    readme.write_text(text.replace("| bf16 | 4,325 |", "| bf16 | 4,400 |"))
    assert publish.stale(copy / "benchmarks/results", copy) == ["README.md"]


def test_a_changed_kept_run_makes_every_place_that_quotes_it_stale(publish, copy):
    kept = copy / "benchmarks/results" / UNRECORDED
    doc = json.loads(kept.read_text())
    doc["steps"][0]["bursts"][2]["samples_per_s"] = 4400  # bf16
    kept.write_text(json.dumps(doc))
    stale = publish.stale(copy / "benchmarks/results", copy)
    assert sorted(stale) == ["README.md", "docs/development.md",
                             "notebooks/reference/gpu_runs.json"]  # fmt: skip


def test_a_gpu_figure_typed_outside_a_block_is_found(publish, copy):
    assert publish.stray_figures(copy) == []
    with (copy / "docs" / "data.md").open("a") as f:
        f.write("\nOn the H200, bf16 trains 4,325 images/s on a resident batch.\n")
    found = publish.stray_figures(copy)
    assert len(found) == 1 and found[0].startswith("docs/data.md: '4,325 images/s'")


def test_the_old_readme_section_would_fail(publish, copy):
    """What the README said before this check: a table typed under a line that names a
    command which did not produce it."""
    old = ("The first GPU session (`bash benchmarks/gpu_session.sh`, one NVIDIA H200):\n\n"
           "| burst | samples/s | step ms p50 |\n| --- | ---: | ---: |\n"
           "| bf16 | 4,325 | 29.4 |\n")  # fmt: skip
    (copy / "README.md").write_text((copy / "README.md").read_text() + "\n" + old)
    assert [s.split(" in: ")[0] for s in publish.stray_figures(copy)] == ["README.md: '4,325'"]


def test_an_entry_naming_a_command_its_run_did_not_record_is_found(publish, copy):
    ref = copy / "notebooks/reference/gpu_runs.json"
    doc = json.loads(ref.read_text())
    doc["entries"][0]["command"] = "bash benchmarks/gpu_session.sh"  # as the first file said
    doc["entries"][1].pop("run")
    ref.write_text(json.dumps(doc))
    bad = publish.reference_problems(copy, copy / "benchmarks/results")
    assert len(bad) == 2
    assert "command 'bash benchmarks/gpu_session.sh', but" in bad[0]
    assert "run None is no kept run" in bad[1]


def _write_kept(results: Path, stamp: str, device: str, step: dict, command: str,
                torch: str = "2.12.0") -> Path:  # fmt: skip
    """One kept run of one step, as gpu_session.py writes it, under ``results``; ``stamp``: the
    file name's date, and time where it has one (``20270105``, ``20270105-1000``)."""
    doc = {"schema": "workbench-gpu-run/1", "recorded": True, "dry": False,
           "command": command, "git_commit": "abcdef1234", "git_dirty": False,
           "started_at": f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T10:00:00+00:00",
           "device": device, "environment": {"versions": {"torch": torch, "cuda": "13.0"}},
           "steps": [step]}  # fmt: skip
    path = results / f"gpu-{stamp}-{device.lower().replace(' ', '-')}.json"
    path.write_text(json.dumps(doc))
    return path


def _recorded_run(results: Path, strict: str = "fp32", device: str = "NVIDIA H200") -> Path:
    """A kept run as the GPU session writes it, holding the precision row only; ``strict``:
    the IEEE burst's name, ``fp32`` before issue 28 (its own row label), ``fp32-strict`` after."""
    knobs = {"batch_size": 128, "loader": "synthetic", "channels_last": True}
    row = ("precisions fp32/tf32/bf16/fp16" if strict == "fp32"
           else "precisions default/fp32-strict/tf32/bf16/fp16")  # fmt: skip
    bursts = [{"label": f"{row}: {p}", "status": "ok",
               "knobs": {**knobs, "precision": p}, "samples_per_s": sps, "step_ms_p50": ms,
               "step_ms_mean": ms * 1.01, "peak_mem_mib": 6000.0, "step_ms": [ms] * 10}
              for p, sps, ms in ((strict, 1000.0, 128.0), ("tf32", 3000.0, 42.7),
                                 ("bf16", 4000.0, 32.0), ("fp16", 4100.0, 31.2))]  # fmt: skip
    step = {"name": "check", "status": "passed", "bursts": bursts}
    return _write_kept(results, "20270102-1000", device, step,
                       "bash benchmarks/gpu_session.sh /tmp/out")  # fmt: skip


@pytest.mark.parametrize("strict", ["fp32", "fp32-strict"])
def test_a_newer_recorded_run_replaces_the_figures_it_holds(publish, copy, strict):
    _recorded_run(copy / "benchmarks/results", strict)
    runs = publish.load_runs(copy / "benchmarks/results")
    body = publish.render(publish.TABLES[0], runs)
    assert "| bf16 | 4,000 | 32.0 | 32.3 | 6,000 | [1] |" in body
    assert ("[1] `benchmarks/results/gpu-20270102-1000-nvidia-h200.json`: "
            "`bash benchmarks/gpu_session.sh /tmp/out`, commit abcdef1, NVIDIA H200, "
            "torch 2.12.0, 2027-01-02") in body  # fmt: skip
    jpeg = next(line for line in body.splitlines() if line.startswith("| bf16 on JPEGs"))
    assert jpeg.endswith("| [2] |") and "(short epochs" in jpeg  # still the old run's row
    assert f"[2] `benchmarks/results/{UNRECORDED}`: unrecorded: " in body
    doc = publish.reference_doc(runs)
    bf16 = next(e for e in doc["entries"] if e["id"] == "wb-gpu-r50-bf16")
    assert bf16["value"] == 4000 and bf16["command"] == "bash benchmarks/gpu_session.sh /tmp/out"
    assert bf16["notes"].startswith("4.0x IEEE fp32")  # from the same run's fp32
    assert publish.stale(copy / "benchmarks/results", copy)  # the published files now lag


def test_an_h100_run_is_named_as_one_and_prose_naming_another_gpu_is_found(publish, copy):
    """The H100 is a first-class target: its figures are tabled under its own name beside the
    published H100 and H200 anchors, and prose that still names the H200 as the kept run's GPU
    is listed until it is reworded."""
    results = copy / "benchmarks/results"
    _recorded_run(results, "fp32-strict", device="NVIDIA H100 80GB HBM3")
    (results / UNRECORDED).unlink()
    runs = publish.load_runs(results)
    body = publish.render(publish.TABLES[0], runs)
    assert "commit abcdef1, NVIDIA H100 80GB HBM3, torch 2.12.0" in body
    assert "| published, for scale: MLPerf Training v3.0 ResNet-50" in body
    assert "8x NVIDIA H100 SXM 80GB (NVIDIA DGX H100) | 7,000 | - | - | - | [a] |" in body
    assert "8x NVIDIA H200 SXM 141GB | 7,940 | - | - | - | [b] |" in body
    bf16 = next(e for e in publish.reference_doc(runs)["entries"] if e["id"] == "wb-gpu-r50-bf16")
    assert bf16["device_name"] == "NVIDIA H100 80GB HBM3"
    assert bf16["hardware"].startswith("1x NVIDIA H100 80GB HBM3")
    words = publish.device_words(results, copy)
    assert words and all("measured on NVIDIA H100 80GB HBM3" in w for w in words)
    assert any(w.startswith("notebooks/03_precision.ipynb: 'kept H200'") for w in words)
    publish_all(publish, copy)
    assert any(p.startswith("a device named by hand: ") for p in publish.problems(results, copy))
    assert publish.device_words() == []  # the shipped prose names the kept run's own GPU


def test_the_guides_mig_table_follows_the_kept_peaks(publish, copy):
    """The instructor guide's MIG table is generated from the runs' peaks: a newer run with
    smaller fp32 peaks moves lesson 3's fp32 rows from "out of memory" on a 10 GB slice."""
    guide = (_ROOT / "notebooks/README.md").read_text()
    assert "<!-- gpu-table: mig-slices -->" in guide
    old = publish.blocks(publish.load_runs(copy / "benchmarks/results"))["mig-slices"]
    assert "| 10 GB | " in old and "3: default, fp32-strict, tf32 at batch 128" in old
    _recorded_run(copy / "benchmarks/results", "fp32-strict")  # every peak 6,000 MiB
    new = publish.blocks(publish.load_runs(copy / "benchmarks/results"))["mig-slices"]
    assert "| 3: fp32-strict, batch 128 | 6,000 | wb-gpu-r50-fp32 |" in new
    ten = next(line for line in new.splitlines() if line.startswith("| 10 GB |"))
    assert "fp32-strict" not in ten.split(" | ")[2]  # out of memory no more
    assert "notebooks/README.md" in publish.stale(copy / "benchmarks/results", copy)


def test_a_block_without_a_generator_is_refused(publish):
    text = "<!-- gpu-table: nonsense -->\nold\n<!-- /gpu-table -->\n"
    with pytest.raises(ValueError, match="no generator for gpu-table 'nonsense'"):
        publish.fill(text, {"readme": ""}, "X.md")


def test_the_command_line_check_passes_here(publish, capsys):
    assert publish.main(["--check"]) == 0
    assert sys.modules["gpu_record"].kept_runs()[0].name == UNRECORDED


def test_a_recorded_command_line_shows_no_store_password(publish, monkeypatch):
    """A kept run's provenance names its command; a class store's password in it is masked."""
    record = sys.modules["gpu_record"]
    argv = ["benchmarks/x.py", "--store", "postgresql://ada:Pw-Rec-3@10.0.0.5/class"]
    assert record.command_line(argv).endswith("postgresql://ada:***@10.0.0.5/class")
    monkeypatch.setenv("WORKBENCH_COMMAND", "run --store=postgres://u:Pw-Env-4@h/db")
    assert record.command_line() == "run --store=postgres://u:***@h/db"


# -- the data-path table (issue 29) ------------------------------------------------------------


def test_the_data_path_table_waits_for_the_first_gpu_session(publish):
    """No kept run has the rows yet: every place that shows the table says so, and the
    lessons' reference file has no data-path entry."""
    for name in ("README.md", "docs/development.md"):
        text = (_ROOT / name).read_text()
        block = text.split("<!-- gpu-table: data-paths -->\n", 1)[1].split("<!-- /gpu-table")[0]
        assert block == publish.DATA_PATHS_WAITING + "\n", name
    ids = [e["id"] for e in json.loads(publish.REFERENCE.read_text())["entries"]]
    assert not [i for i in ids if i.startswith(("wb-gpu-path-", "wb-gpu-loader-"))]


def _paths_run(results: Path, stamp: str = "20270103-1000", *, ceiling=(4300.0, 4100.0),
               gpu=4050.0) -> Path:  # fmt: skip
    """A kept run as the GPU session writes its loader step: tagged bursts, the loader alone
    in the facts, DALI not installed, the predecoded copy not built."""
    k = {"batch_size": 128, "channels_last": True, "precision": "bf16", "num_workers": 8}

    def burst(label, path, sps, **kw):
        return {"label": label, "data_path": path, "status": "ok", "workload": "resnet50",
                "samples_per_s": sps, "knobs": {**k, **kw.pop("knobs", {})}, **kw}  # fmt: skip

    bursts = [burst("ceiling: resident batch (before)", "ceiling", ceiling[0],
                    knobs={"loader": "synthetic"}),
              burst("jpeg, 8 workers", "cpu-few", 1700.0, decode="cpu"),
              burst("gpu decode, overlap on, 8 workers", "gpu-overlap", gpu, decode="gpu",
                    overlap=True, h2d_bytes_per_sample=112_345.0),
              burst("jpeg, 16 workers", "cpu-many", 3100.0, decode="cpu",
                    knobs={"num_workers": 16}),
              burst("ceiling: resident batch (after)", "ceiling", ceiling[1],
                    knobs={"loader": "synthetic"})]  # fmt: skip
    alone = [
        {"data_path": p, "status": "ok", "samples_per_s": sps, "knobs": {**k, "num_workers": n}}
        for p, sps, n in (
            ("cpu-few", 1800.0, 8),
            ("gpu-overlap", 9600.0, 8),
            ("cpu-many", 3300.0, 16),
        )
    ]
    loader = {
        "name": "loader",
        "status": "passed",
        "bursts": bursts,
        "facts": {"big_set": {"images": 12800}, "loader_alone": alone},
        "skipped": [
            {"what": "dali", "reason": "not installed"},
            {"what": "predecoded-gpu", "reason": "not built: 20 s left"},
        ],
    }
    return _write_kept(results, stamp, "NVIDIA H200", loader,
                       "bash benchmarks/gpu_session.sh /tmp/out")  # fmt: skip


def test_a_run_with_the_data_paths_tables_them_against_its_own_ceiling(publish, copy):
    _paths_run(copy / "benchmarks/results")
    runs = publish.load_runs(copy / "benchmarks/results")
    lines = publish.render_data_paths(runs).splitlines()
    assert lines[0] == ("| data path (resnet50 bf16, batch 128, channels_last, 12,800 JPEGs) | "
                        "loader alone images/s | per worker or GPU | training images/s | "
                        "of the ceiling | decoded on | H2D bytes/sample |")  # fmt: skip
    assert (
        lines[2] == "| resident batch (loader=synthetic): the ceiling | - | - | 4,200 | - | - | - |"
    )
    assert ("| decode=cpu (Pillow in the workers), 8 workers | 1,800 | 225 a worker | 1,700 | "
            "40% | cpu | - |") in lines  # fmt: skip
    gpu = next(line for line in lines if line.startswith("| decode=gpu (workers"))
    assert gpu.endswith("| 9,600 | 9,600 a GPU | 4,050 | 96% | gpu | 112,345 |")
    assert "| decode=cpu (Pillow in the workers), 16 workers | 3,300 | 206 a worker | 3,100 |" in (
        "\n".join(lines))  # fmt: skip
    assert ("| decode=gpu, overlap off (in line on the training stream) (not measured: the step "
            "ended before it) | - | - | - | - | - | - |") in lines  # fmt: skip
    assert "| loader=dali, mixed decode (nvJPEG) (not installed) | - |" in "\n".join(lines)
    assert any("(not built: 20 s left)" in line for line in lines)
    assert "(4,300 and 4,100 images/s: after/before 0.9535)" in lines[-4]
    assert lines[-3].startswith("Goal (one path at 90% of the ceiling or more): met by decode=gpu")
    assert lines[-1].startswith(
        "[1] `benchmarks/results/gpu-20270103-1000-nvidia-h200.json`: "
        "`bash benchmarks/gpu_session.sh /tmp/out`, commit abcdef1"
    )
    entries = {e["id"]: e for e in publish.reference_doc(runs)["entries"]}
    assert entries["wb-gpu-path-ceiling"]["value"] == 4200
    assert entries["wb-gpu-path-gpu-overlap"]["value"] == 4050
    assert entries["wb-gpu-path-gpu-overlap"]["notes"].startswith("96% of the ceiling")
    assert entries["wb-gpu-loader-cpu-few"]["notes"] == "225 images/s a worker"
    assert entries["wb-gpu-path-gpu-overlap"]["lessons"] == ["02", "05"]
    assert sorted(publish.stale(copy / "benchmarks/results", copy)) == [
        "README.md", "docs/development.md", "notebooks/README.md",  # the guide's MIG table
        "notebooks/reference/gpu_runs.json"]  # fmt: skip
    publish_all(publish, copy)
    assert publish.problems(copy / "benchmarks/results", copy) == []


def test_the_goal_missed_is_said_and_a_newer_run_without_the_rows_keeps_the_older_table(
    publish, copy
):  # fmt: skip
    _paths_run(copy / "benchmarks/results", gpu=3000.0)
    _recorded_run(copy / "benchmarks/results", "fp32-strict")  # 2027-01-02: older
    later = copy / "benchmarks/results/gpu-20270104-1000-nvidia-h200.json"
    doc = json.loads((copy / "benchmarks/results/gpu-20270102-1000-nvidia-h200.json").read_text())
    later.write_text(json.dumps(dict(doc, started_at="2027-01-04T10:00:00+00:00")))
    body = publish.render_data_paths(publish.load_runs(copy / "benchmarks/results"))
    assert "gpu-20270103-1000-nvidia-h200.json" in body and "20270104" not in body
    assert ("Goal (one path at 90% of the ceiling or more): not met: the best was decode=cpu "
            "(Pillow in the workers), 16 workers (74%).") in body  # fmt: skip


def publish_all(publish, root: Path) -> None:
    """What ``python benchmarks/publish_gpu.py`` writes, into a copy."""
    for path, text in publish.outputs(root / "benchmarks/results", root).items():
        path.write_text(text)


# -- the guide's GPU minutes per lesson (issue 31) ---------------------------------------------


def _lessons_block(text: str) -> str:
    return text.split("<!-- gpu-table: lessons -->\n", 1)[1].split("<!-- /gpu-table")[0]


def test_the_guides_gpu_minutes_wait_for_the_first_gpu_run_of_the_lessons(publish):
    """No kept run has run the lessons yet: every notebook's row says so, none has a time."""
    rows = [line for line in _lessons_block((_ROOT / "notebooks/README.md").read_text())
            .splitlines() if line.startswith("| `")]  # fmt: skip
    names = sorted(p.stem for p in (_ROOT / "notebooks").glob("*.ipynb"))
    assert [r.split("`")[1] for r in rows] == names
    assert all(f"| {publish.LESSONS_WAITING} | - | - | - | - |" in r for r in rows)


def _lesson(name, outcome, wall_s, device="NVIDIA H200", error=None, cells=()):
    return {"lesson": name, "outcome": outcome, "error": error, "wall_s": wall_s,
            "timeout_s": 300.0, "device": device, "expected_s": 40.0, "start_s": 6.2,
            "cells": [{"index": i, "source": src, "s": s, "status": st}
                      for i, src, s, st in cells]}  # fmt: skip


def _lessons_run(results: Path, stamp: str, records: list, device="NVIDIA H200") -> Path:
    """A kept run as the lessons step writes it: run_lessons' document in the step's facts."""
    step = {"name": "lessons", "status": "passed", "bursts": [],
            "facts": {"lessons": {"command": "bash benchmarks/gpu_session.sh --steps lessons",
                                  "device": device, "lessons": records}}}  # fmt: skip
    return _write_kept(results, f"{stamp}-1000", device, step,
                       "bash benchmarks/gpu_session.sh --steps lessons --budget-s 570",
                       torch="2.11.0")  # fmt: skip


def test_each_lesson_is_read_from_the_newest_kept_run_that_ran_it(publish, copy):
    """Lessons run over several sessions: a lesson skipped for time in a newer run keeps the
    older run's time; one run again in a newer run takes the newer; each says its run."""
    results = copy / "benchmarks/results"
    _lessons_run(results, "20270105", [
        _lesson("01_quickstart", "passed", 41.3, cells=[(1, "import workbench as wb", 7.9, "ok"),
                                                        (3, "r = wb.run_burst(w, k)", 12.2,
                                                         "ok")]),
        _lesson("02_data_pipeline", "failed", 30.0, error="RuntimeError: CUDA error | oom"),
    ])  # fmt: skip
    _lessons_run(results, "20270106", [
        _lesson("01_quickstart", "skipped: no time", 0.0),
        _lesson("02_data_pipeline", "passed", 75.0,
                cells=[(4, "df = wb.sweep(`w`)", 50.4, "ok")]),
        _lesson("11_compute_and_monitoring", "timeout", 300.2, error="ran past its 300 s",
                cells=[(9, "c = wb.run_burst(w, k.replace(compile='default'))", 250.0,
                        "stopped")]),
    ])  # fmt: skip
    body = publish.render_lessons(publish.load_runs(results), copy / "notebooks")
    rows = {line.split("`")[1]: line for line in body.splitlines() if line.startswith("| `")}
    assert rows["01_quickstart"] == (
        "| `01_quickstart` | core | 41 s (0.7 min) | passed | cell 3 `r = wb.run_burst(w, k)` "
        "12 s; cell 1 `import workbench as wb` 8 s; kernel start 6 s | NVIDIA H200 | [1] |"
    )
    assert rows["02_data_pipeline"] == (
        "| `02_data_pipeline` | core | 75 s (1.2 min) | passed | cell 4 `df = wb.sweep('w')` "
        "50 s; kernel start 6 s | NVIDIA H200 | [2] |"
    )
    assert rows["11_compute_and_monitoring"].startswith(
        "| `11_compute_and_monitoring` | core | over 300 s | timeout: ran past its 300 s | "
        "cell 9 `c = wb.run_burst(w, k.replace(compile='default'))` 250 s (stopped);"
    )
    assert "| core part: cost per run | " + publish.LESSONS_WAITING in rows["10_memory_and_money"]
    assert "| optional | " + publish.LESSONS_WAITING in rows["06_distributed_and_nccl"]
    assert ("[2] `benchmarks/results/gpu-20270106-1000-nvidia-h200.json`: "
            "`bash benchmarks/gpu_session.sh --steps lessons --budget-s 570`, commit abcdef1, "
            "NVIDIA H200, torch 2.11.0, 2027-01-06") in body  # fmt: skip
    assert "[1] `benchmarks/results/gpu-20270105-1000-nvidia-h200.json`: " in body
    assert publish.stale(results, copy) == ["docs/development.md", "notebooks/README.md"]
    runs = publish.runs_table(*publish.load_runs(results)[0])  # the page of every kept run
    assert ("| lessons | (lessons: 01 skipped: no time, 02 passed, 11 timeout; their minutes: "
            "notebooks/README.md) | passed |") in runs  # fmt: skip
    publish_all(publish, copy)
    assert publish.problems(results, copy) == []
    guide = _lessons_block((copy / "notebooks/README.md").read_text())
    assert rows["01_quickstart"] in guide and publish.LESSONS_WAITING in guide  # 00, 03, ...


def test_a_failed_lessons_error_cannot_break_the_table(publish, copy):
    results = copy / "benchmarks/results"
    _lessons_run(
        results,
        "20270105",
        [_lesson("02_data_pipeline", "failed", 30.0, error="RuntimeError: a | b `c`")],
    )
    body = publish.render_lessons(publish.load_runs(results), copy / "notebooks")
    row = next(line for line in body.splitlines() if line.startswith("| `02_"))
    assert "| failed: RuntimeError: a \\| b 'c' |" in row
    assert len(re.split(r"(?<!\\)\|", row)) == 9  # seven cells, whatever the error says


# -- the transformer rows (issue 32) -----------------------------------------------------------


def _tx_run(results: Path, stamp: str, device: str, *, eager=210_000.0, default=250_000.0,
            ro=300_000.0, refused=True) -> Path:  # fmt: skip
    """A kept run as the GPU session writes its transformer step: each burst tagged with its
    row, cudnn refused in set-up (a KnobError naming the knob), math skipped for time."""
    tx = sys.modules["gpu_transformer"]
    k = {"batch_size": 32, "loader": "synthetic", "precision": "bf16"}

    def burst(key, tps, **kw):
        row = next(r for r in tx.ROWS if r.key == key)
        return {"label": row.label, "row": key, "status": "ok", "workload": "gpt:124m",
                "knobs": {**k, **row.change}, "tokens_per_s": tps, "samples_per_s": tps / 1024,
                "mfu_pct": tps * 8.55e8 / 9.895e14 * 100, "step_ms_p50": 32768 / tps * 1e3,
                "peak_mem_mib": 30_000.0, "attention_backend": "flash", **kw}  # fmt: skip

    bursts = [
        burst("eager", eager),
        burst("compile-default", default, compile_s=41.0),
        burst("compile-reduce-overhead", ro, compile_s=52.0),
        burst("attention-auto", eager * 0.99),
        burst("attention-flash", eager),
        burst("attention-efficient", eager * 0.8, attention_backend="efficient"),
        burst("packing-pad", 120_000.0, pad_share_pct=65.0),
    ]
    if refused:
        bursts.append({"label": "eager, attention=cudnn", "row": "attention-cudnn",
                       "status": "error", "workload": "gpt:124m", "knobs": k,
                       "error": "attention=cudnn is not allowed: one that runs ...",
                       "refused": "attention=cudnn is not allowed: one that runs this model's "
                                  "attention here: auto, flash; PyTorch's cudnn kernel refused "
                                  "it"})  # fmt: skip
    step = {"name": "transformer", "status": "passed", "bursts": bursts,
            "skipped": [{"what": "attention-math", "reason": "would not fit (est 12 s, 3 s of "
                         "the step's 570 s left): --steps transformer runs it"}]}  # fmt: skip
    return _write_kept(
        results,
        stamp,
        device,
        step,
        "bash benchmarks/gpu_session.sh --steps transformer --budget-s 570",
    )


def _block(text: str, name: str) -> str:
    """The generated table ``name`` of a page (between its gpu-table markers)."""
    return text.split(f"<!-- gpu-table: {name} -->\n", 1)[1].split("<!-- /gpu-table")[0]


def _tx_block(text: str) -> str:
    return _block(text, "transformer")


def test_the_transformer_block_sets_the_anchor_and_waits_for_the_first_gpu_run(publish):
    """No kept run has the rows: the README and the figures page give llm.c's published run,
    its per-GPU rate computed from the figures published, and say the goal waits."""
    tx = sys.modules["gpu_transformer"]
    ref = {e["id"]: e for e in json.loads(
        (_ROOT / "notebooks/reference/transformer.json").read_text())["entries"]}  # fmt: skip
    tokens, minutes = ref["llmc-gpt2-124m-tokens"], ref["llmc-gpt2-124m-minutes"]
    rate = tokens["value"] / (minutes["value"] * 60) / tokens["gpus"]
    a = tx.anchor()
    assert a.per_gpu == pytest.approx(rate) and 225_000 < rate < 235_000  # the issue's ~230k
    assert a.url == "https://github.com/karpathy/llm.c/discussions/481"
    # by this workbench's FLOP count the run sits near the ~60% llm.c reported by its own
    assert abs(a.mfu_pct - ref["llmc-gpt2-124m-mfu"]["value"]) < 10
    assert a.peaks["h100"] == a.peaks["h200"] and a.bandwidth["h200"] > a.bandwidth["h100"]
    assert a.mfu_needed_pct("h200") == pytest.approx(a.mfu_pct * a.peaks["a100"] / a.peaks["h200"])
    for name in ("README.md", "docs/figures.md"):
        block = _tx_block((_ROOT / name).read_text())
        assert f"**{rate:,.0f} tokens/s per GPU**" in block, name
        assert publish.TRANSFORMER_WAITING in block
        assert block.rstrip().endswith(f"({rate:,.0f} tokens/s) in bf16 with compile: "
                                       f"**waiting** for a kept run of these rows on an H100 or "
                                       f"H200 (`{publish.TRANSFORMER_CALL}`).")  # fmt: skip
        # llm.c's own H100 run and torchtitan's H100 figures, computed from the entries
        h100 = ref["llmc-gpt2-124m-tokens-per-step"]["value"] / (
            ref["llmc-gpt2-124m-h100-step-ms"]["value"] / 1000) / 8  # fmt: skip
        assert f"**{h100:,.0f} tokens/s per H100**" in block and 465_000 < h100 < 475_000
        assert f"{a.h100_mfu_pct:.0f}% MFU of the H100 SXM's" in block and 38 < a.h100_mfu_pct < 43
        fp8 = ref["torchtitan-llama31-8b-h100-compile-fp8"]["value"]
        bf16 = ref["torchtitan-llama31-8b-h100-bf16"]["value"]
        assert f"{bf16:,.0f} tokens/s per GPU in bf16" in block
        assert f"{fp8:,.0f} compiled with float8 ({fp8 / bf16:.2f}x)" in block
    assert "| eager |" not in _tx_block((_ROOT / "README.md").read_text())


def test_a_kept_h200_run_tables_every_row_and_meets_the_goal(publish, copy):
    _tx_run(copy / "benchmarks/results", "20270105", "NVIDIA H200")
    runs = publish.load_runs(copy / "benchmarks/results")
    lines = publish.render_transformer(runs).splitlines()
    assert (
        "| gpt:124m, bf16, batch 32 x 1,024 tokens, one resident batch | tokens/s | MFU % | "
        "step ms p50 | peak MiB | compile s | pad % | attention kernel | over eager | run |"
    ) in lines
    assert "| eager | 210,000 | 18.1 | 156.0 | 30,000 | - | - | flash | 1.00x | [1] |" in lines
    assert ("| compile=reduce-overhead (CUDA graphs) | 300,000 | 25.9 | 109.2 | 30,000 | 52.0 | "
            "- | flash | 1.43x | [1] |") in lines  # fmt: skip
    assert ("| eager, packing=pad (a document a row) | 120,000 | 10.4 | 273.1 | 30,000 | - | "
            "65.0 | flash | 0.57x | [1] |") in lines  # fmt: skip
    assert publish.FP8_WAITING in lines
    assert any(line.startswith("| eager, attention=cudnn (refused: attention=cudnn is not "
                               "allowed: ") and line.endswith("| - | - | - | [1] |")
               for line in lines)  # fmt: skip
    assert "| eager, attention=math | - | - | - | - | - | - | - | - | not measured yet |" in lines
    goal = next(line for line in lines if line.startswith("Goal: "))
    a = sys.modules["gpu_transformer"].anchor()
    mfu = 100 * 300_000 * a.flops_per_token / 989.5e12  # the H200's own dense bf16 peak
    assert goal.endswith(": **met** by compile=reduce-overhead (CUDA graphs), 300,000 "
                         f"tokens/s, 1.30x the anchor on NVIDIA H200 ({mfu:.0f}% MFU of its "
                         f"989.5 TFLOP/s dense bf16 peak; {300_000 / a.h100.per_gpu:.2f}x "
                         "llm.c's H100 rate) [1].")  # fmt: skip
    assert lines[-1].startswith(
        "[1] `benchmarks/results/gpu-20270105-nvidia-h200.json`: "
        "`bash benchmarks/gpu_session.sh --steps transformer"
    )
    assert sorted(publish.stale(copy / "benchmarks/results", copy)) == [
        "README.md", "docs/development.md", "docs/figures.md"]  # fmt: skip
    publish_all(publish, copy)
    assert publish.problems(copy / "benchmarks/results", copy) == []


def test_the_goal_reads_the_newest_h100_or_h200_run_and_its_own_peak(publish, copy):
    results = copy / "benchmarks/results"
    _tx_run(results, "20270105", "NVIDIA H200", default=200_000.0, ro=220_000.0)
    runs = publish.load_runs(results)
    rate = sys.modules["gpu_transformer"].anchor().per_gpu
    body = publish.render_transformer(runs)
    assert (
        ": **not met**: the best compiled row was compile=reduce-overhead (CUDA graphs), "
        f"220,000 tokens/s, {220_000 / rate:.2f}x the anchor on NVIDIA H200 ("
    ) in body
    # a newer run on an H100 SXM decides (the H100 is a goal GPU too), read on its own peak
    _tx_run(results, "20270106", "NVIDIA H100 80GB HBM3", ro=400_000.0)
    body = publish.render_transformer(publish.load_runs(results))
    assert "| 400,000 |" in body and "**met** by compile=reduce-overhead (CUDA graphs), " \
        "400,000 tokens/s" in body and "on NVIDIA H100 80GB HBM3 (" in body  # fmt: skip
    assert "of its 989.5 TFLOP/s dense bf16 peak" in body
    # an H100 PCIe: the same verdict, its MFU on its own (lower) peak
    _tx_run(results, "20270107", "NVIDIA H100 PCIe", ro=400_000.0)
    body = publish.render_transformer(publish.load_runs(results))
    assert "on NVIDIA H100 PCIe (" in body and "of its 756.5 TFLOP/s dense bf16 peak" in body
    # a GPU that is neither waits, and its rows are still tabled
    for stamp in ("20270105", "20270106", "20270107"):
        next(results.glob(f"gpu-{stamp}-*.json")).unlink()
    _tx_run(results, "20270108", "NVIDIA A100-SXM4-80GB", ro=400_000.0)
    body = publish.render_transformer(publish.load_runs(results))
    assert "**waiting** for a kept run of these rows on an H100 or H200" in body
    assert "| 400,000 |" in body


def test_no_compiled_row_on_an_h200_misses_the_goal_with_the_reasons(publish, copy):
    results = copy / "benchmarks/results"
    path = _tx_run(results, "20270105", "NVIDIA H200")
    doc = json.loads(path.read_text())
    step = doc["steps"][0]
    step["bursts"] = [b for b in step["bursts"] if not b["row"].startswith("compile-")]
    step["skipped"] += [
        {"what": "compile-default", "reason": "would not fit"},
        {"what": "compile-reduce-overhead", "reason": "would not fit"},
    ]
    path.write_text(json.dumps(doc))
    body = publish.render_transformer(publish.load_runs(results))
    assert (
        "**not met**: no compiled bf16 row ran (compile-default: would not fit; "
        "compile-reduce-overhead: would not fit) [1]."
    ) in body


def test_the_fp8_steps_figures_are_a_sentence_under_the_table(publish, copy):
    results = copy / "benchmarks/results"
    path = _tx_run(results, "20270105", "NVIDIA H200")
    doc = json.loads(path.read_text())
    facts = {"workload": "gpt:124m", "batch_size": 16, "bf16_tokens_per_s": 250_000.0,
             "bf16_spread_pct": 1.2, "recipes": {
                 "tensorwise": {"tokens_per_s": 300_000.0, "vs_bf16": 1.2, "fp8_linears": 48},
                 "rowwise": {"tokens_per_s": None, "vs_bf16": None, "fp8_linears": None,
                             "no_effect": "torchao is not installed"}}}  # fmt: skip
    doc["steps"].append({"name": "fp8", "status": "passed", "bursts": [],
                         "facts": {"fp8": facts}})  # fmt: skip
    path.write_text(json.dumps(doc))
    body = publish.render_transformer(publish.load_runs(results))
    assert publish.FP8_WAITING not in body
    assert (
        "float8 (`fp8`, the `fp8` step: gpt:124m, batch 16, compiled, bf16 before and after): "
        "bf16 250,000 tokens/s (the two bf16 bursts 1.2% apart); tensorwise 300,000 tokens/s "
        "(1.20x bf16, 48 Linear layers in float8); rowwise - tokens/s (no ratio, did not act: "
        "torchao is not installed) [1]."
    ) in body


# -- a burst against the user's own loop on a GPU (issue 38) -----------------------------------


def _fidelity_run(results: Path, stamp: str, device: str, *, images=(0.99, 1.01, 1.0, 0.98),
                  tokens=None) -> Path:  # fmt: skip
    """A kept run as the GPU session writes its fidelity step: per row its ABBA pairs (burst
    and hand samples/s) and their summary, as ``gpu_fidelity`` computes it; ``tokens`` None:
    that row skipped for time."""
    gf = sys.modules["gpu_fidelity"]

    def row(label, workload, ratios, hand):
        pairs = [{"pair": i + 1, "order": ["burst", "hand"] if i % 2 == 0 else ["hand", "burst"],
                  "burst": hand * r, "hand": hand, "ratio": r, "burst_wall_s": 7.0,
                  "hand_wall_s": 6.0} for i, r in enumerate(ratios)]  # fmt: skip
        return {"label": label, "workload": workload, "status": "measured", "pairs": pairs,
                **gf.summary(pairs)}  # fmt: skip

    rows = {"images": row("resnet50, bf16, channels_last, batch 128, JPEGs, 16 workers",
                          "resnet50", images, 2000.0)}  # fmt: skip
    skipped = []
    if tokens is None:
        rows["tokens"] = {"label": "gpt:124m, bf16", "workload": "gpt:124m", "status": "skipped",
                          "note": "would not fit", "pairs": [], **gf.summary([])}  # fmt: skip
        skipped = [{"what": "tokens", "reason": "would not fit"}]
    else:
        rows["tokens"] = row("gpt:124m, bf16, batch 16 x 1,024 tokens, 4 workers", "gpt:124m",
                             tokens, 50.0)  # fmt: skip
    step = {"name": "fidelity", "status": "passed", "bursts": [], "skipped": skipped,
            "facts": {"fidelity": {"goal": list(gf.GOAL), "rows": rows}}}  # fmt: skip
    return _write_kept(
        results, stamp, device, step, "bash benchmarks/gpu_session.sh --steps fidelity"
    )


def _fidelity_block(text: str) -> str:
    return _block(text, "fidelity")


def test_the_fidelity_table_waits_for_the_next_gpu_window(publish):
    assert publish.render_fidelity(publish.load_runs()) == publish.FIDELITY_WAITING + "\n"
    for name in ("README.md", "docs/figures.md"):
        assert _fidelity_block((_ROOT / name).read_text()) == publish.FIDELITY_WAITING + "\n"
    assert "0.97 and 1.03" in publish.FIDELITY_WAITING


def test_a_kept_fidelity_step_is_tabled_with_its_device_and_the_goal(publish, copy):
    results = copy / "benchmarks/results"
    _fidelity_run(results, "20270105", "NVIDIA H100 80GB HBM3")
    lines = publish.render_fidelity(publish.load_runs(results)).splitlines()
    assert lines[0].startswith("| recipe | device | pairs | burst samples/s | hand loop")
    # ratios 0.99, 1.01, 1.00, 0.98: median 0.995, range 0.98-1.01, burst first 0.99 and 1.00
    assert ("| resnet50, bf16, channels_last, batch 128, JPEGs, 16 workers | NVIDIA H100 80GB "
            "HBM3 | 4 | 1,990 | 2,000 | 0.995 | 0.980-1.010 | 3.0 | 0.995 / 0.995 | met | "
            "[1] |") in lines  # fmt: skip
    assert "| gpt:124m | - | - | - | - | - | - | - | - | waiting | not measured yet |" in lines
    assert "every row: **waiting** for every row on a GPU." in lines[-3]
    assert lines[-1].startswith("[1] `benchmarks/results/gpu-20270105-nvidia-h100-80gb-hbm3.json"
                                "`: `bash benchmarks/gpu_session.sh --steps fidelity`, commit "
                                "abcdef1, NVIDIA H100 80GB HBM3")  # fmt: skip
    # a newer run on an H200 measures both rows; the tokens row misses the goal
    _fidelity_run(results, "20270106", "NVIDIA H200", tokens=(0.93, 0.95, 0.94, 0.96))
    body = publish.render_fidelity(publish.load_runs(results))
    assert "| NVIDIA H200 | 4 | 47 | 50 | 0.945 | 0.930-0.960 | 3.2 | 0.935 / 0.955 | not met |" \
        in body and "every row: **not met**." in body  # fmt: skip
    assert "gpu-20270105" not in body  # both rows now from the newest run that measured them
    publish_all(publish, copy)
    assert "| not met | [1] |" in _fidelity_block((copy / "README.md").read_text())
    assert publish.problems(results, copy) == []
