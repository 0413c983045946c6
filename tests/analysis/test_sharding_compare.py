"""compare_sharding: the cases it runs, its rows and table, and where it cannot run (the real
two-rank FSDP burst is tests/distributed/test_jobs.py's)."""

import pytest

from workbench.analysis.sharding_compare import SHARDING_CASES, compare_sharding, held_mib
from workbench.core.errors import InputError
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult

HELD = {"ddp": (10.0, 10.0, 20.0), "fsdp": (5.0, 5.0, 10.0)}  # two ranks: half of each


class _Recorded:
    """Stands in for run_burst: what it was asked, and a result with what a rank holds."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Knobs, dict]] = []

    def __call__(self, workload, knobs, **options) -> BurstResult:
        self.asked.append((workload, knobs, options))
        params, grads, state = HELD[knobs.sharding]
        fast = 100.0 if knobs.sharding == "ddp" else 40.0
        return BurstResult(workload=workload, knobs=knobs, samples_per_s=fast,
                           peak_mem_mib=90.0 + params, param_mib_per_rank=params,
                           grad_mib_per_rank=grads, optimizer_state_mib_per_rank=state)  # fmt: skip


def test_each_case_runs_the_base_with_its_sharding_knobs_on_the_ranks_asked():
    run = _Recorded()
    base = Knobs(batch_size=8, precision="bf16")
    c = compare_sharding("gpt:124m", base, world_size=4, device="cpu", run=run, seconds=1.0)
    assert [k.sharding for _, k, _ in run.asked] == ["ddp", "fsdp", "fsdp"]
    assert [k.reshard_after_forward for _, k, _ in run.asked] == [True, True, False]
    assert all(k.world_size == 4 and k.batch_size == 8 and k.precision == "bf16"
               for _, k, _ in run.asked)  # fmt: skip
    assert run.asked[0][2]["seconds"] == 1.0 and str(run.asked[0][2]["device"]) == "cpu"
    assert [case for case, _ in SHARDING_CASES] == list(c.results)


def test_rows_say_what_each_rank_holds_and_how_much_less_than_ddp():
    c = compare_sharding("gpt", world_size=2, device="cpu", run=_Recorded())
    rows = {row["case"]: row for row in c.rows()}
    assert rows["ddp"]["held_mib_per_rank"] == 40.0 and rows["ddp"]["held_saved_pct"] == 0.0
    assert rows["fsdp"]["held_mib_per_rank"] == 20.0
    assert rows["fsdp-kept"]["held_saved_pct"] == pytest.approx(50.0)
    assert list(c.frame()["case"]) == ["ddp", "fsdp", "fsdp-kept"]
    text = c.table().splitlines()
    assert text[0] == "gpt on 2 ranks"
    assert text[2] == "  fsdp       40 samples/s, peak 95 MiB, held per rank 20 MiB (50% less)"


def test_one_rank_is_not_measured_and_says_why():
    run = _Recorded()
    c = compare_sharding("gpt", world_size=1, device="cpu", run=run)
    assert run.asked == [] and c.results == {}
    assert "nothing to shard across" in c.skipped and "not measured" in c.table()
    assert compare_sharding("gpt", device="cpu", run=run).world_size == 2  # a CPU: two ranks


def test_a_case_that_does_not_exist_is_refused_by_name():
    words = "cases='zero3' is not allowed: names from ddp, fsdp, fsdp-kept"
    with pytest.raises(InputError, match=words):
        compare_sharding("gpt", world_size=2, device="cpu", cases=["zero3"], run=_Recorded())


def test_held_memory_is_unknown_when_a_part_is():
    assert held_mib(BurstResult(param_mib_per_rank=1.0, grad_mib_per_rank=1.0)) is None
