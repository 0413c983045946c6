"""The DALI loader: the same knobs and files as the torch loader, honest about what ran.

Tests that need DALI run its CPU pipeline (no GPU needed); they skip where DALI is not
installed, and fail under CI, which installs the ``dali`` extra (``make test``). GPU tests
(``mixed`` decode) are marked and skipped without CUDA.
"""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path

import psutil
import pytest
import torch
from blocked_imports import run_with_ui_blocked
from ci_env import IN_CI

from workbench import Knobs, Workload, run_burst
from workbench.analysis.advice import data_advice
from workbench.core.knobs import KnobError
from workbench.engine.datasets import ImageFiles
from workbench.engine.loaders import LoaderUnavailable
from workbench.engine.loaders.dali import (
    INSTALL_HINT,
    DevicePoolMeter,
    augment_from_transform,
    dali_available,
    dali_no_effect,
    decode_hints,
    jpeg_size,
    mixed_decoder_args,
    plan_pipeline,
    resolve_decode,
)
from workbench.engine.loaders.torch_loader import TorchStream
from workbench.engine.training import no_effect
from workbench.engine.workloads import resolve_workload
from workbench.engine.workloads.vision import SmallConvNet

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
CUDA0 = torch.device("cuda", 0)  # a mixed plan is decided without touching CUDA
MIB = 2**20


def _needs_dali() -> None:
    reason = dali_available()
    if reason and IN_CI:
        pytest.fail(f"CI installs the dali extra, but: {reason}")
    if reason:
        pytest.skip(reason)


@pytest.fixture
def cnn(tiny_data):
    return resolve_workload("cnn", tiny_data)


def _stream(workload, device=CPU, **knobs):
    from workbench.engine.loaders.dali import DaliStream

    _needs_dali()
    knobs.setdefault("batch_size", 5)
    plan = plan_pipeline(workload, Knobs(loader="dali", **knobs), device)
    return DaliStream(plan, record_files=True)


def _epochs(stream, n: int) -> list[list[tuple[str, int]]]:
    """(file, label) of every sample, per epoch, for ``n`` whole epochs."""
    seen: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    while True:
        _, y = next(stream)
        if stream.epochs >= n:
            return seen
        seen[stream.epochs] += list(zip(stream.last_files, y.tolist(), strict=True))


# -- knobs and decisions (no DALI needed) ------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "knob", "words"),
    [
        ({"dali_decode": "gpu"}, "dali_decode", "one of auto, cpu, mixed"),
        ({"dali_hw_decoder_load": 1.5}, "dali_hw_decoder_load", "a number from 0 to 1"),
        ({"dali_hw_decoder_load": "high"}, "dali_hw_decoder_load", "a number from 0 to 1"),
    ],
)
def test_dali_knobs_refuse_bad_values_naming_knob_and_allowed(changes, knob, words):
    with pytest.raises(KnobError) as err:
        Knobs(**changes)
    assert err.value.knob == knob and words in str(err.value)
    assert str(err.value).startswith(f"{knob}=")


def test_auto_decode_is_mixed_on_cuda_and_cpu_elsewhere():
    assert resolve_decode("auto", CUDA) == "mixed"
    assert resolve_decode("auto", CPU) == "cpu"
    assert resolve_decode("cpu", CUDA) == "cpu"
    assert resolve_decode("mixed", CPU) == "mixed"  # refused later, with the reason


def test_results_say_which_decode_ran_and_refuse_mixed_without_cuda(cnn):
    auto = no_effect(Knobs(loader="dali"), CPU, cnn)
    assert "decoded on the CPU" in auto["dali_decode"]
    assert "dali_decode" not in no_effect(Knobs(loader="dali", dali_decode="cpu"), CPU, cnn)
    mixed = no_effect(Knobs(loader="dali", dali_decode="mixed"), CPU, cnn)
    assert "not allowed here" in mixed["dali_decode"] and "CUDA" in mixed["dali_decode"]
    assert dali_no_effect(Knobs(loader="dali"), CUDA) == {}  # auto ran mixed: the knob acted


