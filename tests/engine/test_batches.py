"""Batches of any shape (issue 14): nested batches, the forward hook, the raw-output loss,
collate_fn in every loader, the early check and its message."""

import collections
import functools
import itertools
import json
import typing
from collections import UserDict

import pytest
import torch
from torch import nn
from workloads_for_tests import (
    BagNet,
    KeywordNet,
    Ratings,
    RecNet,
    bag_collate,
    bag_collate_skip_empty,
    count_users,
    dict_input_workload,
    dict_items_workload,
    rec_forward,
    rec_loss,
    recommender_workload,
    tensor_workload,
)

from workbench import Knobs, Workload, run_burst
from workbench.core.results import BurstResult
from workbench.engine.batches import (
    BatchError,
    count_samples,
    describe_batch,
    flop_rows,
    move_batch,
    sample_rule,
    split_batch,
)
from workbench.engine.coordinator import Solo
from workbench.engine.training import build_train_state, count_flops_live
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


def test_tensors_that_agree_count_and_a_0d_tensor_has_no_batch_dimension():
    assert count_samples((torch.zeros(8, 3), torch.zeros(8))) == 8
    assert count_samples({"scale": torch.tensor(2.0), "ids": torch.zeros(5, 7)}) == 5
    assert sample_rule((torch.zeros(8, 3), torch.zeros(8))).source == "all tensors"
    with pytest.raises(BatchError, match=r"no tensor with a batch dimension.*samples_of"):
        count_samples({"text": ["a", "b"]})


def test_the_flop_rows_are_two_samples_where_every_tensor_agrees():
    batch = {"ids": torch.zeros(64, 32, dtype=torch.long), "scale": torch.tensor(2.0)}
    rows, samples = flop_rows(batch, sample_rule(batch), meta=True)
    assert samples == 2 and rows["ids"].shape == (2, 32) and rows["ids"].device.type == "meta"
    assert rows["scale"].shape == ()  # no batch dimension: kept whole


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


# --- samples counted from what the batch proves (issue 25) ---


@functools.cache
def _ratings() -> Ratings:
    return Ratings()


def _rec_batch(n: int = 256, keys: tuple[str, ...] = ("items", "offsets", "users")):
    """The recommender's collated batch, its input's keys in the order given."""
    inputs, rating = bag_collate([_ratings()[i] for i in range(n)])
    return {k: inputs[k] for k in keys}, rating


def test_disagreeing_dims_are_decided_by_the_target_whatever_the_key_order():
    for keys in itertools.permutations(("items", "offsets", "users")):
        batch = _rec_batch(keys=keys)
        assert batch[0]["items"].shape[0] > 256  # the flattened bags: ~26 ids a user
        rule = sample_rule(batch)
        assert (rule.source, rule.count(batch), rule.sliceable) == ("target", 256, False)


def test_the_target_decides_only_when_its_own_tensors_agree():
    x = torch.zeros(8, 3)
    rule = sample_rule(((x, torch.zeros(40)), (torch.zeros(8), torch.zeros(8, 2))))
    assert rule.source == "target" and rule.path == (1, 0)
    with pytest.raises(BatchError, match="the target's own tensors disagree too") as err:
        sample_rule((torch.zeros(40), (torch.zeros(8), torch.zeros(3))))
    assert "target[1] 3" in str(err.value)
    with pytest.raises(BatchError, match="the target has no tensor with a batch dimension"):
        sample_rule(((torch.zeros(40), x), ["a"] * 8))


def test_a_batch_nothing_decides_is_refused_with_its_structure_and_the_hook():
    batch = {"ids": torch.zeros(64, 32, dtype=torch.long), "table": torch.zeros(10, 4)}
    with pytest.raises(BatchError) as err:
        sample_rule(batch)
    message = str(err.value)
    assert 'leading dimensions disagree (batch["ids"] 64, batch["table"] 10)' in message
    assert "a dict batch is input and target at once" in message
    assert describe_batch(batch) in message
    assert message.endswith("e.g. Workload(..., samples_of=lambda batch: len(batch['table']))")
    rule = sample_rule(batch, samples_of=lambda b: len(b["ids"]))
    assert (rule.source, rule.count(batch)) == ("samples_of", 64)


def test_the_hook_always_wins_and_is_checked_on_the_first_batch():
    batch = (torch.zeros(8, 3), torch.zeros(8))
    rule = sample_rule(batch, samples_of=lambda b: 4)  # e.g. pairs of rows are one sample
    assert (rule.source, rule.count(batch), rule.sliceable) == ("samples_of", 4, False)
    assert sample_rule(_rec_batch(), samples_of=count_users).count(_rec_batch(100)) == 100
    for wrong in (0, "8", 8.0, True):
        with pytest.raises(BatchError, match=f"samples_of returned {wrong!r} .* an int >= 1"):
            sample_rule(batch, samples_of=lambda b, wrong=wrong: wrong)
    with pytest.raises(BatchError, match=r"samples_of failed on the first batch \(TypeError"):
        sample_rule(batch, samples_of=lambda b: b["users"])


