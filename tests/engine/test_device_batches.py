"""decode=gpu end to end: bytes from the workers, images on the device, labels attached."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from workbench.core.knobs import Knobs
from workbench.distributed.dispatch import run_burst
from workbench.engine import plan
from workbench.engine.convert import convert_dataset
from workbench.engine.datasets import ImageFiles
from workbench.engine.device_images import DeviceImages, ImageRecipe, jpeg_decoder
from workbench.engine.encoded import JPEG, PIXELS, EncodedFiles, collate_encoded
from workbench.engine.formats import encoded_dataset_for
from workbench.engine.loaders.device_batches import (
    DeviceBatches,
    build_device_stream,
    decode_no_effect,
    decode_ran,
)
from workbench.engine.workloads import Workload, resolve_workload

CUDA = torch.device("cuda")  # only its type is read: nothing here touches a GPU
FAST = {"seconds": 0.3, "min_steps": 2, "warmup_steps": 1, "record": False}


@pytest.fixture(scope="module")
def coloured(tmp_path_factory):
    """Class 0 red, 1 green, 2 blue: a crop's strongest channel is its label."""
    root = tmp_path_factory.mktemp("coloured")
    for label in range(3):
        folder = root / f"class_{label}"
        folder.mkdir()
        for i in range(8):
            pixels = np.full((60 + i, 80, 3), 30, np.uint8)
            pixels[..., label] = 220
            Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=95)
    return root


def test_labels_stay_with_their_images_through_shuffled_workers(coloured):
    files = EncodedFiles(ImageFiles(coloured).samples)
    loader = DataLoader(files, batch_size=6, shuffle=True, num_workers=2,
                        collate_fn=collate_encoded, drop_last=True)  # fmt: skip
    images = DeviceImages(ImageRecipe(size=16), "cpu", seed=1)
    seen = 0
    for x, y in DeviceBatches(loader, images):
        assert x.shape == (6, 3, 16, 16) and x.dtype == torch.float32
        strongest = x.mean(dim=(2, 3)).argmax(dim=1)
        assert strongest.tolist() == y.tolist()
        seen += len(y)
    assert seen == 24 and len(DeviceBatches(loader, images)) == 4
    assert images.h2d_bytes_per_sample > 8  # JPEG bytes and the label


def test_the_burst_reads_every_format_as_stored_bytes(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_FORMATS", str(tmp_path))
    wl = resolve_workload("cnn", data_dir=tiny_data)
    first_path, first_label = wl.dataset().samples[0]
    jpeg = Path(first_path).read_bytes()
    files = encoded_dataset_for(wl, Knobs(decode="gpu"))
    assert files[0][0].numpy().tobytes() == jpeg and files[0][1] == first_label
    for fmt in ("lmdb", "predecoded", "shards"):
        convert_dataset(
            fmt, wl.image_dir, workers=1, **({"resolution": 73} if fmt == "predecoded" else {})
        )
        dataset = encoded_dataset_for(wl, Knobs(decode="gpu", data_format=fmt))
        sample = next(iter(dataset)) if fmt == "shards" else dataset[0]
        kind = collate_encoded([sample]).kind
        assert kind == (PIXELS if fmt == "predecoded" else JPEG), fmt
        if fmt == "lmdb":
            assert sample[0].numpy().tobytes() == jpeg and sample[1] == first_label
        if fmt == "predecoded":
            assert sample[0].shape == (73, 73, 3) and sample[1] == first_label


def test_decode_gpu_says_why_it_cannot_act(tiny_data):
    images = resolve_workload("cnn", data_dir=tiny_data)
    gpu = Knobs(decode="gpu")
    assert "CPU" in decode_no_effect(gpu, torch.device("cpu"), images)["decode"]
    assert decode_no_effect(gpu, CUDA, images) == {}  # it would act
    assert decode_no_effect(Knobs(), CUDA, images) == {}  # decode=cpu: nothing to say
    dali = decode_no_effect(gpu.replace(loader="dali"), CUDA, images)["decode"]
    assert "dali_decode" in dali
    tokens = resolve_workload("gpt", data_dir=tiny_data)
    assert "no image folder" in decode_no_effect(gpu, CUDA, tokens)["decode"]
    own = Workload(name="own", model=images.model, dataset=images.dataset,
                   collate_fn=collate_encoded, image_dir=images.image_dir)  # fmt: skip
    assert "collate_fn" in decode_no_effect(gpu, CUDA, own)["decode"]


def test_a_cpu_burst_with_decode_gpu_runs_the_workers_pipeline_and_says_so(tiny_data):
    r = run_burst(
        "cnn", Knobs(decode="gpu", batch_size=8), data_dir=tiny_data, device="cpu", **FAST
    )
    assert r.ok, r.error
    assert r.decode == "cpu" and "decode" in r.no_effect and r.h2d_bytes_per_sample is None
    tokens = run_burst("gpt", Knobs(batch_size=4), data_dir=tiny_data, device="cpu", **FAST)
    assert tokens.decode is None


def test_what_ran_is_read_from_the_stream(tiny_data):
    images = resolve_workload("cnn", data_dir=tiny_data)

    class Stream:
        backend = "dali"
        decode = "mixed"

    assert decode_ran(Stream(), images) == "gpu"
    Stream.backend = "synthetic"
    assert decode_ran(Stream(), images) is None


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["files", "predecoded"])
def test_gpu_decode_bursts_copy_fewer_bytes_than_float_crops(tiny_data, tmp_path, monkeypatch, fmt):
    monkeypatch.setenv("WORKBENCH_FORMATS", str(tmp_path))
    if fmt == "predecoded":
        convert_dataset("predecoded", tiny_data / "images", workers=1, resolution=73)
    base = Knobs(batch_size=8, pin_memory=True, data_format=fmt)
    cpu = run_burst("cnn", base, data_dir=tiny_data, device="cuda", **FAST)
    gpu = run_burst("cnn", base.replace(decode="gpu"), data_dir=tiny_data, device="cuda", **FAST)
    assert cpu.ok and gpu.ok, (cpu.error, gpu.error)
    assert (cpu.decode, gpu.decode) == ("cpu", "gpu") and "decode" not in gpu.no_effect
    assert cpu.h2d_bytes_per_sample == 3 * 64 * 64 * 4 + 8
    assert gpu.h2d_bytes_per_sample < cpu.h2d_bytes_per_sample


