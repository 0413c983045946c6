"""Saved configs: round trips, byte-identical re-saves, bad input, and the production helpers."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from blocked_imports import run_with_ui_blocked

from workbench.config import provenance
from workbench.config.saved import (
    SCHEMA_VERSION,
    ConfigError,
    ConfigWarning,
    TunedConfig,
    load_config,
    load_knobs,
    save_config,
)
from workbench.core.errors import InputError
from workbench.core.knobs import KNOB_NAMES, Knobs
from workbench.core.results import BurstResult
from workbench.engine import hardware

KNOBS = [
    Knobs(),
    Knobs(batch_size=256, num_workers=8, prefetch_factor=4, pin_memory=True,
          persistent_workers=True, precision="bf16", channels_last=True, compile="max-autotune",
          cudnn_benchmark=True, grad_accum=4, attention="flash", fp8="rowwise", loader="dali",
          dali_decode="mixed",
          dali_hw_decoder_load=0.9, decode="gpu", decode_overlap=False,
          data_format="shards", cache="cold", packing="pack",
          world_size=8, nodes=2, bucket_cap_mb=100.5,
          gradient_as_bucket_view=True, static_graph=True,
          sharding="fsdp", reshard_after_forward=False,
          activation_checkpointing=True, optimizer_impl="fused",
          alloc_conf="expandable_segments:True,roundup_power2_divisions:[256:1,>:4]",
          nccl={"NCCL_CROSS_NIC": "1", "NCCL_IB_TIMEOUT": "22", "NCCL_SOCKET_NTHREADS": "4",
                "NCCL_SOCKET_IFNAME": "^docker,lo"}),  # every knob away from its default
    Knobs(batch_size=1, precision="fp16", compile="reduce-overhead", loader="synthetic",
          optimizer_impl="for-loop", attention="cudnn", packing="pad"),
    Knobs(precision="tf32", num_workers=1, bucket_cap_mb=0.1, nccl={"NCCL_DEBUG": "INFO"},
          dali_decode="cpu", dali_hw_decoder_load=0.0, data_format="predecoded"),
]  # fmt: skip
ALLOC = "PYTORCH_CUDA_ALLOC_CONF"
ENV_KNOBS = KNOBS[1].replace(alloc_conf="")
"""KNOBS[1] without alloc_conf, for the tests that pass allocator variables through env= (a
set alloc_conf writes them itself and refuses an env= that disagrees)."""
H200 = {"gpus": ["NVIDIA H200"] * 8, "torch": "2.5.1+cu124"}
H200_INFO = hardware.DeviceInfo(kind="cuda", name="NVIDIA H200", index=0, total_mem_mib=143771.0,
                                capability=(9, 0), driver_version="550.54.15",
                                cuda_version="12.4", cpu_count=16)  # fmt: skip


def _result(knobs: Knobs | None = None, **changes) -> BurstResult:
    """A BurstResult as a burst on an H200 would give it (no GPU needed to build one)."""
    fields = dict(
        workload="resnet50", device="cuda:0", device_name="NVIDIA H200",
        device_mem_mib=143771.0, knobs=knobs or ENV_KNOBS, samples_per_s=2931.123456,
        step_ms_p50=87.33333, step_ms_iqr=1.25, peak_mem_mib=61234.5678,
        peak_reserved_mib=65536.0, data_wait_pct=3.21, mfu_pct=41.0, noisy=False, id=17,
        created_at="2025-06-01T12:00:00+00:00",
        versions={"torch": "2.5.1+cu124", "torchvision": "0.20.1", "cuda": "12.4",
                  "driver": "550.54.15", "nvidia-dali": "1.40.0"},
    )  # fmt: skip
    fields.update(changes)
    return BurstResult(**fields)


@pytest.fixture
def same_machine(monkeypatch):
    """This machine looks like the H200 the sample results were measured on."""
    monkeypatch.setattr(provenance, "current_machine", lambda: dict(H200))
    monkeypatch.setattr(hardware, "device_info", lambda device=None: H200_INFO)


def _load_quietly(path: Path) -> TunedConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return load_config(path)


# --------------------------------------------------------------------------- round trips


def _default(f: dataclasses.Field) -> object:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def test_the_round_trip_cases_move_every_knob():
    """Each Knobs field is non-default in some case (one case moves them all), so a knob added
    later without a round-trip case fails here."""
    fields = dataclasses.fields(Knobs)
    still = [f.name for f in fields if all(getattr(k, f.name) == _default(f) for k in KNOBS)]
    assert still == []
    assert [f.name for f in fields if getattr(KNOBS[1], f.name) == _default(f)] == []


@pytest.mark.parametrize("knobs", KNOBS, ids=range(len(KNOBS)))
def test_every_knob_survives_a_round_trip(knobs, tmp_path):
    cfg = _load_quietly(save_config(knobs, tmp_path / "t.yaml"))
    assert cfg.knobs == knobs
    for name in KNOB_NAMES:
        assert getattr(cfg.knobs, name) == getattr(knobs, name), name
    assert load_knobs(tmp_path / "t.yaml") == knobs


@pytest.mark.parametrize("knobs", KNOBS, ids=range(len(KNOBS)))
def test_save_load_save_is_byte_identical(knobs, tmp_path, same_machine):
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:512"}
    env = {} if knobs.alloc_conf else env  # the knob writes them: see test_memory_config.py
    for i, source in enumerate([knobs, _result(knobs)]):
        first = save_config(source, tmp_path / f"a{i}.yaml", env=env)
        second = save_config(load_config(first), tmp_path / f"b{i}.yaml")
        assert first.read_bytes() == second.read_bytes()


def test_the_same_result_saved_twice_gives_the_same_bytes(tmp_path):
    """Nothing in the file comes from the clock when the input has its own date."""
    a = save_config(_result(), tmp_path / "a.yaml").read_bytes()
    b = save_config(_result(), tmp_path / "b.yaml").read_bytes()
    assert a == b


def test_the_file_reads_well_and_loads_with_plain_safe_yaml(tmp_path):
    path = save_config(_result(), tmp_path / "t.yaml", env={"OMP_NUM_THREADS": "8"})
    text = path.read_text()
    doc = yaml.safe_load(text)  # comments and all, it is plain safe YAML
    assert list(doc) == ["schema_version", "knobs", "env", "dataloader", "launch", "provenance"]
    assert doc["schema_version"] == SCHEMA_VERSION
    assert list(doc["knobs"]) == list(KNOB_NAMES)
    assert doc["env"] == {"NCCL_CROSS_NIC": "1", "NCCL_IB_TIMEOUT": "22",
                          "NCCL_SOCKET_IFNAME": "^docker,lo", "NCCL_SOCKET_NTHREADS": "4",
                          "OMP_NUM_THREADS": "8"}  # fmt: skip
    assert doc["dataloader"] == {"batch_size": 256, "num_workers": 8, "pin_memory": True,
                                 "persistent_workers": True, "prefetch_factor": 4}  # fmt: skip
    # nodes=2: one node of the tuned shape runs 8 / 2 processes
    assert doc["launch"]["single_node"] == "torchrun --standalone --nproc_per_node=4 train.py"
    assert "--rdzv_endpoint=$MASTER_ADDR:29500" in doc["launch"]["multi_node"]
    assert "--nnodes=2 --nproc_per_node=4" in doc["launch"]["multi_node"]
    assert {"#SBATCH --nodes=2", "#SBATCH --gpus-per-node=4"} <= set(doc["launch"]["sbatch"])
    prov = doc["provenance"]
    assert prov["device"] == {"type": "cuda:0", "name": "NVIDIA H200", "memory_mib": 143771.0}
    assert prov["versions"]["torch"] == "2.5.1+cu124" and prov["versions"]["cuda"] == "12.4"
    assert prov["versions"]["nvidia-dali"] == "1.40.0" and prov["date"].startswith("2025-06-01")
    assert prov["measured"]["samples_per_s"] == 2931.123  # rounded: readable, stable
    assert prov["measured"]["peak_mem_mib"] == 61234.568 and prov["workload"] == "resnet50"
    assert "# Samples per micro-batch fed to the model (per rank)." in text
    assert max(len(line) for line in text.splitlines() if line.lstrip().startswith("#")) <= 96


def test_knobs_saved_alone_say_so_and_keep_their_date(tmp_path):
    path = save_config(Knobs(batch_size=8), tmp_path / "k.yaml")
    prov = _load_quietly(path).provenance
    assert prov["source"] == "knobs" and prov["measured"] is None
    assert prov["versions"]["torch"] == str(torch.__version__)
    again = save_config(_load_quietly(path), tmp_path / "k2.yaml")
    assert again.read_bytes() == path.read_bytes()  # the save date is carried, not renewed


def test_knobs_saved_alone_on_one_gpu_warn_on_another(tmp_path, monkeypatch):
    """No burst measured them, but the device they were saved on is in the file: loading on
    another GPU model warns, as for a measured config, and says nothing was measured."""
    monkeypatch.setattr(hardware, "device_info", lambda device=None: H200_INFO)
    path = save_config(Knobs(batch_size=8), tmp_path / "k.yaml")
    text = path.read_text()
    assert "# No burst measured these knobs" in text
    device = yaml.safe_load(text)["provenance"]["device"]
    assert device == {"type": "cuda:0", "name": "NVIDIA H200", "memory_mib": 143771.0}
    l4 = {"gpus": ["NVIDIA L4"], "torch": str(torch.__version__)}
    monkeypatch.setattr(provenance, "current_machine", lambda: l4)
    with pytest.warns(ConfigWarning) as caught:
        load_config(path)
    assert [str(w.message).split(": ", 1)[1] for w in caught] == [
        "saved (not measured) on NVIDIA H200; this machine has NVIDIA L4: the tuned numbers "
        "are a starting point here, not a promise"
    ]


def test_knobs_saved_alone_name_this_machine(tmp_path):
    prov = _load_quietly(save_config(Knobs(), tmp_path / "k.yaml")).provenance
    here = hardware.device_info()
    assert prov["device"]["name"] == here.name
    assert prov["device"]["type"] == str(hardware.resolve_device())  # "cpu", or "cuda:0"
    assert prov["device"]["memory_mib"] == round(here.total_mem_mib, 3)


def test_a_real_burst_saves_and_loads(tiny_data, tmp_path):
    from workbench.distributed.dispatch import run_burst

    r = run_burst("cnn", Knobs(batch_size=8), data_dir=tiny_data, seconds=0.3, warmup_steps=1,
                  record=False)  # fmt: skip
    assert r.ok, r.error
    cfg = load_config(save_config(r, tmp_path / "t.yaml"))  # same machine: no warning
    assert cfg.knobs == r.knobs and cfg.provenance["workload"] == "cnn"
    assert cfg.provenance["device"]["type"] == "cpu"
    assert cfg.provenance["measured"]["samples_per_s"] == round(r.samples_per_s, 3)


def test_a_tune_result_saves_its_best_burst(tmp_path):
    class Tuned:  # the shape of workbench.tuning.result.TuneResult that matters here
        best = KNOBS[3]
        best_result = _result(KNOBS[3])

    cfg = _load_quietly(save_config(Tuned(), tmp_path / "t.yaml"))
    assert cfg.knobs == KNOBS[3] and cfg.provenance["source"] == "burst"
    Tuned.best_result = None
    with pytest.raises(ConfigError, match="no config that ran and fits"):
        save_config(Tuned(), tmp_path / "u.yaml")


def test_save_refuses_what_is_not_a_tuned_config(tmp_path):
    with pytest.raises(ConfigError, match="status 'oom'"):
        save_config(_result(status="oom", error="CUDA out of memory"), tmp_path / "t.yaml")
    with pytest.raises(ConfigError, match=r"env\.NCCL_ALGO: NCCL variables are knobs"):
        save_config(Knobs(), tmp_path / "t.yaml", env={"NCCL_ALGO": "Ring"})
    with pytest.raises(ConfigError, match=r"env\.PYTORCH_CUDA_ALLOC_CONF: .* takes True or"):
        save_config(Knobs(), tmp_path / "t.yaml", env={ALLOC: "expandable_segments:on"})
    with pytest.raises(TypeError, match="dict"):
        save_config({"batch_size": 8}, tmp_path / "t.yaml")
    assert not (tmp_path / "t.yaml").exists()  # nothing half-written


def test_schema_1_files_still_load(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text(textwrap.dedent("""\
        schema_version: 1
        knobs: {batch_size: 64, num_workers: 2}
        measured: {status: ok, samples_per_s: 123.456789, noisy: false}
        provenance: {workload: cnn, device: cpu, device_name: Some CPU, burst_id: 3,
                     burst_at: '2025-01-02T03:04:05+00:00', versions: {torch: 2.5.0}}
        saved_at: '2025-01-03T00:00:00+00:00'
        """))  # fmt: skip
    cfg = load_config(path, check_machine=False)
    assert cfg.knobs == Knobs(batch_size=64, num_workers=2)
    assert cfg.provenance["date"] == "2025-01-02T03:04:05+00:00"
    assert cfg.provenance["measured"]["samples_per_s"] == 123.457
    assert (
        yaml.safe_load(save_config(cfg, tmp_path / "new.yaml").read_text())["schema_version"]
        == SCHEMA_VERSION
    )


def test_a_short_hand_written_file_loads(tmp_path):
    path = tmp_path / "h.yaml"
    path.write_text("schema_version: 2\nknobs: {batch_size: 48}\nenv: {NCCL_SOCKET_IFNAME: eth}\n")
    cfg = load_config(path)  # no provenance: nothing to compare this machine with
    assert cfg.knobs == Knobs(batch_size=48, nccl={"NCCL_SOCKET_IFNAME": "eth"})  # no knobs.nccl
    assert cfg.provenance["source"] is None and cfg.provenance["measured"] is None
    path.write_text("schema_version: 2\nknobs:\n  nccl:\nenv: {NCCL_SOCKET_IFNAME: eth}\n")
    with pytest.raises(ConfigError, match=r"env\.NCCL_SOCKET_IFNAME: not in knobs\.nccl"):
        load_config(path)  # an explicit, empty knobs.nccl disagrees with env


# --------------------------------------------------------------------------- bad input


def _good_text(tmp_path: Path) -> str:
    return save_config(_result(), tmp_path / "good.yaml").read_text()


BAD = [
    # (what, text or a function of the good text, key named, words of the problem)
    ("not YAML", "knobs: [1, 2\nschema_version: 2\n", "line 2, column 15", "not valid YAML"),
    ("not YAML either", "schema_version: 2\n\tknobs: {}\n", "line 2, column 1", "not valid YAML"),
    ("a list", "- 1\n- 2\n", None, "expected a mapping with schema_version and knobs, got a list"),
    ("empty", "", None, "got an empty file"),
    ("unknown keys", lambda t: t + "tuned_by: me\nextra: 1\n", "tuned_by, extra",
     "unknown keys; known: schema_version, knobs, env, dataloader, launch, training, "
     "provenance, comm"),
    ("unknown knob", lambda t: t.replace("  batch_size: 256", "  batch_size: 256\n  warp: 9"),
     "knobs.warp", "unknown key; known: batch_size, num_workers"),
    ("no schema", lambda t: t.replace("schema_version: 3\n", ""), "schema_version", "missing"),
    ("no knobs", "schema_version: 2\nenv: {}\n", "knobs", "missing (required)"),
    ("newer schema", lambda t: t.replace("schema_version: 3", "schema_version: 4"),
     "schema_version", "4 is newer than this workbench understands (1 to 3): upgrade"),
    ("schema text", "schema_version: '2'\nknobs: {}\n", "schema_version", "'2' is not allowed"),
    ("out of range", lambda t: t.replace("batch_size: 256", "batch_size: 0"),
     "knobs.batch_size", "0 is not allowed: an integer from 1 to 65536"),
    ("wrong type", lambda t: t.replace("precision: bf16", "precision: fp8"),
     "knobs.precision", "'fp8' is not allowed: one of default, fp32-strict, tf32, bf16, fp16"),
    ("combination", "schema_version: 2\nknobs: {prefetch_factor: 4}\n",
     "knobs.prefetch_factor", "needs num_workers > 0"),
    ("NCCL cross NIC", lambda t: t.replace("NCCL_CROSS_NIC: '1'", "NCCL_CROSS_NIC: '7'"),
     "knobs.nccl.NCCL_CROSS_NIC", "'7' is not allowed: 0 (each ring/tree on one NIC)"),
    ("NCCL protocol", "schema_version: 2\nknobs: {nccl: {NCCL_PROTO: LL256}}\n",
     "knobs.nccl.NCCL_PROTO", "'LL256' is not allowed"),
    ("NCCL channels", "schema_version: 2\nknobs: {nccl: {NCCL_MIN_NCHANNELS: 0}}\n",
     "knobs.nccl.NCCL_MIN_NCHANNELS", "'0' is not allowed: a positive integer"),
    ("NCCL in env", "schema_version: 2\nknobs: {}\nenv: {NCCL_DEBUG: LOUD}\n",
     "env.NCCL_DEBUG", "'LOUD' is not allowed: one of VERSION, WARN, INFO, ABORT, TRACE"),
    ("python object", "schema_version: 2\nknobs: !!python/object/apply:os.system ['touch {m}']\n",
     "line 2, column 8", "YAML tag '!!python/object/apply:os.system' is not allowed"),
    ("python name", "schema_version: !!python/name:os.system ''\nknobs: {}\n",
     "line 1, column 17", "YAML tag '!!python/name:os.system' is not allowed"),
    ("local tag", "schema_version: 2\nknobs: !knobs {batch_size: 8}\n", "line 2, column 8",
     "YAML tag '!knobs' is not allowed"),
    ("duplicate", "schema_version: 2\nknobs: {batch_size: 8}\nknobs: {batch_size: 9}\n",
     "line 3, column 1", "duplicate key 'knobs'"),
    ("edited copy", lambda t: t.replace("  num_workers: 8\n  pin", "  num_workers: 2\n  pin"),
     "dataloader.num_workers", "2 disagrees with the knobs: this section is written from "
     "knobs.num_workers, which gives 8; change the knob"),
    ("edited launch", lambda t: t.replace("--nproc_per_node=4 train", "--nproc_per_node=8 train"),
     "launch.single_node", "written from knobs.world_size"),
    ("edited env", lambda t: t.replace("\n  NCCL_IB_TIMEOUT: '22'", "\n  NCCL_IB_TIMEOUT: '23'"),
     "env.NCCL_IB_TIMEOUT", "'23' disagrees with knobs.nccl.NCCL_IB_TIMEOUT='22'"),
    ("allocator", lambda t: t.replace("env:\n", f"env:\n  {ALLOC}: expandable_segments\n"),
     "env.PYTORCH_CUDA_ALLOC_CONF", "key:value pairs separated by commas"),
    ("yes is not text", "schema_version: 2\nknobs: {}\nenv: {CUDA_LAUNCH_BLOCKING: yes}\n",
     "env.CUDA_LAUNCH_BLOCKING", "True is not allowed: text (quote it in YAML)"),
    ("provenance key", lambda t: t.replace("provenance:\n", "provenance:\n  mood: good\n"),
     "provenance.mood", "unknown key; known: source, workload"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "text", "key", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_files_name_the_file_the_key_and_the_problem(what, text, key, words, tmp_path):
    marker = tmp_path / "executed"
    path = tmp_path / "bad.yaml"
    body = text(_good_text(tmp_path)) if callable(text) else text.replace("{m}", str(marker))
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        load_config(path, check_machine=False)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert message.startswith(f"{path}: {key}: " if key else f"{path}: "), message
    assert words in message
    assert "\n" not in message and info.value.key == key
    assert not marker.exists()  # nothing from the file was executed


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such file"):
        load_config(tmp_path / "nope.yaml")


def test_an_unknown_nccl_variable_or_allocator_option_is_a_warning(tmp_path):
    path = save_config(Knobs(nccl={"NCCL_SOCKET_IFNAME": "eth"}), tmp_path / "t.yaml")
    text = path.read_text()
    text = text.replace(
        "    NCCL_SOCKET_IFNAME: eth", "    NCCL_SOCKET_IFNAME: eth\n    NCCL_FANCY_NEW: '1'"
    )
    alloc = "'roundup_power2_divisions:[256:1,>:8],shiny:1'"
    text = text.replace("env:\n", f"env:\n  NCCL_FANCY_NEW: '1'\n  MY_VAR: x\n  {ALLOC}: {alloc}\n")
    text = re.sub(r"\nlaunch:\n(  .*\n)+", "\n", text)  # its sbatch script copies env: rebuilt
    path.write_text(text)
    with pytest.warns(ConfigWarning) as caught:
        cfg = load_config(path, check_machine=False)
    notes = " | ".join(str(w.message) for w in caught)
    assert "knobs.nccl: NCCL_FANCY_NEW is not an NCCL variable workbench knows" in notes
    assert "env.MY_VAR is not a variable workbench knows" in notes
    assert "'shiny' is not an allocator option" in notes
    assert "'roundup_power2_divisions' is not" not in notes  # brackets hold commas
    assert cfg.env()["NCCL_FANCY_NEW"] == "1" and cfg.env()["MY_VAR"] == "x"


# --------------------------------------------------------------------------- provenance


def test_loading_on_another_gpu_or_torch_warns_but_loads(tmp_path, monkeypatch):
    path = save_config(_result(), tmp_path / "t.yaml")
    machines = {
        "tuned on NVIDIA H200; this machine has NVIDIA A100-SXM4-80GB": {
            "gpus": ["NVIDIA A100-SXM4-80GB"], "torch": "2.5.1"},
        "tuned on NVIDIA H200; this machine has no CUDA GPU": {"gpus": [], "torch": "2.6.0"},
        "tuned with torch 2.5.1+cu124; this machine has torch 3.0.0": {
            "gpus": ["NVIDIA H200"], "torch": "3.0.0"},
    }  # fmt: skip
    for words, machine in machines.items():
        monkeypatch.setattr(provenance, "current_machine", lambda m=machine: m)
        with pytest.warns(ConfigWarning, match="starting point here, not a promise") as caught:
            cfg = load_config(path)
        assert [words in str(w.message) for w in caught] == [True]
        assert cfg.knobs == _result().knobs
    monkeypatch.setattr(provenance, "current_machine", lambda: dict(H200, torch="2.7.0"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same GPU model, same torch major: silent
        load_config(path)
    monkeypatch.setattr(provenance, "current_machine", lambda: {"gpus": ["X"], "torch": "9"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config(path, check_machine=False)


def test_a_cpu_tuned_config_warns_on_a_gpu():
    cfg = TunedConfig(Knobs(), provenance={"device": {"type": "cpu", "name": "AMD EPYC"}})
    notes = cfg.machine_differences({"gpus": ["NVIDIA L4"], "torch": str(torch.__version__)})
    assert notes == ["tuned on a CPU (AMD EPYC); this machine has NVIDIA L4"]
    unknown = {"gpus": None, "torch": str(torch.__version__)}  # NVML and CUDA both silent
    gpu_tuned = TunedConfig(Knobs(), provenance=provenance.from_result(_result()))
    assert gpu_tuned.machine_differences(unknown) == []  # nothing known: nothing claimed


def test_loading_does_not_initialize_cuda(tmp_path, monkeypatch):
    """PyTorch's allocator reads PYTORCH_CUDA_ALLOC_CONF when CUDA initializes: a script must
    be able to load the config, then export its env, then start CUDA."""

    def no_init(*args, **kwargs):
        raise AssertionError("load_config initialized CUDA")

    path = save_config(_result(), tmp_path / "t.yaml", env={ALLOC: "backend:cudaMallocAsync"})
    monkeypatch.setattr(torch.cuda, "_lazy_init", no_init)
    monkeypatch.setattr(torch.cuda, "init", no_init)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        cfg = load_config(path)  # with the machine check
    cfg.describe()
    assert cfg.env()[ALLOC] == "backend:cudaMallocAsync"


# --------------------------------------------------------------------------- production side


def test_dataloader_uses_the_tuned_kwargs_and_takes_overrides():
    data = torch.utils.data.TensorDataset(torch.randn(64, 3), torch.arange(64))
    cfg = TunedConfig(Knobs(batch_size=16, num_workers=2, prefetch_factor=3,
                            persistent_workers=True, pin_memory=True))  # fmt: skip
    assert cfg.dataloader_kwargs("cuda") == {"batch_size": 16, "num_workers": 2,
        "pin_memory": True, "persistent_workers": True, "prefetch_factor": 3}  # fmt: skip
    loader = cfg.dataloader(data)
    assert (loader.batch_size, loader.num_workers, loader.prefetch_factor) == (16, 2, 3)
    assert loader.persistent_workers is True
    assert loader.pin_memory is torch.cuda.is_available()  # pinning needs CUDA
    assert cfg.dataloader_kwargs("cpu")["pin_memory"] is False
    plain = cfg.dataloader(data, num_workers=0, batch_size=8, shuffle=True, drop_last=True)
    assert (plain.num_workers, plain.batch_size, plain.prefetch_factor) == (0, 8, None)
    assert len(list(plain)) == 8 and isinstance(plain.sampler, torch.utils.data.RandomSampler)


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("default", torch.float32), ("fp32-strict", torch.float32), ("tf32", torch.float32),
     ("bf16", torch.bfloat16), ("fp16", torch.float16)],
)  # fmt: skip
def test_autocast_runs_in_the_tuned_precision(precision, dtype):
    cfg = TunedConfig(Knobs(precision=precision))
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with cfg.autocast("cpu"):
        assert (a @ b).dtype == dtype
    assert (a @ b).dtype == torch.float32


def test_grad_scaler_only_for_fp16():
    assert isinstance(TunedConfig(Knobs(precision="fp16")).grad_scaler("cpu"), torch.amp.GradScaler)
    for p in ("default", "fp32-strict", "tf32", "bf16"):
        assert TunedConfig(Knobs(precision=p)).grad_scaler("cpu") is None


def test_apply_backend_flags_sets_tf32_and_cudnn_benchmark(restored_backend_flags):
    b = torch.backends
    done = TunedConfig(Knobs(precision="tf32", cudnn_benchmark=True)).apply_backend_flags()
    assert done == {"fp32_precision": "tf32", "cudnn_benchmark": True}
    assert b.cudnn.benchmark is True
    if hasattr(b.cuda.matmul, "fp32_precision"):
        assert b.cuda.matmul.fp32_precision == "tf32" and b.cudnn.conv.fp32_precision == "tf32"
    else:
        assert b.cuda.matmul.allow_tf32 and b.cudnn.allow_tf32
    # bf16 names autocast only: fp32 math outside it and cudnn.benchmark stay as they are
    assert TunedConfig(Knobs(precision="bf16")).apply_backend_flags() == {}
    assert b.cudnn.benchmark is True
    if hasattr(b.cuda.matmul, "fp32_precision"):
        assert b.cuda.matmul.fp32_precision == "tf32" and b.cudnn.conv.fp32_precision == "tf32"


def test_env_lists_the_variables_and_leaves_os_environ_alone(monkeypatch):
    monkeypatch.delenv("NCCL_CROSS_NIC", raising=False)
    before = dict(os.environ)
    cfg = TunedConfig(ENV_KNOBS, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    env = cfg.env()
    assert env == {"NCCL_CROSS_NIC": "1", "NCCL_IB_TIMEOUT": "22",
                   "NCCL_SOCKET_IFNAME": "^docker,lo", "NCCL_SOCKET_NTHREADS": "4",
                   "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}  # fmt: skip
    env["NCCL_CROSS_NIC"] = "0"
    assert cfg.env()["NCCL_CROSS_NIC"] == "1"  # a copy each time
    assert dict(os.environ) == before


def test_ddp_kwargs_are_what_a_distributed_burst_passes_to_ddp(monkeypatch):
    """The burst's own DDP call (dist_worker) gets the same arguments as cfg.ddp_kwargs()."""
    from types import SimpleNamespace

    from workbench.distributed import rank as dist_worker
    from workbench.engine import sharding

    knobs = KNOBS[1].replace(sharding="ddp")
    cfg = TunedConfig(knobs)
    assert cfg.ddp_kwargs() == {"bucket_cap_mb": 100.5, "gradient_as_bucket_view": True,
                                "static_graph": True}  # fmt: skip
    seen = {}
    monkeypatch.setattr(sharding, "DistributedDataParallel", lambda m, **kw: seen.update(kw))
    rank = SimpleNamespace(knobs=knobs, dev=torch.device("cpu"), _on_phase=lambda p: None)
    dist_worker.DdpCoordinator.wrap_model(rank, torch.nn.Linear(2, 2))
    assert {k: v for k, v in seen.items() if k != "device_ids"} == cfg.ddp_kwargs()


