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
