"""How much does decoding one sample image cost, next to a typical ImageNet JPEG?

Builds (or reuses) the sample datasets, then times Pillow's decode + convert("RGB") per image,
single-threaded, from bytes already in memory (so the disk is not measured). Two reference
images of the same size bracket the result: a smooth gradient (little entropy, cheap) and
white noise (much entropy, dear). If a real photograph (JPEG > 30 KB) is found on this
machine it is timed the same way; otherwise the comparison with ImageNet is by dimensions and
bytes (about 500x375 pixels, about 110 KB), which is what libjpeg's decode time follows.

    python benchmarks/decode_cost.py [--root DIR] [--n 200]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from workbench.engine.datasets import encode_jpeg, ensure_datasets, read_manifest

IMAGENET = "ImageNet train, typical: 500x375, ~110 KB (not measured here)"


def decode_ms(payloads: list[bytes], repeats: int = 3) -> list[float]:
    """Per-image decode + convert("RGB") time in ms, the best of `repeats` for each image."""
    times = []
    for payload in payloads:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            with Image.open(io.BytesIO(payload)) as img:
                img.load()
                img.convert("RGB")
            best = min(best, time.perf_counter() - start)
        times.append(best * 1e3)
    return times


def row(name: str, payloads: list[bytes]) -> str:
    dims = []
    for payload in payloads:
        with Image.open(io.BytesIO(payload)) as img:
            dims.append(img.size)
    ms = decode_ms(payloads)
    mpx = statistics.mean(w * h for w, h in dims) / 1e6
    w, h = statistics.median(d[0] for d in dims), statistics.median(d[1] for d in dims)
    kb = statistics.mean(len(p) for p in payloads) / 1024
    p50 = statistics.median(ms)
    size = f"{w:.0f}x{h:.0f}"
    return f"{name:<34} {len(payloads):>4} {size:>9} {kb:>8.1f} {p50:>8.2f} {p50 / mpx:>8.2f}"


def references(shape: tuple[int, int]) -> dict[str, bytes]:
    """Same-size JPEGs at the extremes of entropy, to show what the bytes cost."""
    h, w = shape
    ramp = np.linspace(0, 255, w, dtype=np.float32)[None, :, None] * np.ones((h, 1, 3))
    noise = np.random.default_rng(0).integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    return {
        "smooth gradient, same size": encode_jpeg(ramp.astype(np.uint8)),
        "white noise, same size": encode_jpeg(noise),
    }


def as_imagenet(payload: bytes) -> bytes:
    """A photo resized to 500 px on its long side and re-encoded like our images (q90, 4:2:0)."""
    with Image.open(io.BytesIO(payload)) as img:
        rgb = img.convert("RGB")
    scale = 500 / max(rgb.size)
    size = (round(rgb.width * scale), round(rgb.height * scale))
    return encode_jpeg(np.asarray(rgb.resize(size, Image.Resampling.LANCZOS)))


def find_photos(
    roots: list[Path], skip: Path, limit_s: float = 10.0, min_bytes: int = 30_000
) -> list[Path]:
    """JPEGs over `min_bytes` and at least 300 px a side under `roots` (not under `skip`),
    searched for at most `limit_s` seconds."""
    found, deadline = [], time.monotonic() + limit_s
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if Path(folder, d).resolve() != skip.resolve()]
            if time.monotonic() > deadline:
                return found
            for name in files:
                path = Path(folder) / name
                if name.lower().endswith((".jpg", ".jpeg")) and _is_photo(path, min_bytes):
                    found.append(path)
    return found


def _is_photo(path: Path, min_bytes: int) -> bool:
    try:
        with Image.open(path) as img:
            return path.stat().st_size > min_bytes and min(img.size) >= 300
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="data root to build in or reuse (default: a temp dir)")
    parser.add_argument("--n", type=int, default=200, help="images to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.root or tmp)
        start = time.perf_counter()
        paths = ensure_datasets(root, progress=lambda m: print(m, file=sys.stderr))
        ready_s, build_s = time.perf_counter() - start, read_manifest(root)["build_s"]
        cpus = os.cpu_count()
        print(f"datasets in {root}: ready after {ready_s:.1f} s (build: {build_s} s, {cpus} CPUs)")
        files = sorted(paths.images.rglob("*.jpg"))
        picked = [
            files[i] for i in np.linspace(0, len(files) - 1, min(args.n, len(files))).astype(int)
        ]
        ours = [p.read_bytes() for p in picked]
        print(f"\n{'images':<34} {'n':>4} {'median':>9} {'KB mean':>8} {'ms p50':>8} {'ms/Mpx':>8}")
        print(row("workbench 1/f JPEGs (q90, 4:2:0)", ours))
        for name, payload in references((375, 500)).items():
            print(row(name, [payload] * 20))
        roots = {Path(sys.prefix), Path(sys.base_prefix), Path("/usr/share"), Path.home()}
        photos = find_photos(sorted(roots), skip=root)
        if photos:
            originals = list({p.read_bytes(): None for p in photos})  # distinct files
            print(row("real photos found here (distinct)", originals))
            print(row("  the same, 500 px, q90 4:2:0", [as_imagenet(p) for p in originals]))
            for p in photos[:6]:
                print(f"  {p}")
            print(f"and for scale: {IMAGENET}")
        else:
            print(f"no real photograph (JPEG > 30 KB) on this machine; compare with:\n  {IMAGENET}")


if __name__ == "__main__":
    main()
