"""benchmarks/gpu_session.sh runs only where CUDA is, minutes at a time: its dry path, its
step loop, its timeouts and the drift step's arithmetic are tested here on the CPU, so a typo
or a wrong sum cannot waste that time."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from benchmark_modules import benchmark_fixture
from blocked_imports import _SITECUSTOMIZE

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
_SCRIPT = _BENCH / "gpu_session.sh"

session = benchmark_fixture("gpu_session")
steps = benchmark_fixture("gpu_steps")
record = benchmark_fixture("gpu_record")
publish = benchmark_fixture("publish_gpu")


def _blocked_env(tmp_path: Path) -> dict[str, str]:
    """As on the lent box: no UI packages, no DALI, and here no CUDA either."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "",
            "PYTHONPATH": os.pathsep.join(paths)}  # fmt: skip


# -- the dry path, end to end ------------------------------------------------------------------


def _rehearse(out: Path, *args: str, timeout: float = 700) -> subprocess.CompletedProcess:
    """``bash benchmarks/gpu_session.sh --rehearse OUT ...`` as a user types it: the rehearsal
    itself blocks the packages the box lacks and hides CUDA."""
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(_SCRIPT), "--rehearse", str(out), *args],
                          cwd=_BENCH.parent, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def _kept(out: Path) -> dict:
    (path,) = sorted(out.glob("gpu-*-dry.json"))
    return json.loads(path.read_text())


