"""The image pipeline on the training device: decode (nvJPEG), random-resized crop, flip, normalize.

Why it exists: a torch DataLoader worker that decodes JPEGs with Pillow and augments them
delivers roughly 150-270 images/s at 224 px, while resnet50 in bf16 trains thousands a second
on one H100/H200. Feeding it from the CPU takes more cores than many GPU boxes give one GPU.
With ``decode=gpu`` the workers only read the stored bytes (``workbench.engine.encoded``): the
device decodes a whole batch of JPEGs in one nvJPEG call and does the augmentation there, or,
for ``data_format=predecoded``, takes the stored uint8 squares as they are (a quarter of the
float32 crops' bytes to copy) and crops them on the device.

The same augmentation as the CPU path (``workloads.vision.train_transform``), drawn by the same
rules (:class:`ImageRecipe`, read from the workload's own transform by :func:`recipe_of`):
RandomResizedCrop's box (a share of the area from ``scale``, an aspect ratio log-uniform in
``ratio``, ten tries, then the centre crop clamped to ``ratio``), resized to ``size`` x
``size`` with antialiasing (one ``roi_align`` per image size: :func:`augment` says how close
that is to torchvision's resize), a horizontal flip with probability ``flip_p``, then ``/255``
and the mean/std normalisation.
The boxes and flips are drawn on the host (``random.Random``: no device sync); only the pixel
work runs on the device. The result is float32, outside any autocast, as the CPU path's is.

The JPEG decoder: TorchCodec's ``decode_jpeg`` where it is installed (torchvision 0.29
deprecated its own decoders in favour of TorchCodec 0.16), else ``torchvision.io.decode_jpeg``
(present wherever the image workloads run). Both take the bytes as CPU tensors and decode a list
in one batched nvJPEG call on CUDA; :func:`jpeg_decoder` says which one this process uses, its
version and how it is made safe, and a ``decode=gpu`` burst's ``notes`` repeat that.

Why every device decode first waits for the caller's stream. A decoder takes its output tensors
from PyTorch's caching allocator on the caller's current stream, which hands out a block as soon
as it is freed there: any later use is meant to queue behind the kernels that still read it, on
that same stream. Neither decoder keeps that order, so nvJPEG can write a batch's pixels into a
block that kernels queued earlier have yet to read, and those kernels read pixels (NaN sums in
most of 200 tries on an H100, in pytorch/vision PR 9606's reproducer):

- torchvision's CUDA decoder, from 0.19 (the batched one, PR 8496) to 0.29, 0.26 among them (the
  lent GPU box has 0.26 with torch 2.11), decodes on a private stream from torch's pool that
  never waits for the caller's. It does end each batch with a host synchronize of that stream
  and then makes the caller's stream wait for it, so the pixels are complete when it returns:
  the output's readers are safe, its write is not. PR 9606 made the private stream wait for the
  caller's; it was closed unmerged, and 0.29 deprecated the decoders for TorchCodec's (PR 9609).
- TorchCodec's (0.16) decodes on the caller's stream, as it should, but nvJPEG's hardware engine
  (the batched path of baseline JPEGs; H100s, not an A100) writes before the work queued earlier
  on that stream has run: the same corruption. meta-pytorch/torchcodec PR 1634 adds a host
  barrier before the hardware decode; it was merged after 0.16.0, and no release is checked for
  it here.

Draining the caller's stream before the decode (the host waits for it:
``torch.cuda.current_stream(device).synchronize()``) made every case of PR 9606's measurements
clean, hardware and software paths, both decoders. So every device decode drains it first,
whichever decoder, unless :data:`ORDERED_FROM` names a release of that decoder known to order its
own writes. Neither cheaper way works: a synchronize *after* the decode comes too late (the
write is what must wait), and an event cannot order torchvision's private stream or nvJPEG's
engine. The cost: with ``decode_overlap`` (the default) the caller's stream is the side stream,
whose queued work is the previous batch's augmentation, queued a training step earlier; in line
it is the training stream, so the host waits for the previous step before decoding and queues
no further ahead, and the burst measures that. TorchCodec host-synchronizes the caller's stream
after each batch anyway: for it the wait comes earlier and costs nothing more.
"""

from __future__ import annotations

import importlib.metadata
import math
import random
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from workbench.engine.encoded import JPEG, EncodedBatch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP_TRIES = 10  # RandomResizedCrop's tries before its centre-crop fallback


class UnsupportedTransform(ValueError):
    """A workload transform the device pipeline cannot reproduce; the message says which step."""


@dataclass(frozen=True, slots=True)
class ImageRecipe:
    """The augmentation a batch gets, whichever side runs it (the CPU's or the device's)."""

    size: int
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD


