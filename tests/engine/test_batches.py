"""Batches of any shape (issue 14): nested batches, the forward hook, the raw-output loss,
collate_fn in every loader, the early check and its message."""

import collections
import typing
from collections import UserDict

import pytest
import torch
from torch import nn
from workloads_for_tests import (
    BagNet,
    KeywordNet,
    dict_input_workload,
    dict_items_workload,
    tensor_workload,
)

from workbench import Knobs, Workload, run_burst
from workbench.engine.batches import (
    BatchError,
    count_samples,
    describe_batch,
    move_batch,
    shape_sample,
    split_batch,
)
from workbench.engine.workloads import count_train_flops

FAST = {"seconds": 0.3, "warmup_steps": 1, "record": False}


class Pair(typing.NamedTuple):
    image: torch.Tensor
    ids: torch.Tensor


class Encoding(UserDict):
    """A mapping that is not a dict, as transformers' BatchEncoding."""


def test_move_batch_reaches_every_leaf_and_keeps_the_containers():
    pair = Pair(torch.zeros(4, 3, 8, 8), torch.zeros(4, 3, 8, 8, dtype=torch.long))
    batch = (Encoding(ids=torch.zeros(4, 3, dtype=torch.long), text=["a"] * 4), [pair])
    moved = move_batch(batch, torch.device("meta"), channels_last=True)
    enc, (pair,) = moved
    assert isinstance(enc, Encoding) and isinstance(pair, Pair)
    assert enc["ids"].device.type == "meta" and enc["text"] == ["a"] * 4  # non-tensors kept
    assert pair.image.is_contiguous(memory_format=torch.channels_last)
    assert not pair.ids.is_contiguous(memory_format=torch.channels_last)  # integers stay NCHW


def test_samples_come_from_the_first_leaf_with_a_batch_dimension():
    assert count_samples((torch.zeros(8, 3), torch.zeros(8))) == 8
    assert count_samples({"scale": torch.tensor(2.0), "ids": torch.zeros(5, 7)}) == 5
    with pytest.raises(BatchError, match="no tensor with a batch dimension"):
        count_samples({"text": ["a", "b"]})


def test_the_flop_sample_cuts_batch_rows_only():
    batch = {"ids": torch.zeros(64, 32, dtype=torch.long), "table": torch.zeros(10, 4)}
    sample = shape_sample(batch)
    assert sample["ids"].shape == (2, 32) and sample["ids"].device.type == "meta"
    assert sample["table"].shape == (10, 4)  # no batch dimension: kept whole


def test_describe_and_split_say_what_the_batch_is():
    batch = ({"input_ids": torch.zeros(8, 32, dtype=torch.long)}, torch.zeros(8))
    assert describe_batch(batch) == "tuple (dict {input_ids: int64[8, 32]}, float32[8])"
    assert split_batch({"a": 1}) == ({"a": 1}, {"a": 1})  # a dict is input and target
    with pytest.raises(BatchError, match=r"tuple \(float32\[2\], float32\[2\], float32\[2\]\)"):
        split_batch((torch.zeros(2), torch.zeros(2), torch.zeros(2)))


def test_a_dict_input_through_the_forward_hook_trains_and_counts_samples():
    r = run_burst(dict_input_workload(forward=lambda m, b: m(**b)), Knobs(batch_size=8), **FAST)
    assert r.ok, r.error
    assert r.samples == r.steps * 8 and r.samples_per_s > 0
    # the same layers as tensor_workload's model: FLOPs counted on meta through the hook
    flat = count_train_flops(tensor_workload(), torch.zeros(8, 16), torch.zeros(8).long())
    assert r.flops_per_sample == pytest.approx(flat)


def test_a_dict_the_model_cannot_take_fails_in_set_up_with_the_fix():
    KeywordNet.calls.clear()
    r = run_burst(dict_input_workload(), Knobs(batch_size=8), **FAST)
    assert r.status == "error" and r.steps == 0 and r.warmup_s is None  # before any step
    assert r.error.startswith("BatchMismatch: the model cannot take this batch")
    assert "(dict {x: float32[8, 16], scale: float32[8]}, int64[8])" in r.error
    assert r.error.endswith("pass forward=lambda model, batch: model(**batch)")
    assert KeywordNet.calls == []  # model(dict) failed before the model saw a tensor