def test_dali_knobs_without_dali_loader_or_mixed_decode_have_no_effect(cnn):
    torch_loader = no_effect(Knobs(dali_decode="cpu", dali_hw_decoder_load=0.9), CPU, cnn)
    assert torch_loader["dali_decode"] == "acts only with loader='dali'"
    assert torch_loader["dali_hw_decoder_load"] == "acts only with loader='dali'"
    cpu_decode = dali_no_effect(
        Knobs(loader="dali", dali_decode="cpu", dali_hw_decoder_load=0.9), CUDA
    )
    assert "mixed decode only" in cpu_decode["dali_hw_decoder_load"]
    workers = Knobs(loader="dali", num_workers=2, persistent_workers=True)
    assert "pipeline" in dali_no_effect(workers, CPU)["persistent_workers"]


def test_knobs_map_to_dali_threads_and_queue_depth(cnn):
    zero = plan_pipeline(cnn, Knobs(loader="dali", num_workers=0), CPU)
    assert zero.threads == 1 and zero.queue_depth == 2  # 0 workers still decodes: 1 thread
    deep = plan_pipeline(cnn, Knobs(loader="dali", num_workers=3, prefetch_factor=4), CPU)
    assert deep.threads == 3 and deep.queue_depth == 4
    assert deep.decode == "cpu" and deep.device_id is None  # a CPU pipeline: no GPU touched


def test_files_and_labels_come_from_the_torch_dataset(cnn):
    plan = plan_pipeline(cnn, Knobs(loader="dali"), CPU)
    assert list(zip(plan.files, plan.labels, strict=True)) == cnn.dataset().samples


def test_augment_is_read_from_the_workloads_own_transform(cnn):
    aug = augment_from_transform(cnn.dataset().transform)
    assert aug.size == (64, 64) and aug.scale == (0.08, 1.0) and aug.flip_p == 0.5
    assert aug.ratio == pytest.approx((3 / 4, 4 / 3))
    assert aug.mean == pytest.approx((0.485 * 255, 0.456 * 255, 0.406 * 255))
    assert aug.std == pytest.approx((0.229 * 255, 0.224 * 255, 0.225 * 255))


def test_a_transform_dali_cannot_mirror_is_refused_by_name():
    from torchvision import transforms as T

    jitter = T.Compose([T.RandomResizedCrop(32), T.ColorJitter(0.4), T.ToTensor()])
    with pytest.raises(LoaderUnavailable, match="ColorJitter"):
        augment_from_transform(jitter)
    with pytest.raises(LoaderUnavailable, match="RandomResizedCrop"):
        augment_from_transform(T.Compose([T.Resize(32), T.ToTensor()]))


def test_a_batch_bigger_than_the_dataset_is_refused_as_the_torch_loader_does(cnn):
    with pytest.raises(ValueError, match="batch_size=64 is not allowed: the dataset has only 36"):
        plan_pipeline(cnn, Knobs(loader="dali", batch_size=64), CPU)


def test_a_workload_without_images_is_refused(tiny_data):
    gpt = resolve_workload("gpt", tiny_data)
    with pytest.raises(LoaderUnavailable, match="reads image folders"):
        plan_pipeline(gpt, Knobs(loader="dali"), CPU)


def test_data_bound_advice_considers_dali(cnn, monkeypatch):
    from workbench.engine import hardware

    cpu = {s.knob: s for s in data_advice(Knobs(), CPU, cnn)}
    assert cpu["loader"].value == "dali" and "crop window" in cpu["loader"].why
    host = hardware.device_info("cpu")
    monkeypatch.setattr(hardware, "device_info", lambda _dev=None: host)  # a GPU box's cores
    gpu_dali = {s.knob: s for s in data_advice(Knobs(loader="dali", dali_decode="cpu"), CUDA, cnn)}
    assert gpu_dali["dali_decode"].value == "mixed" and "loader" not in gpu_dali


def test_the_panel_disables_dali_controls_with_the_install_reason(monkeypatch):
    from workbench.notebook.ui import controls

    monkeypatch.setattr(controls, "dali_available", lambda: f"not installed: {INSTALL_HINT}")
    panel = controls.KnobControls(Knobs(), "cpu")
    for name in ("dali_decode", "dali_hw_decoder_load"):
        assert panel.controls[name].disabled
        assert "install the `dali` extra" in panel.notes[name].value
    assert not panel.controls["loader"].disabled  # torch and synthetic stay selectable


