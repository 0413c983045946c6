"""``source_names``: how a burst result says, by name, what another process must import to
rebuild the run (the workload's factory, collate_fn, loss and optimizer)."""

from __future__ import annotations

import functools

import torch
from rebuild_for_tests import adamw, bce, make_baskets, pad_items
from workloads_for_tests import tensor_workload

from workbench.core.knobs import Knobs
from workbench.distributed.dispatch import run_burst
from workbench.engine.workloads import Workload, resolve_workload, source_names

BASKETS = "rebuild_for_tests:make_baskets"


def test_a_module_workload_is_named_by_its_factory_and_its_functions():
    assert source_names(resolve_workload(BASKETS)) == {
        "workload": BASKETS,
        "collate_fn": "rebuild_for_tests:pad_items",
        "loss": "rebuild_for_tests:bce",
        "optimizer": "rebuild_for_tests:adamw",
    }
    made_here = source_names(make_baskets())  # built by hand: no factory name to give
    assert made_here["workload"] is None and made_here["loss"] == "rebuild_for_tests:bce"


def test_the_defaults_are_named_as_workbench_functions():
    names = source_names(tensor_workload())
    assert names["collate_fn"] is None  # torch's default collate
    assert names["loss"] == "workbench.engine.workloads.base:default_loss"
    assert names["optimizer"] == "workbench.engine.workloads.base:default_optimizer"


def _in_main(items):
    return items


_in_main.__module__ = "__main__"


def _renamed(items):
    return items


_renamed.__qualname__ = "pad_items"  # spells a name that imports another function


def test_functions_without_an_importable_name_are_spelled_for_the_reader_to_refuse():
    base = tensor_workload()

    def nested(output, target):
        return bce(output, target)

    wl = Workload(name="x", model=base.model, dataset=base.dataset,
                  collate_fn=lambda items: items, loss=nested,
                  optimizer=functools.partial(torch.optim.SGD, lr=0.1))  # fmt: skip
    names = source_names(wl)
    assert names["collate_fn"].endswith(".<locals>.<lambda>")
    assert names["loss"].endswith(".<locals>.nested")
    assert names["optimizer"] == "<partial object>"
    more = Workload(name="y", model=base.model, dataset=base.dataset, collate_fn=_in_main,
                    loss=torch.nn.CrossEntropyLoss(), optimizer=adamw)  # fmt: skip
    assert source_names(more)["collate_fn"] == "__main__:_in_main"
    assert source_names(more)["loss"] == "<CrossEntropyLoss object>"
    renamed = Workload(name="z", model=base.model, dataset=base.dataset, collate_fn=_renamed)
    assert _renamed is not pad_items
    assert source_names(renamed)["collate_fn"] == "<function object>"


def test_a_burst_result_carries_the_names():
    r = run_burst(BASKETS, Knobs(batch_size=8), seconds=0.2, warmup_steps=1, record=False)
    assert r.ok, r.error
    assert r.workload == "baskets"  # the display name, as before
    assert r.workload_source == source_names(resolve_workload(BASKETS))
    assert type(r).from_dict(r.to_dict()).workload_source == r.workload_source  # history
