"""benchmarks/gpu_session.sh runs only where CUDA is, minutes at a time: its dry path, its
step loop, its timeouts and the drift step's arithmetic are tested here on the CPU, so a typo
or a wrong sum cannot waste that time."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from blocked_imports import _SITECUSTOMIZE

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
_SCRIPT = _BENCH / "gpu_session.sh"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, _BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def session():
    return _load("gpu_session")


@pytest.fixture(scope="module")
def steps():
    return _load("gpu_steps")


def _blocked_env(tmp_path: Path) -> dict[str, str]:
    """As on the lent box: no UI packages, no DALI, and here no CUDA either."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "",
            "PYTHONPATH": os.pathsep.join(paths)}  # fmt: skip


# -- the dry path, end to end ------------------------------------------------------------------


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The whole session on this CPU, once for the tests below."""
    tmp = tmp_path_factory.mktemp("session")
    out = tmp / "out"
    before = set((_BENCH / "results").iterdir())
    p = subprocess.run(["bash", str(_SCRIPT), str(out)], cwd=_BENCH.parent,
                       env=_blocked_env(tmp), capture_output=True, text=True,
                       timeout=900)  # fmt: skip
    kept = sorted(out.glob("gpu-*-dry.json"))
    return p, out, kept, before


def test_the_dry_path_passes_and_writes_one_run_file(dry_run):
    p, out, kept, before = dry_run
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-3000:]
    assert len(kept) == 1 and kept[0].name.startswith("gpu-") and "-cpu-dry" in kept[0].name
    assert set((_BENCH / "results").iterdir()) == before  # a rehearsal is never kept
    summary = (out / "summary.txt").read_text()
    assert "0 failed, 0 timed out, 3 skipped" in summary


def test_the_run_file_has_the_layout_a_kept_run_needs(dry_run, session):
    doc = json.loads(dry_run[2][0].read_text())
    assert doc["schema"] == "workbench-gpu-run/1" and doc["recorded"] and doc["dry"]
    assert doc["command"].startswith("bash benchmarks/gpu_session.sh ")
    assert len(doc["git_commit"] or "") == 40 and doc["running"] is None
    env = doc["environment"]
    assert env["cores"]["usable"] >= 1 and "affinity" in env["cores"]
    assert env["cores"]["cgroup_quota"] is None or env["cores"]["cgroup_quota"] > 0
    assert env["versions"]["torch"] and "nvidia_smi_q" in env
    assert [s["name"] for s in doc["steps"]] == [s.name for s in session.PLAN]
    assert [s["name"] for s in doc["plan"]] == [s.name for s in session.PLAN]
    for step in doc["steps"]:
        assert step["status"] in ("passed", "skipped"), step
        assert step["wall_s"] is not None and "log_tail" in step
    skipped = {s["name"]: s["reason"] for s in doc["steps"] if s["status"] == "skipped"}
    assert set(skipped) == {"check", "pytest-gpu", "lessons"}
    assert all(r.startswith("no CUDA device") for r in skipped.values())


def test_every_burst_is_kept_whole(dry_run):
    doc = json.loads(dry_run[2][0].read_text())
    bursts = [b for s in doc["steps"] for b in s["bursts"]]
    assert len(bursts) >= 25
    for b in bursts:
        assert b["label"] and "knobs" in b and "samples_per_s" in b
        if b["status"] == "ok":
            mean = sum(b["step_ms"]) / len(b["step_ms"])  # the kept times are rounded to 1 us
            assert b["step_ms"] and b["step_ms_mean"] == pytest.approx(mean, abs=1e-3)
            assert b["step_ms_p50"] is not None and "sm_clock_mhz" in b


def test_the_drift_step_measures_in_the_planned_order(dry_run):
    doc = json.loads(dry_run[2][0].read_text())
    drift = next(s for s in doc["steps"] if s["name"] == "drift")
    labels = [b["label"] for b in drift["bursts"]]
    assert labels[:3] == ["identical 1", "identical 2", "identical 3"]
    assert labels[3:11] == [f"cudnn ABBA {p}: {x}" for p in (1, 2)
                            for x in ("off", "on", "on", "off")]  # fmt: skip
    assert labels[11] == "fresh process" and drift["bursts"][11]["status"] == "ok"
    assert [b["knobs"]["cudnn_benchmark"] for b in drift["bursts"][3:7]] == [
        False, True, True, False]  # fmt: skip
    facts = drift["facts"]
    assert set(facts["abba_on_over_off"]) == {"1", "2"}
    assert facts["fresh_over_first"] > 0 and len(facts["clocks"]) == 12


def test_the_loader_and_paths_steps_say_what_they_could_not_run(dry_run):
    doc = json.loads(dry_run[2][0].read_text())
    loader = next(s for s in doc["steps"] if s["name"] == "loader")
    assert loader["facts"]["big_set"]["images"] == 80
    assert loader["facts"]["loader_alone"]["status"] == "ok"
    assert [b["label"] for b in loader["bursts"]] == [
        "jpeg, 1 workers", "jpeg, 2 workers", "predecoded, 1 workers"]  # fmt: skip
    skipped = {s["what"] for s in loader["skipped"]}
    assert {"gpu decode", "dali"} <= skipped
    paths = next(s for s in doc["steps"] if s["name"] == "paths")
    labels = [b["label"] for b in paths["bursts"]]
    assert labels[:5] == ["activation_checkpointing", "optimizer fused", "optimizer foreach",
                          "pinned dict batch", "memory_snapshot"]  # fmt: skip
    assert sum(label.startswith("tune ") for label in labels) == 8
    assert paths["facts"]["tune"]["start_runs_samples_per_s"]


# -- the step loop -----------------------------------------------------------------------------


def test_a_step_that_does_not_fit_is_skipped_and_a_timed_one_gets_what_is_left(session):
    drift = next(s for s in session.PLAN if s.name == "drift")
    check = next(s for s in session.PLAN if s.name == "check")
    assert session.time_for(drift, 50, dry=False) == (
        None, "would not fit (est 110 s, 50 s left)")  # fmt: skip
    assert session.time_for(drift, 400, dry=False) == (drift.timeout_s, None)
    assert session.time_for(check, 200, dry=False) == (200, None)
    assert session.time_for(check, 100, dry=True) == (check.timeout_s, None)


def test_the_steps_that_answer_the_questions_fit_in_8_minutes(session):
    answers = [s for s in session.PLAN if not s.timed or s.name == "check"]
    assert sum(s.est_s for s in answers) <= session.DEFAULT_BUDGET_S == 480
    assert [s.name for s in session.PLAN][:5] == ["environment", "drift", "loader", "paths",
                                                  "check"]  # fmt: skip
    assert all(s.est_s > 0 and s.why and s.timeout_s >= s.est_s for s in session.PLAN)


def test_a_step_stopped_by_its_timeout_keeps_what_it_wrote(session, tmp_path):
    script = tmp_path / "slow_step.py"
    script.write_text(
        textwrap.dedent("""
        import json, sys, time
        out = sys.argv[sys.argv.index("--json") + 1]
        doc = {"name": sys.argv[1], "status": "running",
               "bursts": [{"label": "first", "samples_per_s": 10.0}]}
        open(out, "w").write(json.dumps(doc))
        print("wrote one burst", flush=True)
        time.sleep(60)
    """)
    )
    step = session.Step("drift", 1, 3, "test")
    t0 = time.monotonic()
    rec = session.run_step(step, 3, tmp_path, False, [], script=script)
    assert time.monotonic() - t0 < 20
    assert rec["status"] == "timeout" and rec["bursts"][0]["label"] == "first"
    assert "stopped by its timeout after 3 s" in rec["reason"]
    assert "wrote one burst" in rec["log_tail"]


def test_a_step_that_dies_is_failed_with_the_exit_code(session, tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)\n")
    rec = session.run_step(session.Step("loader", 1, 30, "test"), 30, tmp_path, False, [],
                           script=script)  # fmt: skip
    assert rec["status"] == "failed" and rec["exit_code"] == -11
    assert rec["reason"] == "the process died (exit -11): see log_tail"


def test_an_unknown_step_is_refused(session, capsys):
    with pytest.raises(SystemExit) as exc:
        session.main(["--steps", "drift,nonsense"])
    assert exc.value.code == 2
    assert "--steps nonsense: not a step; steps: environment, drift" in capsys.readouterr().err


def test_the_plan_prints(session, capsys):
    assert session.main(["--plan"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| step | est s | timeout s | why |"
    assert lines[2].startswith("| environment | 8 | 60 |")


# -- the drift step's arithmetic ---------------------------------------------------------------


def _burst(label, sps, clock=1980.0):
    return {"label": label, "samples_per_s": sps, "sm_clock_mhz": clock, "temp_c": 50.0,
            "power_w": 600.0, "throttle_reasons": [], "suspect": []}  # fmt: skip


def test_drift_facts_from_the_first_sessions_four_identical_bursts(steps):
    """The first session's cudnn row was four identical configs in effect (cudnn gave no
    gain): 4,306 / 3,990 / 3,819 / 3,816 samples/s."""
    same = [4306.0, 3990.0, 3819.0, 3816.0]
    facts = steps.drift_facts([_burst(f"identical {i + 1}", x) for i, x in enumerate(same)])
    assert facts["first_over_last"] == pytest.approx(1.1284, abs=1e-4)
    assert facts["spread_pct"] == pytest.approx(100 * 490 / 3904.5, abs=0.01)
    assert facts["trend_pct_per_burst"] == pytest.approx(100 * -164.1 / 3904.5, abs=0.01)


def test_abba_cancels_a_linear_drift(steps):
    """Throughput falls 2% a burst; cudnn on is truly 3% faster. Neighbours compared in one
    order read the drift; ABBA's sums read the effect."""
    bursts, i = [], 0
    for p in (1, 2):
        for side in ("off", "on", "on", "off"):
            true = 1000.0 * (1.03 if side == "on" else 1.0)
            bursts.append(_burst(f"cudnn ABBA {p}: {side}", true * (1 - 0.02 * i)))
            i += 1
    facts = steps.drift_facts(bursts)
    naive = bursts[1]["samples_per_s"] / bursts[0]["samples_per_s"]
    assert abs(naive - 1.03) > 0.015  # off then on, as the old row compared them
    for ratio in facts["abba_on_over_off"].values():
        assert ratio == pytest.approx(1.03, abs=0.002)
    assert facts["abba_pass_gap_pct"] < 0.5


def test_dali_gpu_tests_are_named_as_not_run_without_dali(tmp_path):
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import gpu_steps; "
            "files, not_run = gpu_steps.gpu_test_files(); "
            "print('FILES', *files); print('NOTRUN', *not_run, sep='\\n')")  # fmt: skip
    p = subprocess.run([sys.executable, "-c", code], cwd=_BENCH.parent, capture_output=True,
                       text=True, env=_blocked_env(tmp_path), timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    files = next(line for line in p.stdout.splitlines() if line.startswith("FILES")).split()[1:]
    assert "tests/engine/test_burst.py" in files and "tests/engine/test_dali.py" not in files
    dali = "tests/engine/test_dali.py::test_gpu_mixed_decode_burst_runs_on_the_gpu"
    assert f"{dali}: not run: DALI not installed" in p.stdout