@pytest.mark.gpu
def test_overlap_on_a_side_stream_gives_the_same_batches(coloured):
    loader = DataLoader(EncodedFiles(list(ImageFiles(coloured).samples)), batch_size=6,
                        collate_fn=collate_encoded, pin_memory=True)  # fmt: skip
    runs = []
    for overlap in (True, False):
        images = DeviceImages(ImageRecipe(size=16), "cuda", seed=4)
        runs.append([(x.cpu(), y.cpu()) for x, y in DeviceBatches(loader, images, overlap=overlap)])
    for (xa, ya), (xb, yb) in zip(*runs, strict=True):
        assert torch.equal(ya, yb) and torch.allclose(xa, xb)


def test_the_bursts_device_path_runs_whole_on_cpu_tensors(tiny_data, monkeypatch):
    """The CPU twin of a decode=gpu burst: the refusal lifted, the same stream, pipeline and
    loop run on CPU tensors; what crosses is the JPEG bytes and the label."""
    monkeypatch.setattr(plan, "decode_no_effect", lambda *_: {})  # the burst's plan decides
    knobs = Knobs(decode="gpu", batch_size=6, num_workers=1)
    r = run_burst("cnn", knobs, data_dir=tiny_data, device="cpu", **FAST)
    assert r.ok, r.error
    assert r.decode == "gpu" and r.samples == r.steps * 6
    sizes = [Path(p).stat().st_size for p, _ in ImageFiles(tiny_data / "images").samples]
    assert min(sizes) + 8 <= r.h2d_bytes_per_sample <= max(sizes) + 8
    decoder = jpeg_decoder()[0]  # its version and safety mode, as the GPU session reads it
    assert any(f"decode=gpu: JPEGs decoded by nvJPEG through {decoder}" in n for n in r.notes)


def test_on_cuda_the_next_batch_is_queued_on_a_side_stream_the_trainer_waits_for(monkeypatch):
    """The overlap's order, with CUDA's stream calls recorded (a fake: no GPU here): batch k+1
    is prepared on the side stream only after the training stream was made to wait for batch
    k's work and k's tensors were marked as used there."""
    log: list[str] = []

    class Stream:
        def __init__(self, name):
            self.name = name

        def wait_stream(self, other):
            log.append(f"{self.name} waits for {other.name}")

    main, side = Stream("main"), Stream("side")
    current = [main]

    class Tensor:
        def __init__(self, tag):
            self.tag = tag

        def record_stream(self, stream):
            log.append(f"{self.tag} used on {stream.name}")

    class Images:
        device = CUDA

        def __call__(self, batch):
            log.append(f"prepare {batch} on {current[-1].name}")
            return Tensor(f"x{batch}"), Tensor(f"y{batch}")

    class OnSide:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            current.append(self.stream)

        def __exit__(self, *exc):
            current.pop()

    monkeypatch.setattr(torch.cuda, "Stream", lambda device: side)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current[-1])
    monkeypatch.setattr(torch.cuda, "stream", OnSide)
    got = [x.tag for x, _ in DeviceBatches([0, 1], Images())]
    assert got == ["x0", "x1"]
    assert log == [
        "prepare 0 on side",
        "main waits for side", "x0 used on main", "y0 used on main",
        "prepare 1 on side",
        "main waits for side", "x1 used on main", "y1 used on main",
    ]  # fmt: skip
    log.clear()
    list(DeviceBatches([0], Images(), overlap=False))
    assert log == ["prepare 0 on main"]  # in line: nothing to wait for


def test_decode_overlap_reaches_the_stream_and_says_when_it_cannot_act(tiny_data):
    images = resolve_workload("cnn", data_dir=tiny_data)
    inline = Knobs(decode="gpu", decode_overlap=False, batch_size=4)
    stream = build_device_stream(images, inline, torch.device("cpu"), None)
    try:
        assert "in line" in stream.note
    finally:
        stream.close()
    cpu_decode = decode_no_effect(Knobs(decode_overlap=False), CUDA, images)
    assert "only with decode=gpu" in cpu_decode["decode_overlap"]
    on_cpu = decode_no_effect(inline, torch.device("cpu"), images)
    assert set(on_cpu) == {"decode", "decode_overlap"}