def test_without_dali_a_dali_burst_says_install_the_extra(tiny_data, tmp_path):
    doc = run_with_ui_blocked(
        f"""
        import torch
        import workbench as wb
        from workbench.analysis.advice import data_advice
        from workbench.engine.loaders.dali import dali_available
        from workbench.engine.workloads import resolve_workload
        wl = resolve_workload("cnn", {str(tiny_data)!r})
        r = wb.run_burst(wl, wb.Knobs(loader="dali", batch_size=8), seconds=0.2,
                         warmup_steps=1, device="cpu", record=False)
        advice = data_advice(wb.Knobs(), torch.device("cpu"), wl)
        why = {{s.knob: s.why for s in advice}}["loader"]
        out.update(status=r.status, error=r.error, reason=dali_available(), why=why)
        """
    )
    assert doc["status"] == "error" and "install the `dali` extra" in doc["error"]
    assert "install the `dali` extra" in doc["reason"]
    assert "install the `dali` extra" in doc["why"]
    assert doc["leaked"] == []


# -- mixed decode's buffers, sized from the data (no GPU needed) -------------------------------


def _jpeg(path: Path, size: tuple[int, int], mode: str = "RGB", **save) -> str:
    from PIL import Image

    Image.new(mode, size, 128).save(path, "JPEG", **save)
    return str(path)


def _frame_only_jpeg(path: Path, width: int, height: int) -> str:
    """Start of image, an APP0 segment and a baseline frame header: all a header reader sees."""
    app0 = b"\xff\xe0" + (16).to_bytes(2, "big") + b"JFIF\0" + bytes(9)
    sof0 = b"\xff\xc0" + (17).to_bytes(2, "big") + b"\x08"
    sof0 += height.to_bytes(2, "big") + width.to_bytes(2, "big") + b"\x03" + bytes(9)
    path.write_bytes(b"\xff\xd8" + app0 + sof0)
    return str(path)


def test_jpeg_size_reads_the_frame_header_past_exif_of_every_kind(tmp_path):
    from PIL import Image

    exif = Image.Exif()
    exif[0x010E] = "x" * 30_000  # ImageDescription: a 30 KB APP1 segment before the frame
    files = {
        _jpeg(tmp_path / "baseline.jpg", (640, 480)): (640, 480),
        _jpeg(tmp_path / "progressive.jpg", (301, 199), progressive=True): (301, 199),
        _jpeg(tmp_path / "exif.jpg", (123, 77), exif=exif.tobytes()): (123, 77),
        _jpeg(tmp_path / "grey.jpg", (90, 45), "L"): (90, 45),
        _jpeg(tmp_path / "cmyk.jpg", (64, 48), "CMYK"): (64, 48),
    }
    assert {path: jpeg_size(path) for path in files} == files
    png = tmp_path / "image.png"
    Image.new("RGB", (10, 10)).save(png)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(Path(next(iter(files))).read_bytes()[:20])
    assert jpeg_size(str(png)) is None and jpeg_size(str(cut)) is None
    assert jpeg_size(str(tmp_path / "missing.jpg")) is None


def test_a_mixed_plan_sizes_the_decoders_buffers_from_the_largest_jpeg(cnn):
    plan = plan_pipeline(cnn, Knobs(loader="dali", dali_hw_decoder_load=0.8), CUDA0)
    widths, heights = zip(*(_size(f) for f in plan.files), strict=True)
    assert plan.decode == "mixed" and plan.hints is not None
    assert (plan.hints.width, plan.hints.height) == (max(widths), max(heights))
    assert plan.hints.files_read == len(plan.files) == 36
    args = mixed_decoder_args(plan)
    assert args["preallocate_width_hint"] == max(widths)
    assert args["preallocate_height_hint"] == max(heights)
    # 500x375 images are far below DALI's own paddings: those stay (never less than DALI's)
    assert args["device_memory_padding"] == 16 * MIB and args["host_memory_padding"] == 8 * MIB
    assert args["hw_decoder_load"] == 0.8
    cpu = plan_pipeline(cnn, Knobs(loader="dali"), CPU)
    assert cpu.hints is None and mixed_decoder_args(cpu) == {}  # no header read for CPU decode


