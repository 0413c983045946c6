"""Every published GPU figure comes from a kept run: benchmarks/publish_gpu.py and its checks.

The test reads the real README.md, docs/ and notebooks/reference/ against the real kept runs
(benchmarks/results/gpu-*.json), then shows on copies that a figure edited by hand, a figure
typed outside a generated block, and an entry naming a command its run did not record are
each caught."""

import importlib.util
import json
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


def _recorded_run(results: Path, strict: str = "fp32") -> Path:
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
    doc = {"schema": "workbench-gpu-run/1", "recorded": True, "dry": False,
           "command": "bash benchmarks/gpu_session.sh /tmp/out", "git_commit": "abcdef1234",
           "git_dirty": False, "started_at": "2027-01-02T10:00:00+00:00",
           "device": "NVIDIA H200",
           "environment": {"versions": {"torch": "2.12.0", "cuda": "13.0"}},
           "steps": [{"name": "check", "status": "passed", "bursts": bursts}]}  # fmt: skip
    path = results / "gpu-20270102-1000-nvidia-h200.json"
    path.write_text(json.dumps(doc))
    return path


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
