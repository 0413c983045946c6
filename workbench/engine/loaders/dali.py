"""NVIDIA DALI loader backend: the torch loader's augmentation, decoded by DALI.

DALI is optional (the ``dali`` extra) and imported only here, only when a DALI stream is built;
the helpers that decide what a burst *would* do (``resolve_decode``, ``dali_no_effect``) never
import it, so results and the panel can say so on a box without DALI.

What the pipeline does, and why each choice keeps it comparable with ``loader="torch"``:

- **Files and labels** come from the workload's own dataset (``dataset.samples``, the
  ImageFolder list), falling back to a scan of ``workload.image_dir`` in ImageFolder order. DALI
  never assigns a label itself, so a file has the same class index under both loaders.
- **Shuffling** is a full permutation per epoch (``shuffle_after_epoch``), as
  ``DataLoader(shuffle=True)``: DALI's ``random_shuffle`` only shuffles within a buffer, which on
  a folder sorted by class gives batches of one class.
- **Epochs are exact**: the reader pads its last batch (``pad_last_batch``) so its epoch ends
  where the iterator's does, and the iterator drops that last, partial batch
  (``LastBatchPolicy.DROP``), as the torch loader's ``drop_last=True`` does. Padding is never
  delivered, so every sample counted is a distinct file of this epoch; without the padding the
  reader drifts into the next epoch and files repeat.
- **Augmentation** is read from the dataset's torchvision transform (RandomResizedCrop's size,
  scale, ratio and interpolation, the flip probability, ToTensor's 1/255 and Normalize's mean
  and std), so a user's ImageFolder gets *its* numbers, not ours. The crop is fused with the
  decode (``decoders.image_random_crop``): DALI decodes only the crop's region where it can,
  which is part of why it is faster. A transform DALI cannot mirror is refused, by name.
- **Knobs**: ``num_workers`` is DALI's CPU thread count (0 still runs: one thread; DALI always
  decodes off the training thread), ``prefetch_factor`` the pipeline's prefetch queue depth in
  batches (unset: DALI's 2; note it is per pipeline, not per worker as in torch),
  ``dali_decode`` where JPEGs are decoded, ``dali_hw_decoder_load`` the share sent to the GPU's
  hardware JPEG decoder with mixed decode.
- **Decoder buffers** (mixed decode): nvJPEG's per-thread buffers and the hardware decoder's
  are sized up front from the largest JPEG in the file list (``DecodeHints``), so they are
  allocated when the pipeline is built, not grown by a large image inside the measured window.
- **Device memory**: DALI allocates from its own pools, which neither torch's allocator nor
  ``torch.cuda.empty_cache()`` sees, and with DALI's default executor the batches themselves
  are DALI buffers lent to torch (DLPack, no copy), so ``peak_mem_mib`` misses all of it. The
  stream measures what DALI takes on the device (``device_mem_mib``), and ``close`` destroys
  the pipeline and hands DALI's unused pool blocks, device and pinned, back to the driver:
  pools outlive their pipeline, so otherwise the next burst meets a card DALI still holds.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from workbench.core.knobs import DEFAULTS, KnobError, Knobs
from workbench.engine.formats import located
from workbench.engine.formats.shards import shard_paths
from workbench.engine.loaders.stream import LoaderUnavailable, check_batch_fits
from workbench.engine.workloads import Workload

INSTALL_HINT = "install the `dali` extra (pip install 'throughput-workbench[dali]')"
_READER = "Reader"
_SUPPORTED = ("RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize")


# -- what a burst would do (no DALI import) ---------------------------------------------------


def dali_available() -> str | None:
    """None when DALI looks importable, else the reason it is not (cheap: no import).

    A meta-path finder that blocks the module (tests, a locked-down box) counts as absent.
    """
    try:
        found = importlib.util.find_spec("nvidia") is not None and (
            importlib.util.find_spec("nvidia.dali") is not None
        )
    except (ImportError, ValueError):
        found = False
    return None if found else f"NVIDIA DALI is not installed: {INSTALL_HINT}"


def resolve_decode(choice: str, device: torch.device) -> str:
    """The decoder ``dali_decode`` means for a burst on ``device``: ``auto`` picks ``mixed``
    (nvJPEG on the GPU) when the burst runs on CUDA and ``cpu`` otherwise."""
    if choice == "auto":
        return "mixed" if device.type == "cuda" else "cpu"
    return choice


def mixed_refusal(knobs: Knobs, device: torch.device) -> str | None:
    """Why ``mixed`` decode cannot run for this burst, or None when it can.

    Mixed decode hands batches over on the GPU, so it needs the burst itself on CUDA, not
    merely a GPU somewhere in the box.
    """
    if resolve_decode(knobs.dali_decode, device) != "mixed" or device.type == "cuda":
        return None
    return (
        f"dali_decode='mixed' is not allowed here: mixed decode runs nvJPEG on a CUDA GPU and "
        f"this burst runs on {device}; use dali_decode=cpu or auto"
    )


def dali_no_effect(knobs: Knobs, device: torch.device) -> dict[str, str]:
    """DALI knobs that cannot act in this burst, with the reason; says which decode ran."""
    reasons: dict[str, str] = {}
    default = DEFAULTS
    if knobs.loader != "dali":
        for name in ("dali_decode", "dali_hw_decoder_load"):
            if getattr(knobs, name) != getattr(default, name):
                reasons[name] = "acts only with loader='dali'"
        return reasons
    decode = resolve_decode(knobs.dali_decode, device)
    refusal = mixed_refusal(knobs, device)
    if refusal:
        reasons["dali_decode"] = refusal
    elif knobs.dali_decode == "auto" and decode == "cpu":
        reasons["dali_decode"] = (
            f"auto decoded on the CPU: mixed (GPU) decode needs the burst on CUDA, it ran on "
            f"{device}"
        )
    if decode != "mixed" and knobs.dali_hw_decoder_load != default.dali_hw_decoder_load:
        reasons["dali_hw_decoder_load"] = "the hardware JPEG decoder is used by mixed decode only"
    if knobs.persistent_workers:
        reasons["persistent_workers"] = "DALI's threads live as long as its pipeline"
    if knobs.pin_memory and device.type == "cuda":
        reasons["pin_memory"] = (
            "DALI hands over its own buffers (on the GPU already with mixed decode)"
        )
    return reasons


# -- the plan: everything the pipeline needs, read from the workload and the knobs ------------


@dataclass(frozen=True, slots=True)
class Augment:
    """The torch transform's numbers, in DALI's terms (pixels 0..255, HxW sizes)."""

    size: tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    interpolation: str = "bilinear"
    flip_p: float = 0.0
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)


@dataclass(frozen=True, slots=True)
class DaliPlan:
    """One DALI pipeline, fully decided before DALI is imported (testable without it)."""

    files: tuple[str, ...]
    labels: tuple[int, ...]
    augment: Augment
    batch_size: int
    threads: int
    queue_depth: int
    decode: str
    device_id: int | None
    hw_decoder_load: float
    channels_last: bool
    shard: tuple[int, int] | None = None
    """(rank, world_size): this rank reads its slice, all ranks one global shuffle."""
    seed: int = 0
    hints: DecodeHints | None = None
    """nvJPEG buffer sizes for mixed decode; None: DALI's defaults (CPU decode, no JPEG seen)."""
    shards: tuple[str, ...] = ()
    """``data_format=shards``: the tar shards ``fn.readers.webdataset`` reads instead of files."""


