"""Sample datasets, made on this machine: a JPEG ImageFolder and a byte-token file.

Why generate rather than download: a GPU box is often offline, and a throughput workbench needs
data whose *cost* is realistic more than data whose content is. What a loader pays per image is
the JPEG decode, and libjpeg's decode time follows the pixel count and the entropy-coded bytes.
So the images are made to match a typical ImageNet photo on both: about 500x375 pixels and about
110 KB at quality 90. Photographs have a roughly 1/f amplitude spectrum (power falling as 1/f^2),
which is what sets how many DCT coefficients survive quantisation; the images here are built
from 1/f ("pink") noise fields plus smooth regions and hard-edged shapes, so their JPEG entropy,
and hence their decode cost, is that of a photo. Each class has its own palette, texture
orientation and texture scale, so a model trained on them really learns (its loss falls).

The token file is real text: the Python standard library's own source, read as bytes (a
vocabulary of 256), so a language model sees natural statistics without a download.

Layout under the data root (see `data_root`)::

    images/<class_name>/<n>.jpg     torchvision-ImageFolder compatible
    tokens/stdlib.bin               raw uint8 bytes, one token each
    manifest.json                   written last: its presence means the build completed
"""

from __future__ import annotations

import colorsys
import contextlib
import functools
import io
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from workbench.core.errors import InputError
from workbench.core.private import others_can_change, private_dir, workbench_home
from workbench.core.safefiles import locked, write_atomic
from workbench.engine.epochs import SHORT_EPOCH_BATCHES

FORMAT_VERSION = 1
"""Bumped when the layout or the generator changes; a manifest with another value is rebuilt."""

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
JPEG_QUALITY = 90
TOKEN_FILE = "stdlib.bin"

# Sizes of ImageNet train images, roughly by frequency: (width, height, weight).
_SIZES = (
    (500, 375, 0.45),
    (500, 333, 0.20),
    (375, 500, 0.15),
    (500, 400, 0.08),
    (333, 500, 0.07),
    (500, 500, 0.05),
)
_CLASS_DIR = re.compile(r"class_\d+")
_IMAGE_FILE = re.compile(r"\d+\.jpg")
_TEXTURE_CONTRAST = 50.0  # grey levels (std) of the 1/f detail: sets the JPEG size
_CHROMA_CONTRAST = 9.0
_ALPHA_LOW, _ALPHA_SPAN = 0.7, 0.3  # spectral slopes of the class textures

Progress = Callable[[str], None]


class DataError(InputError):
    """A dataset path that cannot be used; the message names the path and the problem."""


@dataclass(frozen=True)
class DatasetPaths:
    """Where the sample datasets are: `images` is an ImageFolder root, `tokens` a uint8 file."""

    root: Path
    images: Path
    tokens: Path

    @classmethod
    def under(cls, root: Path) -> DatasetPaths:
        return cls(root=root, images=root / "images", tokens=root / "tokens" / TOKEN_FILE)


# ---------------------------------------------------------------------------------------------
# Where the data lives


def data_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The data root: `explicit`, else $WORKBENCH_DATA, else ./data if it exists, else
    $WORKBENCH_HOME/data (WORKBENCH_HOME defaults to ~/.workbench; created 0700 when it is
    new, as the history creates it: ``workbench.core.private``). ``./data`` is adopted only
    when it is this user's and nobody else may write in it; else InputError naming it."""
    if explicit is not None:
        return Path(explicit).expanduser()
    if env := os.environ.get("WORKBENCH_DATA"):
        return Path(env).expanduser()
    local = Path.cwd() / "data"
    if local.is_dir():
        why = others_can_change(local)
        if why is not None:  # what another user put there would be measured, or run
            raise InputError(
                f"./data ({local}) is {why}: not adopted as the data root; pass --data "
                f"{local} (or set WORKBENCH_DATA) to use it anyway, or run from another folder"
            )
        return local
    return private_dir(workbench_home()) / "data"  # the home is made 0700 if it is new


# ---------------------------------------------------------------------------------------------
# Building and reusing


