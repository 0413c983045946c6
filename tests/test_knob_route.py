"""benchmarks/knob_route.py: the knobs' route through a burst, counted; and the route itself
held to issue 39's targets, so a module that starts re-asking the raw knobs is caught."""

import pytest
from benchmark_modules import load_benchmark


@pytest.fixture(scope="module")
def route():
    return load_benchmark("knob_route")


def test_calls_collapse_into_stays_and_count_returns_and_climbs(route):
    calls = ["distributed/dispatch.py:run_burst", "engine/plan.py:plan_burst",
             "engine/plan.py:_no_effect", "core/knobs.py:x", "engine/plan.py:y",
             "engine/burst.py:z", "engine/plan.py:w"]  # fmt: skip
    r = route.count(calls)
    assert r.path == ["distributed/dispatch.py", "engine/plan.py", "core/knobs.py",
                      "engine/plan.py", "engine/burst.py", "engine/plan.py"]  # fmt: skip
    assert (r.stays, r.rooms, r.returns) == (6, 4, 2)
    assert r.climbs == 1  # core back up to the engine; dispatch down to the engine is not one
    assert r.entries["engine/plan.py"] == 3


def test_only_calls_handed_the_knobs_are_followed(route):
    from workbench.core.knobs import Knobs

    class Holder:
        knobs = Knobs()

    def handed(k, other=1):
        return route.holds_knobs(__import__("sys")._getframe(), Knobs)

    assert handed(Knobs()) and handed(Holder()) and not handed(3)


def test_a_cpu_burst_decides_each_knob_once(route):
    r = route.follow("cnn", {"batch_size": 8})
    assert r.entries.get("engine/training.py", 0) <= 2, r.path
    assert r.returns <= 20 and r.climbs <= 3, r.path
    assert r.path[0] == "distributed/dispatch.py" and "engine/plan.py" in r.path