REHEARSAL_ROOM_S = 580


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The rehearsal of every call on this CPU, once for the tests below."""
    tmp = tmp_path_factory.mktemp("session")
    out = tmp / "out"
    before = set((_BENCH / "results").iterdir())
    # The rehearsal's own budget (170 s) holds on a quiet 2-core machine (about 90 s seen);
    # the suite may share the machine, so it gives the same plumbing all a call may have
    # (beside four other test runs, load 19 on 2 cores, it needed more than 480 s).
    p = _rehearse(out, "--scratch", str(tmp / "scratch"), "--budget-s", str(REHEARSAL_ROOM_S))
    kept = sorted(out.glob("gpu-*-dry.json"))
    return p, out, kept, before


def test_the_rehearsal_passes_and_leaves_three_files_in_out(dry_run, session):
    p, out, kept, before = dry_run
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-3000:]
    assert len(kept) == 1 and kept[0].name.startswith("gpu-") and "-cpu-dry" in kept[0].name
    assert set((_BENCH / "results").iterdir()) == before  # a rehearsal is never kept
    summary = (out / "summary.txt").read_text()
    assert "0 failed, 0 timed out, 4 skipped" in summary and "nothing here is published" in summary
    assert sorted(p.name for p in out.rglob("*")) == sorted(
        [kept[0].name, "summary.txt", "logs.tar.gz"])  # fmt: skip
    assert session.out_problems(out) == []
    doc = json.loads(kept[0].read_text())
    assert doc["rehearsal"] and doc["dry"] and doc["budget_s"] == REHEARSAL_ROOM_S
    assert doc["wall_s"] <= REHEARSAL_ROOM_S


def test_the_log_archive_holds_every_steps_log(dry_run, session):
    import tarfile

    out = dry_run[1]
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = set(tar.getnames())
        drift_log = tar.extractfile("step-drift.log").read().decode()
    assert {f"step-{s.name}.log" for s in session.PLAN} <= names
    assert "step-check.rows.json" in names and "step-drift.fresh.json" in names
    assert "drift: identical 1: cnn on cpu" in drift_log


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
    assert set(skipped) == {"pytest-gpu", "max-autotune", "lessons", "lessons-optional"}
    assert all(r.startswith("no CUDA device") for r in skipped.values())
    assert all("running" not in s and s["status"] != "running" for s in doc["steps"])


def test_every_burst_is_kept_whole(dry_run):
    doc = json.loads(dry_run[2][0].read_text())
    bursts = [b for s in doc["steps"] for b in s["bursts"]]
    assert len(bursts) >= 25
    assert sum(1 for b in bursts if b["status"] == "ok") == len(bursts)
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
    assert labels[:2] == ["identical 1", "identical 2"]  # a rehearsal: 2, and one ABBA pass
    assert labels[2:6] == [f"cudnn ABBA 1: {x}" for x in ("off", "on", "on", "off")]
    assert labels[6] == "fresh process" and drift["bursts"][6]["status"] == "ok"
    assert [b["knobs"]["cudnn_benchmark"] for b in drift["bursts"][2:6]] == [
        False, True, True, False]  # fmt: skip
    facts = drift["facts"]
    assert set(facts["abba_on_over_off"]) == {"1"}
    assert facts["fresh_over_first"] > 0 and len(facts["clocks"]) == 7


def test_the_loader_step_measures_every_data_path_between_two_ceilings(dry_run):
    doc = json.loads(dry_run[2][0].read_text())
    loader = next(s for s in doc["steps"] if s["name"] == "loader")
    assert loader["facts"]["big_set"]["images"] == 80
    assert [(b["label"], b["data_path"]) for b in loader["bursts"]] == [
        ("ceiling: resident batch (before)", "ceiling"),
        ("jpeg, 1 workers", "cpu-few"),
        ("gpu decode, overlap on, 1 workers", "gpu-overlap"),
        ("jpeg, 2 workers", "cpu-many"),
        ("gpu decode, overlap off, 1 workers", "gpu-inline"),
        ("predecoded, decode=gpu, overlap on, 1 workers", "predecoded-gpu"),
        ("ceiling: resident batch (after)", "ceiling"),
    ]  # fmt: skip
    by = {b["data_path"]: b for b in loader["bursts"]}
    assert [b["knobs"]["loader"] for b in loader["bursts"][::6]] == ["synthetic", "synthetic"]
    assert (by["gpu-overlap"]["overlap"], by["gpu-inline"]["overlap"]) == (True, False)
    assert by["predecoded-gpu"]["knobs"]["data_format"] == "predecoded"
    for key in ("gpu-overlap", "gpu-inline", "predecoded-gpu"):  # refused on a CPU, and why
        assert by[key]["knobs"]["decode"] == "gpu" and by[key]["decode"] == "cpu"
        assert "decode_jpeg (caller's stream synchronized before each batch" in by[key]["decoder"]
        assert "CUDA device" in by[key]["no_effect"]["decode"]
    alone = {r["data_path"]: r for r in loader["facts"]["loader_alone"]}
    assert set(alone) == {"cpu-few", "cpu-many", "gpu-overlap", "gpu-inline", "predecoded-gpu"}
    assert all(r["status"] == "ok" and r["samples_per_s"] > 0 for r in alone.values())
    # the loader alone ran the device pipeline on CPU tensors (its CPU twin)
    assert {k for k, r in alone.items() if r.get("device_pipeline")} == {
        "gpu-overlap", "gpu-inline", "predecoded-gpu"}  # fmt: skip
    assert {s["what"]: s["reason"] for s in loader["skipped"]} == {"dali": "not installed"}
    paths = loader["facts"]["data_paths"]
    assert len(paths["ceiling"]["bursts"]) == 2 and paths["best"]["over_ceiling"] > 0
    rows = {r["path"]: r for r in paths["rows"]}
    assert rows["dali"]["not_run"] == "not installed" and rows["dali"]["training"] is None
    assert rows["cpu-many"]["loader_per"] == pytest.approx(alone["cpu-many"]["samples_per_s"] / 2)
    assert all(rows[k]["over_ceiling"] > 0 for k in alone)


def test_the_dry_runs_data_paths_render_as_the_published_table(dry_run, publish):
    doc = json.loads(dry_run[2][0].read_text())
    body = publish.render_data_paths([(dry_run[2][0], doc)])
    lines = body.splitlines()
    assert lines[0].startswith("| data path (cnn default, batch 16, 80 JPEGs) | loader alone")
    assert lines[2].startswith("| resident batch (loader=synthetic): the ceiling | - | - | ")
    assert len([line for line in lines if line.startswith("| decode=")]) == 4
    assert "| loader=dali, mixed decode (nvJPEG) (not installed) | - | - | - | - | - | - |" in lines
    assert any(line.startswith("Goal (one path at 90% of the ceiling or more): ") for line in lines)
    entries = {e["id"] for e in publish.path_entries([(dry_run[2][0], doc)])}
    assert {"wb-gpu-path-ceiling", "wb-gpu-path-gpu-inline", "wb-gpu-loader-gpu-inline"} <= entries


def test_the_paths_step_runs_what_never_ran_on_a_gpu(dry_run):
    doc = json.loads(dry_run[2][0].read_text())
    paths = next(s for s in doc["steps"] if s["name"] == "paths")
    labels = [b["label"] for b in paths["bursts"]]
    assert labels == ["activation_checkpointing", "optimizer fused", "optimizer foreach",
                      "pinned dict batch"]  # fmt: skip


def test_the_memory_snapshot_is_a_step_of_its_own(dry_run):
    doc = json.loads(dry_run[2][0].read_text())
    snap = next(s for s in doc["steps"] if s["name"] == "snapshot")
    assert snap["status"] == "passed" and [b["label"] for b in snap["bursts"]] == [
        "memory_snapshot"]  # fmt: skip
    assert snap["facts"]["snapshot_bytes"] == 0 and snap["facts"]["snapshot_s"] > 0  # a CPU


def test_the_check_step_keeps_gpu_checks_rows_as_its_own(dry_run):
    doc = json.loads(dry_run[2][0].read_text())
    step = next(s for s in doc["steps"] if s["name"] == "check")
    assert step["status"] == "passed", step["checks"]
    rows = [r["label"] for r in step["facts"]["rows"]]
    assert rows == ["rehearsal: cnn, resident batch", "rehearsal: cnn, JPEGs, 1 worker",
                    "rehearsal: cnn, resident batch again"]  # fmt: skip
    assert [b["label"] for b in step["bursts"]] == [
        "rehearsal: cnn, resident batch: resident batch",
        "rehearsal: cnn, JPEGs, 1 worker: JPEGs, 1 worker",
        "rehearsal: cnn, resident batch again: resident batch again"]  # fmt: skip
    assert step["facts"]["device"] == "cpu (a rehearsal)"


def test_the_tune_step_judges_its_pick_against_a_hand_grid(dry_run):
    doc = json.loads(dry_run[2][0].read_text())
    step = next(s for s in doc["steps"] if s["name"] == "tune")
    labels = [b["label"] for b in step["bursts"]]
    tune = [label for label in labels if label.startswith("tune ")]
    assert 2 <= len(tune) <= 4  # its budget; a tune that converges stops sooner
    assert tune[0] == "tune 1: start"
    assert step["facts"]["tune"]["start_runs_samples_per_s"]
    grid = step["facts"]["tune_vs_grid"]
    assert [label for label in labels if label.startswith("grid: ")] == [
        "grid: start", "grid: 1 worker", "grid: tune pick"]  # fmt: skip
    assert labels[-2:] == ["grid again: tune pick", f"grid again: {grid['grid_best']}"]
    assert len(grid["readings"]["tune pick"]) == 2
    # the rates are kept to 0.1 samples/s and the ratio to 1e-4: at a CPU's few samples/s the
    # rates' rounding alone moves their ratio by up to 0.05 x (1 + ratio) / best
    best_sps = grid["grid_best_samples_per_s"]
    ratio = grid["pick_samples_per_s"] / best_sps
    rounding = 0.05 * (1 + ratio) / best_sps + 1e-4
    assert grid["pick_over_grid_best"] == pytest.approx(ratio, abs=rounding)


# -- the step loop -----------------------------------------------------------------------------


def test_a_step_that_does_not_fit_is_skipped_and_every_step_ends_before_the_session(session):
    drift = next(s for s in session.PLAN if s.name == "drift")
    check = next(s for s in session.PLAN if s.name == "check")
    margin = session.STEP_MARGIN_S
    assert session.time_for(drift, 50, dry=False) == (
        None, "would not fit (est 68 s, 50 s left)")  # fmt: skip
    assert session.time_for(drift, 400, dry=False) == (drift.timeout_s, None)
    # a step that is not timed is capped by what is left all the same: --budget-s caps all
    assert session.time_for(drift, 130, dry=False) == (130 - margin, None)
    assert session.time_for(check, 200, dry=False) == (200 - margin, None)
    assert session.time_for(check, 100, dry=True) == (100 - margin, None)
    assert session.time_for(check, margin + 5, dry=True)[0] is None  # a dry run too


def test_a_lessons_step_starts_when_its_first_lesson_fits_and_is_a_call_of_its_own(session):
    """The lessons take longer than a call to the box: a lessons step gets what is left when
    its set-up and first lesson fit, and skips by lesson what does not."""
    core = next(s for s in session.PLAN if s.name == "lessons")
    runner = sys.modules["run_lessons"]
    assert core.est_s == session.LESSONS_SETUP_S + sum(runner.GPU_EST_S[n] for n in runner.CORE)
    assert core.min_s == session.LESSONS_SETUP_S + runner.GPU_EST_S[runner.CORE[0]]
    assert session.time_for(core, 300, dry=False) == (300 - session.STEP_MARGIN_S, None)
    assert session.time_for(core, 50, dry=False) == (
        None, f"would not fit (its first part ~{core.min_s:.0f} s, 50 s left)")  # fmt: skip
    assert session.time_for(core, 2000, dry=False) == (core.timeout_s, None)
    assert core.timeout_s == session.LESSONS_CALL_S <= 600 - 30  # a call, and start-up
    assert session.CALLS[core.call] == ("lessons",)
    optional = next(s for s in session.PLAN if s.name == "lessons-optional")
    assert "(06, 09, 00)" in optional.why and optional.min_s < optional.est_s


def test_the_first_call_holds_what_every_figure_leans_on_and_each_call_fits_600_s(session):
    assert session.CALLS[1] == ("environment", "fidelity", "drift", "loader", "check")
    assert session.DEFAULT_BUDGET_S + 30 <= session.CALL_LIMIT_S
    for call, names in session.CALLS.items():
        steps = [s for s in session.PLAN if s.name in names]
        if any(s.name.startswith("lessons") for s in steps):
            continue  # a lessons call skips by lesson what does not fit
        room = session.DEFAULT_BUDGET_S - session.STEP_MARGIN_S
        assert sum(s.est_s for s in steps) <= room, (call, [(s.name, s.est_s) for s in steps])
    slow = {s.name: s.call for s in session.PLAN if s.name in ("max-autotune", "snapshot")}
    assert 1 not in slow.values() and len(slow) == 2  # never in the first call
    assert all(s.est_s > 0 and s.why and s.timeout_s >= (s.min_s or s.est_s)
               for s in session.PLAN)  # fmt: skip


def test_the_default_is_the_first_call_and_a_rehearsal_runs_every_call(session):
    assert [s.name for s in session.selected_steps(session.parse_args([]))] == list(
        session.CALLS[1])  # fmt: skip
    assert [s.name for s in session.selected_steps(session.parse_args(["--call", "4"]))] == [
        "fp8", "max-autotune", "snapshot"]  # fmt: skip
    everything = session.selected_steps(session.parse_args(["--rehearse"]))
    assert [s.name for s in everything] == [s.name for s in session.PLAN]


_FAKE_PRELUDE = (
    "import json, os, sys, time\n"
    "out = sys.argv[sys.argv.index('--json') + 1]\n"
    "def save(doc):\n"
    "    open(out + '.tmp', 'w').write(json.dumps(doc))\n"
    "    os.replace(out + '.tmp', out)\n"
)
"""What a stand-in for a step (or for gpu_check.py) needs: its --json file, replaced whole."""


def _fake(tmp_path: Path, name: str, body: str) -> Path:
    script = tmp_path / name
    script.write_text(_FAKE_PRELUDE + textwrap.dedent(body))
    return script


def _fake_step(tmp_path: Path, body: str) -> Path:
    return _fake(tmp_path, "fake_step.py", "write = save\n" + textwrap.dedent(body))


def test_a_step_stopped_by_its_timeout_keeps_what_it_wrote_and_names_the_burst_it_was_in(
    session, tmp_path
):  # fmt: skip
    script = _fake_step(
        tmp_path,
        """
        first = {"label": "first", "samples_per_s": 10.0}
        write({"name": sys.argv[1], "status": "running", "bursts": [first], "running": "second"})
        print("wrote one burst", flush=True)
        time.sleep(60)
    """,
    )
    step = session.Step("drift", 1, 3, "test")
    t0 = time.monotonic()
    rec = session.run_step(step, 3, tmp_path, False, [], script=script)
    assert time.monotonic() - t0 < 20
    assert rec["status"] == "timeout" and rec["bursts"][0]["label"] == "first"
    assert rec["reason"] == ("stopped by its timeout after 3 s in 'second'; the 1 burst "
                             "finished before it is kept")  # fmt: skip
    assert rec["died_in"] == {"label": "second", "status": "failed",
                              "reason": "stopped by its timeout after 3 s"}  # fmt: skip
    assert {"name": "second: finished", "ok": False,
            "detail": "stopped by its timeout after 3 s"} in rec["checks"]  # fmt: skip
    assert "wrote one burst" in rec["log_tail"] and "running" not in rec


def test_a_step_that_dies_of_a_signal_is_a_crash_that_keeps_its_bursts(session, tmp_path):
    """subprocess reports a signal as a negative code (-11): a crash, never a pass."""
    script = _fake_step(
        tmp_path,
        """
        import signal
        write({"name": sys.argv[1], "status": "running", "running": "b",
               "bursts": [{"label": "a", "samples_per_s": 1.0}]})
        os.kill(os.getpid(), signal.SIGSEGV)
    """,
    )
    rec = session.run_step(session.Step("loader", 1, 30, "test"), 30, tmp_path, False, [],
                           script=script)  # fmt: skip
    assert rec["status"] == "failed" and rec["exit_code"] == -11
    assert rec["reason"] == ("the process died of SIGSEGV (exit -11): see log_tail in 'b'; the "
                             "1 burst finished before it is kept")  # fmt: skip
    assert [b["label"] for b in rec["bursts"]] == ["a"] and rec["died_in"]["label"] == "b"


def test_every_burst_reaches_the_kept_run_while_the_step_runs(session, tmp_path):
    script = _fake_step(
        tmp_path,
        """
        for i in range(3):
            write({"name": sys.argv[1], "status": "running",
                   "bursts": [{"label": str(j)} for j in range(i + 1)]})
            time.sleep(1.3)
    """,
    )
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    out.mkdir()
    scratch.mkdir()
    doc = {"steps": [], "running": "drift", "summary": {}}
    s = session.Session(doc, out / "gpu-x-dry.json", out, scratch)
    step = session.Step("drift", 1, 30, "test")
    seen = []
    keep = s.progress(step)

    def progress(part):
        keep(part)
        kept = json.loads((out / "gpu-x-dry.json").read_text())
        seen.append([len(st["bursts"]) for st in kept["steps"]])

    rec = session.run_step(step, 30, scratch, False, [], script=script, on_progress=progress)
    assert seen == [[1], [2], [3]]  # one step in the kept run, growing burst by burst
    s.finish_step(rec)
    kept = json.loads((out / "gpu-x-dry.json").read_text())
    assert [(st["name"], st["status"]) for st in kept["steps"]] == [("drift", "failed")]
    assert (out / "logs.tar.gz").exists() and kept["running"] is None


def test_out_is_checked_against_what_the_box_sends_back(session, tmp_path):
    for i in range(9):
        (tmp_path / f"f{i}.txt").write_text("x")
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "d.txt").write_text("x")
    with open(tmp_path / "big.bin", "wb") as f:
        f.truncate(session.OUT_FILE_MAX_BYTES + 1)
    problems = session.out_problems(tmp_path)
    assert problems[0].startswith("11 files in OUT, at most 8 come back")
    assert "big.bin: 16.0 MiB, over 16 MiB" in problems
    assert "a/b/c/d.txt: deeper than 2 folders" in problems


def test_the_log_archive_keeps_each_logs_tail_under_its_limit(session, tmp_path):
    import tarfile

    scratch, out = tmp_path / "scratch", tmp_path / "out"
    scratch.mkdir()
    out.mkdir()
    (scratch / "step-loud.log").write_bytes(b"x" * (3 * session.LOG_FILE_MAX_BYTES) + b"END")
    (scratch / "step-quiet.log").write_text("quiet")
    (scratch / "work").mkdir()  # data sets: never archived
    (scratch / "work" / "img.jpg").write_bytes(b"\xff" * 1000)
    path = session.write_log_archive(scratch, out)
    with tarfile.open(path) as tar:
        loud = tar.extractfile("step-loud.log").read()
        assert sorted(tar.getnames()) == ["step-loud.log", "step-quiet.log"]
    assert len(loud) == session.LOG_FILE_MAX_BYTES and loud.endswith(b"END")
    assert [p.name for p in out.iterdir()] == ["logs.tar.gz"]


def test_the_scratch_folder_is_never_inside_out(session, tmp_path):
    with pytest.raises(SystemExit, match="is inside OUT"):
        session._scratch(str(tmp_path / "out" / "work"), tmp_path / "out", False)
    root, made = session._scratch(None, tmp_path / "out", True)  # a dry run's own, removed
    assert made and root.is_dir() and root.name.startswith("wb-gpu-scratch-")
    assert session._scratch(None, tmp_path / "out", False) == (session.BOX_SCRATCH, False)


@pytest.mark.parametrize("argv, said", [
    (["--rehearse-fail", "drift=segv"], "--rehearse-fail makes a rehearsal's step die: add "
                                        "--rehearse"),
    (["--rehearse", "--rehearse-fail", "drift=hang"], "expected STEP=timeout|segv"),
    (["--budget-s", "900"], "--budget-s 900: a call to the box ends at 600 s"),
    (["--dry", "--results-dir", str(_BENCH / "results")], "a rehearsal is never published"),
])  # fmt: skip
def test_session_arguments_that_cannot_work_are_refused(session, capsys, argv, said):
    with pytest.raises(SystemExit) as exc:
        session.parse_args(argv)
    assert exc.value.code == 2 and said in capsys.readouterr().err


def test_an_unknown_step_is_refused(session, capsys):
    with pytest.raises(SystemExit) as exc:
        session.main(["--steps", "drift,nonsense"])
    assert exc.value.code == 2
    assert (
        "--steps nonsense: not a step; steps: environment, fidelity, drift"
        in capsys.readouterr().err
    )


def test_the_plan_prints(session, capsys):
    assert session.main(["--plan"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| call | step | est s | timeout s | why |"
    assert lines[2].startswith("| 1 | environment | 8 | 60 |")
    assert any(line.startswith("| 4 | total | ") for line in lines)


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


# -- the data paths' arithmetic and the overlap switch -----------------------------------------


def _tagged(label, path, sps, *, workers=8, status="ok", **kw):
    return {"label": label, "data_path": path, "status": status, "samples_per_s": sps,
            "knobs": {"num_workers": workers}, **kw}  # fmt: skip


def _alone(path, sps, workers=8):
    return {"data_path": path, "status": "ok", "samples_per_s": sps,
            "knobs": {"num_workers": workers}}  # fmt: skip


def test_each_path_is_read_against_the_mean_of_the_ceilings_around_it(record):
    step = {"bursts": [_tagged("ceiling (before)", "ceiling", 4400.0),
                       _tagged("jpeg, 8 workers", "cpu-few", 1100.0, decode="cpu"),
                       _tagged("gpu decode", "gpu-overlap", 4000.0, decode="gpu",
                               h2d_bytes_per_sample=110_000.0),
                       _tagged("ceiling (after)", "ceiling", 4000.0)],
            "facts": {"loader_alone": [_alone("cpu-few", 1200.0), _alone("gpu-overlap", 9000.0)]},
            "skipped": [{"what": "dali", "reason": "not installed"},
                        {"what": "predecoded-gpu", "reason": "not built: no time"}]}  # fmt: skip
    out = record.data_paths(step)
    assert out["ceiling"]["samples_per_s"] == 4200.0
    assert out["ceiling"]["after_over_before"] == round(4000 / 4400, 4)
    rows = {r["path"]: r for r in out["rows"]}
    assert [r["path"] for r in out["rows"]] == [p.key for p in record.DATA_PATHS]
    cpu, gpu = rows["cpu-few"], rows["gpu-overlap"]
    assert cpu["loader_per"] == 150.0 and cpu["text"].endswith(", 8 workers")  # per worker
    assert cpu["over_ceiling"] == pytest.approx(1100 / 4200)
    assert gpu["loader_per"] == 9000.0 and gpu["per"] == "GPU"  # one GPU
    assert gpu["over_ceiling"] == pytest.approx(4000 / 4200) and gpu["h2d_bytes_per_sample"]
    assert out["best"] == {"path": "gpu-overlap", "over_ceiling": pytest.approx(0.952, abs=1e-3)}
    assert out["goal_met"] is True
    assert rows["dali"]["not_run"] == "not installed"
    assert rows["predecoded-gpu"]["not_run"] == "not built: no time"
    assert rows["cpu-many"]["training"] is None
    assert (
        rows["cpu-many"]["not_run"]
        == record.NOT_MEASURED
        == "not measured: the step ended before it"
    )


def test_a_path_below_90_percent_misses_the_goal_and_a_failed_one_says_why(record):
    step = {"bursts": [_tagged("ceiling (before)", "ceiling", 1000.0),
                       _tagged("jpeg, 1 workers", "cpu-few", 890.0, workers=1),
                       _tagged("gpu decode", "gpu-overlap", None, status="error",
                               error="nvJPEG failed")], "skipped": []}  # fmt: skip
    out = record.data_paths(step)
    assert "after_over_before" not in out["ceiling"]  # one ceiling burst: no drift to read
    assert out["goal_met"] is False and out["best"]["path"] == "cpu-few"
    rows = {r["path"]: r for r in out["rows"]}
    assert rows["cpu-few"]["text"].endswith(", 1 worker")
    assert rows["gpu-overlap"]["failed"] == "error: nvJPEG failed"
    assert rows["gpu-overlap"]["over_ceiling"] is None


def test_a_run_from_before_the_data_path_rows_has_none(record):
    old = {"name": "loader", "bursts": [{"label": "jpeg, 8 workers", "samples_per_s": 699.0}]}
    assert record.data_paths(old) is None


def test_the_rehearsal_builds_the_device_pipeline_and_puts_the_loader_back(steps, tiny_data):
    """The session's one reach past the knobs: inside the block ``build_loader`` builds the
    decode=gpu stream on a CPU (its CPU twin), with the overlap the knob asks; after it, a CPU
    refuses it."""
    import torch

    import workbench.engine.loaders as loaders
    from workbench import Knobs
    from workbench.engine.loaders.device_batches import DeviceDecodeStream
    from workbench.engine.workloads import resolve_target

    wl, dev = resolve_target("cnn", "cpu", tiny_data)
    knobs = Knobs(batch_size=4, num_workers=0, decode="gpu", decode_overlap=False)
    with steps.device_decode(on_cpu=True) as built:
        stream = loaders.build_loader(wl, knobs, dev)
    try:
        assert isinstance(stream, DeviceDecodeStream) and built == ["cpu"]
        assert "in line" in stream.note
        images, labels = next(stream)
        assert images.shape == (4, 3, 64, 64) and images.dtype == torch.float32
        assert labels.shape == (4,) and stream.h2d_bytes_per_sample > 0
    finally:
        stream.close()
    again = loaders.build_loader(wl, knobs, dev)
    try:
        assert not isinstance(again, DeviceDecodeStream)
    finally:
        again.close()


# -- the lessons steps -------------------------------------------------------------------------


def _fake_wheel(folder: Path) -> Path:
    """A wheel as the wheelhouse holds them: the kernel must find what it installs."""
    import zipfile

    folder.mkdir()
    path = folder / "roomcheck-1.0-py3-none-any.whl"
    info = "roomcheck-1.0.dist-info"
    files = {"roomcheck.py": "INSTALLED = True\n",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: roomcheck\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}  # fmt: skip
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


@pytest.mark.concurrent  # pip and two kernels
def test_the_lessons_step_installs_offline_and_keeps_each_lesson_as_it_ends(
    steps, tmp_path, monkeypatch
):  # fmt: skip
    """The step's whole path on a CPU: the wheelhouse installed with no index into a folder the
    kernels see, the room's data built where the lessons read it, every lesson's record (with
    its cells' times) in the step's facts, and a failed lesson failing the step by name."""
    import nbformat

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("WORKBENCH_DATA", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # the step extends it
    monkeypatch.setattr(sys, "path", list(sys.path))
    wheels = _fake_wheel(tmp_path / "wheels").parent
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    cells = {"01_room": ["import roomcheck\nfrom workbench.engine.datasets import data_root",
                         "assert roomcheck.INSTALLED\n"
                         "assert len(list((data_root() / 'images').rglob('*.jpg'))) == 20"],
             "02_broken": ["raise RuntimeError('CUDA error: out of memory')"],
             "03_never": ["1"]}  # fmt: skip
    for name, sources in cells.items():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in sources])
        nbformat.write(nb, notebooks / f"{name}.ipynb")
    out = tmp_path / "step-lessons.json"
    ctx = steps.Context(dry=False, seconds=0.1, out=out, workdir=tmp_path / "work")
    log = steps.StepLog("lessons", ctx)
    steps.lessons(log, 240, "01,02", wheelhouse=wheels, notebooks=notebooks, images_per_class=2)
    doc = json.loads(out.read_text())  # written as each lesson ended
    facts = doc["facts"]
    assert facts["selected"] == ["01", "02"] and facts["install_s"] > 0
    assert facts["lessons"]["data"]["images"] == 20  # 2 a class: the room's set, here tiny
    room, broken = facts["lessons"]["lessons"]
    assert (room["lesson"], room["outcome"], room["error"]) == ("01_room", "passed", None)
    assert [c["source"] for c in room["cells"]] == [
        "import roomcheck",
        "assert roomcheck.INSTALLED",
    ]
    assert broken["outcome"] == "failed"
    assert broken["error"] == "RuntimeError: CUDA error: out of memory"
    checks = {c["name"]: c for c in log.doc()["checks"]}
    assert checks["wheelhouse installed offline"]["ok"]
    assert checks["lesson 01_room: passed"]["ok"]
    assert checks["lesson 02_broken: failed"] == {
        "name": "lesson 02_broken: failed", "ok": False,
        "detail": "RuntimeError: CUDA error: out of memory"}  # fmt: skip
    assert log.doc()["status"] == "failed"
    kept = {"schema": "workbench-gpu-run/1", "steps": [log.doc()]}
    assert set(sys.modules["gpu_record"].lesson_runs([(out, kept)])) == {"01", "02"}


def test_the_lessons_steps_say_why_they_do_not_run(steps, tmp_path):
    ctx = steps.Context(dry=False, seconds=0.1, out=tmp_path / "x.json", workdir=tmp_path)
    with pytest.raises(steps.StepSkipped, match="no wheelhouse here: run `make wheelhouse`"):
        steps.lessons(steps.StepLog("lessons", ctx), 100, wheelhouse=tmp_path / "none")
    dry = steps.Context(dry=True, seconds=0.1, out=tmp_path / "y.json", workdir=tmp_path)
    with pytest.raises(steps.StepSkipped, match="no CUDA device"):
        steps.lessons(steps.StepLog("lessons-optional", dry), 100)


# -- the transformer step (issue 32) -----------------------------------------------------------


@pytest.fixture(scope="module")
def tx(steps):
    return sys.modules["gpu_transformer"]


def test_the_dry_runs_transformer_step_runs_the_eager_rows_and_says_why_not_the_rest(dry_run, tx):
    doc = json.loads(dry_run[2][0].read_text())
    step = next(s for s in doc["steps"] if s["name"] == "transformer")
    assert step["status"] == "passed", step["checks"]
    eager = [r for r in tx.ROWS if r.compile == "off"]
    assert [(b["label"], b["row"]) for b in step["bursts"]] == [(r.label, r.key) for r in eager]
    assert [b["knobs"].get("attention", "auto") for b in step["bursts"][1:6]] == [
        "auto", "flash", "efficient", "cudnn", "math"]  # fmt: skip
    assert [b["knobs"].get("packing") for b in step["bursts"][6:]] == ["pad", "pack"]
    assert all(b["tokens_per_s"] > 0 and b["workload"].startswith("gpt (2 layers")
               for b in step["bursts"])  # fmt: skip
    skipped = {s["what"]: s["reason"] for s in step["skipped"]}
    assert set(skipped) == {"compile-default", "compile-reduce-overhead"}
    assert all(r.startswith("no CUDA: a cold compile") for r in skipped.values())
    rows = step["facts"]["rows"]
    ran = {k: rows[k]["attention_backend"] for k in ("attention-flash", "attention-math")}
    assert ran == {"attention-flash": "flash", "attention-math": "math"}
    for key in ("attention-efficient", "attention-cudnn"):  # no kernel on a CPU: said, and ran
        assert rows[key]["status"] == "ok" and "CUDA kernels only" in rows[key]["note"]
    assert rows["compile-default"] == {"status": "skipped", "note": skipped["compile-default"]}
    assert rows["eager"]["over_eager"] == 1.0 and rows["attention-math"]["over_eager"] > 0
    # one document a row leaves most positions padding; packed rows leave none
    assert rows["packing-pad"]["pad_share_pct"] > 30 and rows["packing-pack"]["pad_share_pct"] == 0


def test_the_transformer_step_is_planned_from_the_kept_compiles_as_a_call_of_its_own(
    session, tx, record
):  # fmt: skip
    step = next(s for s in session.PLAN if s.name == "transformer")
    runs = record.load_kept()
    kept = record.find_burst(runs[-1][1], "compile", "compile default (tf32)")
    default = next(r for r in tx.ROWS if r.key == "compile-default")
    assert tx.estimate(default, runs).seconds == tx.EAGER_S + tx.COMPILE_FACTOR * kept["compile_s"]
    assert step.est_s == tx.SETUP_S + sum(tx.estimate(r, runs).seconds for r in tx.ROWS)
    assert step.timed and step.min_s == tx.SETUP_S + tx.EAGER_S
    assert step.timeout_s <= 600 - 30 and step.timeout_s >= step.est_s
    assert "--steps transformer --budget-s 570" in step.why and runs[-1][0].name in step.why
    assert session.time_for(step, 20, dry=False)[0] is None
    assert session.time_for(step, 300, dry=False) == (300 - session.STEP_MARGIN_S, None)


def test_a_kept_gpt124m_compile_replaces_the_tiny_gpts_in_the_estimate(tx):
    own = {"steps": [{"name": "transformer", "bursts": [
        {"row": "compile-default", "status": "ok", "compile_s": 40.0, "knobs": {}}]}]}  # fmt: skip
    default = next(r for r in tx.ROWS if r.key == "compile-default")
    est = tx.estimate(default, [(Path("gpu-20270101-nvidia-h200.json"), own)])
    assert est.seconds == tx.EAGER_S + 50.0 and "1.25x its own" in est.why
    assert tx.estimate(default, []).seconds == tx.EAGER_S + tx.COMPILE_FALLBACK_S


def test_row_results_read_each_row_from_the_record(tx):
    step = {"bursts": [
        {"row": "eager", "status": "ok", "tokens_per_s": 200.0, "mfu_pct": 20.0,
         "knobs": {"precision": "bf16"}, "attention_backend": "flash"},
        {"row": "compile-default", "status": "ok", "tokens_per_s": 300.0, "compile_s": 9.0,
         "knobs": {"precision": "bf16", "compile": "default"}},
        {"row": "attention-cudnn", "status": "error", "error": "KnobError: attention=...",
         "refused": "attention='cudnn' is not allowed: ..."},
        {"row": "attention-math", "status": "oom", "error": "CUDA out of memory"}],
        "skipped": [{"what": "compile-reduce-overhead", "reason": "would not fit"}]}  # fmt: skip
    rows = tx.row_results(step)
    assert list(rows) == [r.key for r in tx.ROWS]
    assert (rows["compile-default"]["over_eager"], rows["compile-default"]["compile_s"]) == (1.5, 9)
    assert rows["attention-cudnn"] == {**rows["attention-cudnn"], "status": "refused",
                                       "note": "attention='cudnn' is not allowed: ...",
                                       "tokens_per_s": None}  # fmt: skip
    assert rows["attention-math"]["status"] == "failed"
    assert rows["attention-math"]["note"] == "oom: CUDA out of memory"
    assert rows["compile-reduce-overhead"] == {"status": "skipped", "note": "would not fit"}
    assert rows["attention-flash"] == {"status": "not measured", "note": tx.NOT_MEASURED}


def test_a_transformer_row_that_does_not_fit_is_skipped_and_said(steps, tx, tmp_path):
    ctx = steps.Context(dry=False, seconds=0.1, out=tmp_path / "tx.json", workdir=tmp_path)
    log = steps.StepLog("transformer", ctx)
    tx.transformer(log, 20)  # less than any row's estimate and the margin: nothing runs
    doc = json.loads((tmp_path / "tx.json").read_text())
    assert doc["bursts"] == [] and [s["what"] for s in doc["skipped"]] == [r.key for r in tx.ROWS]
    assert all(s["reason"].startswith("would not fit (est ") and "--steps transformer" in
               s["reason"] for s in doc["skipped"])  # fmt: skip
    assert doc["facts"]["workload"] == "gpt:124m" and doc["facts"]["precision"] == "bf16"


def test_a_refused_attention_kernel_is_the_rows_answer_not_a_failure(steps, tx, tmp_path,
                                                                     monkeypatch):  # fmt: skip
    """On a GPU a backend that cannot run these shapes fails the burst in set-up with a
    KnobError naming ``attention``: the row keeps the refusal; any other failure fails it."""
    import workbench
    from workbench import Knobs
    from workbench.core.results import BurstResult

    said = "attention='cudnn' is not allowed: one that runs this model's attention here: auto"
    outcome = {"error": f"KnobError: {said}"}
    monkeypatch.setattr(workbench, "run_burst", lambda wl, knobs, **kw: BurstResult(
        status="error", workload="gpt:124m", knobs=knobs, **outcome))  # fmt: skip
    ctx = steps.Context(dry=False, seconds=0.1, out=tmp_path / "tx.json", workdir=tmp_path)
    log = steps.StepLog("transformer", ctx)
    cudnn = next(r for r in tx.ROWS if r.key == "attention-cudnn")
    tx._run_row(log, cudnn, "gpt:124m", Knobs(attention="cudnn"))
    assert log.bursts[-1]["refused"] == said and log.doc()["status"] == "passed"
    outcome["error"] = "RuntimeError: CUDA error: an illegal memory access"
    tx._run_row(log, cudnn, "gpt:124m", Knobs(attention="cudnn"))
    assert "refused" not in log.bursts[-1] and log.doc()["status"] == "failed"


# -- the check step: gpu_check's rows kept however it ends -------------------------------------


def _fake_check(tmp_path: Path, body: str) -> Path:
    """A stand-in for gpu_check.py: writes its --json file as the real one does."""
    rows = (
        "def row(label):\n"
        "    burst = {'label': 'b', 'status': 'ok', 'samples_per_s': 1.0}\n"
        "    return {'label': label, 'status': 'passed', 'bursts': [burst]}\n"
        "def write(rows, running):\n"
        "    save({'device': 'fake', 'rows': rows, 'running': running})\n"
    )
    return _fake(tmp_path, "fake_check.py", rows + textwrap.dedent(body))


def test_a_check_killed_by_its_deadline_keeps_its_rows_and_fails_the_one_it_was_in(
    steps, tmp_path
):  # fmt: skip
    """The issue's reproduction: a gpu_check that writes 2 rows then hangs."""
    script = _fake_check(
        tmp_path,
        """
        write([row('one'), row('two')], 'three')
        time.sleep(120)
    """,
    )
    ctx = steps.Context(dry=False, seconds=0.1, out=tmp_path / "step-check.json",
                        workdir=tmp_path)  # fmt: skip
    log = steps.StepLog("check", ctx)
    t0 = time.monotonic()
    steps.check(log, 4 + steps.CHECK_WRAPUP_S, script=script)
    assert time.monotonic() - t0 < 20
    doc = json.loads((tmp_path / "step-check.json").read_text())
    assert [r["label"] for r in doc["facts"]["rows"]] == ["one", "two", "three"]
    lost = doc["facts"]["rows"][2]
    assert lost["status"] == "failed" and lost["reason"].startswith("stopped by its timeout")
    assert [b["label"] for b in doc["bursts"]] == ["one: b", "two: b"]
    failed = {c["name"]: c["detail"] for c in doc["checks"] if not c["ok"]}
    assert set(failed) == {"row: three", "gpu_check ended by itself"}
    assert doc["status"] == "failed" and doc["running"] is None


def test_a_check_that_crashes_goes_on_in_a_fresh_process(steps, tmp_path):
    """A segfault is a negative return code: the rest of the rows run with --resume."""
    script = _fake_check(
        tmp_path,
        """
        import signal
        if '--resume' in sys.argv:
            doc = json.load(open(out))
            lost = {'label': doc['running'], 'status': 'failed', 'reason': 'died here'}
            write(doc['rows'] + [lost, row('three')], None)
        else:
            write([row('one')], 'two')
            os.kill(os.getpid(), signal.SIGSEGV)
    """,
    )
    ctx = steps.Context(dry=False, seconds=0.1, out=tmp_path / "step-check.json",
                        workdir=tmp_path)  # fmt: skip
    log = steps.StepLog("check", ctx)
    steps.check(log, steps.RESUME_MIN_S + 30, script=script)
    doc = log.doc()
    assert [(r["label"], r["status"]) for r in doc["facts"]["rows"]] == [
        ("one", "passed"), ("two", "failed"), ("three", "passed")]  # fmt: skip
    assert doc["facts"]["resumed_after"] == "the process died of SIGSEGV (exit -11)"
    assert [c["name"] for c in doc["checks"] if not c["ok"]] == ["row: two"]


# -- a rehearsal that plants a failure ---------------------------------------------------------


DRIFT_ORDER = ["identical 1", "identical 2", "cudnn ABBA 1: off", "cudnn ABBA 1: on"]
CHECK_ORDER = ["rehearsal: cnn, resident batch", "rehearsal: cnn, JPEGs, 1 worker",
               "rehearsal: cnn, resident batch again"]  # fmt: skip


def _kept_then_lost(kept: list[str], lost: str | None, order: list[str]) -> None:
    """What a killed step keeps, whatever the machine's speed: the bursts (rows) it finished,
    in order, then the one it was in, named; the planted failure strikes at the third (the
    check: the second row), so never more than that."""
    assert kept == order[: len(kept)] and len(kept) <= 2
    assert lost == order[len(kept)]


def _planted_failure(tmp_path: Path, step: str, failure: str, budget_s: int) -> tuple[Path, dict]:
    """Rehearse ``step`` alone with a planted ``failure`` (segv, timeout): the session exits
    1; its out folder and the step's kept record."""
    out = tmp_path / "out"
    p = _rehearse(out, "--steps", step, "--rehearse-fail", f"{step}={failure}",
                  "--budget-s", str(budget_s))  # fmt: skip
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-2000:]
    (kept,) = _kept(out)["steps"]
    return out, kept


