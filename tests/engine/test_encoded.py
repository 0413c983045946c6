"""What the workers hand over with decode=gpu: the stored bytes, packed into one batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from workbench.core.errors import KnobError
from workbench.engine.datasets import ImageFiles
from workbench.engine.encoded import (
    JPEG,
    PIXELS,
    EncodedFiles,
    as_tensor,
    collate_encoded,
    file_bytes,
)


def test_a_batch_of_jpegs_is_one_block_of_bytes_that_splits_back_into_the_files(tiny_data):
    samples = list(ImageFiles(tiny_data / "images").samples)[:5]
    dataset = EncodedFiles(samples)
    batch = collate_encoded([dataset[i] for i in range(5)])
    assert batch.kind == JPEG and len(batch) == 5 and batch.data.dim() == 1
    for (path, label), data, got in zip(samples, batch.jpegs(), batch.labels, strict=True):
        assert data.numpy().tobytes() == Path(path).read_bytes()
        assert int(got) == label
    assert batch.nbytes == sum(Path(p).stat().st_size for p, _ in samples) + 5 * 8


def test_predecoded_squares_stack_into_one_uint8_tensor():
    squares = [torch.full((8, 8, 3), i, dtype=torch.uint8) for i in range(3)]
    batch = collate_encoded([(s, 7 - i) for i, s in enumerate(squares)])
    assert batch.kind == PIXELS and batch.data.shape == (3, 8, 8, 3) and batch.lengths is None
    assert batch.labels.tolist() == [7, 6, 5] and batch.nbytes == 3 * 8 * 8 * 3 + 3 * 8
    with pytest.raises(ValueError, match="pixels batch holds no JPEG"):
        batch.jpegs()


def test_a_folder_with_other_images_than_jpegs_is_refused_naming_the_file(tmp_path):
    png = tmp_path / "a" / "0.png"
    png.parent.mkdir()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(png)
    with pytest.raises(KnobError, match=r"decode.*nvJPEG decodes JPEGs only.*0\.png"):
        EncodedFiles([(str(png), 0)])


def test_stored_bytes_of_any_kind_become_a_uint8_tensor(tmp_path):
    path = tmp_path / "b.bin"
    path.write_bytes(b"\x01\x02\x03")
    assert file_bytes(path).tolist() == [1, 2, 3]
    assert as_tensor(memoryview(b"\x04\x05")).tolist() == [4, 5]
    pixels = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    converted = as_tensor(pixels)
    pixels[0, 0, 0] = 99  # a copy: the memory map it came from may go away
    assert converted.shape == (2, 2, 3) and int(converted[0, 0, 0]) == 0


@pytest.mark.gpu
def test_a_pinned_batch_pins_its_data_and_labels():
    batch = collate_encoded([(torch.zeros(10, dtype=torch.uint8), 1)] * 2).pin_memory()
    assert batch.data.is_pinned() and batch.labels.is_pinned()
