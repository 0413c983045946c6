import os
import subprocess
import sys

import pytest

from workbench.core import allocconf
from workbench.core.knobs import KnobError, Knobs, check_value, parse_value
from workbench.distributed.jobs import worker_env

GOOD = [
    ("expandable_segments:True", "expandable_segments:True"),
    (" expandable_segments: True , max_split_size_mb:128",
     "expandable_segments:True,max_split_size_mb:128"),
    ("garbage_collection_threshold:0.6,max_split_size_mb:20", None),
    ("roundup_power2_divisions:[64:8,256:4,1024:4,>:1]", None),
    ("roundup_power2_divisions:4", None),
    ("backend:cudaMallocAsync", None),
    ("pinned_use_cuda_host_register:True,pinned_num_register_threads:8", None),
    ("per_process_memory_fraction:0.5", None),
]  # fmt: skip


@pytest.mark.parametrize("text, canonical", GOOD)
def test_the_allocator_forms_pytorch_accepts_are_knobs(text, canonical):
    assert Knobs(alloc_conf=text).alloc_conf == (canonical or text)


BAD = [
    ("expandable_segment:True", "unknown allocator option 'expandable_segment'"),
    ("expandable_segments:true", "expandable_segments takes True or False, not 'true'"),
    ("max_split_size_mb:10", "max_split_size_mb takes an integer >= 20"),
    ("garbage_collection_threshold:1.0", "garbage_collection_threshold takes a number between"),
    ("roundup_power2_divisions:3", "roundup_power2_divisions takes a power of 2"),
    ("roundup_power2_divisions:[64:3]", "roundup_power2_divisions takes"),
    ("roundup_power2_divisions:[64:8", "an unclosed '['"),
    ("expandable_segments", "is not key:value"),
    ("expandable_segments:True,expandable_segments:False", "given twice"),
    ("backend:cudaMalloc", "backend takes native or cudaMallocAsync"),
]


@pytest.mark.parametrize("text, words", BAD)
def test_a_bad_alloc_conf_names_the_option_and_lists_the_allowed_ones(text, words):
    with pytest.raises(KnobError) as err:
        Knobs(alloc_conf=text)
    message = str(err.value)
    assert message.startswith("alloc_conf=") and words in message
    if "unknown" in words or "key:value" in words:
        assert "expandable_segments, max_split_size_mb" in message  # the allowed ones
    with pytest.raises(KnobError):
        check_value("alloc_conf", text)  # sweeps and tune spaces refuse it before any burst


def test_unset_is_the_empty_string_and_reads_from_text():
    assert Knobs().alloc_conf == "" and allocconf.env_for("") == {}
    assert parse_value("alloc_conf", "default") == "" and parse_value("alloc_conf", "none") == ""
    assert Knobs().with_text(["alloc_conf=expandable_segments:True"]).alloc_conf == (
        "expandable_segments:True"
    )
    with pytest.raises(KnobError):
        Knobs(alloc_conf=True)


def test_the_fresh_process_gets_both_variables_and_the_knob_wins(monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")  # a stale one
    env = worker_env({}, 1, "expandable_segments:True")
    assert env["PYTORCH_ALLOC_CONF"] == env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:64"  # ours untouched
    assert worker_env({}, 1)["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:64"


def test_the_cli_refuses_a_bad_alloc_conf_with_exit_2():
    p = subprocess.run([sys.executable, "-m", "workbench", "burst", "--set",
                        "alloc_conf=max_split_size:64", "--json"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 2 and p.stdout == ""
    assert "unknown allocator option 'max_split_size'" in p.stderr
    assert "Traceback" not in p.stderr


def test_a_sweep_separates_alloc_conf_values_by_semicolons():
    from workbench.cli.common import parse_values

    values = parse_values("alloc_conf", "default;expandable_segments:True,max_split_size_mb:64")
    assert values == ["", "expandable_segments:True,max_split_size_mb:64"]


@pytest.mark.gpu
def test_gpu_alloc_conf_reaches_a_one_rank_job_and_it_trains_without_ddp():
    from workbench.distributed.dispatch import run_burst

    r = run_burst("cnn", Knobs(batch_size=64, alloc_conf="expandable_segments:True"),
                  seconds=1.0, record=False)  # fmt: skip
    assert r.ok, r.error
    assert r.ranks[0]["alloc_env"]["PYTORCH_ALLOC_CONF"] == "expandable_segments:True"
    assert "alloc_conf" not in r.no_effect and r.fragmentation_pct is not None


def test_a_saved_alloc_conf_is_the_env_of_production_and_a_disagreeing_copy_is_refused(tmp_path):
    from workbench.config import load_config, save_config
    from workbench.config.yaml_text import ConfigError

    k = Knobs(alloc_conf="expandable_segments:True", optimizer_impl="fused",
              activation_checkpointing=True)  # fmt: skip
    path = save_config(k, tmp_path / "t.yaml")
    cfg = load_config(path)
    assert cfg.env() == {"PYTORCH_ALLOC_CONF": "expandable_segments:True",
                         "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}  # fmt: skip
    assert cfg.optimizer_kwargs() == {"foreach": False, "fused": True}
    from workbench.engine.workloads.vision import SmallConvNet

    assert cfg.apply_activation_checkpointing(SmallConvNet(3)) == 4
    text = path.read_text().replace("PYTORCH_ALLOC_CONF: expandable_segments:True",
                                    "PYTORCH_ALLOC_CONF: max_split_size_mb:64")  # fmt: skip
    (tmp_path / "edited.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"env\.PYTORCH_ALLOC_CONF: 'max_split_size_mb:64' "
                                          r"disagrees with knobs\.alloc_conf"):  # fmt: skip
        load_config(tmp_path / "edited.yaml")
    with pytest.raises(ConfigError, match=r"disagrees with knobs\.alloc_conf"):
        save_config(k, tmp_path / "x.yaml", env={"PYTORCH_CUDA_ALLOC_CONF": "backend:native"})


@pytest.mark.parametrize("value", ["expandable_segments:True\x00", "max_split_size_mb:20\x1b",
                                   "expandable_segments:True\nPYTHONPATH=/x",
                                   "roundup_power2_divisions:[256:1\x00,>:8]"])  # fmt: skip
def test_control_characters_never_reach_the_variable(value):
    """Whitespace (a newline too) is dropped and every option's value is checked whole, so a
    NUL or an escape is refused naming the knob, and a newline cannot start another line."""
    try:
        normalized = allocconf.normalize(value)
    except KnobError as exc:
        assert exc.knob == "alloc_conf" and exc.value == value
        return
    assert normalized.isprintable() and "\n" not in normalized