def test_torchrun_command_for_one_node_and_for_several():
    cfg = TunedConfig(Knobs(world_size=4, nccl={"NCCL_SOCKET_IFNAME": "eth0"}))
    assert cfg.torchrun_command("train.py") == "torchrun --standalone --nproc_per_node=4 train.py"
    assert cfg.torchrun_command("my train.py", nproc_per_node=2, script_args=["--lr", "0.1"]) == (
        "torchrun --standalone --nproc_per_node=2 'my train.py' --lr 0.1"
    )
    assert cfg.torchrun_command("t.py", nnodes=2) == (
        "torchrun --nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d "
        "--rdzv_endpoint=$MASTER_ADDR:29500 --rdzv_id=$JOB_ID t.py"
    )
    line = cfg.torchrun_command("t.py", nnodes="1:4", rdzv_endpoint="10.0.0.1:29400",
                                rdzv_id="job7", with_env=True)  # fmt: skip
    assert line.startswith("NCCL_SOCKET_IFNAME=eth0 torchrun --nnodes=1:4 --nproc_per_node=4")
    assert "--rdzv_endpoint=10.0.0.1:29400 --rdzv_id=job7 t.py" in line
    for bad in [{"nnodes": 0}, {"nnodes": "two"}, {"nproc_per_node": 0},
                {"nnodes": 2, "rdzv_endpoint": "a b; rm -rf /"}]:  # fmt: skip
        with pytest.raises(InputError):
            cfg.torchrun_command("t.py", **bad)