def build_datasets(
    root: str | os.PathLike[str] | None = None,
    *,
    images_per_class: int = 80,
    classes: int = 10,
    token_mb: float = 4.0,
    seed: int = 0,
    progress: Progress | None = None,
) -> DatasetPaths:
    """Build both datasets under `root` (see `data_root`), replacing earlier ones.

    Deterministic from `seed` on a given machine (same numpy, Pillow and Python). `progress`,
    if given, receives one-line messages; nothing is printed otherwise.
    """
    params = _params(images_per_class, classes, token_mb, seed)
    paths = DatasetPaths.under(data_root(root))
    paths.root.mkdir(parents=True, exist_ok=True)
    with _lock(paths.root):
        _build(paths, params, progress or _silent)
    return paths


def ensure_datasets(
    root: str | os.PathLike[str] | None = None,
    *,
    images_per_class: int | None = None,
    classes: int | None = None,
    token_mb: float | None = None,
    seed: int | None = None,
    progress: Progress | None = None,
) -> DatasetPaths:
    """The datasets under `root`, built first unless a complete build is already there (its
    manifest is written last, so an interrupted build is redone).

    With no build parameters, any complete build is accepted: a burst must never silently
    rebuild a dataset a person made smaller or larger on purpose (`workbench data
    --images-per-class 10`). Given parameters, a build with other parameters is replaced.
    Missing ones default as for `build_datasets`."""
    given = (images_per_class, classes, token_mb, seed)
    params = _params(
        80 if images_per_class is None else images_per_class,
        10 if classes is None else classes,
        4.0 if token_mb is None else token_mb,
        0 if seed is None else seed,
    )
    wanted = None if all(v is None for v in given) else params
    paths = DatasetPaths.under(data_root(root))
    if _is_complete(paths, wanted):
        return paths
    paths.root.mkdir(parents=True, exist_ok=True)
    with _lock(paths.root):
        if not _is_complete(paths, wanted):  # another process may have built it meanwhile
            _build(paths, params, progress or _silent)
    return paths


