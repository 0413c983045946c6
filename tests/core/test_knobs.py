import warnings

import pytest

from workbench.core.knobs import (
    KNOB_NAMES,
    KnobError,
    Knobs,
    RenamedValueWarning,
    check_value,
    knob_specs,
    parse_value,
)


def test_defaults_are_valid_and_documented():
    k = Knobs()
    assert k.batch_size == 32 and k.precision == "default" and k.loader == "torch"
    for spec in knob_specs():
        assert spec.doc and spec.group in {"data", "compute", "memory", "dist"}


def _renamed(make):
    """What ``make()`` returns, and the RenamedValueWarnings it gave, as Python would show
    them with its default filter ("default": once per message and calling line)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = make()
    return value, [str(w.message) for w in caught if w.category is RenamedValueWarning]


@pytest.mark.parametrize(
    "make",
    [
        lambda: Knobs(precision="fp32").precision,
        lambda: Knobs.from_dict({"precision": "fp32"}).precision,
        lambda: Knobs().with_text(["precision=fp32"]).precision,  # --set precision=fp32
        lambda: check_value("precision", "fp32"),  # a sweep's values, a tuner's space
    ],
    ids=["Knobs(...)", "from_dict", "--set", "check_value"],
)
def test_the_old_fp32_reads_as_fp32_strict_with_one_warning_line(make):
    value, notes = _renamed(make)
    assert value == "fp32-strict"
    assert len(notes) == 1 and "\n" not in notes[0]
    assert "IEEE fp32 everywhere" in notes[0] and "precision=default" in notes[0]


def test_the_current_names_give_no_warning():
    for precision in ("default", "fp32-strict", "tf32", "bf16", "fp16"):
        knobs, notes = _renamed(lambda p=precision: Knobs(precision=p).replace(batch_size=64))
        assert knobs.precision == precision and notes == []


def test_contract_knob_names_are_fields():
    contract = [
        "batch_size",
        "num_workers",
        "prefetch_factor",
        "pin_memory",
        "persistent_workers",
        "precision",
        "channels_last",
        "compile",
        "cudnn_benchmark",
        "grad_accum",
        "loader",
        "world_size",
        "bucket_cap_mb",
        "sharding",
    ]
    assert set(contract) <= set(KNOB_NAMES)


@pytest.mark.parametrize(
    ("changes", "knob", "words"),
    [
        ({"batch_size": 0}, "batch_size", "from 1 to"),
        ({"batch_size": -3}, "batch_size", "from 1 to"),
        ({"batch_size": "abc"}, "batch_size", "integer"),
        ({"batch_size": 2.5}, "batch_size", "integer"),
        ({"batch_size": True}, "batch_size", "integer"),
        ({"precision": "fp8"}, "precision", "default, fp32-strict, tf32, bf16, fp16"),
        ({"compile": "fast"}, "compile", "reduce-overhead"),
        ({"loader": "ffcv"}, "loader", "torch, dali, synthetic"),
        ({"attention": "sdpa"}, "attention", "one of auto, flash, efficient, cudnn, math"),
        ({"packing": "greedy"}, "packing", "one of off, pad, pack"),
        ({"sharding": "zero3"}, "sharding", "one of ddp, fsdp"),
        ({"reshard_after_forward": "yes"}, "reshard_after_forward", "true or false"),
        ({"fp8": "e4m3"}, "fp8", "one of off, tensorwise, rowwise, rowwise_with_gw_hp"),
        ({"fp8": "rowwise", "precision": "fp16"}, "fp8", "needs precision=bf16 (not fp16)"),
        ({"grad_accum": 0}, "grad_accum", "from 1"),
        ({"pin_memory": "yes"}, "pin_memory", "true or false"),
        ({"bucket_cap_mb": float("nan")}, "bucket_cap_mb", "number"),
        ({"prefetch_factor": 4}, "prefetch_factor", "needs num_workers > 0"),
        ({"persistent_workers": True}, "persistent_workers", "needs num_workers > 0"),
        ({"nccl": {"ALGO": "Ring"}}, "nccl", "NCCL_"),
    ],
)
def test_bad_values_name_knob_value_and_allowed(changes, knob, words):
    with pytest.raises(KnobError) as err:
        Knobs(**changes)
    msg = str(err.value)
    assert msg.startswith(f"{knob}=") or knob in msg
    assert words in msg
    assert err.value.knob == knob
    assert isinstance(err.value, ValueError)


def test_valid_combinations():
    k = Knobs(num_workers=2, prefetch_factor=4, persistent_workers=True, precision="bf16")
    assert k.prefetch_factor == 4 and k.persistent_workers


def test_from_dict_refuses_unknown_keys_and_lists_known():
    with pytest.raises(KnobError) as err:
        Knobs.from_dict({"batch_size": 8, "batchsize": 8})
    assert "batchsize" in str(err.value)
    assert "known: batch_size, num_workers" in str(err.value)


def test_to_dict_round_trips_exactly():
    k = Knobs(
        batch_size=64, num_workers=3, prefetch_factor=8, pin_memory=True, precision="fp16",
        channels_last=True, compile="max-autotune", grad_accum=4, loader="synthetic",
        bucket_cap_mb=50, nccl={"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"},
    )  # fmt: skip
    d = k.to_dict()
    assert Knobs.from_dict(d) == k
    assert Knobs.from_dict(d).to_dict() == d
    assert d["nccl"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
    assert type(d["nccl"]) is dict and d["bucket_cap_mb"] == 50.0


def test_frozen_and_hashable():
    k = Knobs(nccl={"NCCL_ALGO": "Ring"})
    with pytest.raises(AttributeError):
        k.batch_size = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        k.nccl["NCCL_ALGO"] = "Tree"  # type: ignore[index]
    assert hash(k) == hash(Knobs(nccl={"NCCL_ALGO": "Ring"}))
    assert len({k, Knobs(nccl={"NCCL_ALGO": "Ring"}), Knobs()}) == 2


def test_replace_and_text_assignments():
    k = Knobs().with_text(
        ["batch_size=8", "pin_memory=on", "NCCL_ALGO=Tree", "prefetch_factor=none"]
    )
    assert (k.batch_size, k.pin_memory, dict(k.nccl)) == (8, True, {"NCCL_ALGO": "Tree"})
    assert k.replace(NCCL_PROTO="LL").nccl == {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"}
    fsdp = Knobs().with_text(["sharding=fsdp", "reshard_after_forward=off"])  # --set, as typed
    assert (fsdp.sharding, fsdp.reshard_after_forward) == ("fsdp", False)
    assert (Knobs().sharding, Knobs().reshard_after_forward) == ("ddp", True)  # torch's default
    with pytest.raises(KnobError, match="expected KNOB=VALUE"):
        Knobs().with_text(["batch_size"])
    with pytest.raises(KnobError, match="unknown knob"):
        Knobs().with_text(["warp_speed=9"])


@pytest.mark.parametrize(
    ("refuse", "meant"),
    [
        (lambda: Knobs().with_text(["batch_sise=64"]), "batch_size"),
        (lambda: Knobs().replace(num_worker=2), "num_workers"),
        (lambda: Knobs.from_dict({"precison": "bf16"}), "precision"),
        (lambda: check_value("channel_last", True), "channels_last"),
        (lambda: Knobs().with_text(["nccl_algo=Ring"]), "NCCL_ALGO"),
    ],
)
def test_a_misspelt_knob_gets_the_name_it_meant(refuse, meant):
    with pytest.raises(KnobError, match=rf"unknown knob \(did you mean {meant}\?\); known: "):
        refuse()


def test_an_unknown_knob_like_no_other_gets_no_guess():
    with pytest.raises(KnobError) as caught:
        Knobs().with_text(["warp=9"])
    assert "did you mean" not in str(caught.value)
    assert "warp='9' is not allowed: unknown knob; known: batch_size" in str(caught.value)


def test_parse_value_types():
    assert parse_value("batch_size", "16") == 16
    assert parse_value("bucket_cap_mb", "12.5") == 12.5
    assert parse_value("channels_last", "False") is False
    with pytest.raises(KnobError, match="channels_last='maybe'"):
        parse_value("channels_last", "maybe")
    with pytest.raises(KnobError, match="batch_size='abc'"):
        parse_value("batch_size", "abc")


def test_repr_shows_only_changes():
    assert repr(Knobs(batch_size=8)) == "Knobs(batch_size=8)"
