"""engine/window: the burst window and the options every burst-running entry point takes."""

import threading

import pytest
import torch

from workbench.core.errors import InputError
from workbench.core.knobs import Knobs
from workbench.engine.window import BurstSetup, BurstWindow, prefetched_batches


@pytest.mark.parametrize(
    ("changes", "name"),
    [({"seconds": 0}, "seconds"), ({"seconds": float("nan")}, "seconds"),
     ({"seconds": True}, "seconds"), ({"min_steps": 0}, "min_steps"),
     ({"warmup_steps": -1}, "warmup_steps"), ({"warmup_steps": 1.5}, "warmup_steps")],
)  # fmt: skip
def test_a_bad_window_is_refused_naming_the_field(changes, name):
    with pytest.raises(InputError) as caught:
        BurstWindow(**changes)
    assert caught.value.name == name and "is not allowed" in str(caught.value)


def test_given_numbers_replace_the_windows_own_and_none_keeps_them():
    base = BurstWindow(seconds=2.0, min_steps=3, warmup_steps=1)
    assert BurstWindow.of(base, seconds=None, min_steps=7) == BurstWindow(
        seconds=2.0, min_steps=7, warmup_steps=1
    )
    assert BurstWindow.of(None) == BurstWindow()  # 3 s, 5 steps, 3 warm-up steps
    assert BurstWindow.of(base) is base


def test_settled_warm_up_drains_the_prefetch_queue():
    w = BurstWindow(warmup_steps=2)
    assert w.settled(Knobs(num_workers=0)) == w  # no workers, no queue
    deep = Knobs(num_workers=3, prefetch_factor=4, grad_accum=2)
    assert prefetched_batches(deep) == 12
    assert w.settled(deep).warmup_steps == 6  # 12 batches, 2 per step


def test_setup_checks_the_options_once(tmp_path):
    stop = threading.Event()
    s = BurstSetup.of("sweep", {"seconds": 0.5, "device": "cpu", "store": tmp_path / "h.sqlite",
                                "cancel": stop})  # fmt: skip
    assert s.window == BurstWindow(seconds=0.5) and s.device == torch.device("cpu")
    assert s.cancel is stop and s.store is not None and s.store.path == tmp_path / "h.sqlite"
    assert BurstSetup.of("profile_burst", {}, record=False).store is None
    with pytest.raises(TypeError, match=r"sweep\(\) got an unexpected keyword argument 'secs'"):
        BurstSetup.of("sweep", {"secs": 1})
    with pytest.raises(InputError, match="seconds=-1"):
        BurstSetup.of("sweep", {"seconds": -1})