def test_describe_gives_lines_to_paste(tmp_path, same_machine):
    path = save_config(_result(), tmp_path / "t.yaml", env={ALLOC: "expandable_segments:True"})
    cfg = load_config(path)
    text = cfg.describe("fit.py")
    assert "resnet50 on NVIDIA H200 (cuda:0), 2,931.1 samples/s, step 87.3 ms" in text
    assert "export NCCL_SOCKET_IFNAME='^docker,lo'\n" in text  # quoted for the shell
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" in text
    assert "DataLoader(dataset, batch_size=256, num_workers=8, pin_memory=True," in text
    assert "\ntorchrun --standalone --nproc_per_node=4 fit.py\n" in text  # 8 ranks on 2 nodes


# --------------------------------------------------------------------------- light imports


def test_load_config_imports_no_ui_and_no_dali(tmp_path):
    path = save_config(_result(), tmp_path / "t.yaml")
    doc = run_with_ui_blocked(
        f"""
        import warnings
        from workbench.config.saved import load_config
        out["torch_at_import"] = "torch" in sys.modules
        warnings.simplefilter("ignore")
        cfg = load_config({str(path)!r})
        out["torch_after_load"] = "torch" in sys.modules  # a script reads it before CUDA work
        cfg.describe()
        with cfg.autocast("cpu"):
            pass
        loader = cfg.dataloader([1, 2, 3], num_workers=0)
        out.update(
            batch_size=loader.batch_size,
            scaler=cfg.grad_scaler("cpu") is None,
            flags=sorted(cfg.apply_backend_flags()),
            env=sorted(cfg.env()),
            ddp=sorted(cfg.ddp_kwargs()),
            launch=cfg.torchrun_command("train.py", nnodes=2),
        )
        """
    )
    assert doc.pop("leaked") == [] and doc.pop("torch_at_import") is False
    assert doc.pop("torch_after_load") is False
    assert doc["batch_size"] == 256 and doc["scaler"] is True  # bf16: no GradScaler
    assert doc["flags"] == ["cudnn_benchmark"] and "NCCL_CROSS_NIC" in doc["env"]  # bf16: no math
    assert doc["ddp"] == ["bucket_cap_mb", "gradient_as_bucket_view", "static_graph"]
    assert doc["launch"].startswith("torchrun --nnodes=2 --nproc_per_node=8")


