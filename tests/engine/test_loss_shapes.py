"""A loss that compares an output and a target of different shapes by broadcasting trains the
wrong thing without an error: a burst says so once, at set-up, with both shapes; and a collate
that leaves its items unstacked is told to stack them."""

import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

from workbench import Knobs, Workload, run_burst
from workbench.engine.batches import BatchError, sample_rule
from workbench.engine.workloads.checks import WorkloadWarning, loss_broadcast_misfit

FAST = {"seconds": 0.05, "warmup_steps": 1, "min_steps": 2, "record": False, "device": "cpu"}


def _regression(loss) -> Workload:
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
    return Workload(name="reg", model=lambda: nn.Linear(8, 1),  # output [B, 1]
                    dataset=lambda: TensorDataset(x, x[:, 0]), loss=loss)  # target [B]  # fmt: skip


def _sq(output, target):
    return ((output - target) ** 2).mean()  # broadcasts silently: torch warns nothing


@pytest.mark.parametrize("loss", [F.mse_loss, _sq])
def test_a_broadcasting_loss_is_a_workload_warning_with_both_shapes(loss):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = run_burst(_regression(loss), Knobs(batch_size=16), **FAST)
    ours = [str(w.message) for w in caught if w.category is WorkloadWarning]
    assert r.ok and len(ours) == 1
    assert "output [16, 1] with the target [16] by broadcasting them to [16, 16]" in ours[0]
    assert ours[0] in r.notes


def test_shapes_that_agree_or_class_indices_say_nothing():
    out, labels = torch.zeros(16, 10), torch.zeros(16, dtype=torch.long)
    assert loss_broadcast_misfit(out, labels, []) is None  # cross-entropy's [B, C] and [B]
    assert loss_broadcast_misfit(torch.zeros(16), torch.zeros(16), []) is None
    assert loss_broadcast_misfit(torch.zeros(16, 1), torch.zeros(16, 1), []) is None
    said = ["Using a target size (torch.Size([16])) that is different to the input size "
            "(torch.Size([16, 1])). This will likely lead to incorrect results due to "
            "broadcasting."]  # fmt: skip
    assert "[16, 16]" in loss_broadcast_misfit(torch.zeros(16, 1), torch.zeros(16), said)


def test_a_list_of_per_item_dicts_is_told_to_stack_them_in_the_collate():
    items = [{"image": torch.zeros(3, 8, 8), "meta": torch.zeros(5)} for _ in range(4)]
    with pytest.raises(BatchError) as caught:
        sample_rule((items, torch.zeros(4)))
    said = str(caught.value)
    assert said.startswith("input is a list of 4 per-item dicts (keys image, meta)")
    assert "torch.stack([item[k] for item in items])" in said and "samples_of" not in said
    stacked = {"image": torch.zeros(4, 3, 8, 8), "meta": torch.zeros(4, 5)}
    assert sample_rule((stacked, torch.zeros(4))).count((stacked, torch.zeros(4))) == 4
