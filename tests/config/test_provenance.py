"""A tuned config's provenance says what the tune could and could not tell."""

from __future__ import annotations

import pytest

from workbench.config import provenance
from workbench.config.yaml_text import ConfigError

TUNE = {"runs": 3, "samples_per_s_runs": [100.0, 101.0, 99.0], "speedup": 1.25,
        "speedup_low": 1.1, "speedup_high": 1.4, "start_runs": 3, "noise_pct": 4.0,
        "bursts": 12}  # fmt: skip
PROV = {"source": "tune", "workload": "cnn", "device": {"name": "cpu", "type": "cpu"},
        "measured": {"samples_per_s": 100.0}, "versions": {"torch": "2.x"},
        "date": "today"}  # fmt: skip


def test_a_speed_up_the_runs_could_tell_is_shown_with_its_interval():
    line = provenance.summary({**PROV, "tune": {**TUNE, "speedup_uncertain": False}})
    assert "1.25x (1.10-1.40) the start (3 runs)" in line


def test_a_speed_up_the_runs_could_not_tell_is_words_not_a_figure():
    line = provenance.summary({**PROV, "tune": {**TUNE, "speedup_uncertain": True}})
    assert "could not tell" in line and "1.25x" not in line


def test_a_config_saved_before_the_mark_reads_as_unmarked_and_a_bad_mark_is_refused():
    assert provenance._tune(dict(TUNE), "old.yaml")["speedup_uncertain"] is None
    with pytest.raises(ConfigError, match="speedup_uncertain"):
        provenance._tune({**TUNE, "speedup_uncertain": "yes"}, "bad.yaml")


def test_this_machine_is_read_without_importing_torch():
    import subprocess
    import sys

    code = ("import sys; from workbench.config import provenance; "
            "m = provenance.current_machine(); "
            "print('torch' in sys.modules, m['torch'] is not None, m['gpus'])")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported, versioned, gpus = out.stdout.split(" ", 2)
    assert (imported, versioned) == ("False", "True")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():  # no driver: NVML says so, and that means no CUDA GPU
        assert gpus.strip() == "[]"


def test_no_nvidia_driver_reads_as_no_gpu_and_other_nvml_trouble_as_unknown(monkeypatch):
    from workbench.engine import telemetry

    monkeypatch.setattr(telemetry, "nvml_status", lambda: "NVML Shared Library Not Found")
    assert provenance._gpu_names(None) == []
    monkeypatch.setattr(telemetry, "nvml_status", lambda: "Insufficient Permissions")
    assert provenance._gpu_names(None) is None