def images_for_batch(batch_size: int, classes: int = 10, batches: int = SHORT_EPOCH_BATCHES) -> int:
    """Images per class for an epoch of at least ``batches`` full batches of ``batch_size``
    (``drop_last``): batch 256 at 50 batches is 12,800 images, 1,280 in each of 10 classes."""
    for name, value in (("batch_size", batch_size), ("classes", classes), ("batches", batches)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError.not_allowed(name, value, "an integer >= 1")
    return math.ceil(batch_size * batches / classes)


def ensure_datasets_for_batch(
    root: str | os.PathLike[str] | None = None,
    batch_size: int = 256,
    *,
    classes: int = 10,
    progress: Progress | None = None,
) -> DatasetPaths:
    """The sample datasets under ``root``, with images enough for ``SHORT_EPOCH_BATCHES``
    (50) full batches of ``batch_size`` an epoch: built here (generated, no network), or
    reused when a complete build of exactly that size is there. The epoch is then not short
    (``workbench.engine.epochs``): a burst measures the loader, not its restarts.

    Cost, measured 2026-12-05 (``time python -c "from workbench.engine.datasets import *;
    ensure_datasets_for_batch('/tmp/epochs-big', 256)"``): 12,800 images, 1.4 GB, 297 s wall
    on this project's 2-core test machine while other jobs shared it (195 s of CPU time, so
    about 100 s on two idle cores). The build forks one worker per core (up to 16), so a
    16-core GPU box should take about a tenth of that CPU time in wall time (an estimate, not
    measured). A second call finds the build and reuses it (about 9 s here, most of it
    importing torch and listing the files).
    """
    per_class = images_for_batch(batch_size, classes)
    return ensure_datasets(root, images_per_class=per_class, classes=classes, progress=progress)


def is_sample_data(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is the image folder or the token file of a complete generated build
    (a data root with its manifest): data whose size is an arbitrary sample, not a user's."""
    path = Path(path).expanduser()
    if path.name == "images":
        root = path.parent
    elif path.name == TOKEN_FILE and path.parent.name == "tokens":
        root = path.parent.parent
    else:
        return False
    manifest = read_manifest(root)
    return bool(manifest) and manifest.get("format") == FORMAT_VERSION


def read_manifest(root: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The manifest of the datasets under `root`, or None when there is no readable one."""
    try:
        return json.loads((data_root(root) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def _params(images_per_class: int, classes: int, token_mb: float, seed: int) -> dict[str, Any]:
    if images_per_class < 1 or classes < 1:
        raise ValueError(
            f"images_per_class and classes must be >= 1, got {images_per_class} and {classes}"
        )
    if token_mb <= 0:
        raise ValueError(f"token_mb must be > 0, got {token_mb}")
    return {
        "images_per_class": int(images_per_class),
        "classes": int(classes),
        "token_mb": float(token_mb),
        "seed": int(seed),
    }


def _is_complete(paths: DatasetPaths, params: dict[str, Any] | None) -> bool:
    manifest = read_manifest(paths.root)
    if not manifest or manifest.get("format") != FORMAT_VERSION:
        return False
    if params is not None and manifest.get("params") != params:
        return False
    try:
        count, _ = check_image_folder(paths.images)
        tokens = check_token_file(paths.tokens)
    except DataError:
        return False
    return count == manifest["images"]["count"] and tokens == manifest["tokens"]["count"]


def _build(paths: DatasetPaths, params: dict[str, Any], progress: Progress) -> None:
    started = time.perf_counter()
    (paths.root / "manifest.json").unlink(missing_ok=True)  # incomplete from here on
    _clear_own_dir(paths.images, _looks_like_our_images)
    _clear_own_dir(paths.tokens.parent, lambda d: {p.name for p in d.iterdir()} <= {TOKEN_FILE})
    image_bytes = _write_images(paths.images, params, progress)
    image_s = time.perf_counter() - started
    n_tokens, corpus_files = _write_tokens(paths.tokens, params["token_mb"])
    build_s = time.perf_counter() - started
    count = params["images_per_class"] * params["classes"]
    manifest = {
        "format": FORMAT_VERSION,
        "params": params,
        "images": {
            "count": count,
            "classes": params["classes"],
            "bytes": image_bytes,
            "jpeg_quality": JPEG_QUALITY,
            "build_s": round(image_s, 2),
        },
        "tokens": {
            "count": n_tokens,
            "bytes": n_tokens,
            "source_files": corpus_files,
            "source": f"Python {sys.version.split()[0]} standard library .py files",
        },
        "total_bytes": image_bytes + n_tokens,
        "build_s": round(build_s, 2),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    write_atomic(paths.root / "manifest.json", json.dumps(manifest, indent=2).encode())
    progress(
        f"datasets ready in {paths.root} ({count} images, {n_tokens:,} tokens, {build_s:.1f} s)"
    )


def _clear_own_dir(path: Path, is_ours: Callable[[Path], bool]) -> None:
    """Remove a directory left by an earlier build; refuse one that workbench did not make."""
    if not path.exists():
        return
    if not path.is_dir() or not is_ours(path):
        raise DataError(
            f"{path} exists and was not made by workbench; "
            f"refusing to overwrite it (choose another data directory)"
        )
    shutil.rmtree(path)


def _looks_like_our_images(path: Path) -> bool:
    for class_dir in path.iterdir():
        if not (class_dir.is_dir() and _CLASS_DIR.fullmatch(class_dir.name)):
            return False
        if not all(_IMAGE_FILE.fullmatch(f.name) for f in class_dir.iterdir()):
            return False
    return True


def _lock(root: Path) -> contextlib.AbstractContextManager[None]:
    """An exclusive lock on `root` so two processes never build into it at once (POSIX)."""
    return locked(root / ".lock")


def _silent(_: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# Images: 1/f noise photographs


@dataclass(frozen=True)
class _ClassStyle:
    """What makes a class recognisable: colours, texture orientation, texture scale."""

    palette: np.ndarray  # (3, 3) RGB in 0..255: two background tones and a shape colour
    theta: float  # dominant texture orientation, radians
    anisotropy: float  # > 1 stretches texture along theta
    alpha: float  # spectral slope of the texture: larger is smoother


def class_names(classes: int) -> list[str]:
    """Folder names of the generated classes, in ImageFolder (sorted) order."""
    width = max(2, len(str(classes - 1)))
    return [f"class_{i:0{width}d}" for i in range(classes)]


def _class_style(seed: int, index: int, classes: int) -> _ClassStyle:
    rng = np.random.default_rng([seed, 1, index])
    hue = (index / classes + rng.uniform(-0.03, 0.03)) % 1.0
    tones = [
        (hue, rng.uniform(0.35, 0.7), rng.uniform(0.65, 0.9)),
        ((hue + rng.uniform(0.05, 0.15)) % 1.0, rng.uniform(0.4, 0.8), rng.uniform(0.3, 0.6)),
        ((hue + 0.5) % 1.0, rng.uniform(0.5, 0.9), rng.uniform(0.4, 0.9)),
    ]
    palette = np.array([colorsys.hsv_to_rgb(*t) for t in tones], dtype=np.float32) * 255
    return _ClassStyle(
        palette=palette,
        theta=float(np.pi * index / classes),
        anisotropy=float(rng.uniform(1.5, 3.0)),
        alpha=_ALPHA_LOW + _ALPHA_SPAN * ((index * 7) % classes) / max(classes - 1, 1),
    )


def _pink(
    rng: np.random.Generator,
    shape: tuple[int, int],
    alpha: float,
    anisotropy: float = 1.0,
    theta: float = 0.0,
) -> np.ndarray:
    """A Gaussian random field with amplitude spectrum 1/f^alpha, unit standard deviation.

    `anisotropy` > 1 compresses frequencies across `theta`, so structures run along it.
    """
    amplitude = _amplitude(shape, alpha, anisotropy, theta)
    noise = rng.standard_normal((2, *amplitude.shape), dtype=np.float32)
    field = np.fft.irfft2(amplitude * (noise[0] + 1j * noise[1]), s=shape).astype(np.float32)
    return field / (field.std() + 1e-12)


@functools.lru_cache(maxsize=64)
def _amplitude(shape: tuple[int, int], alpha: float, anisotropy: float, theta: float) -> np.ndarray:
    """1/f^alpha over the rfft2 frequency grid of `shape` (read-only; cached: a class's
    texture has one alpha, anisotropy and orientation, and there are a few image sizes)."""
    h, w = shape
    fy = np.fft.fftfreq(h).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(w).astype(np.float32)[None, :]
    c, s = float(np.cos(theta)), float(np.sin(theta))
    u, v = fx * c + fy * s, (fy * c - fx * s) * anisotropy
    f = np.sqrt(u * u + v * v)
    f[0, 0] = 1.0
    amplitude = f ** np.float32(-alpha)
    amplitude[0, 0] = 0.0  # zero mean
    amplitude.flags.writeable = False
    return amplitude


def _upsample(field: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bilinear upsampling of a float field to (width, height) via Pillow's mode "F"."""
    return np.asarray(Image.fromarray(field).resize(size, Image.Resampling.BILINEAR))


def _soft_ellipse(
    rng: np.random.Generator, h: int, w: int
) -> tuple[np.ndarray, tuple[slice, slice]]:
    """A mask in 0..1 over its bounding box (and that box): an ellipse at a random place,
    with an edge from sharp to soft."""
    cy, cx = rng.uniform(0, h), rng.uniform(0, w)
    ry, rx = rng.uniform(0.08, 0.35) * h, rng.uniform(0.08, 0.35) * w
    angle = rng.uniform(0, np.pi)
    edge_px = float(rng.choice([0.7, 1.5, 6.0]))
    reach = max(rx, ry) * (1 + 0.5 * edge_px / min(rx, ry)) + 1  # mask is 0 beyond this
    box = (
        slice(max(0, int(cy - reach)), min(h, int(cy + reach) + 1)),
        slice(max(0, int(cx - reach)), min(w, int(cx + reach) + 1)),
    )
    dy = np.arange(box[0].start, box[0].stop, dtype=np.float32)[:, None] - np.float32(cy)
    dx = np.arange(box[1].start, box[1].stop, dtype=np.float32)[None, :] - np.float32(cx)
    a, b = float(np.cos(angle)), float(np.sin(angle))
    r = np.sqrt(((dx * a + dy * b) / rx) ** 2 + ((dy * a - dx * b) / ry) ** 2)
    return np.clip((1.0 - r) * (min(rx, ry) / edge_px) + 0.5, 0.0, 1.0), box


def render_image(seed: int, class_index: int, n: int, classes: int) -> np.ndarray:
    """One photo-like RGB uint8 image (H, W, 3) of class `class_index`; deterministic."""
    style = _class_style(seed, class_index, classes)
    rng = np.random.default_rng([seed, 2, class_index, n])
    w, h = _SIZES[rng.choice(len(_SIZES), p=[s[2] for s in _SIZES])][:2]
    # Work channel-first: numpy's loops are slow over a trailing axis of length 3.
    img, lower = _layout(rng, style, h, w)
    _add_objects(rng, style, img)
    _add_texture(rng, style, img, lower)
    return np.ascontiguousarray(np.clip(img, 0, 255).astype(np.uint8).transpose(1, 2, 0))


def _layout(
    rng: np.random.Generator, style: _ClassStyle, h: int, w: int
) -> tuple[np.ndarray, np.ndarray]:
    """Two tones split along a tilted horizon made irregular by a smooth field; (3, h, w)
    image and the (h, w) weight of the lower tone."""
    y = np.linspace(-1, 1, h, dtype=np.float32)[:, None]
    x = np.linspace(-1, 1, w, dtype=np.float32)[None, :]
    tilt, offset = rng.uniform(-0.4, 0.4), rng.uniform(-0.4, 0.4)
    blobs = _upsample(_pink(rng, (h // 8, w // 8), 2.0), (w, h))
    lower = np.clip(0.5 + 2.0 * (y + tilt * x - offset) + 0.6 * blobs, 0.0, 1.0)
    tone = style.palette[:2] * rng.uniform(0.9, 1.1, size=(2, 3)).astype(np.float32)
    img = tone[0, :, None, None] + (tone[1] - tone[0])[:, None, None] * lower
    return img, lower


def _add_objects(rng: np.random.Generator, style: _ClassStyle, img: np.ndarray) -> None:
    """A few ellipses with sharp or soft edges, shaded by a linear gradient."""
    _, h, w = img.shape
    y = np.linspace(-1, 1, h, dtype=np.float32)[:, None]
    x = np.linspace(-1, 1, w, dtype=np.float32)[None, :]
    for _ in range(rng.integers(1, 5)):
        mask, (ys, xs) = _soft_ellipse(rng, h, w)
        colour = style.palette[2] * rng.uniform(0.6, 1.2, size=3).astype(np.float32)
        shade = 1.0 + 0.25 * (x[:, xs] * rng.uniform(-1, 1) + y[ys] * rng.uniform(-1, 1))
        for c in range(3):
            img[c, ys, xs] += mask * (colour[c] * shade - img[c, ys, xs])


def _add_texture(
    rng: np.random.Generator, style: _ClassStyle, img: np.ndarray, lower: np.ndarray
) -> None:
    """1/f luminance detail along the class orientation, stronger in the lower tone; 1/f
    chroma detail at half resolution (as in photos, and as JPEG stores it anyway)."""
    _, h, w = img.shape
    contrast = rng.uniform(0.7, 1.3) * _TEXTURE_CONTRAST
    detail = _pink(rng, (h, w), style.alpha, style.anisotropy, style.theta)
    img += (contrast * (0.6 + 0.4 * lower)) * detail
    cb, cr = (_upsample(_pink(rng, (h // 2, w // 2), 1.2), (w, h)) for _ in range(2))
    img[0] += _CHROMA_CONTRAST * cr
    img[1] -= _CHROMA_CONTRAST * (cb + cr) * 0.5
    img[2] += _CHROMA_CONTRAST * cb


def encode_jpeg(pixels: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    """Baseline JPEG, 4:2:0 chroma subsampling: what most ImageNet files are."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=quality, subsampling="4:2:0")
    return buffer.getvalue()


def _write_one(job: tuple[Path, int, int, int, int]) -> int:
    path, seed, class_index, n, classes = job
    payload = encode_jpeg(render_image(seed, class_index, n, classes))
    path.write_bytes(payload)
    return len(payload)


def _write_images(images: Path, params: dict[str, Any], progress: Progress) -> int:
    """Render and write all images; returns their total bytes."""
    names, seed = class_names(params["classes"]), params["seed"]
    jobs = []
    for c, name in enumerate(names):
        (images / name).mkdir(parents=True)
        jobs += [
            (images / name / f"{n}.jpg", seed, c, n, len(names))
            for n in range(params["images_per_class"])
        ]
    total, step = 0, max(1, len(jobs) // 10)
    for done, size in enumerate(_parallel_map(_write_one, jobs), start=1):
        total += size
        if done % step == 0 or done == len(jobs):
            progress(f"images: {done}/{len(jobs)}")
    return total


def _ignore_sigint() -> None:
    """In a build worker: a terminal's Ctrl-C reaches the whole process group, and a worker
    that took it would print its own KeyboardInterrupt traceback. The parent alone handles it
    (stops the pool and drops the queued work)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _parallel_map(fn: Callable[[Any], int], jobs: list[Any]) -> Iterator[int]:
    """`map` over forked worker processes on Linux, in order; serial elsewhere or when small.

    Processes, not threads: the rendering is many mid-sized numpy operations, and threads
    measured no faster than one (the GIL). Fork, chosen explicitly, because the workers need
    only numpy and Pillow, already imported; spawn or forkserver would re-import torch in
    each child (seconds). This is the start method torch's DataLoader uses on Linux too.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    workers = min(cpus, 16, len(jobs) // 8)
    if workers < 2 or sys.platform != "linux" or multiprocessing.current_process().daemon:
        yield from map(fn, jobs)
        return
    pool = ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("fork"), initializer=_ignore_sigint
    )
    try:
        yield from pool.map(fn, jobs, chunksize=8)
    finally:  # on an interrupt, drop the queued work rather than finish it
        pool.shutdown(wait=True, cancel_futures=True)


# ---------------------------------------------------------------------------------------------
# Tokens: the standard library's source as bytes


def stdlib_sources() -> list[Path]:
    """The standard library's .py files in sorted order, without site-/dist-packages."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for folder, dirs, names in os.walk(stdlib):
        dirs[:] = sorted(
            d for d in dirs if d not in {"site-packages", "dist-packages", "__pycache__"}
        )
        files += [Path(folder) / name for name in sorted(names) if name.endswith(".py")]
    return sorted(files, key=lambda p: p.relative_to(stdlib).as_posix())


def _write_tokens(path: Path, token_mb: float) -> tuple[int, int]:
    """Concatenate stdlib sources (newline-separated) up to `token_mb` MiB; (bytes, files)."""
    limit = int(token_mb * 2**20)
    parts, size = [], 0
    for source in stdlib_sources():
        parts.append(source.read_bytes() + b"\n")
        size += len(parts[-1])
        if size >= limit:
            break
    payload = b"".join(parts)[:limit]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, payload)
    return len(payload), len(parts)


# ---------------------------------------------------------------------------------------------
# Checking user-supplied paths


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def _scan_image_folder(path: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """Classes and (file, class index) pairs, ordered as torchvision's ImageFolder orders them:
    class folders sorted by name, files found by a sorted walk. Hidden folders are skipped."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"data directory {path} does not exist")
    if not path.is_dir():
        raise DataError(f"data directory {path} is not a directory")
    if (path / "manifest.json").is_file() and (path / "images").is_dir():
        raise DataError(f"{path} is a workbench data root; its image folder is {path / 'images'}")
    classes = sorted(e.name for e in os.scandir(path) if e.is_dir() and not e.name.startswith("."))
    samples: list[tuple[str, int]] = []
    for index, name in enumerate(classes):
        found = [
            os.path.join(folder, f)
            for folder, _, files in sorted(os.walk(path / name, followlinks=True))
            for f in sorted(files)
            if _is_image(f)
        ]
        if not found:
            raise DataError(
                f"class folder {path / name} holds no images "
                f"({', '.join(IMAGE_EXTENSIONS)}); expected {path}/<class>/<image>.jpg"
            )
        samples += [(f, index) for f in found]
    if not classes:
        loose = sum(1 for f in os.listdir(path) if _is_image(f))
        hint = (
            f"; it has {loose} images directly inside: move them into class folders"
            if loose
            else ""
        )
        raise DataError(
            f"data directory {path} holds no images in class sub-folders; expected "
            f"{path}/<class>/<image>.jpg (.jpg, .jpeg or .png){hint}"
        )
    return classes, samples


def check_image_folder(path: str | os.PathLike[str]) -> tuple[int, list[str]]:
    """(image count, class names) of an ImageFolder tree; DataError saying what is wrong."""
    classes, samples = _scan_image_folder(Path(path))
    return len(samples), classes


def check_token_file(path: str | os.PathLike[str], min_tokens: int = 2) -> int:
    """Number of byte tokens in a uint8 token file; DataError when missing or too small."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"token file {path} does not exist")
    if not path.is_file():
        raise DataError(f"token file {path} is not a file")
    size = path.stat().st_size
    if size < min_tokens:
        raise DataError(f"token file {path} holds {size} bytes; need at least {min_tokens}")
    return size


# ---------------------------------------------------------------------------------------------
# Datasets


class ImageFiles(Dataset):
    """An ImageFolder-compatible dataset decoded with Pillow, as torchvision's ImageFolder does.

    Same class order and indices as ImageFolder; the difference is the error: a corrupt or
    truncated file raises DataError naming that file, where Pillow alone names none.
    """

    def __init__(self, root: str | os.PathLike[str], transform: Callable | None = None) -> None:
        self.root = Path(root)
        self.classes, self.samples = _scan_image_folder(self.root)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, target = self.samples[index]
        try:
            with Image.open(path) as img:
                img.load()  # decode fully here: Image.open alone only reads the header
                rgb = img.convert("RGB")
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            raise DataError(f"corrupt or unreadable image {path}: {exc}") from exc
        return (self.transform(rgb) if self.transform else rgb), target


class TokenWindows(Dataset):
    """Non-overlapping windows of a uint8 token file: item i is (x, y), int64, y = x shifted by 1.

    The file is memory-mapped lazily in each process (a memmap does not travel through pickle
    into DataLoader workers), and window i starts at i * block_size, so every item reads its
    own bytes from the file.
    """

    def __init__(self, path: str | os.PathLike[str], block_size: int = 256) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.path = Path(path)
        self.block_size = block_size
        self.n_tokens = check_token_file(self.path, min_tokens=block_size + 1)
        self._tokens: np.memmap | None = None

    def __len__(self) -> int:
        return (self.n_tokens - 1) // self.block_size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"window {index} out of range for {len(self)} windows")
        if self._tokens is None:
            self._tokens = np.memmap(self.path, dtype=np.uint8, mode="r")
        start = index * self.block_size
        chunk = torch.from_numpy(self._tokens[start : start + self.block_size + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tokens": None}


class BigramTokenWindows(TokenWindows):
    """:class:`TokenWindows` over a vocabulary larger than bytes: token ``j`` of the file is
    its byte pair, ``(256 * byte[j-1] + byte[j]) % vocab`` (the first token is its byte).

    Why: a model with GPT-2's 50,257-token vocabulary should be fed ids across a real
    vocabulary's range (the embedding gather and its gradient's scatter then touch thousands
    of distinct rows a batch, as real tokens do), from the same local text file and without a
    tokenizer to download. Byte pairs of real text keep its statistics (a few thousand pairs
    are common, most are rare); the ids are read, never learned, so what a burst measures is
    a real model's step on real-shaped input. Pairs of ASCII bytes (both under 128) fall below
    32,768 and never collide; pairs that reach past ``vocab`` wrap around. Targets are the
    next token, as for bytes.
    """

    def __init__(self, path: str | os.PathLike[str], block_size: int, vocab: int) -> None:
        if vocab < 256:
            raise ValueError(f"vocab must be >= 256 (every byte is a token), got {vocab}")
        super().__init__(path, block_size)
        self.vocab = vocab

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = super().__getitem__(index)  # the window's bytes, checked and in range
        start = (index % len(self)) * self.block_size
        first = int(self._tokens[start - 1]) if start > 0 else 0  # the byte before the window
        ids = pair_ids(first, torch.cat([x, y[-1:]]), self.vocab)
        return ids[:-1], ids[1:]


def pair_ids(before: int, data: torch.Tensor, vocab: int) -> torch.Tensor:
    """The byte-pair ids of ``data`` (int64 bytes), ``before`` being the byte ahead of its
    first: ``(256 * byte[j-1] + byte[j]) % vocab`` (:class:`BigramTokenWindows`)."""
    previous = torch.cat([torch.tensor([before], dtype=data.dtype), data[:-1]])
    return (256 * previous + data) % vocab
