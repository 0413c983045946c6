"""A failed burst on the command line: what is known (not a page of n/a), and its traceback
with ``--debug`` (or WORKBENCH_DEBUG=1), in text and in ``--json``."""

import json

import pytest
from workloads_for_tests import tensor_workload

from workbench.cli import main
from workbench.engine.workloads import Workload, register_workload

RUN = ["burst", "--workload", "refuses", "--seconds", "0.2", "--no-record"]


def _refusing_model():
    raise RuntimeError("the model says no")


@pytest.fixture(autouse=True)
def _refusing():
    data = tensor_workload().dataset
    register_workload(
        "refuses", lambda data_dir=None: Workload(name="refuses", model=_refusing_model,
                                                  dataset=data)
    )  # fmt: skip


def test_a_failed_burst_prints_its_status_error_and_what_is_known_not_n_a(capsys):
    assert main(RUN) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["status", "error"]
    assert lines[1].startswith("error") and lines[1].endswith("RuntimeError: the model says no")
    assert "n/a" not in out and len(lines) < 12, out  # it was about 25 lines of n/a
    assert any(line.startswith("workload") and "refuses" in line for line in lines)
    assert lines[-1] == "traceback          kept: --debug prints it (Python: result.traceback)"


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_prints_the_traceback_in_text(where, capsys):
    args = ["--debug", *RUN] if where == "before" else [*RUN, "--debug"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "Traceback (most recent call last)" in out and "in _refusing_model" in out
    assert out.rstrip().endswith("RuntimeError: the model says no")


def test_json_has_the_traceback_only_with_debug(monkeypatch, capsys):
    assert main([*RUN, "--json"]) == 1
    plain = json.loads(capsys.readouterr().out)
    assert plain["status"] == "error" and plain["traceback"] is None  # the key stays
    assert main(["--debug", *RUN, "--json"]) == 1
    debug = json.loads(capsys.readouterr().out)
    assert debug["traceback"].rstrip().endswith("RuntimeError: the model says no")
    monkeypatch.setenv("WORKBENCH_DEBUG", "1")  # the same switch
    assert main([*RUN, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["traceback"] == debug["traceback"]


def test_history_json_shows_a_stored_traceback_only_with_debug(tmp_path, capsys):
    store = ["--store", str(tmp_path / "h.sqlite")]
    assert main([*RUN[:-1], *store]) == 1
    capsys.readouterr()
    assert main(["history", *store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["traceback"] is None
    assert main(["history", *store, "--json", "--debug"]) == 0
    assert "the model says no" in json.loads(capsys.readouterr().out)[0]["traceback"]
