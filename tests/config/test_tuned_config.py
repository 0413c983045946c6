"""TunedConfig.dataset: production reads the data the way the tuned bursts read it (``images``:
tests/config/conftest.py)."""

import shutil

import pytest
import torch
from torch import nn
from torch.utils.data import IterableDataset

from workbench.config.tuned_config import TunedConfig
from workbench.core.errors import InputError
from workbench.core.knobs import KnobError, Knobs
from workbench.engine.datasets import ImageFiles
from workbench.engine.formats.manifest import FormatError


def _cfg(**knobs) -> TunedConfig:
    return TunedConfig(Knobs(batch_size=4, **knobs))


def _labels(dataset) -> list[int]:
    return sorted(label for _, label in dataset)


def test_files_are_the_folder_itself(converted_images):
    dataset = _cfg().dataset(converted_images)
    assert isinstance(dataset, ImageFiles) and len(dataset) == 8
    assert dataset.classes == sorted(p.name for p in converted_images.iterdir())


@pytest.mark.parametrize("fmt", ["shards", "lmdb", "predecoded"])
def test_a_converted_copy_holds_the_same_samples(converted_images, fmt):
    dataset = _cfg(data_format=fmt).dataset(converted_images, image_size=64)
    assert type(dataset).__name__ != "ImageFiles"
    assert _labels(dataset) == _labels(ImageFiles(converted_images))
    assert isinstance(dataset, IterableDataset) == (fmt == "shards")


def test_a_copy_not_built_names_the_command_that_builds_it(converted_images):
    with pytest.raises(KnobError, match=r"data_format.*workbench data --format predecoded "
                       r"--from .*images --resolution 256"):  # fmt: skip
        _cfg(data_format="predecoded").dataset(converted_images, image_size=224)


def test_predecoded_needs_the_crop_size(converted_images):
    with pytest.raises(InputError, match="image_size"):
        _cfg(data_format="predecoded").dataset(converted_images)


def test_a_stale_copy_is_an_error_not_old_data(converted_images, tmp_path):
    source = tmp_path / "images"
    shutil.copytree(converted_images, source)
    shutil.copytree(converted_images.parent / "images.lmdb", tmp_path / "images.lmdb")
    extra = next(p for p in (source / sorted(p.name for p in source.iterdir())[0]).iterdir())
    shutil.copy(extra, extra.with_name("added.jpg"))
    with pytest.raises(FormatError, match=r"holds 8 samples but .* has 9 now: convert again"):
        _cfg(data_format="lmdb").dataset(source)


def test_show_says_how_the_data_was_read():
    shown = _cfg(data_format="shards", cache="cold").describe()
    assert "# data: measured reading the shards copy" in shown
    assert "dataset = cfg.dataset(DIR, transform)" in shown
    assert "# data: measured with a cold page cache" in shown
    assert "# data:" not in _cfg().describe()


def _sdpa_switches() -> tuple[bool, ...]:
    b = torch.backends.cuda
    return (b.flash_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.cudnn_sdp_enabled(),
            b.math_sdp_enabled())  # fmt: skip


def test_attention_context_runs_the_tuned_kernel_alone_as_the_bursts_did():
    before = _sdpa_switches()
    with _cfg(attention="flash").attention_context("cpu"):
        assert _sdpa_switches() == (True, False, False, False)
    with _cfg().attention_context("cpu"):  # auto: every kernel, PyTorch's choice
        assert _sdpa_switches() == (True, True, True, True)
    assert _sdpa_switches() == before


def test_attention_context_warns_where_the_kernel_has_no_cpu_version():
    with pytest.warns(RuntimeWarning, match="attention=cudnn: cudnn attention has CUDA kernels "
                      "only; runs on the CPU with PyTorch's own choice"):  # fmt: skip
        context = _cfg(attention="cudnn").attention_context("cpu")
    with context:
        assert _sdpa_switches() == (True, True, True, True)


def test_show_says_how_to_keep_the_tuned_attention_kernel():
    shown = _cfg(attention="efficient").describe()
    assert (
        "# attention: measured with scaled_dot_product_attention on the efficient kernel" in shown
    )
    assert "with cfg.attention_context():" in shown
    assert "attention_context" not in _cfg().describe()