@dataclass(frozen=True, slots=True)
class CropBox:
    """Where a crop is cut from an image (pixels) and whether it is flipped."""

    top: int
    left: int
    height: int
    width: int
    flip: bool = False


def recipe_of(transform: Any) -> ImageRecipe:
    """The recipe of a torchvision ``Compose`` of RandomResizedCrop, RandomHorizontalFlip
    (optional), ToTensor / ToImage+ToDtype and Normalize: the classic training augmentation,
    and what the built-in image workloads use. Anything else raises UnsupportedTransform
    naming the step: the device would run another augmentation than the CPU's."""
    steps = list(getattr(transform, "transforms", [transform] if transform else []))
    found: dict[str, Any] = {}
    for step in steps:
        kind = type(step).__name__
        if kind == "RandomResizedCrop":
            _check_bilinear(step)
            size = step.size[0] if isinstance(step.size, (tuple, list)) else step.size
            found |= {"size": int(size), "scale": tuple(step.scale), "ratio": tuple(step.ratio)}
        elif kind == "ToDtype" and not getattr(step, "scale", False):
            raise UnsupportedTransform(
                "its ToDtype step does not scale (scale=False): its pixels stay 0-255, while "
                "the device pipeline divides by 255 as ToTensor does"
            )
        elif kind == "RandomHorizontalFlip":
            found["flip_p"] = float(step.p)
        elif kind == "Normalize":
            found |= {"mean": tuple(map(float, step.mean)), "std": tuple(map(float, step.std))}
        elif kind not in {"ToTensor", "ToImage", "ToDtype", "PILToTensor", "ConvertImageDtype"}:
            raise UnsupportedTransform(
                f"its transform has a {kind} step, which the device pipeline does not run "
                "(it runs RandomResizedCrop, RandomHorizontalFlip and Normalize)"
            )
    if "size" not in found:
        raise UnsupportedTransform("its transform has no RandomResizedCrop to take the size from")
    return ImageRecipe(**{"flip_p": 0.0, **found})


def _check_bilinear(crop: Any) -> None:
    """Refuse a crop that resizes otherwise than bilinearly: the device resizes bilinearly."""
    mode = getattr(crop, "interpolation", None)
    name = str(getattr(mode, "value", mode) or "bilinear").lower()
    if name != "bilinear":
        raise UnsupportedTransform(
            f"its RandomResizedCrop resizes with {name} interpolation; the device pipeline "
            "resizes bilinearly"
        )