def test_the_rule_of_the_first_batch_counts_batches_of_any_size():
    rule = sample_rule(_rec_batch(256))
    assert [rule.count(_rec_batch(n)) for n in (256, 100, 1)] == [256, 100, 1]
    agree = sample_rule((torch.zeros(8, 3), torch.zeros(8)))
    assert agree.path == (1,)  # the target's: an input's length may agree by chance only once
    assert agree.count((torch.zeros(5, 3), torch.zeros(5))) == 5
    with pytest.raises(BatchError, match=r"no tensor with a batch dimension at target.*samples_of"):
        agree.count((torch.zeros(5, 3), ["a"] * 5))


def test_flops_per_sample_of_the_flattened_batch_are_one_samples_flops():
    from torch.utils.flop_counter import FlopCounterMode

    wl = recommender_workload()
    with torch.device("meta"):
        model = RecNet()
    inputs, rating = move_batch(bag_collate([_ratings()[3]]), torch.device("meta"))
    with FlopCounterMode(display=False) as one:  # one user, counted by hand
        rec_loss(rec_forward(model, inputs), rating).backward()
    per_sample = one.get_total_flops()
    assert per_sample == 3 * 2 * (64 * 64 + 64 * 1)  # the MLP's matmuls, forward and backward
    assert count_train_flops(wl, _rec_batch()) == pytest.approx(per_sample)
    assert count_train_flops(wl, _rec_batch(keys=("users", "items", "offsets"))) == pytest.approx(
        per_sample
    )
    # the live count (for models meta cannot run) divides by the same samples
    state = build_train_state(wl, Knobs(), torch.device("cpu"), wrap=Solo().wrap_model)
    batch = _rec_batch()
    assert count_flops_live(state, batch, sample_rule(batch)) == pytest.approx(per_sample)
    rows, samples = flop_rows(batch, sample_rule(batch), meta=True)
    assert samples == 256 and rows[0]["items"].shape == batch[0]["items"].shape  # no slice


def test_samples_of_is_checked_when_the_workload_is_made():
    with pytest.raises(
        TypeError,
        match=r"samples_of=3 is not allowed: a function or None \(samples_of\(batch\) -> the",
    ):
        recommender_workload(samples_of=3)
    with pytest.raises(TypeError, match=r"extras\['samples_of'\] is never used"):
        recommender_workload(extras={"samples_of": count_users})


def test_a_recommender_burst_counts_its_users_and_says_by_which_tensor():
    r = run_burst(recommender_workload(), Knobs(batch_size=256), **FAST)
    assert r.ok, r.error
    assert r.samples_from == "target" and r.samples == r.steps * 256
    assert r.flops_per_sample == 3 * 2 * (64 * 64 + 64 * 1)
    doc = json.loads(r.to_json())
    assert doc["samples_from"] == "target"
    assert BurstResult.from_dict(doc).samples_from == "target"
    hooked = run_burst(recommender_workload(samples_of=count_users), Knobs(batch_size=256), **FAST)
    assert hooked.ok and hooked.samples_from == "samples_of"
    assert hooked.samples == hooked.steps * 256
    compute = run_burst(recommender_workload(), Knobs(batch_size=256, loader="synthetic"), **FAST)
    assert (
        compute.ok and compute.samples_from == "target" and compute.samples == compute.steps * 256
    )


def test_the_dicts_key_order_no_longer_changes_the_count():
    def users_first(items):
        inputs, rating = bag_collate(items)
        return {k: inputs[k] for k in ("users", "offsets", "items")}, rating

    for collate in (bag_collate, users_first):
        r = run_burst(recommender_workload(collate_fn=collate), Knobs(batch_size=256), **FAST)
        assert r.ok and (r.samples_from, r.samples) == ("target", r.steps * 256), r.error


def test_batches_of_varying_size_count_what_each_holds():
    RecNet.seen.clear()
    wl = recommender_workload(collate_fn=bag_collate_skip_empty)  # drops users with no items
    r = run_burst(wl, Knobs(batch_size=256), **FAST)
    assert r.ok, r.error
    trained = RecNet.seen[-r.steps :]  # the window's steps are the last training forwards
    assert r.samples == sum(trained) and r.samples < r.steps * 256


def test_a_batch_nothing_decides_fails_in_set_up_naming_samples_of():
    def flat(items):  # variable-length tokens flattened beside their lengths, in one dict
        tokens = [torch.arange(3 + i % 4) for i, _ in enumerate(items)]
        return {"tokens": torch.cat(tokens), "lengths": torch.tensor([len(t) for t in tokens]),
                "label": torch.tensor([label for _, label in items])}  # fmt: skip

    items = [(torch.zeros(1), i % 2) for i in range(32)]
    wl = Workload(name="flat", model=KeywordNet, dataset=lambda: items, collate_fn=flat)
    r = run_burst(wl, Knobs(batch_size=8), **FAST)
    assert r.status == "error" and r.steps == 0 and r.warmup_s is None
    assert r.error.startswith("BatchError: cannot tell how many samples this batch holds")
    assert "samples_of=lambda batch: len(batch['lengths'])" in r.error
    assert r.samples_from is None
