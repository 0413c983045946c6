"""decode=gpu in production: cfg.dataloader reads stored bytes, cfg.device_batches decodes them.

This machine has no CUDA: the loader of stored bytes is asked for with ``device="cuda"`` (the
device it will feed), and ``cfg.device_batches(loader, "cpu")`` runs the burst's own
``DeviceBatches``/``DeviceImages`` on CPU tensors. ``images``: tests/config/conftest.py.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torchvision import transforms as T

from workbench.config.device_decode import DecodedBatches
from workbench.config.saved import ConfigWarning, load_config, save_config
from workbench.config.tuned_config import TunedConfig
from workbench.core.knobs import KnobError, Knobs
from workbench.engine.datasets import ImageFiles
from workbench.engine.encoded import EncodedBatch, file_bytes
from workbench.engine.loaders.device_batches import DeviceBatches
from workbench.engine.workloads.vision import train_transform

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _cfg(**knobs) -> TunedConfig:
    return TunedConfig(Knobs(batch_size=4, decode="gpu", **knobs))


def _whole_image(size: int) -> T.Compose:
    """A crop of the whole (square-clamped) image and no flip: the same pixels on either side."""
    return T.Compose([T.RandomResizedCrop(size, scale=(1.0, 1.0), ratio=(1.0, 1.0)), T.ToTensor(),
                      T.Normalize(MEAN, STD)])  # fmt: skip


def test_a_saved_config_with_decode_gpu_round_trips(tmp_path):
    path = save_config(Knobs(decode="gpu"), tmp_path / "tuned.yaml")
    assert "\n  decode: gpu\n" in path.read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        assert load_config(path).knobs.decode == "gpu"


def test_the_loader_yields_the_files_bytes_with_their_labels(converted_images):
    dataset = ImageFiles(converted_images, train_transform(32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # decode=gpu acts: nothing to warn about
        loader = _cfg().dataloader(dataset, device="cuda")
    batch = next(iter(loader))
    assert isinstance(batch, EncodedBatch) and batch.kind == "jpeg" and len(batch) == 4
    firsts = dataset.samples[:4]
    assert batch.labels.tolist() == [label for _, label in firsts]
    jpegs = batch.jpegs()
    assert all(torch.equal(j, file_bytes(p)) for j, (p, _) in zip(jpegs, firsts, strict=True))


def test_device_batches_are_the_bursts_class_and_keep_each_label_with_its_image(converted_images):
    """Shuffled: each device-decoded crop is nearest to the CPU path's decode of a file of its
    own label, so the labels travelled with their images."""
    dataset = ImageFiles(converted_images, _whole_image(32))
    cfg = _cfg()
    loader = cfg.dataloader(dataset, device="cuda", shuffle=True)
    batches = cfg.device_batches(loader, "cpu")
    assert type(batches) is DeviceBatches and batches.overlap  # what the burst measures
    cpu = torch.stack([x for x, _ in dataset])
    labels = torch.tensor([y for _, y in dataset])
    seen = 0
    for x, y in batches:
        assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
        distance = (x[:, None] - cpu[None]).abs().mean(dim=(2, 3, 4))  # batch x dataset
        best = distance.min(dim=1)
        assert best.values.max() < 0.15  # the same image, resized another way (another: >= 0.5)
        assert torch.equal(labels[best.indices], y)
        seen += len(y)
    assert seen == len(dataset)


def test_channels_last_and_the_rank_seed_reach_the_device_images(converted_images):
    cfg = _cfg(channels_last=True)
    loader = cfg.dataloader(ImageFiles(converted_images, train_transform(32)), device="cuda")
    x, _ = next(iter(cfg.device_batches(loader, "cpu")))
    assert x.is_contiguous(memory_format=torch.channels_last)
    one, other = (next(iter(cfg.device_batches(loader, "cpu", seed=s)))[0] for s in (1, 2))
    again = next(iter(cfg.device_batches(loader, "cpu", seed=1)))[0]
    assert torch.equal(one, again) and not torch.equal(one, other)


@pytest.mark.parametrize(("fmt", "kind"), [("shards", "jpeg"), ("lmdb", "jpeg"),
                                           ("predecoded", "pixels")])  # fmt: skip
def test_a_converted_copy_is_read_as_stored(converted_images, fmt, kind):
    cfg = _cfg(data_format=fmt)
    dataset = cfg.dataset(converted_images, train_transform(64), image_size=64)
    loader = cfg.dataloader(dataset, device="cuda")
    assert loader.dataset is not dataset and loader.dataset.encoded
    batch = next(iter(loader))
    assert isinstance(batch, EncodedBatch) and batch.kind == kind
    x, y = next(iter(cfg.device_batches(loader, "cpu")))
    assert x.shape == (4, 3, 64, 64) and len(y) == 4


def test_shards_keep_their_rank_share_when_read_as_bytes(converted_images):
    cfg = _cfg(data_format="shards")
    dataset = cfg.dataset(converted_images, train_transform(64), rank=1, world_size=2)
    stored = cfg.dataloader(dataset, device="cuda").dataset
    assert (stored.rank, stored.world_size, stored.seed) == (1, 2, dataset.seed)


def test_without_cuda_the_workers_decode_and_a_warning_says_why(converted_images):
    cfg = _cfg()
    with pytest.warns(ConfigWarning, match=r"decode=gpu has no effect here: nvJPEG decodes on "
                      r"a CUDA device and this loader's device is cpu"):  # fmt: skip
        loader = cfg.dataloader(ImageFiles(converted_images, train_transform(32)), device="cpu")
    x, y = next(iter(loader))
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and len(y) == 4  # decoded
    batches = cfg.device_batches(loader, "cpu")
    assert isinstance(batches, DecodedBatches)
    x2, y2 = next(iter(batches))
    assert x2.shape == (4, 3, 32, 32) and len(y2) == 4


@pytest.mark.parametrize(
    ("transform", "overrides", "says"),
    [(T.Compose([T.RandomResizedCrop(32), T.ColorJitter(0.2), T.ToTensor()]), {}, "ColorJitter"),
     (train_transform(32), {"collate_fn": torch.utils.data.default_collate},
      r"its own collate_fn \(default_collate\)")],
)  # fmt: skip
def test_what_the_device_cannot_reproduce_falls_back_with_the_reason(converted_images, transform,
                                                                     overrides, says):  # fmt: skip
    with pytest.warns(ConfigWarning, match=f"decode=gpu has no effect here: .*{says}"):
        loader = _cfg().dataloader(
            ImageFiles(converted_images, transform), device="cuda", **overrides
        )
    assert not isinstance(next(iter(loader)), EncodedBatch)


def test_a_dataset_with_no_files_to_read_is_refused_naming_decode():
    data = torch.utils.data.TensorDataset(torch.randn(8, 3, 8, 8), torch.arange(8))
    with pytest.raises(KnobError, match=r"decode='gpu' is not allowed: decode=cpu for a "
                       r"TensorDataset, which lists no image files"):  # fmt: skip
        _cfg().dataloader(data, device="cuda")


def test_decode_cpu_batches_go_to_the_device_as_tuned(converted_images):
    cfg = TunedConfig(Knobs(batch_size=4, channels_last=True))
    loader = cfg.dataloader(ImageFiles(converted_images, train_transform(32)), device="cpu")
    batches = cfg.device_batches(loader, "cpu")
    x, y = next(iter(batches))
    assert isinstance(batches, DecodedBatches) and len(batches) == len(loader)
    assert x.is_contiguous(memory_format=torch.channels_last) and y.dtype == torch.int64


def test_an_autotuned_loader_reads_bytes_too(converted_images):
    cfg = _cfg()
    loader = cfg.dataloader(ImageFiles(converted_images, train_transform(32)), autotune=True,
                            device="cuda")  # fmt: skip
    x, y = next(iter(cfg.device_batches(loader, "cpu")))
    assert isinstance(next(iter(loader.loader)), EncodedBatch)
    assert x.shape == (4, 3, 32, 32) and len(y) == 4


def test_show_says_decode_gpu_has_no_effect_with_the_workloads_collate_fn():
    shown = TunedConfig(Knobs(decode="gpu"), collate_fn="recs.data:pad").describe()
    assert ("# data: decode=gpu has no effect with the workload's own collate_fn (recs.data:pad)"
            in shown)  # fmt: skip
    assert "collate_encoded" not in shown and "device_batches" not in shown


def test_the_default_seed_follows_torch_and_differs_by_rank_and_by_call(
    converted_images, monkeypatch
):
    cfg = _cfg()
    loader = cfg.dataloader(ImageFiles(converted_images, train_transform(32)), device="cuda")

    def crops(seed_torch: int | None, rank: str) -> torch.Tensor:
        monkeypatch.setenv("RANK", rank)
        if seed_torch is not None:
            torch.manual_seed(seed_torch)
        return next(iter(cfg.device_batches(loader, "cpu")))[0]

    first = crops(0, "0")
    assert torch.equal(first, crops(0, "0"))  # reproducible under torch.manual_seed
    assert not torch.equal(first, crops(0, "1"))  # each rank its own crops
    assert not torch.equal(first, crops(None, "0"))  # a second call (an epoch): new crops