def test_debug_only_nccl_variables_are_suggestions_in_the_file_not_env(tmp_path):
    knobs = Knobs(world_size=2, nccl={"NCCL_PROTO": "Simple", "NCCL_SOCKET_IFNAME": "eth0"})
    with pytest.warns(ConfigWarning, match=r"knobs\.nccl: NCCL_PROTO: NCCL documents it for "):
        path = save_config(knobs, tmp_path / "t.yaml")
    text = path.read_text()
    doc = yaml.safe_load(text)
    assert doc["env"] == {"NCCL_SOCKET_IFNAME": "eth0"} and doc["knobs"]["nccl"] == doc["env"]
    assert doc["suggestions"]["nccl"]["NCCL_PROTO"]["value"] == "Simple"
    assert doc["suggestions"]["nccl"]["NCCL_PROTO"]["measured"]["world_size"] == 2
    head = text[: text.index("\nsuggestions:")].rsplit("\n\n", 1)[1]  # the section's comment
    assert "debugging only" in head and "docs.nvidia.com/deeplearning/nccl" in head
    asked = load_config(path, check_machine=False).describe(nccl_suggestions=True)
    assert "# note: NCCL_PROTO: changes which algorithm" in asked  # numerics, where it is used


# --- the workload's collate_fn in the saved config (issue 14) ---


