from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.engine import oom


def _row(peak, reserved=None, status="ok", **knobs):
    return {"workload": "gpt", "device": "cuda:0", "status": status, "id": len(knobs),
            "knobs": Knobs(**knobs).to_dict(), "peak_mem_mib": peak,
            "peak_reserved_mib": reserved}  # fmt: skip


HISTORY = [
    _row(10_000, 11_000, batch_size=32),
    _row(20_000, 22_000, batch_size=64),
    _row(30_000, status="oom", batch_size=128),  # failed: never "fitted"
    _row(12_000, 13_000, batch_size=64, activation_checkpointing=True),  # saves 9,000
    _row(16_000, 17_000, batch_size=64, precision="bf16"),  # saves 5,000
    _row(11_000, 12_000, batch_size=32, grad_accum=2),  # 64 = 32 x 2: saves 10,000
    _row(10_000, 11_000, batch_size=32, num_workers=4),  # another base: not a pair with 64
]


def _failed(**knobs) -> BurstResult:
    return BurstResult(status="oom", error="OutOfMemoryError: CUDA out of memory",
                       workload="gpt", device="cuda:0", knobs=Knobs(**knobs),
                       memory_breakdown={"params_mib": 100.0, "grads_mib": 100.0,
                                         "optimizer_mib": 200.0, "activations_mib": 9000.0,
                                         "peak_mib": 70_000.0, "rest_mib": 69_600.0})  # fmt: skip


def test_an_oom_says_what_fitted_and_ranks_the_knobs_by_measured_saving():
    report = oom.explain(_failed(batch_size=128), HISTORY)
    assert report["tried"]["batch_size"] == 128
    assert report["largest_fitting_batch"]["batch_size"] == 64
    assert report["largest_fitting_batch"]["peak_mem_mib"] == 22_000  # reserved on CUDA
    assert report["breakdown"]["activations_mib"] == 9000.0
    measured = [f for f in report["frees"] if f["measured"]]
    assert [f["knob"] for f in measured] == ["grad_accum", "activation_checkpointing", "precision"]
    assert measured[0]["saved_mib"] == 10_000 and measured[0]["saved_pct"] == 45.5
    untried = [f["knob"] for f in report["frees"] if not f["measured"]]
    assert set(untried) == {"alloc_conf", "optimizer_impl"}
    text = report["summary"]
    assert "largest batch that fitted with these knobs: 64" in text
    assert "grad_accum x2: saved 10,000 MiB" in text
    assert "bigger" not in text.lower() and "gpu" not in text.lower()


def test_knobs_already_on_are_not_suggested_and_cpu_skips_the_cuda_allocator():
    r = _failed(batch_size=128, activation_checkpointing=True)
    r.device = "cpu"
    frees = [f["knob"] for f in oom.explain(r, []).get("frees")]
    assert "activation_checkpointing" not in frees and "alloc_conf" not in frees
    assert oom.explain(r, [])["largest_fitting_batch"] is None


def test_an_oom_burst_gets_its_report_from_the_store(store_path):
    from workbench.engine.burst import finish
    from workbench.history.store import open_store

    store = open_store(store_path)
    for row in HISTORY:
        store.append({k: v for k, v in row.items() if k != "id"})
    r = _failed(batch_size=128)
    finish(r, (None, None), store_path)
    assert r.oom_report["largest_fitting_batch"]["batch_size"] == 64
    assert r.summary().count("\n") >= 3 and "saved 10,000 MiB" in r.summary()


def test_a_ddp_job_is_offered_fsdp_ranked_by_its_measured_saving_and_a_sharded_one_its_shards():
    two = {"batch_size": 64, "world_size": 2}
    fsdp = {**two, "sharding": "fsdp"}
    keep = {**fsdp, "reshard_after_forward": False}
    rows = [
        _row(20_000, 22_000, **two),
        _row(12_000, 13_500, **fsdp),  # saves 8,500
        _row(12_000, 13_500, **keep),  # the same: keeping the gathered blocks freed nothing
        _row(11_000, 12_000, **keep, activation_checkpointing=True),
    ]
    report = oom.explain(_failed(batch_size=128, world_size=2), rows)
    sharding = next(f for f in report["frees"] if f["knob"] == "sharding")
    assert sharding["measured"] and sharding["saved_mib"] == 8_500
    assert report["sharded_over"] == 1 and "on one rank" not in report["summary"]
    assert "sharding=fsdp: saved 8,500 MiB" in report["summary"]
    # one rank: fsdp cannot act there, so it is never offered
    assert "sharding" not in [f["knob"] for f in oom.explain(_failed(batch_size=128), [])["frees"]]
    sharded = _failed(batch_size=128, world_size=2, sharding="fsdp", reshard_after_forward=False)
    kept = oom.explain(sharded, rows)
    frees = {f["knob"]: f for f in kept["frees"]}
    assert "sharding" not in frees  # already on
    assert frees["reshard_after_forward"]["saved_mib"] == 0  # one pair, the same peak
    assert frees["reshard_after_forward"]["expected"] == "measured here, it freed nothing"
    untried = {f["knob"]: f for f in oom.explain(sharded, [])["frees"]}["reshard_after_forward"]
    assert "one more all-gather a block" in untried["expected"]
    assert untried["measure_with"].startswith('wb.sweep(wl, "reshard_after_forward", [False, True]')
    assert kept["sharded_over"] == 2
    assert (
        "memory on one rank of 2, its shards (sharding=fsdp) (MiB): params 100" in (kept["summary"])
    )