def test_a_rehearsed_segfault_keeps_the_bursts_before_it(tmp_path, session):
    out, drift = _planted_failure(tmp_path, "drift", "segv", budget_s=400)
    assert drift["status"] == "failed" and drift["exit_code"] == -11
    _kept_then_lost([b["label"] for b in drift["bursts"]], drift["died_in"]["label"], DRIFT_ORDER)
    assert "died of SIGSEGV" in drift["reason"] and "planted segv" in drift["log_tail"]
    assert session.out_problems(out) == [] and len(list(out.iterdir())) == 3


@pytest.mark.concurrent  # mostly waits for the planted hang's deadline
def test_a_rehearsed_hang_is_killed_by_the_steps_deadline_and_keeps_its_bursts(tmp_path):
    out, drift = _planted_failure(tmp_path, "drift", "timeout", budget_s=60)
    assert drift["status"] == "timeout"
    _kept_then_lost([b["label"] for b in drift["bursts"]], drift["died_in"]["label"], DRIFT_ORDER)
    summary = (out / "summary.txt").read_text()
    assert "drift: timeout (stopped by its timeout after" in summary


@pytest.mark.concurrent  # mostly waits for the planted hang's deadline
def test_a_rehearsed_check_that_hangs_keeps_the_rows_before_it(tmp_path):
    _, check = _planted_failure(tmp_path, "check", "timeout", budget_s=75)
    rows = check["facts"]["rows"]
    assert [r["status"] for r in rows] == ["passed"] * (len(rows) - 1) + ["failed"]
    assert rows[-1]["reason"].startswith("stopped by its timeout")
    _kept_then_lost([r["label"] for r in rows[:-1]], rows[-1]["label"], CHECK_ORDER)
    assert len(check["bursts"]) == len(rows) - 1  # one burst a finished rehearsal row


def test_a_rehearsed_check_that_crashes_resumes_after_the_row_it_died_in(tmp_path):
    _, check = _planted_failure(tmp_path, "check", "segv", budget_s=400)
    assert [(r["label"], r["status"]) for r in check["facts"]["rows"]] == [
        (CHECK_ORDER[0], "passed"), (CHECK_ORDER[1], "failed"),
        (CHECK_ORDER[2], "passed")]  # fmt: skip
    assert check["facts"]["resumed_after"].startswith("the process died of SIGSEGV")
    assert "died in this row" in check["facts"]["rows"][1]["reason"]