def test_a_collate_fn_is_saved_by_name_and_used_by_cfg_dataloader(tmp_path, same_machine):
    from workloads_for_tests import _Sequences, pad_tokens

    path = save_config(Knobs(batch_size=4), tmp_path / "t.yaml", collate_fn=pad_tokens)
    doc = yaml.safe_load(path.read_text())
    assert doc["dataloader"]["collate_fn"] == "workloads_for_tests:pad_tokens"
    cfg = load_config(path)
    assert cfg.collate_fn == "workloads_for_tests:pad_tokens"
    batch = next(iter(cfg.dataloader(_Sequences(), num_workers=0)))  # varied lengths: padded
    assert batch["tokens"].shape[0] == 4
    assert cfg.dataloader(_Sequences(), collate_fn=list).collate_fn is list  # an override wins
    assert "collate_fn=workloads_for_tests.pad_tokens" in cfg.describe()
    assert save_config(cfg, tmp_path / "again.yaml").read_text() == path.read_text()


def _impostor():
    def join(items):
        return items

    join.__module__, join.__qualname__ = "os.path", "join"  # a name that imports os.path.join
    return join


@pytest.mark.parametrize(
    ("collate", "says"),
    [
        (lambda items: items, "a lambda (test_saved:<lambda>) cannot be saved by name"),
        (_impostor(), "names another object"),
        (functools.partial(sorted), "a callable partial object cannot be saved"),
        ("no colon", "'module:function'"),
        ("nowhere_module:pad", "cannot be imported here"),
    ],
)
def test_a_collate_fn_without_an_importable_name_is_refused_at_save_time(tmp_path, collate, says):
    with pytest.raises(ConfigError, match=r"dataloader\.collate_fn") as err:
        save_config(Knobs(), tmp_path / "t.yaml", collate_fn=collate)
    assert says in str(err.value)
    assert not (tmp_path / "t.yaml").exists()