def plan_pipeline(
    workload: Workload,
    knobs: Knobs,
    device: torch.device,
    shard: tuple[int, int] | None = None,
) -> DaliPlan:
    """Decide the pipeline for this workload and these knobs; refuse what cannot run, saying why.

    ``shard=(rank, world_size)``: this rank's slice in a DDP job, as DistributedSampler gives.
    """
    refuse_collate(workload, knobs)
    if workload.image_dir is None:
        raise LoaderUnavailable(
            f"loader='dali' cannot run workload {workload.name!r}: DALI reads image folders, "
            "and this workload has none"
        )
    refusal = mixed_refusal(knobs, device)
    if refusal:
        raise LoaderUnavailable(refusal)
    dataset = workload.dataset()
    files, labels = _file_list(dataset, workload)
    # a batch bigger than an epoch: DALI itself would only say "no data in the pipeline"
    check_batch_fits(knobs.batch_size, len(files) // shard[1] if shard else len(files), bool(shard))
    decode = resolve_decode(knobs.dali_decode, device)
    return DaliPlan(
        files=files,
        labels=labels,
        augment=augment_from_transform(getattr(dataset, "transform", None)),
        batch_size=knobs.batch_size,
        threads=max(1, knobs.num_workers),
        queue_depth=knobs.prefetch_factor or 2,
        decode=decode,
        device_id=_device_id(device) if decode == "mixed" else None,
        hw_decoder_load=knobs.dali_hw_decoder_load,
        channels_last=knobs.channels_last,
        shard=shard,
        hints=decode_hints(files) if decode == "mixed" else None,
        shards=_shards(workload, knobs, dataset),
    )


def _shards(workload: Workload, knobs: Knobs, dataset: Any) -> tuple[str, ...]:
    """The shard files for ``data_format=shards`` (same JPEG bytes as the files), else ()."""
    if knobs.data_format != "shards":
        return ()
    folder, manifest = located(workload, knobs, dataset)
    return tuple(shard_paths(folder, manifest))


def refuse_collate(workload: Workload, knobs: Knobs) -> None:
    """DALI builds its batches itself, so a workload's own ``collate_fn`` would never run and
    the burst would measure another pipeline than production's: refused, naming the knob."""
    collate = workload.collate_fn
    if collate is None:
        return
    name = getattr(collate, "__qualname__", type(collate).__name__)
    raise KnobError(
        "loader", knobs.loader, f"torch or synthetic: workload {workload.name!r} has its own "
        f"collate_fn ({name}), which DALI's pipeline cannot run"
    )  # fmt: skip


def _device_id(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _file_list(dataset: Any, workload: Workload) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(files, labels) exactly as the torch dataset pairs them: its ``samples`` list (what
    ImageFolder and ImageFiles keep), else ImageFolder order over ``workload.image_dir``."""
    from workbench.engine.datasets import ImageFiles  # PIL, numpy: only without a file list

    samples = getattr(dataset, "samples", None)
    if not _is_file_list(samples):
        samples = ImageFiles(workload.image_dir).samples  # type: ignore[arg-type]
    files = tuple(str(path) for path, _ in samples)
    return files, tuple(int(label) for _, label in samples)


def _is_file_list(samples: Any) -> bool:
    if not isinstance(samples, Sequence) or not samples:
        return False
    first = samples[0]
    return (
        isinstance(first, tuple)
        and len(first) == 2
        and isinstance(first[0], str)
        and isinstance(first[1], int)
    )


def augment_from_transform(transform: Any) -> Augment:
    """Read a torchvision training transform into an Augment, or refuse it by name.

    DALI mirrors the classic chain (RandomResizedCrop, RandomHorizontalFlip, ToTensor,
    Normalize, v1 or v2 classes); anything else would make the two loaders feed the model
    different inputs, so it is refused rather than silently dropped.
    """
    steps = list(getattr(transform, "transforms", [transform] if transform else []))
    names = [type(t).__name__ for t in steps]
    other = [n for n in names if n not in _SUPPORTED]
    if other or "RandomResizedCrop" not in names or "ToTensor" not in names:
        raise LoaderUnavailable(
            "loader='dali' cannot mirror this dataset's transform "
            f"({' -> '.join(names) or 'none'}): DALI runs RandomResizedCrop -> "
            "RandomHorizontalFlip -> ToTensor -> Normalize; "
            + (f"it has {', '.join(other)}" if other else "RandomResizedCrop and ToTensor needed")
        )
    fields: dict[str, Any] = {}
    for step, name in zip(steps, names, strict=True):
        if name == "RandomResizedCrop":
            fields |= _crop_fields(step)
        elif name == "RandomHorizontalFlip":
            fields["flip_p"] = float(step.p)
        elif name == "Normalize":
            fields["mean"] = tuple(float(m) * 255 for m in step.mean)
            fields["std"] = tuple(float(s) * 255 for s in step.std)
    fields.setdefault("std", (255.0, 255.0, 255.0))  # ToTensor alone: pixels / 255
    return Augment(**fields)


def _crop_fields(crop: Any) -> dict[str, Any]:
    size = crop.size if isinstance(crop.size, Sequence) else (crop.size, crop.size)
    if len(size) == 1:
        size = (size[0], size[0])
    interpolation = str(getattr(crop.interpolation, "value", crop.interpolation)).lower()
    if interpolation not in _INTERPOLATIONS:
        raise LoaderUnavailable(
            f"loader='dali' cannot mirror RandomResizedCrop(interpolation={interpolation!r}): "
            f"DALI resizes with {', '.join(_INTERPOLATIONS)}"
        )
    return {
        "size": (int(size[0]), int(size[1])),
        "scale": (float(crop.scale[0]), float(crop.scale[1])),
        "ratio": (float(crop.ratio[0]), float(crop.ratio[1])),
        "interpolation": interpolation,
    }


_INTERPOLATIONS = ("nearest", "bilinear", "bicubic")


# -- nvJPEG's buffers, sized from the data (mixed decode) -------------------------------------

_HEADER_SAMPLE = 4096
"""At most this many JPEG headers are read per file list (every file of a smaller list)."""
_DALI_DEVICE_PADDING = 16 * 2**20
_DALI_HOST_PADDING = 8 * 2**20
"""DALI's own defaults for ``device_memory_padding`` / ``host_memory_padding`` (DALI 2.4)."""
_IMAGENET_DEVICE_PADDING = 211_025_920
_IMAGENET_HOST_PADDING = 140_544_512
"""What NVIDIA's ResNet-50 DALI example preallocates for ImageNet's biggest sample: our cap."""
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # frame headers, not DHT/DAC


@dataclass(frozen=True, slots=True)
class DecodeHints:
    """Buffer sizes for mixed decode, from the largest JPEGs in the file list.

    Why: nvJPEG keeps one device buffer and two pinned host buffers per decoder thread, and
    the hardware decoder a batch of its own; each grows (a reallocation, with a device sync)
    the first time its thread meets a larger image. With a shuffled dataset that first time
    lands anywhere, the measured window included. Sized for the largest image up front, they
    are allocated when the pipeline is built, during setup, and the window decodes into
    buffers that no longer grow: the steady state a long run reaches anyway.
    """

    width: int
    """Largest width seen (px): ``preallocate_width_hint`` of the hardware decoder."""
    height: int
    """Largest height seen (px): ``preallocate_height_hint``."""
    pixels: int
    """Pixels of the largest single image in whole 16x16 blocks (a JPEG's largest MCU): what
    the nvJPEG paddings are sized for."""
    files_read: int
    """Headers read: every file of a list up to 4096 long, an even sample of a longer one (a
    larger image outside the sample still grows its thread's buffer once, as with no hint)."""

    @property
    def device_memory_padding(self) -> int:
        """Bytes per thread: int16 DCT coefficients plus the 8-bit planes, 3 bytes per sample,
        3 samples per pixel (4:4:4, the worst case). NVIDIA's ImageNet figures keep the same
        3:2 device:host ratio. Never below DALI's default, never above ImageNet's."""
        return _clamp(3 * 3 * self.pixels, _DALI_DEVICE_PADDING, _IMAGENET_DEVICE_PADDING)

    @property
    def host_memory_padding(self) -> int:
        """Pinned bytes per buffer: the int16 coefficients the host Huffman decoder writes,
        2 bytes per sample, 3 samples per pixel. Never below DALI's default, never above
        ImageNet's."""
        return _clamp(2 * 3 * self.pixels, _DALI_HOST_PADDING, _IMAGENET_HOST_PADDING)


def _blocks(px: int) -> int:
    """``px`` rounded up to whole 16-px blocks."""
    return -(-px // 16) * 16


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


@functools.lru_cache(maxsize=8)
def decode_hints(files: tuple[str, ...]) -> DecodeHints | None:
    """The largest JPEG dimensions in ``files`` (cached: a sweep plans the same list again);
    None when no JPEG header could be read (DALI's defaults apply then)."""
    step = max(1, math.ceil(len(files) / _HEADER_SAMPLE))
    sample = files[::step]
    sizes = [size for size in map(jpeg_size, sample) if size is not None]
    if not sizes:
        return None
    return DecodeHints(
        width=max(w for w, _ in sizes),
        height=max(h for _, h in sizes),
        pixels=max(_blocks(w) * _blocks(h) for w, h in sizes),
        files_read=len(sample),
    )


def jpeg_size(path: str) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header; None for another format or a broken file.

    Reads the markers before the frame header only (a few hundred bytes, EXIF skipped by its
    length), so thousands of files take a fraction of a second once cached.
    """
    try:
        with open(path, "rb") as f:
            if f.read(2) != b"\xff\xd8":
                return None
            return _frame_size(f)
    except OSError:
        return None


def _frame_size(f: Any) -> tuple[int, int] | None:
    while True:
        byte = f.read(1)
        if byte != b"\xff":
            return None
        code = f.read(1)
        while code == b"\xff":  # fill bytes before a marker
            code = f.read(1)
        if not code or code[0] in (0xD9, 0xDA):  # end of image, or scan data before any frame
            return None
        if code[0] == 0x01 or 0xD0 <= code[0] <= 0xD7:  # markers without a length
            continue
        length = int.from_bytes(f.read(2), "big")
        if code[0] in _SOF_MARKERS:
            frame = f.read(5)  # precision, height, width
            if len(frame) < 5:
                return None
            return int.from_bytes(frame[3:5], "big"), int.from_bytes(frame[1:3], "big")
        if length < 2:
            return None
        f.seek(length - 2, 1)


# -- the pipeline and the stream (DALI imported from here on) ---------------------------------


def _import_dali() -> Any:
    """The DALI modules, or LoaderUnavailable with the reason (absent, or present but broken)."""
    reason = dali_available()
    if reason:
        raise LoaderUnavailable(f"loader='dali' cannot run here: {reason}")
    try:
        # DALI is optional (the dali extra): imported only when a DALI stream is built
        import nvidia.dali as dali
        import nvidia.dali.fn  # noqa: F401  (the operators, as dali.fn)
        import nvidia.dali.plugin.pytorch as dali_torch
    except ImportError as exc:  # installed but unusable (missing libraries, wrong CUDA)
        raise LoaderUnavailable(
            f"loader='dali' cannot run here: NVIDIA DALI failed to import ({exc}); "
            f"reinstall it: {INSTALL_HINT}"
        ) from exc
    return dali, dali_torch


def build_pipeline(plan: DaliPlan, *, with_source: bool = False) -> Any:
    """The DALI pipeline for ``plan``: outputs (images, labels[, source file names]).

    ``with_source`` adds each sample's file name (zero-padded bytes) so tests can check
    that file and label travel together through the shuffle.
    """
    dali, _ = _import_dali()
    fn, types = dali.fn, dali.types
    aug = plan.augment

    @dali.pipeline_def(
        batch_size=plan.batch_size,
        num_threads=plan.threads,
        device_id=plan.device_id,  # None: a CPU-only pipeline that needs no GPU at all
        prefetch_queue_depth=plan.queue_depth,
        seed=plan.seed,
    )
    def pipeline() -> tuple[Any, ...]:
        jpegs, labels = _read(fn, types, plan)
        images = _decode(fn, types, jpegs, plan)
        images = fn.resize(
            images,
            resize_x=aug.size[1],
            resize_y=aug.size[0],
            interp_type=_interp(types, aug.interpolation),
            antialias=True,
        )
        images = fn.crop_mirror_normalize(
            images,
            mirror=fn.random.coin_flip(probability=aug.flip_p) if aug.flip_p > 0 else 0,
            mean=list(aug.mean),
            std=list(aug.std),
            dtype=types.FLOAT,
            output_layout="HWC" if plan.channels_last else "CHW",
        )
        if plan.decode == "mixed":
            labels = labels.gpu()
        if with_source:
            return images, labels, fn.pad(fn.get_property(jpegs, key="source_info"))
        return images, labels

    return pipeline()


def _read(fn: Any, types: Any, plan: DaliPlan) -> tuple[Any, Any]:
    """(encoded JPEGs, labels): from the file list, or from tar shards (the ``.lbl`` member,
    8 little-endian bytes, read as an int64; shuffled through a buffer as the torch reader
    does, since shards are read in sequence)."""
    if plan.shards:
        jpegs, labels = fn.readers.webdataset(
            paths=list(plan.shards),
            ext=["jpg", "lbl"],
            dtypes=[types.UINT8, types.INT64],
            random_shuffle=True,
            initial_fill=256,
            pad_last_batch=True,
            name=_READER,
            **_shard_args(plan.shard),
        )
        return jpegs, labels
    return fn.readers.file(
        files=list(plan.files),
        labels=list(plan.labels),
        shuffle_after_epoch=True,
        pad_last_batch=True,
        name=_READER,
        **_shard_args(plan.shard),
    )


def _shard_args(shard: tuple[int, int] | None) -> dict[str, int]:
    if shard is None:
        return {}
    rank, world_size = shard
    return {"shard_id": rank, "num_shards": world_size}


def _decode(fn: Any, types: Any, jpegs: Any, plan: DaliPlan) -> Any:
    """Decode fused with RandomResizedCrop's random window (scale, ratio, 10 attempts, as
    torchvision), so only the cropped region is decoded where the format allows."""
    return fn.decoders.image_random_crop(
        jpegs,
        device=plan.decode,
        output_type=types.RGB,
        random_area=list(plan.augment.scale),
        random_aspect_ratio=list(plan.augment.ratio),
        num_attempts=10,
        **mixed_decoder_args(plan),
    )


def mixed_decoder_args(plan: DaliPlan) -> dict[str, Any]:
    """The decoder's mixed-only arguments: the hardware decoder's share and the buffer sizes
    (``DecodeHints``); empty for CPU decode, where DALI ignores them."""
    if plan.decode != "mixed":
        return {}
    args: dict[str, Any] = {"hw_decoder_load": plan.hw_decoder_load}
    if plan.hints is not None:
        args |= {
            "device_memory_padding": plan.hints.device_memory_padding,
            "host_memory_padding": plan.hints.host_memory_padding,
            "preallocate_width_hint": plan.hints.width,
            "preallocate_height_hint": plan.hints.height,
        }
    return args


def _interp(types: Any, name: str) -> Any:
    return {
        "nearest": types.INTERP_NN,
        "bilinear": types.INTERP_LINEAR,
        "bicubic": types.INTERP_CUBIC,
    }[name]


_MIB = 2**20
_T = TypeVar("_T")


class DevicePoolMeter:
    """What DALI holds on the device, read from the device's free memory around DALI's own
    actions, and DALI's pools handed back on teardown.

    DALI 2.4 has no call that reports its pools' size (its backend offers
    ``ReleaseUnusedMemory`` and ``Preallocate*Memory``, no statistics; ``executor_statistics``
    needs the old executor and covers operator outputs only), so the meter asks the driver
    (``cudaMemGetInfo``) how much free memory DALI took and gave back:

    - **build**: DALI's unused blocks are released first (a previous stream's batches that
      died after its close), then free memory is read before and after the pipeline is built
      and has produced its first batches. Nothing else runs in between: that drop is DALI's.
    - **teardown**: read, destroy the pipeline (its buffers go back to DALI's pools, not to
      the driver), ``ReleaseUnusedMemory`` (device and pinned pools give their free blocks
      back), synchronize, read: the rise is what DALI held at the end of the burst.

    Pools only grow while a pipeline runs, so the larger of the two is DALI's peak, from
    below: blocks still lent to a batch the caller holds are not given back at teardown. Where
    another process allocates or frees on the same GPU in those milliseconds the reading is
    off by that much; a drop or rise of the wrong sign reads as unknown (None), never as 0.
    A CPU pipeline (``device_id=None``) holds no device memory and reads None throughout.
    """

    def __init__(self, device_id: int | None, backend: Any) -> None:
        self.device_id = device_id
        self._backend = backend
        self.build_mib: float | None = None
        """Free device memory DALI took while its pipeline was built (MiB)."""
        self.released_mib: float | None = None
        """Free device memory DALI's teardown gave back (MiB); None until the teardown."""
        self.torn_down = False

    def build(self, make: Callable[[], _T]) -> _T:
        """``make()`` the pipeline, measuring the device memory it takes."""
        self._backend.ReleaseUnusedMemory()
        before = self._free_bytes()
        made = make()
        self.build_mib = _mib(before, self._free_bytes(), sign=-1)
        return made

    def teardown(self, destroy: Callable[[], None]) -> None:
        """``destroy()`` the pipeline, then release DALI's pools; once only."""
        if self.torn_down:
            return
        self.torn_down = True
        before = self._free_bytes()
        destroy()
        self._backend.ReleaseUnusedMemory()  # pools outlive pipelines: give their blocks back
        self.released_mib = _mib(before, self._free_bytes(), sign=+1)

    def peak_mib(self) -> float | None:
        """The larger of the two readings known so far; None where neither is."""
        known = [m for m in (self.build_mib, self.released_mib) if m is not None]
        return max(known) if known else None

    def _free_bytes(self) -> int | None:
        if self.device_id is None:
            return None
        torch.cuda.synchronize(self.device_id)  # DALI's frees and allocations have landed
        free, _total = torch.cuda.mem_get_info(self.device_id)
        return int(free)


