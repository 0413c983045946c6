"""The comm sweep: winners per size range, the bucket past the knee, saved and shown."""

import json

import pytest
import yaml

import workbench as wb
from workbench.analysis.comm_sweep import (
    KNEE_SHARE,
    bucket_suggestion,
    comm_sweep,
    sweep_rows,
    winners_by_size,
)
from workbench.cli import main
from workbench.config.saved import save_config
from workbench.core.errors import InputError
from workbench.core.knobs import KnobError

pytestmark = pytest.mark.concurrent  # comm benchmarks are torchrun jobs

KIB, MIB = 2**10, 2**20


def _rows(points: list[tuple[int, float]]) -> list[dict]:
    """Rows as comm_bench gives them, for two ranks (busbw = algbw)."""
    return [{"size_bytes": s, "time_us": s / (bw * 1e3) if bw else 1e9, "busbw_gbps": bw}
            for s, bw in points]  # fmt: skip


def test_winners_are_merged_into_size_ranges_with_their_lead():
    ring = _rows([(8 * KIB, 1.0), (64 * KIB, 2.0), (1 * MIB, 8.0), (8 * MIB, 10.0)])
    tree = _rows([(8 * KIB, 1.5), (64 * KIB, 2.2), (1 * MIB, 6.0), (8 * MIB, 9.0)])
    ranges = winners_by_size({"Ring": ring, "Tree": tree})
    assert [(r["value"], r["from_bytes"], r["to_bytes"]) for r in ranges] == [
        ("Tree", 8 * KIB, 64 * KIB), ("Ring", 1 * MIB, 8 * MIB)]  # fmt: skip
    assert ranges[0]["busbw_gbps"] == [1.5, 2.2] and ranges[1]["sizes_bytes"] == [MIB, 8 * MIB]
    assert ranges[0]["margin_pct"] == pytest.approx(10.0, abs=0.1)  # 2.2 vs 2.0: the smaller lead
    assert ranges[1]["margin_pct"] == pytest.approx(11.1, abs=0.1)


def test_the_bucket_is_the_first_size_past_the_knee():
    curve = [(8 * KIB, 0.5), (256 * KIB, 3.0), (4 * MIB, 8.5), (16 * MIB, 9.5), (64 * MIB, 10.0)]
    b = bucket_suggestion(winners_by_size({"x": _rows(curve)}))
    assert b["value"] == 4.0 and b["at_bytes"] == 4 * MIB  # 8.5 >= 0.8 x 10, 3.0 is not
    assert (
        b["busbw_gbps"] == 8.5 and b["peak_busbw_gbps"] == 10.0 and b["peak_at_bytes"] == 64 * MIB
    )
    assert b["share_of_peak_pct"] == 85.0 and KNEE_SHARE == 0.8 and not b["clamped_to_min"]
    tiny = bucket_suggestion(winners_by_size({"x": _rows([(8 * KIB, 1.0), (32 * KIB, 1.0)])}))
    assert tiny["value"] == 0.1 and tiny["clamped_to_min"]  # the knob's smallest value
    assert bucket_suggestion(winners_by_size({"x": _rows([(8 * KIB, 0.0)])})) is None


def test_bad_sweeps_are_refused_before_anything_runs():
    with pytest.raises(InputError, match="variable='OMP_NUM_THREADS'"):
        comm_sweep("OMP_NUM_THREADS", ["1", "2"])
    with pytest.raises(KnobError, match="NCCL_ALGO='Rign'"):
        comm_sweep("NCCL_ALGO", ["Ring", "Rign"])
    with pytest.raises(InputError, match="distinct values"):
        comm_sweep("NCCL_ALGO", ["Ring", "Ring"])


def test_a_real_sweep_on_gloo_says_nccl_had_no_effect_and_is_saved_and_shown(tmp_path, capsys):
    sweep = comm_sweep(
        "NCCL_ALGO", ["Ring", "Tree"], world_size=2, sizes=[8 * KIB, 256 * KIB, 4 * MIB]
    )
    assert all(r.ok for r in sweep.results.values())
    assert "gloo ran here: NCCL_ALGO had no effect" in sweep.note
    sizes = [s for r in sweep.winners for s in r["sizes_bytes"]]
    assert sizes == [8 * KIB, 256 * KIB, 4 * MIB]
    assert sweep.bucket["peak_busbw_gbps"] > 0 and sweep.bucket["at_bytes"] in sizes
    table = sweep.table()
    assert "comm sweep over NCCL_ALGO: Ring, Tree" in table and "bucket_cap_mb=" in table
    path = save_config(wb.Knobs(world_size=2), tmp_path / "t.yaml", comm=sweep.suggestions())
    saved = yaml.safe_load(path.read_text())["comm"]
    assert saved["variable"] == "NCCL_ALGO" and saved["backend"] == "gloo"
    assert saved["world_size"] == 2 and saved["nodes"] == 1
    assert saved["bucket_cap_mb"]["value"] == sweep.bucket["value"]
    assert wb.load_config(path, check_machine=False).comm == saved
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "# comm sweep over NCCL_ALGO (gloo, 2 ranks" in out
    assert f"#   bucket_cap_mb={sweep.bucket['value']:g}: busbw" in out


def test_the_cli_refuses_a_sweep_it_cannot_read(capsys):
    assert main(["comm", "--sweep", "NCCL_ALGO"]) == 2
    assert main(["comm", "--sweep", "NCCL_ALGO=Ring,Rign"]) == 2
    err = capsys.readouterr().err
    assert "--sweep='NCCL_ALGO' is not allowed: NCCL_X=V1,V2" in err and "'Rign'" in err


def test_across_nodes_a_sweep_ranks_values_by_the_inter_node_rows():
    one_node = [{"size_bytes": 8, "busbw_gbps": 1.0}]
    assert sweep_rows(one_node) == one_node
    rows = [{"size_bytes": 8, "busbw_gbps": 9.0, "scope": "intra"},
            {"size_bytes": 8, "busbw_gbps": 1.0, "scope": "inter"}]  # fmt: skip
    assert sweep_rows(rows) == [rows[1]]


def test_a_sweep_across_two_local_nodes_names_winners_from_the_inter_rows(capsys):
    args = ["comm", "--sweep", "NCCL_ALGO=Ring,Tree", "--world-size", "2", "--nodes", "2",
            "--launcher", "local", "--sizes", "8K,64K", "--json"]  # fmt: skip
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    for result in doc["results"].values():
        assert result["nodes"] == 2 and [r["scope"] for r in result["rows"]] == ["inter"] * 2
    covered = [size for w in doc["suggestions"]["winners"] for size in w["sizes_bytes"]]
    assert covered == [8192, 65536]
    assert doc["suggestions"]["nodes"] == 2  # a saved config says where it was measured