def test_a_collate_fn_from_main_is_refused_with_the_fix(tmp_path):
    def pad(items):
        return items

    pad.__module__, pad.__qualname__ = "__main__", "pad"
    with pytest.raises(ConfigError, match=r"pad is defined in __main__.*move it into a module"):
        save_config(Knobs(), tmp_path / "t.yaml", collate_fn=pad)


def test_a_hand_edited_collate_name_is_checked_on_load(tmp_path):
    path = save_config(Knobs(), tmp_path / "t.yaml", collate_fn="workloads_for_tests:pad_tokens")
    path.write_text(path.read_text().replace("workloads_for_tests:pad_tokens", "'pad tokens'"))
    with pytest.raises(ConfigError, match=r"dataloader\.collate_fn: 'pad tokens' is not allowed"):
        load_config(path)


def test_the_launch_section_has_an_srun_line_and_an_sbatch_script(tmp_path, same_machine):
    knobs = Knobs(world_size=8, nccl={"NCCL_SOCKET_IFNAME": "^docker,lo"})
    path = save_config(knobs, tmp_path / "t.yaml", env={"OMP_NUM_THREADS": "8"})
    launch = yaml.safe_load(path.read_text())["launch"]
    assert launch["srun"] == (
        "srun --nodes=$SLURM_NNODES --ntasks-per-node=1 --kill-on-bad-exit=1 --export=ALL "
        "torchrun --nnodes=$SLURM_NNODES --nproc_per_node=8 --rdzv_backend=c10d "
        "--rdzv_endpoint=$MASTER_ADDR:29500 --rdzv_id=$SLURM_JOB_ID train.py"
    )
    script = launch["sbatch"]
    assert script[0] == "#!/bin/bash" and script[-1] == launch["srun"]
    for line in ["#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "export NCCL_SOCKET_IFNAME='^docker,lo'", "export OMP_NUM_THREADS=8"]:  # fmt: skip
        assert line in script
    assert any(line.startswith("export MASTER_ADDR=$(scontrol show hostnames") for line in script)
    shown = load_config(path, check_machine=False).describe()
    assert launch["srun"] in shown and "#SBATCH --gpus-per-node=8" in shown
    # a file saved before srun and sbatch existed still loads; an edited script does not
    text = path.read_text()
    old = re.sub(r"  srun: .*\n  sbatch:\n(  - .*\n)+", "", text)
    assert "  sbatch:" not in old and "  srun:" not in old
    path.write_text(old)
    load_config(path, check_machine=False)
    path.write_text(text.replace("--gpus-per-node=8", "--gpus-per-node=4"))
    with pytest.raises(ConfigError, match=r"launch\.sbatch: .* disagrees with the knobs"):
        load_config(path, check_machine=False)


def test_saving_follows_no_symlink_planted_at_a_predictable_name(tmp_path):
    """A temporary name others can guess (``.NAME.<pid>.tmp``) was opened with ``open(.., "w")``:
    a symlink planted there made the save overwrite the file it points at."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (tmp_path / f".t.yaml.{os.getpid()}.tmp").symlink_to(victim)
    target = save_config(Knobs(batch_size=48), tmp_path / "t.yaml")
    assert victim.read_text() == "mine\n"
    assert not target.is_symlink() and _load_quietly(target).knobs.batch_size == 48


def test_loading_warns_about_each_variable_that_can_run_code_or_touch_files(tmp_path):
    """A config is trusted input: its variables reach every rank. Loading names each one that
    loads a library or writes a file there, with what it can do, and refuses none."""
    knobs = Knobs(nccl={"NCCL_CROSS_NIC": "1", "NCCL_NET_PLUGIN": "aws-ofi",
                        "NCCL_DEBUG_FILE": "/tmp/nccl.%h.%p"})  # fmt: skip
    path = save_config(knobs, tmp_path / "t.yaml", env={"LD_PRELOAD": "/opt/x.so"})
    text = path.read_text()
    assert "trusted input: NCCL loads the network plugin" in text  # the file says it too
    with pytest.warns(ConfigWarning) as caught:
        cfg = load_config(path, check_machine=False)
    said = [str(w.message) for w in caught if "trusted input" in str(w.message)]
    assert len(said) == 3
    assert any("knobs.nccl.NCCL_NET_PLUGIN='aws-ofi': NCCL loads the network plugin" in m
               for m in said)  # fmt: skip
    assert any("knobs.nccl.NCCL_DEBUG_FILE" in m and "truncated" in m for m in said)
    assert any("env.LD_PRELOAD='/opt/x.so'" in m and "loads the libraries" in m for m in said)
    assert cfg.env()["NCCL_NET_PLUGIN"] == "aws-ofi"  # warned, not refused


def test_a_config_without_such_variables_loads_without_that_warning(tmp_path):
    path = save_config(Knobs(nccl={"NCCL_CROSS_NIC": "1"}), tmp_path / "t.yaml")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_config(path, check_machine=False)
    assert not [w for w in caught if "trusted input" in str(w.message)]