def test_decoder_paddings_grow_with_the_largest_image_up_to_imagenets(tmp_path):
    photo = _frame_only_jpeg(tmp_path / "photo.jpg", 4000, 3000)  # 12 MP
    small = _frame_only_jpeg(tmp_path / "small.jpg", 640, 480)
    hints = decode_hints((small, photo))
    assert (hints.width, hints.height) == (4000, 3000)  # the hardware hints: the image itself
    assert hints.pixels == 4000 * 3008  # the paddings: whole 16-px blocks
    assert hints.device_memory_padding == 9 * 4000 * 3008  # 3 samples x (2 B coeffs + 1 B plane)
    assert hints.host_memory_padding == 6 * 4000 * 3008  # 3 samples x 2 B coefficients
    huge = decode_hints((_frame_only_jpeg(tmp_path / "huge.jpg", 20_000, 20_000),))
    assert huge.device_memory_padding == 211_025_920  # NVIDIA's ImageNet preallocation: the cap
    assert huge.host_memory_padding == 140_544_512
    assert huge.width == 20_000  # the hardware decoder's hint is the image itself
    assert decode_hints((str(tmp_path / "none.png"),)) is None  # no JPEG: DALI's defaults


def test_a_long_file_list_reads_an_even_sample_of_headers(tmp_path, monkeypatch):
    from workbench.engine.loaders import dali

    one = _frame_only_jpeg(tmp_path / "a.jpg", 800, 600)
    read: list[str] = []
    monkeypatch.setattr(dali, "jpeg_size", lambda path: read.append(path) or (800, 600))
    files = tuple(f"{one}#{i}" for i in range(10_000))
    hints = decode_hints(files)
    assert hints.files_read == len(read) <= 4096 and read[0] == files[0]
    assert read[-1] in files[-4:]  # spread over the whole list, not its head
    decode_hints(files)
    assert len(read) == hints.files_read  # a sweep's next burst plans from the cache