def test_pack_feeds_a_scripts_documents_as_the_bursts_were_fed():
    docs = [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10, 11]]
    packed = _cfg(packing="pack").pack(docs, 4)
    inputs, targets = packed[0]
    assert inputs["tokens"].tolist() == [1, 2, 3, 4] and inputs["docs"].tolist() == [0, 0, 0, 1]
    assert targets.tolist() == [2, 3, -100, 5]  # the first document's end is not a target
    padded = _cfg(packing="pad").pack(docs, 4)
    assert len(padded) == 3 and padded[1][0]["tokens"].tolist() == [4, 5, 0, 0]
    with pytest.raises(InputError, match="packing='off' is not allowed: pad or pack"):
        _cfg().pack(docs, 4)


def test_show_says_how_the_documents_were_fed():
    shown = _cfg(packing="pack").describe()
    assert "# packing: measured with documents packed into full rows" in shown
    assert "dataset = cfg.pack(documents, seq_len)" in shown
    assert "cfg.pack" not in _cfg().describe()


def test_wrap_model_shards_each_block_then_the_root_as_the_bursts_did(tmp_path):
    """One gloo rank in this process: production's call gives the bursts' FSDP2 model, or
    DDP with the tuned DDP knobs; without a process group it says what to call first."""
    from torch import distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from workbench.engine.sharding import sharded_units
    from workbench.engine.workloads.gpt import GPTShape, TinyGPT

    shape = GPTShape(block=16, layers=3, heads=2, width=32)
    with pytest.raises(InputError, match="init_process_group"):
        _cfg(sharding="fsdp").wrap_model(TinyGPT(shape))
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "s"), 1), rank=0,
                            world_size=1)  # fmt: skip
    try:
        cfg = _cfg(sharding="fsdp", reshard_after_forward=False, precision="bf16")
        model = cfg.wrap_model(TinyGPT(shape), "cpu")
        assert sharded_units(model) == 4  # three blocks, then the root
        assert type(model.blocks[0].qkv.weight).__name__ == "DTensor"
        kwargs = cfg.fsdp_kwargs()
        assert kwargs["reshard_after_forward"] is False
        assert kwargs["mp_policy"].param_dtype == torch.bfloat16
        ddp = _cfg(bucket_cap_mb=5.0).wrap_model(TinyGPT(shape), "cpu")
        assert isinstance(ddp, DistributedDataParallel)
        assert ddp.bucket_bytes_cap == 5 * 2**20
    finally:
        dist.destroy_process_group()


def test_show_says_how_to_keep_the_tuned_sharding():
    shown = _cfg(sharding="fsdp", world_size=2).describe()
    assert "# sharding: measured with FSDP2 (fully_shard per block, then the root" in shown
    assert "reshard_after_forward=True" in shown and "model = cfg.wrap_model(model)" in shown
    assert "wrap_model" not in _cfg(world_size=2).describe()


def test_convert_fp8_leaves_the_model_where_the_device_has_no_float8_cores():
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))
    said = "fp8=tensorwise: float8 training needs float8 tensor cores .*; this is a CPU: the model"
    with pytest.warns(RuntimeWarning, match=said + " is returned unconverted"):
        out = _cfg(precision="bf16", fp8="tensorwise").convert_fp8(model, "cpu")
    assert out is model and type(model[0]) is nn.Linear
    assert _cfg().convert_fp8(model, "cpu") is model  # fp8=off: nothing to do


def test_convert_fp8_converts_the_layers_the_bursts_converted(monkeypatch):
    pytest.importorskip("torchao")  # the dev extra installs it
    from torchao.float8.float8_linear import Float8Linear

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))
    out = _cfg(precision="bf16", fp8="rowwise").convert_fp8(model, "cuda")  # needs no GPU
    assert isinstance(out[0], Float8Linear) and type(out[2]) is nn.Linear  # the head stays


def test_show_says_how_to_keep_float8_training():
    shown = _cfg(precision="bf16", fp8="tensorwise").describe()
    assert "# fp8: measured with the Linear layers in float8 (torchao, tensorwise recipe" in shown
    assert "model = cfg.convert_fp8(model)  # before DDP and torch.compile" in shown
    assert "convert_fp8" not in _cfg().describe()
