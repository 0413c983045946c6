"""The device image pipeline, run on CPU tensors: the same augmentation as the CPU path."""

from __future__ import annotations

import io
import math
import random
import statistics

import numpy as np
import pytest
import torch
from PIL import Image
from torch.nn import functional as F
from torchvision import transforms as T
from torchvision.transforms import InterpolationMode, v2

from workbench.engine import device_images
from workbench.engine.device_images import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    DeviceImages,
    ImageRecipe,
    UnsupportedTransform,
    augment,
    crop_box,
    decode_jpegs,
    jpeg_decoder,
    normalize_,
    recipe_of,
)
from workbench.engine.encoded import collate_encoded
from workbench.engine.workloads.vision import train_transform


def _jpeg(array: np.ndarray, quality: int = 95) -> torch.Tensor:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="JPEG", quality=quality)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _halves(height: int = 120, width: int = 160) -> np.ndarray:
    """Left half black, right half white: a flipped crop is bright on its left."""
    image = np.zeros((height, width, 3), dtype=np.uint8)
    image[:, width // 2 :] = 255
    return image


def test_the_recipe_is_read_from_the_workloads_own_transform():
    recipe = recipe_of(train_transform(224))
    assert recipe == ImageRecipe(size=224)  # RandomResizedCrop's defaults, flip 0.5, ImageNet
    custom = T.Compose([T.RandomResizedCrop(96, scale=(0.3, 0.9), ratio=(0.5, 2.0)),
                        T.ToTensor(), T.Normalize((0.5,) * 3, (0.25,) * 3)])  # fmt: skip
    got = recipe_of(custom)
    assert (got.size, got.scale, got.ratio, got.flip_p) == (96, (0.3, 0.9), (0.5, 2.0), 0.0)
    assert got.mean == (0.5,) * 3 and got.std == (0.25,) * 3


def test_a_transform_the_device_does_not_run_is_refused_by_name():
    jitter = T.Compose([T.RandomResizedCrop(64), T.ColorJitter(0.4), T.ToTensor()])
    with pytest.raises(UnsupportedTransform, match="ColorJitter"):
        recipe_of(jitter)
    with pytest.raises(UnsupportedTransform, match="RandomResizedCrop"):
        recipe_of(T.Compose([T.ToTensor()]))


def test_crop_boxes_have_random_resized_crops_statistics():
    """Area share and aspect ratio of 3,000 boxes against torchvision's own draw."""
    recipe, rng = ImageRecipe(size=224), random.Random(0)
    ours = [crop_box(375, 500, recipe, rng) for _ in range(3000)]
    torch.manual_seed(0)
    image = torch.empty(3, 375, 500)
    theirs = [T.RandomResizedCrop.get_params(image, recipe.scale, list(recipe.ratio))
              for _ in range(3000)]  # fmt: skip
    for box in ours:
        assert box.top >= 0 and box.top + box.height <= 375
        assert box.left >= 0 and box.left + box.width <= 500
    area = lambda hw: statistics.fmean(h * w / (375 * 500) for h, w in hw)  # noqa: E731
    log_ratio = lambda hw: statistics.fmean(math.log(w / h) for h, w in hw)  # noqa: E731
    ours_hw = [(b.height, b.width) for b in ours]
    theirs_hw = [(h, w) for _, _, h, w in theirs]
    assert area(ours_hw) == pytest.approx(area(theirs_hw), abs=0.02)
    assert log_ratio(ours_hw) == pytest.approx(log_ratio(theirs_hw), abs=0.03)


def test_an_image_too_wide_for_any_try_gets_the_centre_crop_at_the_widest_ratio():
    recipe = ImageRecipe(size=32, scale=(0.95, 1.0))
    box = crop_box(20, 400, recipe, random.Random(1))
    assert (box.height, box.width) == (20, round(20 * 4 / 3))
    assert box.left == (400 - box.width) // 2


def test_device_crops_match_the_cpu_paths_statistics():
    """Same size, same value range, close per-channel means over one batch of real photos'
    stand-ins, CPU (Pillow + torchvision) against the device code on CPU tensors."""
    rng_np = np.random.default_rng(0)
    photos = [rng_np.integers(0, 256, (300 + 7 * i, 400, 3), dtype=np.uint8) for i in range(48)]
    photos = [(np.cumsum(p, axis=1) // (np.arange(400) + 1)[None, :, None]).astype(np.uint8)
              for p in photos]  # fmt: skip  # smooth left-to-right: crops differ by where they land
    torch.manual_seed(0)
    cpu = torch.stack([train_transform(64)(Image.fromarray(p)) for p in photos])
    device = DeviceImages(ImageRecipe(size=64), "cpu", seed=0)
    got, labels = device(collate_encoded([(_jpeg(p), i % 3) for i, p in enumerate(photos)]))
    assert got.shape == cpu.shape == (48, 3, 64, 64) and got.dtype == torch.float32
    low = (0 - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)
    high = (1 - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)
    for c in range(3):
        assert got[:, c].min() >= low[c] - 1e-4 and got[:, c].max() <= high[c] + 1e-4
    means = got.mean(dim=(0, 2, 3)).tolist()
    assert means == pytest.approx(cpu.mean(dim=(0, 2, 3)).tolist(), abs=0.15)
    assert got.std().item() == pytest.approx(cpu.std().item(), rel=0.15)
    assert labels.tolist() == [i % 3 for i in range(48)]


def test_half_the_crops_are_flipped():
    image = torch.from_numpy(_halves()).permute(2, 0, 1)
    recipe, rng = ImageRecipe(size=16, scale=(0.9, 1.0)), random.Random(3)
    out = augment([image] * 400, recipe, rng)
    flipped = out[:, :, :, :4].mean(dim=(1, 2, 3)) > out[:, :, :, -4:].mean(dim=(1, 2, 3))
    assert 0.42 <= flipped.float().mean().item() <= 0.58
    never = augment([image] * 50, ImageRecipe(size=16, flip_p=0.0), random.Random(3))
    assert (never[:, :, :, :4].mean() < never[:, :, :, -4:].mean()).item()


def test_the_same_seed_gives_the_same_crops():
    image = torch.from_numpy(_halves()).permute(2, 0, 1)
    a = augment([image] * 8, ImageRecipe(size=24), random.Random(5))
    b = augment([image] * 8, ImageRecipe(size=24), random.Random(5))
    c = augment([image] * 8, ImageRecipe(size=24), random.Random(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_normalize_is_totensor_then_normalize():
    pixels = torch.randint(0, 256, (2, 3, 5, 5), dtype=torch.uint8)
    recipe = ImageRecipe(size=5)
    expected = T.Normalize(recipe.mean, recipe.std)(pixels.float() / 255)
    assert torch.allclose(normalize_(pixels.float(), recipe), expected, atol=1e-5)


def test_jpegs_decode_as_pillow_decodes_them_and_grey_ones_come_out_rgb():
    rng_np = np.random.default_rng(2)
    colour = rng_np.integers(0, 256, (40, 56, 3), dtype=np.uint8)
    grey = Image.fromarray(colour).convert("L")
    buffer = io.BytesIO()
    grey.save(buffer, format="JPEG")
    grey_bytes = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    got = decode_jpegs([_jpeg(colour), grey_bytes], "cpu")
    assert [g.shape for g in got] == [(3, 40, 56), (3, 40, 56)]
    pillow = np.asarray(Image.open(io.BytesIO(_jpeg(colour).numpy().tobytes())).convert("RGB"))
    assert np.abs(got[0].permute(1, 2, 0).numpy().astype(int) - pillow).max() <= 2
    assert torch.equal(got[1][0], got[1][2])  # grey: the three channels are one
    assert jpeg_decoder()[0].split()[0] in {"torchcodec", "torchvision"}


def test_predecoded_squares_are_cropped_from_uint8_and_counted_as_their_bytes():
    squares = torch.randint(0, 256, (4, 73, 73, 3), dtype=torch.uint8)
    batch = collate_encoded([(squares[i], i) for i in range(4)])
    images = DeviceImages(ImageRecipe(size=64), "cpu", channels_last=True)
    out, labels = images(batch)
    assert out.shape == (4, 3, 64, 64) and labels.tolist() == [0, 1, 2, 3]
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert images.h2d_bytes_per_sample == 73 * 73 * 3 + 8  # the square and its int64 label


def test_without_torchcodec_torchvisions_decoder_decodes_the_same(monkeypatch):
    colour = np.random.default_rng(4).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    first = decode_jpegs([_jpeg(colour)], "cpu")[0]

    def missing():
        raise ImportError("No module named 'torchcodec'")

    monkeypatch.setattr(device_images, "_DECODER", None)
    monkeypatch.setattr(device_images, "_torchcodec_decoder", missing)
    assert jpeg_decoder()[0].startswith("torchvision ")
    assert torch.equal(decode_jpegs([_jpeg(colour)], "cpu")[0], first)
    monkeypatch.setattr(device_images, "_DECODER", None)  # the next test picks again


class _Drains:
    """torch.cuda.current_stream, recorded: a drain is the host synchronizing a stream."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def __call__(self, device: torch.device | None = None) -> _Drains:
        self.device = device
        return self

    def synchronize(self) -> None:
        self.log.append(f"drain {self.device}")


def _fake_decode(log: list[str]):
    def decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        log.append(f"decode {len(data)} on {device}")
        return [torch.zeros(3, 2, 2, dtype=torch.uint8) for _ in data]

    return decode


@pytest.mark.parametrize(
    ("package", "version", "ordered_from", "drained"),
    [
        ("torchvision", "0.26.0+cu130", None, True),  # the lent GPU box's: PR 9606
        ("torchvision", "0.29.2", None, True),  # 9606 closed unmerged: no release is fixed
        ("torchcodec", "0.16.0", None, True),  # nvJPEG's hardware engine: torchcodec PR 1634
        ("torchcodec", "0.17.0", (0, 18), True),  # before a release named as ordering itself
        ("torchcodec", "0.18.1", (0, 18), False),  # from it: trusted, not drained
        ("torchcodec", "(version unknown)", (0, 18), True),  # unknown: drained
    ],
)
def test_the_version_gate_drains_the_callers_stream_before_each_cuda_batch(
    monkeypatch, package, version, ordered_from, drained
):
    log: list[str] = []
    monkeypatch.setattr(device_images, "ORDERED_FROM", {**device_images.ORDERED_FROM,
                                                        package: ordered_from})  # fmt: skip
    monkeypatch.setattr(torch.cuda, "current_stream", _Drains(log))
    name, decode = device_images._made_safe(package, version, _fake_decode(log))
    pr = device_images.PULL_REQUESTS[package]
    assert name.startswith(f"{package} {version} decode_jpeg (") and pr in name
    assert (device_images.DRAINED in name) == drained
    decode([torch.zeros(4, dtype=torch.uint8)] * 2, torch.device("cuda", 1))
    drain = ["drain cuda:1"] if drained else []
    assert log == [*drain, "decode 2 on cuda:1"]  # the drain comes first: the write must wait
    log.clear()
    decode([torch.zeros(4, dtype=torch.uint8)], torch.device("cpu"))
    assert log == ["decode 1 on cpu"]  # a CPU decode has no stream to drain


def test_torchvision_0_26_is_named_with_its_version_and_drained_through_decode_jpegs(monkeypatch):
    """The lent GPU box's decoder (torchvision 0.26, no TorchCodec), picked as a burst picks it."""
    log: list[str] = []

    def missing():
        raise ImportError("No module named 'torchcodec'")

    monkeypatch.setattr(device_images, "_DECODER", None)
    monkeypatch.setattr(device_images, "_torchcodec_decoder", missing)
    monkeypatch.setattr(device_images, "_torchvision_decoder", lambda: _fake_decode(log))
    monkeypatch.setattr(device_images, "_version", lambda package: "0.26.0")
    monkeypatch.setattr(torch.cuda, "current_stream", _Drains(log))
    assert jpeg_decoder()[0] == (
        "torchvision 0.26.0 decode_jpeg (caller's stream synchronized before each batch: "
        "pytorch/vision PR 9606)"
    )
    decode_jpegs([torch.zeros(4, dtype=torch.uint8)] * 3, "cuda:0")
    assert log == ["drain cuda:0", "decode 3 on cuda:0"]
    monkeypatch.setattr(device_images, "_DECODER", None)  # the next test picks again


def _smooth(height: int, width: int, seed: int) -> torch.Tensor:
    coarse = torch.rand(
        (1, 3, height // 8, width // 8), generator=torch.Generator().manual_seed(seed)
    )
    full = F.interpolate(coarse, size=(height, width), mode="bilinear") * 255
    return full[0].round().to(torch.uint8)


def test_the_batched_resize_is_within_a_grey_level_of_torchvisions_antialiased_one():
    """roi_align's averaged samples against a per-image antialiased bilinear resize, on the
    same boxes, for crops both larger and smaller than the output."""
    images = [_smooth(256, 256, i) for i in range(24)] + [_smooth(300, 400, i) for i in range(8)]
    recipe = ImageRecipe(size=96, flip_p=0.0)
    got = augment(images, recipe, random.Random(9), stats=(torch.zeros(1), torch.ones(1)))
    rng = random.Random(9)
    boxes = [crop_box(i.shape[-2], i.shape[-1], recipe, rng) for i in images]
    expected = torch.stack([
        F.interpolate(image[None, :, b.top : b.top + b.height, b.left : b.left + b.width].float(),
                      size=(96, 96), mode="bilinear", antialias=True, align_corners=False)[0]
        for image, b in zip(images, boxes, strict=True)
    ])  # fmt: skip
    difference = (got - expected).abs()
    assert difference.mean().item() < 1.0  # grey levels, of 255
    assert difference.flatten().quantile(0.99).item() < 6.0
    per_image = difference.mean(dim=(1, 2, 3))
    assert per_image.max().item() < 2.0  # every image in its own place: order kept across sizes


def test_a_crop_that_is_not_bilinear_or_pixels_left_unscaled_are_refused():
    bicubic = T.Compose([T.RandomResizedCrop(32, interpolation=InterpolationMode.BICUBIC)])
    with pytest.raises(UnsupportedTransform, match="bicubic"):
        recipe_of(bicubic)
    unscaled = v2.Compose([v2.RandomResizedCrop(32), v2.ToImage(), v2.ToDtype(torch.float32)])
    with pytest.raises(UnsupportedTransform, match="scale=False"):
        recipe_of(unscaled)
    steps = [v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(), v2.ToImage()]
    steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.5] * 3)]
    scaled = v2.Compose(steps)
    assert recipe_of(scaled) == ImageRecipe(size=32, mean=(0.5,) * 3, std=(0.5,) * 3)