def _mib(before: int | None, after: int | None, *, sign: int) -> float | None:
    """``sign * (after - before)`` in MiB, or None where unknown or of the wrong sign."""
    if before is None or after is None:
        return None
    delta = sign * (after - before)
    return delta / _MIB if delta >= 0 else None


class DaliStream:
    """Batches from DALI's PyTorch iterator as ``(input, target)``; a new epoch on exhaustion.

    Inputs are float32 NCHW (NHWC memory when ``channels_last``: DALI writes HWC and the
    permute is free), targets int64 of shape (batch,), as the torch loader yields them.
    With DALI's default executor the inputs are DALI's own buffers, lent through DLPack (no
    copy): device memory that torch's allocator statistics never see (``device_mem_mib``).
    """

    backend = "dali"
    batches_per_epoch = None  # DALI's reader runs its epochs: short_epochs does not apply
    epoch_handling = None

    def __init__(self, plan: DaliPlan, *, record_files: bool = False):
        dali, dali_torch = _import_dali()
        self.plan = plan
        self.decode = plan.decode
        self.on_device = plan.decode == "mixed"
        self.epochs = 0
        self.last_files: list[str] = []
        """File of each sample in the last batch (filled only with ``record_files``)."""
        self._record = record_files
        self._meter = DevicePoolMeter(plan.device_id, dali.backend)
        self._pipe: Any = None
        self._iter: Any = self._meter.build(lambda: self._build(dali_torch))

    def _build(self, dali_torch: Any) -> Any:
        """The pipeline and its iterator, which builds it and runs it to a first batch."""
        self._pipe = build_pipeline(self.plan, with_source=self._record)
        outputs = ["data", "label", *(["source"] if self._record else [])]
        return dali_torch.DALIGenericIterator(
            self._pipe,
            outputs,
            reader_name=_READER,
            last_batch_policy=dali_torch.LastBatchPolicy.DROP,
            dynamic_shape=self._record,  # file names differ in length from batch to batch
        )

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._iter is None:
            raise StopIteration  # closed
        try:
            out = next(self._iter)
        except StopIteration:
            self.epochs += 1
            self._iter.reset()
            out = next(self._iter)  # the plan checked the dataset holds a full batch
        return self._unpack(out[0])

    def _unpack(self, out: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = out["data"], out["label"].reshape(-1).long()
        if self.plan.channels_last:
            x = x.permute(0, 3, 1, 2)  # NHWC memory seen as NCHW: torch.channels_last
        if self._record:
            rows = out["source"].cpu().tolist()
            self.last_files = [bytes(r).rstrip(b"\0").decode() for r in rows]
        return x, y

    def device_mem_mib(self) -> float | None:
        """Device memory DALI's pools held at their peak in this stream (MiB, a lower bound;
        see ``DevicePoolMeter``): what building the pipeline took, and once closed the larger
        of that and what closing gave back. None for a CPU pipeline, or where unknown."""
        return self._meter.peak_mib()

    def close(self) -> None:
        """Destroy the pipeline (its threads stop) and give DALI's unused pool blocks, device
        and pinned, back to the driver; idempotent. Batches still held by the caller keep
        their blocks until they die: drop them before closing to free everything."""
        self._meter.teardown(self._destroy)

    def _destroy(self) -> None:
        """Drop the last references: the iterator's and ours (the pipeline's destructor shuts
        it down; ``nvidia.dali.Pipeline`` has no public close)."""
        self._iter = None
        self._pipe = None


def build_dali_stream(
    workload: Workload,
    knobs: Knobs,
    device: torch.device,
    shard: tuple[int, int] | None = None,
) -> DaliStream:
    """The DALI stream ``build_loader`` returns for ``loader="dali"``."""
    refuse_collate(workload, knobs)  # a knob that can never fit this workload: said first
    _import_dali()  # the clearest reason first: not installed beats anything about the data
    return DaliStream(plan_pipeline(workload, knobs, device, shard))


__all__ = [
    "INSTALL_HINT",
    "Augment",
    "DaliPlan",
    "DaliStream",
    "DecodeHints",
    "DevicePoolMeter",
    "augment_from_transform",
    "build_dali_stream",
    "build_pipeline",
    "dali_available",
    "dali_no_effect",
    "decode_hints",
    "jpeg_size",
    "mixed_decoder_args",
    "mixed_refusal",
    "plan_pipeline",
    "resolve_decode",
]
