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
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from workbench.knobs import Knobs
from workbench.loaders import LoaderUnavailable, check_batch_fits
from workbench.workloads import Workload

INSTALL_HINT = "install the `dali` extra (pip install 'workbench[dali]')"
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
    default = Knobs()
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


def plan_pipeline(
    workload: Workload,
    knobs: Knobs,
    device: torch.device,
    shard: tuple[int, int] | None = None,
) -> DaliPlan:
    """Decide the pipeline for this workload and these knobs; refuse what cannot run, saying why.

    ``shard=(rank, world_size)``: this rank's slice in a DDP job, as DistributedSampler gives.
    """
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
    )


def _device_id(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _file_list(dataset: Any, workload: Workload) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(files, labels) exactly as the torch dataset pairs them: its ``samples`` list (what
    ImageFolder and ImageFiles keep), else ImageFolder order over ``workload.image_dir``."""
    samples = getattr(dataset, "samples", None)
    if not _is_file_list(samples):
        from workbench.data import ImageFiles

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


# -- the pipeline and the stream (DALI imported from here on) ---------------------------------


def _import_dali() -> Any:
    """The DALI modules, or LoaderUnavailable with the reason (absent, or present but broken)."""
    reason = dali_available()
    if reason:
        raise LoaderUnavailable(f"loader='dali' cannot run here: {reason}")
    try:
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
        jpegs, labels = fn.readers.file(
            files=list(plan.files),
            labels=list(plan.labels),
            shuffle_after_epoch=True,
            pad_last_batch=True,
            name=_READER,
            **_shard_args(plan.shard),
        )
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


def _shard_args(shard: tuple[int, int] | None) -> dict[str, int]:
    if shard is None:
        return {}
    rank, world_size = shard
    return {"shard_id": rank, "num_shards": world_size}


def _decode(fn: Any, types: Any, jpegs: Any, plan: DaliPlan) -> Any:
    """Decode fused with RandomResizedCrop's random window (scale, ratio, 10 attempts, as
    torchvision), so only the cropped region is decoded where the format allows."""
    extra = {"hw_decoder_load": plan.hw_decoder_load} if plan.decode == "mixed" else {}
    return fn.decoders.image_random_crop(
        jpegs,
        device=plan.decode,
        output_type=types.RGB,
        random_area=list(plan.augment.scale),
        random_aspect_ratio=list(plan.augment.ratio),
        num_attempts=10,
        **extra,
    )


def _interp(types: Any, name: str) -> Any:
    return {
        "nearest": types.INTERP_NN,
        "bilinear": types.INTERP_LINEAR,
        "bicubic": types.INTERP_CUBIC,
    }[name]


class DaliStream:
    """Batches from DALI's PyTorch iterator as ``(input, target)``; a new epoch on exhaustion.

    Inputs are float32 NCHW (NHWC memory when ``channels_last``: DALI writes HWC and the
    permute is free), targets int64 of shape (batch,), as the torch loader yields them.
    """

    backend = "dali"

    def __init__(self, plan: DaliPlan, *, record_files: bool = False):
        _, dali_torch = _import_dali()
        self.plan = plan
        self.decode = plan.decode
        self.on_device = plan.decode == "mixed"
        self.epochs = 0
        self.last_files: list[str] = []
        """File of each sample in the last batch (filled only with ``record_files``)."""
        self._record = record_files
        self._pipe = build_pipeline(plan, with_source=record_files)
        outputs = ["data", "label", *(["source"] if record_files else [])]
        self._iter: Any = dali_torch.DALIGenericIterator(
            self._pipe,
            outputs,
            reader_name=_READER,
            last_batch_policy=dali_torch.LastBatchPolicy.DROP,
            dynamic_shape=record_files,  # file names differ in length from batch to batch
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

    def close(self) -> None:
        """Free the pipeline now: its threads (and GPU buffers) go when it is deleted."""
        self._iter = None
        self._pipe = None


def build_dali_stream(
    workload: Workload,
    knobs: Knobs,
    device: torch.device,
    shard: tuple[int, int] | None = None,
) -> DaliStream:
    """The DALI stream ``build_loader`` returns for ``loader="dali"``."""
    _import_dali()  # the clearest reason first: not installed beats anything about the data
    return DaliStream(plan_pipeline(workload, knobs, device, shard))


__all__ = [
    "INSTALL_HINT",
    "Augment",
    "DaliPlan",
    "DaliStream",
    "augment_from_transform",
    "build_dali_stream",
    "build_pipeline",
    "dali_available",
    "dali_no_effect",
    "mixed_refusal",
    "plan_pipeline",
    "resolve_decode",
]