def test_the_real_mixed_pipeline_accepts_the_hints(cnn, monkeypatch):
    """DALI checks argument names when the graph is defined, GPU or not: the hints reach the
    mixed decoder under names DALI knows."""
    _needs_dali()
    import nvidia.dali.fn as fn

    from workbench.engine.loaders.dali import build_pipeline

    seen: list[dict] = []
    real = fn.decoders.image_random_crop

    def recording(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(fn.decoders, "image_random_crop", recording)
    plan = plan_pipeline(cnn, Knobs(loader="dali"), CUDA0)
    build_pipeline(plan)  # defined, not built: no GPU needed
    (kwargs,) = seen
    assert kwargs["device"] == "mixed"
    assert kwargs["preallocate_width_hint"] == plan.hints.width
    assert kwargs["device_memory_padding"] == plan.hints.device_memory_padding
    assert kwargs["host_memory_padding"] == plan.hints.host_memory_padding


# -- DALI's device memory: measured, and given back on close (recorded fake device) ------------


class _FakeDevice:
    """A GPU's free memory and DALI's pool, as cudaMemGetInfo and DALI's backend see them."""

    def __init__(self, free_mib: float, pool_spare_mib: float = 0.0):
        self.free = int(free_mib * MIB)
        self.pool_spare = int(pool_spare_mib * MIB)  # blocks DALI holds but does not use
        self.events: list[str] = []

    def ReleaseUnusedMemory(self) -> None:  # DALI's name
        self.events.append("release")
        self.free += self.pool_spare
        self.pool_spare = 0

    def dali_takes(self, mib: float) -> None:
        self.free -= int(mib * MIB)

    def mem_get_info(self, device_id: int) -> tuple[int, int]:
        self.events.append(f"read {device_id}")
        return self.free, 141 * 1024 * MIB

    def synchronize(self, device_id: int) -> None:
        self.events.append(f"sync {device_id}")


@pytest.fixture
def fake_gpu(monkeypatch) -> _FakeDevice:
    gpu = _FakeDevice(free_mib=80_000, pool_spare_mib=100)  # 100 MiB left by an earlier burst
    monkeypatch.setattr(torch.cuda, "mem_get_info", gpu.mem_get_info)
    monkeypatch.setattr(torch.cuda, "synchronize", gpu.synchronize)
    return gpu


def test_the_meter_reads_what_dali_took_and_gave_back(fake_gpu):
    meter = DevicePoolMeter(0, backend=fake_gpu)
    meter.build(lambda: fake_gpu.dali_takes(300))  # pipeline, decoder buffers, first batches
    assert meter.build_mib == 300  # not 200: the earlier burst's spare blocks went back first
    assert meter.peak_mib() == 300 and meter.released_mib is None
    fake_gpu.dali_takes(200)  # the pool grows during the burst

    def destroy() -> None:  # buffers go back to DALI's pool, not to the driver
        fake_gpu.events.append("destroy")
        fake_gpu.pool_spare += 500 * MIB

    meter.teardown(destroy)
    meter.teardown(destroy)  # idempotent: one destroy, one release
    assert meter.released_mib == 500 and meter.peak_mib() == 500
    assert fake_gpu.events[:3] == ["release", "sync 0", "read 0"]
    close = fake_gpu.events[fake_gpu.events.index("destroy") - 2 :]
    assert close == ["sync 0", "read 0", "destroy", "release", "sync 0", "read 0"]


def test_a_reading_disturbed_by_another_process_is_unknown_not_zero(fake_gpu):
    meter = DevicePoolMeter(0, backend=fake_gpu)
    meter.build(lambda: fake_gpu.dali_takes(-1024))  # someone freed 1 GiB meanwhile
    assert meter.build_mib is None and meter.peak_mib() is None


def test_a_cpu_pipeline_reads_no_device_memory_and_touches_no_gpu(fake_gpu):
    meter = DevicePoolMeter(None, backend=fake_gpu)
    meter.build(lambda: None)
    meter.teardown(lambda: None)
    assert meter.peak_mib() is None
    assert fake_gpu.events == ["release", "release"]  # pinned pools are released all the same


# -- the CPU pipeline, for real ----------------------------------------------------------------


def test_epochs_are_exact_distinct_files_as_many_as_the_torch_loader(cnn):
    stream = _stream(cnn, batch_size=5)
    epochs = _epochs(stream, 3)
    stream.close()
    torch_per_epoch = _torch_epoch_samples(cnn, batch_size=5)
    assert torch_per_epoch == 35  # 36 files, the last partial batch dropped
    for seen in epochs:
        files = [f for f, _ in seen]
        assert len(files) == torch_per_epoch and len(set(files)) == len(files)  # no padding
    assert [f for f, _ in epochs[0]] != [f for f, _ in epochs[1]]  # reshuffled every epoch
    classes = [label for _, label in epochs[0][:12]]
    assert len(set(classes)) > 1  # shuffled across the class-sorted folder, not within it


def _torch_epoch_samples(workload, batch_size: int) -> int:
    stream = TorchStream(workload.dataset(), Knobs(batch_size=batch_size), CPU)
    samples = 0
    while True:
        x, _ = next(stream)
        if stream.epochs:
            stream.close()
            return samples
        samples += x.shape[0]


def test_labels_match_the_torch_loaders_for_the_same_file(cnn):
    from torchvision.datasets import ImageFolder

    folder = cnn.image_dir
    torchvision_labels = dict(ImageFolder(str(folder)).samples)
    stream = _stream(cnn, batch_size=6)
    (seen,) = _epochs(stream, 1)
    stream.close()
    assert len(seen) == 36
    for path, label in seen:
        assert torchvision_labels[path] == label, path


def test_pixels_match_the_torch_transform_for_the_same_file(tiny_data):
    """A user's ImageFolder workload whose crop keeps the whole 4:3 image: both loaders then
    feed the model the same picture, up to JPEG decoder and resize-kernel differences."""
    mine = _full_frame_workload(tiny_data)
    dataset = mine.dataset()
    stream = _stream(mine, batch_size=12)
    x, _ = next(stream)
    index = {path: i for i, (path, _) in enumerate(dataset.samples)}
    compared = 0
    for j, path in enumerate(stream.last_files):
        if _size(path) != (500, 375):
            continue  # other aspect ratios crop differently at random
        reference, _ = dataset[index[path]]
        assert (reference - x[j]).abs().mean() < 0.02  # normalized units: about 1 grey level
        compared += 1
    stream.close()
    assert compared >= 2


def _full_frame_workload(tiny_data: Path) -> Workload:
    """A user's ImageFolder workload whose crop is the whole frame of a 500x375 (4:3) JPEG."""
    from torchvision import transforms as T

    folder = tiny_data / "images"
    full = T.RandomResizedCrop(32, scale=(1.0, 1.0), ratio=(4 / 3, 4 / 3), antialias=True)
    tf = T.Compose([full, T.ToTensor(), T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    return Workload(
        name="mine",
        model=lambda: SmallConvNet(3),
        dataset=lambda: ImageFiles(folder, transform=tf),
        image_dir=folder,
    )


def _size(path: str) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as img:
        return img.size


def test_channels_last_is_the_same_batch_in_nhwc_memory(cnn):
    nchw_stream, nhwc_stream = _stream(cnn), _stream(cnn, channels_last=True)
    nchw, _ = next(nchw_stream)
    nhwc, _ = next(nhwc_stream)
    nchw_stream.close()
    nhwc_stream.close()
    assert nchw.shape == nhwc.shape == (5, 3, 64, 64) and nchw.dtype == torch.float32
    assert nhwc.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(nchw, nhwc)  # same seed, same crops: only the layout differs


def test_close_frees_dalis_threads(cnn):
    gc.collect()
    before = psutil.Process().num_threads()
    stream = _stream(cnn, num_workers=2)
    next(stream)
    assert psutil.Process().num_threads() > before
    stream.close()
    gc.collect()
    assert psutil.Process().num_threads() <= before


def test_close_destroys_the_pipeline_then_releases_dalis_pools_once(cnn, monkeypatch):
    import nvidia.dali.backend as backend

    stream = _stream(cnn, num_workers=2)
    x, y = next(stream)
    pipe = weakref.ref(stream._pipe)
    gone_at_release: list[bool] = []
    real = backend.ReleaseUnusedMemory

    def recording() -> None:
        gone_at_release.append(pipe() is None)  # its buffers are back in the pools by then
        real()

    monkeypatch.setattr(backend, "ReleaseUnusedMemory", recording)
    del x, y
    stream.close()
    stream.close()
    assert gone_at_release == [True]  # released once, after the pipeline was destroyed
    assert stream.device_mem_mib() is None  # a CPU pipeline holds no device memory
    with pytest.raises(StopIteration):
        next(stream)
    again = _stream(cnn, num_workers=2)  # the next burst builds and runs as usual
    x, _ = next(again)
    again.close()
    assert x.shape == (5, 3, 64, 64)


def test_a_cpu_dali_burst_runs_and_counts_every_sample(tiny_data):
    _needs_dali()
    r = run_burst("cnn", Knobs(loader="dali", batch_size=8, num_workers=0), data_dir=tiny_data,
                  seconds=0.3, warmup_steps=1, min_steps=5, device="cpu", record=False)  # fmt: skip
    assert r.ok, r.error
    assert r.samples == r.steps * 8 and r.samples_per_s > 0
    assert r.loader_epochs >= 1  # 36 files: several epochs in the window, each restarted
    assert r.short_epochs is None  # DALI runs its own epochs: nothing continued, none claimed
    assert "decoded on the CPU" in r.no_effect["dali_decode"]


def test_mixed_decode_without_cuda_is_refused_with_the_reason(tiny_data):
    _needs_dali()
    knobs = Knobs(loader="dali", dali_decode="mixed", batch_size=8)
    r = run_burst("cnn", knobs, data_dir=tiny_data, seconds=0.2, device="cpu", record=False)
    assert r.status == "error"
    assert "dali_decode='mixed' is not allowed here" in r.error and "CUDA" in r.error
    assert "use dali_decode=cpu or auto" in r.error
    assert "not allowed here" in r.no_effect["dali_decode"]


def test_sweep_loader_torch_vs_dali_from_the_cli(tiny_data, tmp_path, capsys):
    from workbench.cli import main

    _needs_dali()
    code = main(["sweep", "--knob", "loader", "--values", "torch,dali", "--workload", "cnn",
                 "--data", str(tiny_data), "--seconds", "0.3", "--set", "batch_size=8",
                 "--device", "cpu", "--store", str(tmp_path / "h.sqlite"), "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    by_loader = {b["knobs"]["loader"]: b for b in doc["bursts"]}
    assert set(by_loader) == {"torch", "dali"}
    assert all(b["status"] == "ok" and b["samples_per_s"] > 0 for b in by_loader.values())
    assert "dali_decode" in by_loader["dali"]["no_effect"]  # which decode ran
    assert "dali_decode" not in by_loader["torch"]["no_effect"]


def test_the_loader_alone_measures_dali_too(tiny_data):
    from workbench.analysis.loader_ceiling import run_loader_burst
    from workbench.engine.window import BurstWindow

    _needs_dali()
    knobs = Knobs(loader="dali", batch_size=6, num_workers=1)
    window = BurstWindow(seconds=0.2)
    r = run_loader_burst("cnn", knobs, window=window, data_dir=tiny_data, device="cpu")
    assert r.ok, r.error
    assert r.samples == r.batches * 6 and r.samples_per_s > 0


# -- mixed decode on a GPU ---------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_mixed_decode_burst_runs_on_the_gpu(tiny_data):
    _needs_dali()
    knobs = Knobs(loader="dali", batch_size=8, num_workers=2, dali_hw_decoder_load=0.9)
    r = run_burst("cnn", knobs, data_dir=tiny_data, seconds=0.5, device="cuda", record=False)
    assert r.ok, r.error
    assert r.samples == r.steps * 8
    assert "dali_decode" not in r.no_effect and "dali_hw_decoder_load" not in r.no_effect


@pytest.mark.gpu
def test_gpu_mixed_decode_batches_are_on_the_gpu_with_the_same_labels(cnn):
    from torchvision.datasets import ImageFolder

    stream = _stream(cnn, device=CUDA, batch_size=6)
    assert stream.on_device and stream.decode == "mixed"
    x, y = next(stream)
    assert x.is_cuda and y.is_cuda and y.dtype == torch.int64
    labels = dict(ImageFolder(str(cnn.image_dir)).samples)
    assert [labels[f] for f in stream.last_files] == y.tolist()
    stream.close()


@pytest.mark.gpu
@pytest.mark.parametrize("load", [0.0, 1.0])
def test_gpu_hardware_decoder_share_runs_at_both_ends(cnn, load):
    stream = _stream(cnn, device=CUDA, batch_size=6, dali_hw_decoder_load=load)
    for _ in range(8):  # more than an epoch
        x, _ = next(stream)
    assert x.is_cuda and torch.isfinite(x).all()
    stream.close()


@pytest.mark.gpu
def test_gpu_mixed_and_cpu_decode_give_the_same_pictures(tiny_data):
    mine = _full_frame_workload(tiny_data)
    cpu, gpu = _stream(mine, batch_size=12), _stream(mine, device=CUDA, batch_size=12)
    x_cpu, x_gpu = next(cpu)[0], next(gpu)[0].cpu()
    files = cpu.last_files
    assert files == gpu.last_files  # the same shuffle
    cpu.close()
    gpu.close()
    full_frames = [j for j, path in enumerate(files) if _size(path) == (500, 375)]
    assert full_frames
    for j in full_frames:  # nvJPEG and libjpeg-turbo upsample chroma differently: a little
        assert (x_cpu[j] - x_gpu[j]).abs().mean() < 0.05


@pytest.mark.gpu
def test_gpu_dali_memory_is_measured_and_given_back_on_close(cnn):
    """The nvJPEG paddings are allocated when the pipeline is built (two threads: at least
    2 x 16 MiB), and closing gives DALI's pools back: free memory returns to where it was."""
    _needs_dali()
    warm = _stream(cnn, device=CUDA0, batch_size=6, num_workers=2)  # DALI's kernels and handles
    next(warm)
    warm.close()
    free_before, _ = torch.cuda.mem_get_info(0)
    stream = _stream(cnn, device=CUDA0, batch_size=6, num_workers=2)
    for _ in range(8):  # more than an epoch
        x, _ = next(stream)
    built = stream.device_mem_mib()
    assert built is not None and built >= 2 * 16
    del x
    stream.close()
    assert stream.device_mem_mib() >= built
    free_after, _ = torch.cuda.mem_get_info(0)
    assert (free_before - free_after) / MIB < 64  # no more than a stray block stays


def test_dali_reads_shards_with_their_labels(tmp_path):
    """data_format=shards: fn.readers.webdataset reads the tars; one epoch holds every sample
    once with the label it has in the folder (the .lbl member, read as an int64)."""
    from collections import Counter

    from workbench.engine.convert import convert_dataset
    from workbench.engine.datasets import build_datasets

    images = build_datasets(tmp_path, images_per_class=5, classes=3, token_mb=0.05).images
    convert_dataset("shards", images)
    wl = resolve_workload("cnn", tmp_path)
    _needs_dali()
    from workbench.engine.loaders.dali import DaliStream

    plan = plan_pipeline(wl, Knobs(loader="dali", data_format="shards", batch_size=3), CPU)
    assert len(plan.shards) == 15 and all(s.endswith(".tar") for s in plan.shards)
    stream = DaliStream(plan)
    try:
        labels: list[int] = []
        while stream.epochs == 0:
            x, y = next(stream)
            if stream.epochs == 0:
                labels += y.tolist()
        assert x.shape == (3, 3, 64, 64)
        assert Counter(labels) == Counter({0: 5, 1: 5, 2: 5})
    finally:
        stream.close()
