"""benchmarks/transformer_figures.py (the transformer knobs on a CPU): its order and arithmetic
on made-up bursts, and every kept run's table where docs/figures.md publishes it."""

from pathlib import Path

import pytest
from benchmark_modules import load_benchmark

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def tf():
    return load_benchmark("transformer_figures")


def test_the_rounds_run_the_rows_forward_then_reversed(tf):
    assert tf.order(1, 3) == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0)]  # A B C C B A
    assert tf.order(2, 2) == [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1), (3, 1), (3, 0)]
    assert tf.ROWS[0] == ("attention=auto", {})  # what the others are read against


def _burst(rnd, label, tps, **kw):
    return {"round": rnd, "label": label, "status": "ok", "tokens_per_s": tps,
            "step_ms_p50": 256_000 / tps if tps else None, "attention_backend": "flash",
            **kw}  # fmt: skip


def test_each_row_is_read_against_the_same_rounds_first_row(tf):
    """The machine slows 3x between rounds; B is 1.2x A in both. Per-round ratios read 1.2;
    B's own tokens/s spread 3x, so medians alone would say little."""
    bursts = [_burst(0, "A", 300.0), _burst(0, "B", 360.0), _burst(0, "C", None, status="error"),
              _burst(1, "C", 50.0, attention_backend="math", no_effect={"x": "why"}),
              _burst(1, "B", 120.0), _burst(1, "A", 100.0)]  # fmt: skip
    a, b, c = tf.summarize(bursts, ("A", "B", "C"))
    assert (a["tokens_per_s_median"], a["over_first_median"], a["bursts"]) == (200.0, 1.0, 2)
    assert b["tokens_per_s"] == [360.0, 120.0] and b["over_first_median"] == pytest.approx(1.2)
    assert b["over_first_range"] == [pytest.approx(1.2), pytest.approx(1.2)]
    assert c["bursts"] == 1 and c["over_first_median"] == 0.5  # the failed burst is left out
    assert c["attention_backend"] == ["math"] and c["no_effect"] == {"x": "why"}
    assert a["step_ms_p50_median"] == pytest.approx((256_000 / 300 + 256_000 / 100) / 2)


def test_the_figures_page_holds_every_kept_runs_table(tf):
    kept = sorted((_BENCH / "results").glob("transformer-cpu-*.json"))
    assert kept, "no kept run: python benchmarks/transformer_figures.py"
    page = (_BENCH.parent / "docs" / "figures.md").read_text()
    for path in kept:
        assert tf.table(path) in page, f"docs/figures.md lacks the table of {path.name}"
