"""workbench.analysis.format_bench: every format measured, converted first where missing."""

from __future__ import annotations

from workbench.analysis.format_bench import compare_formats, summary
from workbench.core.knobs import Knobs
from workbench.engine.datasets import build_datasets


def test_every_format_is_converted_then_measured_cold_and_warm(tmp_path):
    build_datasets(tmp_path, images_per_class=4, classes=2, token_mb=0.05)
    frame = compare_formats("cnn", Knobs(batch_size=4), modes=("loader",), seconds=0.2,
                            data_dir=tmp_path)  # fmt: skip
    assert len(frame) == 8 and set(frame["status"]) == {"ok"}
    assert (frame["samples_per_s"] > 0).all()
    sizes = frame.groupby("data_format")["bytes_on_disk"].first()
    assert sizes["predecoded"] == 8 * 73 * 73 * 3 + 8 * 8  # pixels + labels
    assert sizes["lmdb"] >= sizes["files"]  # the same JPEGs, plus LMDB's pages
    table = summary(frame)
    assert list(table.index) == ["files", "shards", "lmdb", "predecoded"]
    assert {c[1] for c in table.columns} == {"warm", "cold"}
    assert (tmp_path / "images.predecoded-73" / "manifest.json").is_file()
