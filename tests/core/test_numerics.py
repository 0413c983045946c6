"""workbench.core.numerics: every knob says what it may change in the loss."""

import pytest

from workbench.core import numerics
from workbench.core.knobs import KNOB_NAMES


def test_every_knob_has_a_numeric_class_and_nothing_else_does():
    assert set(numerics.classes()) == set(KNOB_NAMES)
    assert set(numerics.classes().values()) <= set(numerics.NUMERIC_CLASSES)


@pytest.mark.parametrize(("knob", "kind"), [
    ("num_workers", "bit-identical"), ("pin_memory", "bit-identical"), ("nccl", "bit-identical"),
    ("bucket_cap_mb", "bit-identical"), ("precision", "rounding"), ("compile", "rounding"),
    ("attention", "rounding"), ("channels_last", "rounding"), ("fp8", "rounding"),
    ("optimizer_impl", "rounding"), ("batch_size", "optimisation"), ("grad_accum", "optimisation"),
])  # fmt: skip
def test_the_issue_s_classes(knob, kind):
    assert numerics.numeric_class(knob) == kind
    assert kind in numerics.tooltip_line(knob)


def test_an_nccl_variable_that_reorders_the_sums_is_rounding_the_others_are_not():
    assert numerics.change_class("nccl", {}, {"NCCL_ALGO": "Tree"}) == "rounding"
    assert numerics.change_class("nccl", {}, {"NCCL_BUFFSIZE": "8388608"}) == "bit-identical"
    assert numerics.change_class("nccl", {"NCCL_PROTO": "LL"}, {}) == "rounding"
    assert numerics.loosest(["bit-identical", "rounding", "optimisation"]) == "optimisation"
    assert numerics.loosest([]) == "bit-identical"
