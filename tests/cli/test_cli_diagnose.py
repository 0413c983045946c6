"""`workbench diagnose`, run in-process (cli.main) on a tiny workload."""

import json

import pytest

from workbench.cli import main

pytestmark = pytest.mark.usefixtures("tiny_workload")


def test_diagnose_json_has_the_verdict_and_the_three_numbers(capsys):
    code = main(["diagnose", "--workload", "tiny", "--set", "batch_size=16", "--seconds", "0.2",
                 "--no-record", "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["verdict"] in ("data-bound", "compute-bound", "balanced")
    for key in ("full_samples_per_s", "loader_samples_per_s", "compute_samples_per_s"):
        assert doc[key] > 0
