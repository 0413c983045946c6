"""Data the production-side tests share."""

from pathlib import Path

import pytest

from workbench.engine.convert import convert_dataset


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    """A copy of a small image folder, with its shards, LMDB and predecoded (64 px crop) copies."""
    from workbench.engine.datasets import build_datasets

    root = tmp_path_factory.mktemp("prod") / "data"
    build_datasets(root, images_per_class=4, classes=2, token_mb=0.01)
    for fmt in ("shards", "lmdb", "predecoded"):
        convert_dataset(fmt, root / "images", resolution=73 if fmt == "predecoded" else None,
                        workers=1)  # fmt: skip
    return root / "images"