def crop_box(height: int, width: int, recipe: ImageRecipe, rng: random.Random) -> CropBox:
    """A RandomResizedCrop box for a ``height`` x ``width`` image and a flip, drawn from ``rng``."""
    area = height * width
    log_low, log_high = math.log(recipe.ratio[0]), math.log(recipe.ratio[1])
    for _ in range(CROP_TRIES):
        target = area * rng.uniform(*recipe.scale)
        aspect = math.exp(rng.uniform(log_low, log_high))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top, left = rng.randint(0, height - h), rng.randint(0, width - w)
            return CropBox(top, left, h, w, rng.random() < recipe.flip_p)
    h, w = _centre_fallback(height, width, recipe.ratio)
    flip = rng.random() < recipe.flip_p
    return CropBox((height - h) // 2, (width - w) // 2, h, w, flip)


def _centre_fallback(height: int, width: int, ratio: tuple[float, float]) -> tuple[int, int]:
    """The whole image, narrowed to the ratio range where it is too wide or too tall."""
    in_ratio = width / height
    if in_ratio < min(ratio):
        return round(width / min(ratio)), width
    if in_ratio > max(ratio):
        return height, round(height * max(ratio))
    return height, width


def augment(
    images: Sequence[torch.Tensor],
    recipe: ImageRecipe,
    rng: random.Random,
    stats: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``N x 3 x size x size`` float32, normalized, from uint8 ``3 x H x W`` images (any sizes,
    on any one device), in their order: each cropped by its own box, resized, flipped.

    Why batched: a loop over images launches about four small kernels an image from the
    training thread (500 a batch of 128). Images of one size are stacked and cropped and
    resized together by one ``roi_align`` (a predecoded batch is one group; a batch of photos a
    group per size), so a batch costs a few kernels a size. ``roi_align`` with an adaptive
    sampling grid averages ceil(crop/size) bilinear samples a pixel each way: a box filter
    where the crop is larger than the output (antialiasing), plain bilinear where it is
    smaller; within a grey level of torchvision's antialiased bilinear resize on average (the
    tests measure it). ``stats``: :func:`channel_stats` made once on the device."""
    device = images[0].device
    boxes = [crop_box(int(i.shape[-2]), int(i.shape[-1]), recipe, rng) for i in images]
    groups = _by_size(images)
    if len(groups) == 1:
        out = _crop_resize(list(images), boxes, recipe.size)
    else:
        out = torch.empty((len(images), 3, recipe.size, recipe.size), device=device)
        for members in groups:
            crops = _crop_resize([images[i] for i in members], [boxes[i] for i in members],
                                 recipe.size)  # fmt: skip
            out.index_copy_(0, host_tensor(members, torch.int64, device), crops)
    flips = host_tensor([b.flip for b in boxes], torch.bool, device).view(-1, 1, 1, 1)
    return normalize_(torch.where(flips, out.flip(-1), out), recipe, stats)


def _by_size(images: Sequence[torch.Tensor]) -> list[list[int]]:
    """Indices of the images, grouped by their height and width (first-seen order)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, image in enumerate(images):
        groups.setdefault((int(image.shape[-2]), int(image.shape[-1])), []).append(i)
    return list(groups.values())


def _crop_resize(images: list[torch.Tensor], boxes: list[CropBox], size: int) -> torch.Tensor:
    """Same-size uint8 images cropped by their boxes and resized to ``size``: one roi_align."""
    # torchvision only when an image pipeline runs
    from torchvision.ops import roi_align

    stack = torch.stack(images).float()
    rois = [[j, b.left, b.top, b.left + b.width, b.top + b.height] for j, b in enumerate(boxes)]
    rois_on_device = host_tensor(rois, torch.float32, stack.device)
    return roi_align(stack, rois_on_device, size, spatial_scale=1.0, sampling_ratio=0, aligned=True)


def host_tensor(values: list[Any], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small tensor made on the host and sent to ``device`` without waiting: from pinned
    memory with ``non_blocking`` (a copy from pageable memory would wait for the stream)."""
    tensor = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def channel_stats(recipe: ImageRecipe, device: torch.device | str) -> tuple[torch.Tensor, ...]:
    """The mean and std on the 0-255 scale, shaped to broadcast over ``N x C x H x W``."""
    shape = (1, len(recipe.mean), 1, 1)
    mean = torch.tensor(recipe.mean).view(shape) * 255.0
    std = torch.tensor(recipe.std).view(shape) * 255.0
    return mean.to(device), std.to(device)


def normalize_(
    batch: torch.Tensor,
    recipe: ImageRecipe,
    stats: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``(x / 255 - mean) / std`` in place, channel-wise: what ToTensor then Normalize do.

    Why ``stats`` is made once: copying a tensor from pageable host memory to a GPU waits for
    the stream (PyTorch synchronizes a blocking copy), which on every batch would stop the host
    until the side stream's work so far is done, and with it the overlap."""
    mean, std = stats if stats is not None else channel_stats(recipe, batch.device)
    return batch.sub_(mean).div_(std)


Decode = Callable[[list[torch.Tensor], torch.device], list[torch.Tensor]]
PULL_REQUESTS = {"torchvision": "pytorch/vision PR 9606",
                 "torchcodec": "meta-pytorch/torchcodec PR 1634"}  # fmt: skip
"""The write-before-read hazard of each decoder on CUDA, by the pull request that shows it."""
ORDERED_FROM: dict[str, tuple[int, ...] | None] = {"torchvision": None, "torchcodec": None}
"""The first release of each decoder known to order its own writes after the caller's queued
work (its decode is then not drained); None: none known (see the module's doc)."""
DRAINED = "caller's stream synchronized before each batch"


def _torchcodec_decoder() -> Decode:
    # torchcodec is optional: the decoder torchvision points to since 0.29
    from torchcodec.decoders import decode_jpeg

    return lambda data, device: decode_jpeg(data, mode="RGB", device=device)


def _torchvision_decoder() -> Decode:
    # torchvision only when an image pipeline runs
    from torchvision.io import ImageReadMode, decode_jpeg

    def decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        with warnings.catch_warnings():  # 0.29+ says to use TorchCodec: we do, where installed
            warnings.filterwarnings("ignore", message=".*TorchCodec.*")
            return decode_jpeg(data, mode=ImageReadMode.RGB, device=device)

    return decode


def _pick_decoder() -> tuple[str, Decode]:
    try:
        package, decode = "torchcodec", _torchcodec_decoder()
    except Exception:  # not installed, or built for another torch: its own ops fail to load
        package, decode = "torchvision", _torchvision_decoder()
    return _made_safe(package, _version(package), decode)


def _made_safe(package: str, version: str, decode: Decode) -> tuple[str, Decode]:
    """(name, decode) of ``package``'s decoder at ``version``: drained before each CUDA batch
    unless :data:`ORDERED_FROM` knows this release orders its own writes (module's doc). The
    name says the decoder, its version and which it is, for a burst's ``notes``."""
    name, why = f"{package} {version} decode_jpeg", PULL_REQUESTS[package]
    fixed_in, release = ORDERED_FROM[package], _release(version)
    if fixed_in is not None and release is not None and release >= fixed_in:
        since = ".".join(map(str, fixed_in))
        return f"{name} (orders its own writes since {since}, not drained: {why})", decode
    return f"{name} ({DRAINED}: {why})", _drained(decode)


def _drained(decode: Decode) -> Decode:
    """``decode`` after the host waits for the caller's current stream on the target device."""

    def decode_after_drain(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        if device.type == "cuda":
            torch.cuda.current_stream(device).synchronize()
        return decode(data, device)

    return decode_after_drain


def _release(version: str) -> tuple[int, ...] | None:
    """(0, 26, 0) of "0.26.0+cu130"; None for a version that does not start with numbers."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in match.group().split(".")) if match else None


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


_DECODER: tuple[str, Decode] | None = None


def jpeg_decoder() -> tuple[str, Decode]:
    """(name, decode): the JPEG decoder this process uses, chosen once, made safe on CUDA (see
    the module's doc). The name holds its version and safety mode ("torchvision 0.26.0
    decode_jpeg (caller's stream synchronized before each batch: pytorch/vision PR 9606)"); a
    burst that decoded on the device names it in its ``notes``."""
    global _DECODER
    if _DECODER is None:
        _DECODER = _pick_decoder()
    return _DECODER


def decode_jpegs(data: list[torch.Tensor], device: torch.device | str) -> list[torch.Tensor]:
    """uint8 ``3 x H x W`` images on ``device`` from JPEG bytes (1-D uint8 CPU tensors): one
    batched nvJPEG call on CUDA (after the caller's stream is drained), libjpeg-turbo on a CPU.
    Grey JPEGs come out as RGB."""
    _, decode = jpeg_decoder()
    return list(decode(list(data), torch.device(device)))


class DeviceImages:
    """``EncodedBatch`` -> ``(images, labels)`` on ``device``: JPEGs decoded (one batched
    call), predecoded squares copied as uint8, then :func:`augment` with ``recipe``. Counts the
    bytes that crossed to the device (``h2d_bytes_per_sample``).

    Nothing here waits for the device when the batch is pinned (``pin_memory=True``): the
    crop boxes are drawn on the host, the copies are ``non_blocking``, the normalisation's
    constants live on the device. An unpinned batch's copy waits for the stream, as an
    unpinned copy does in any loop: that is what ``pin_memory`` measures."""

    def __init__(
        self,
        recipe: ImageRecipe,
        device: torch.device | str,
        *,
        seed: int = 0,
        channels_last: bool = False,
    ) -> None:
        self.recipe = recipe
        self.device = torch.device(device)
        self.channels_last = channels_last
        self._rng = random.Random(seed)
        self._stats = channel_stats(recipe, self.device)
        self._held: list[tuple[torch.cuda.Event, EncodedBatch]] = []
        self.bytes_moved = 0
        self.samples = 0

    def __call__(self, batch: EncodedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        pinned = self.device.type == "cuda" and batch.labels.is_pinned()
        labels = batch.labels.to(self.device, non_blocking=pinned)
        if batch.kind == JPEG:
            images = decode_jpegs(batch.jpegs(), self.device)
        else:  # predecoded N x R x R x 3: one uint8 copy, then CHW views of it
            pixels = batch.data.to(self.device, non_blocking=pinned)
            images = list(pixels.permute(0, 3, 1, 2))
        out = augment(images, self.recipe, self._rng, self._stats)
        if self.channels_last:
            out = out.contiguous(memory_format=torch.channels_last)
        self.bytes_moved += batch.nbytes
        self.samples += len(batch)
        self._hold_until_done(batch)
        return out, labels

    def _hold_until_done(self, batch: EncodedBatch) -> None:
        """Keep the host batch alive until the device has finished with it.

        nvJPEG reads the JPEG bytes from host memory on its own schedule; once this batch is
        dropped, its pinned block goes back to PyTorch's host cache, which knows only of the
        uses that ``copy_`` recorded, and the pinning thread could refill it with the next
        batch under the decoder. An event after the batch's work says when it is free."""
        if self.device.type != "cuda":
            return
        self._held = [(done, held) for done, held in self._held if not done.query()]
        done = torch.cuda.Event()
        done.record()  # on the current stream: the side stream when overlapping
        self._held.append((done, batch))

    @property
    def h2d_bytes_per_sample(self) -> float | None:
        """Mean bytes a sample sent to the device so far (stored bytes plus its label)."""
        return self.bytes_moved / self.samples if self.samples else None