def test_a_tuple_input_is_told_to_unpack_it():
    def tuple_items():
        x = torch.randn(32, 16)
        return [((x[i], x[i]), 0) for i in range(32)]

    wl = Workload(name="tuple", model=KeywordNet, dataset=tuple_items)
    r = run_burst(wl, Knobs(batch_size=8), **FAST)
    assert r.status == "error" and "pass forward=lambda model, batch: model(*batch)" in r.error
    fixed = Workload(name="tuple", model=KeywordNet, dataset=tuple_items,
                     forward=lambda m, b: m(b[0], b[1][:, 0]))  # fmt: skip
    assert run_burst(fixed, Knobs(batch_size=8), **FAST).ok


def test_dict_items_a_logits_output_and_a_padding_collate_in_every_loader():
    for knobs in (Knobs(batch_size=8), Knobs(batch_size=8, num_workers=2),
                  Knobs(batch_size=8, loader="synthetic")):  # fmt: skip
        BagNet.lengths.clear()
        r = run_burst(dict_items_workload(), knobs, **FAST)
        assert r.ok, (knobs, r.error)  # default collate cannot stack the varied lengths
        assert r.samples == r.steps * 8 and r.flops_per_sample > 0
        assert set(BagNet.lengths) <= {3, 4, 5, 6, 7} and max(BagNet.lengths) == 7


def test_without_its_collate_the_same_data_fails_before_the_window():
    r = run_burst(dict_items_workload(collate_fn=None), Knobs(batch_size=8), **FAST)
    assert r.status == "error" and r.steps == 0 and "stack" in r.error


def test_the_default_loss_reads_logits_and_a_wrong_loss_is_told_the_fix():
    ok = dict_items_workload(loss=Workload.__dataclass_fields__["loss"].default,
                             dataset=lambda: [({"tokens": torch.arange(4)}, i % 2)
                                              for i in range(32)],
                             collate_fn=None, forward=lambda m, b: m(b["tokens"]))  # fmt: skip
    assert run_burst(ok, Knobs(batch_size=8), **FAST).ok  # cross-entropy of out.logits
    wrong = dict_items_workload(loss=lambda out, batch: nn.functional.cross_entropy(out, batch))
    r = run_burst(wrong, Knobs(batch_size=8), **FAST)
    assert r.status == "error" and r.error.startswith("BatchMismatch: the loss cannot take")
    assert "pass loss=lambda out, batch: F.cross_entropy(out.logits, batch['label'])" in r.error


def test_channels_last_turns_only_float_images_nhwc():
    seen: list[tuple[bool, bool]] = []

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 2, 3)

        def forward(self, image, mask):
            cl = torch.channels_last
            seen.append(
                (image.is_contiguous(memory_format=cl), mask.is_contiguous(memory_format=cl))
            )
            return self.conv(image).mean(dim=(2, 3))

    images = torch.randn(16, 3, 8, 8)
    items = [({"image": images[i], "mask": torch.ones(2, 8, 8, dtype=torch.long)}, 0)
             for i in range(16)]  # fmt: skip
    wl = Workload(name="cl", model=Net, dataset=lambda: items, forward=lambda m, b: m(**b))
    assert run_burst(wl, Knobs(batch_size=4, channels_last=True), **FAST).ok
    assert seen and set(seen) == {(True, False)}


def test_the_dali_loader_refuses_a_custom_collate_by_name():
    r = run_burst(dict_items_workload(), Knobs(batch_size=8, loader="dali"), **FAST)
    assert r.status == "error" and r.bad_knob == "loader"
    assert "collate_fn (pad_tokens)" in r.error


def test_a_collate_in_extras_is_refused_not_ignored():
    with pytest.raises(TypeError, match=r"extras\['collate_fn'\] is never used"):
        Workload(name="x", model=nn.Identity, dataset=list, extras={"collate_fn": print})
    with pytest.raises(TypeError, match="collate_fn=3 is not allowed"):
        Workload(name="x", model=nn.Identity, dataset=list, collate_fn=3)


def test_an_ordered_dict_keeps_its_type_on_the_device():
    batch = collections.OrderedDict(a=torch.zeros(2, 3))
    assert isinstance(move_batch(batch, torch.device("cpu")), collections.OrderedDict)
