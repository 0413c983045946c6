import os
import pickle
import stat
from types import SimpleNamespace

import pytest
import torch

from workbench.analysis import memory_views
from workbench.core.knobs import KnobError, Knobs


def test_memory_snapshot_on_a_cpu_says_why_there_is_no_file_and_records_steps(tiny_data, tmp_path):
    snap = memory_views.memory_snapshot("cnn", Knobs(batch_size=8), path=tmp_path / "s.pickle",
                                  data_dir=tiny_data, seconds=0.3, min_steps=3,
                                  warmup_steps=2, record=False)  # fmt: skip
    assert snap.result.ok and snap.path is None and not (tmp_path / "s.pickle").exists()
    assert "only for CUDA" in snap.why_no_file
    phases = [s["phase"] for s in snap.steps]
    assert phases.count("warmup") == 2 and phases.count("measuring") >= 3
    assert all(s["process_mib"] > 0 for s in snap.steps)
    assert "only for CUDA" in snap.summary()


def test_a_snapshot_of_a_fresh_process_burst_is_refused_on_a_gpu(monkeypatch):
    from workbench.engine import hardware

    monkeypatch.setattr(hardware, "resolve_device", lambda d: torch.device("cuda", 0))
    with pytest.raises(KnobError, match=r"alloc_conf=.*fresh processes"):
        memory_views.memory_snapshot("cnn", Knobs(alloc_conf="expandable_segments:True"))


def test_a_snapshot_is_written_private_in_a_private_home(tmp_path, monkeypatch):
    """It holds the stack of every allocation: mode 0600 in folders of mode 0700, whatever
    the umask. PyTorch's writer (``open(..., "wb")``) and the burst are stood in for: this
    path runs on CUDA only (the GPU test below writes a real one)."""
    from workbench.engine import hardware

    written = {}

    def dump(filename):
        with open(filename, "wb") as f:  # what torch.cuda.memory._dump_snapshot does
            pickle.dump({"segments": []}, f)
        written["mode"] = stat.S_IMODE(os.stat(filename).st_mode)

    monkeypatch.setattr(hardware, "resolve_device", lambda d: torch.device("cuda", 0))
    monkeypatch.setattr(memory_views, "run_burst", lambda *a, **k: SimpleNamespace(id=7))
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **k: None)
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", dump)
    umask = os.umask(0o022)
    try:
        snap = memory_views.memory_snapshot("cnn", Knobs())
    finally:
        os.umask(umask)
    home = tmp_path / "wbhome"  # tests/conftest.py's WORKBENCH_HOME
    assert snap.path == home / "snapshots" / "burst-7.pickle"
    assert written["mode"] == 0o644  # the writer's own mode, as the umask leaves it
    assert stat.S_IMODE(snap.path.stat().st_mode) == 0o600
    for folder in (home, home / "snapshots"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert pickle.loads(snap.path.read_bytes()) == {"segments": []}


def test_the_recorder_keeps_python_stacks_unless_asked(tmp_path, monkeypatch):
    """C++ frames make the dump minutes long (461 s against 4 s in torchtitan's H100
    measurements): the default records Python frames only; ``stacks="all"`` asks for both."""
    from workbench.engine import hardware

    calls = []
    monkeypatch.setattr(hardware, "resolve_device", lambda d: torch.device("cuda", 0))
    monkeypatch.setattr(memory_views, "run_burst", lambda *a, **k: SimpleNamespace(id=7))
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **k: calls.append(k))
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", lambda f: open(f, "wb").close())
    memory_views.memory_snapshot("cnn", Knobs(), path=tmp_path / "a.pickle")
    memory_views.memory_snapshot("cnn", Knobs(), path=tmp_path / "b.pickle", stacks="all")
    starts = [c for c in calls if c.get("enabled", "all") is not None]
    assert [c["stacks"] for c in starts] == ["python", "all"]
    with pytest.raises(KnobError, match=r"stacks='cpp'.*'python'.*'all'"):
        memory_views.memory_snapshot("cnn", Knobs(), stacks="cpp")


@pytest.mark.gpu
def test_gpu_snapshot_is_a_pickle_the_viewer_opens(tmp_path):
    snap = memory_views.memory_snapshot("cnn", Knobs(batch_size=64), path=tmp_path / "s.pickle",
                                  seconds=0.5, record=False)  # fmt: skip
    assert snap.result.ok and snap.path.exists()
    assert stat.S_IMODE(snap.path.stat().st_mode) == 0o600
    data = pickle.loads(snap.path.read_bytes())
    assert "segments" in data and "device_traces" in data  # what memory_viz reads
    assert all(s["reserved_mib"] >= s["allocated_mib"] for s in snap.steps)
    assert snap.result.fragmentation_pct is not None
    assert snap.result.memory_breakdown["rest_mib"] is not None
