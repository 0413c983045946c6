"""`workbench show FILE.yaml`: validates a saved config and prints what to paste."""

import dataclasses
import json
import os
import subprocess
import sys

from workbench.cli import main
from workbench.config import provenance
from workbench.config.saved import save_config
from workbench.core.knobs import Knobs
from workbench.engine import hardware

KNOBS = Knobs(batch_size=64, num_workers=4, pin_memory=True, world_size=2,
              nccl={"NCCL_CROSS_NIC": "1", "NCCL_SOCKET_IFNAME": "^docker,lo"})  # fmt: skip
ALLOC = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_show_prints_env_dataloader_and_torchrun_lines(tmp_path, capsys):
    path = save_config(KNOBS, tmp_path / "tuned.yaml", env=ALLOC)
    assert main(["show", str(path), "--script", "fit.py"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0].startswith(f"# {path}: saved ")
    for line in [
        "export NCCL_CROSS_NIC=1",
        "export NCCL_SOCKET_IFNAME='^docker,lo'",
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True, "
        "persistent_workers=False, prefetch_factor=2)",
        "torchrun --standalone --nproc_per_node=2 fit.py",
        "torchrun --nnodes=$NNODES --nproc_per_node=2 --rdzv_backend=c10d "
        "--rdzv_endpoint=$MASTER_ADDR:29500 --rdzv_id=$JOB_ID fit.py",
    ]:
        assert line in lines


def test_show_json_is_one_document(tmp_path, capsys):
    path = save_config(KNOBS, tmp_path / "tuned.yaml")
    assert main(["show", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["env"] == {"NCCL_CROSS_NIC": "1", "NCCL_SOCKET_IFNAME": "^docker,lo"}
    assert doc["dataloader"]["num_workers"] == 4 and doc["knobs"]["world_size"] == 2
    assert doc["torchrun"]["single_node"].endswith("--nproc_per_node=2 train.py")
    assert doc["warnings"] == []


def test_show_puts_machine_warnings_on_stderr(tmp_path, capsys, monkeypatch):
    h200 = dataclasses.replace(hardware.device_info("cpu"), kind="cuda", name="NVIDIA H200",
                               index=0)  # fmt: skip
    monkeypatch.setattr(hardware, "device_info", lambda device=None: h200)
    path = save_config(KNOBS, tmp_path / "tuned.yaml")  # saved alone, on "an H200"
    monkeypatch.setattr(
        provenance, "current_machine", lambda: {"gpus": ["NVIDIA L4"], "torch": "2.9"}
    )
    assert main(["show", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "export NCCL_CROSS_NIC=1" in out
    assert err.startswith("workbench show: warning: ")
    assert "saved (not measured) on NVIDIA H200; this machine has NVIDIA L4" in err


def test_show_flags_each_variable_that_can_run_code_or_touch_files(tmp_path, capsys):
    knobs = dataclasses.replace(KNOBS, nccl={**KNOBS.nccl, "NCCL_TUNER_PLUGIN": "mine"})
    path = save_config(knobs, tmp_path / "tuned.yaml", env={"PYTHONPATH": "/shared/mods"})
    assert main(["show", str(path)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    at = lines.index("export NCCL_TUNER_PLUGIN=mine")
    assert lines[at - 1].startswith("# trusted input: NCCL_TUNER_PLUGIN: NCCL loads the tuner")
    at = lines.index("export PYTHONPATH=/shared/mods")
    assert lines[at - 1].startswith("# trusted input: PYTHONPATH: Python imports modules")
    assert sum(line.startswith("# trusted input:") for line in lines) == 2
    assert err.count("a config is trusted input, like a script") == 2


def test_a_bad_file_exits_2_with_one_line_naming_file_key_and_problem(tmp_path, capsys):
    path = save_config(KNOBS, tmp_path / "tuned.yaml")
    path.write_text(path.read_text().replace("batch_size: 64", "batch_size: -1", 1))
    assert main(["show", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == (
        f"workbench show: error: {path}: knobs.batch_size: -1 is not allowed: "
        "an integer from 1 to 65536"
    )


def test_show_in_a_real_process(tmp_path):
    path = save_config(KNOBS, tmp_path / "tuned.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 2\nknobs: !!python/object/apply:os.system ['echo hi']\n")
    env = {**os.environ, "WORKBENCH_HOME": str(tmp_path / "home")}
    ok = subprocess.run([sys.executable, "-m", "workbench", "show", str(path)],
                        capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "torchrun --standalone --nproc_per_node=2 train.py" in ok.stdout
    no = subprocess.run([sys.executable, "-m", "workbench", "show", str(bad)],
                        capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert no.returncode == 2 and no.stdout == "" and "hi" not in no.stdout
    assert len(no.stderr.strip().splitlines()) == 1 and "Traceback" not in no.stderr
    assert f"{bad}: line 2, column 8: YAML tag '!!python/object/apply:os.system'" in no.stderr


def test_show_prints_the_workload_and_its_training_functions(tmp_path, capsys):
    """A config saved from a burst of a module workload: show names the workload by
    ``module:function``, and gives the lines that read its loss and optimizer back."""
    from workbench.core.results import BurstResult

    source = {"workload": "rebuild_for_tests:make_baskets",
              "collate_fn": "rebuild_for_tests:pad_items", "loss": "rebuild_for_tests:bce",
              "optimizer": "rebuild_for_tests:adamw"}  # fmt: skip
    result = BurstResult(workload="baskets", device="cpu", device_name="Some CPU",
                         samples_per_s=500.0, created_at="2026-12-05T00:00:00+00:00",
                         workload_source=source)  # fmt: skip
    path = save_config(result, tmp_path / "t.yaml")
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"# {path}: rebuild_for_tests:make_baskets on Some CPU")
    assert "loss_fn = cfg.loss()  # rebuild_for_tests:bce" in out
    assert "optimizer = cfg.optimizer(params)  # rebuild_for_tests:adamw" in out
    assert "collate_fn=rebuild_for_tests.pad_items" in out
    assert "gpus-per-node" not in out  # measured on a CPU
    assert main(["show", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["training"] == {"loss": "rebuild_for_tests:bce",
                               "optimizer": "rebuild_for_tests:adamw"}  # fmt: skip
    assert doc["collate_fn"] == "rebuild_for_tests:pad_items"
    assert doc["provenance"]["workload"] == "rebuild_for_tests:make_baskets"


def test_show_lists_what_apply_changes_in_a_fresh_process_under_a_heading(tmp_path, capsys):
    knobs = Knobs(precision="tf32", cudnn_benchmark=True, alloc_conf="expandable_segments:True")
    path = save_config(knobs, tmp_path / "tuned.yaml")
    assert main(["show", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("# what cfg.apply() changes in a fresh process (PyTorch's defaults, no "
                     "variable set)")  # fmt: skip
    listed = []
    for line in lines[at + 1 :]:
        if not line.startswith("  "):
            break
        listed.append(line.strip())
    from workbench.config.saved import load_config

    expected = [str(c) for c in load_config(path).fresh_process_changes()]
    assert listed == expected and "cudnn.benchmark: False -> True" in listed
    assert "PYTORCH_ALLOC_CONF: (unset) -> expandable_segments:True" in listed


def test_show_lists_nccl_suggestions_with_their_figures_and_exports_them_only_when_asked(
    tmp_path, capsys
):
    knobs = Knobs(world_size=2, nccl={"NCCL_ALGO": "Ring"})
    path = save_config(knobs, tmp_path / "tuned.yaml")
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "export NCCL_ALGO" not in out and "NCCL_ALGO=Ring torchrun" not in out
    assert "# NCCL suggestions, not applied: NCCL documents these for debugging only" in out
    assert "#   NCCL_ALGO=Ring  (knobs.nccl: set in the tuned bursts)" in out
    assert "#     measured: world_size 2; nodes 1" in out
    assert main(["show", str(path), "--nccl-suggestions", "--script", "fit.py"]) == 0
    asked = capsys.readouterr().out.splitlines()
    assert "export NCCL_ALGO=Ring" in asked
    assert "NCCL_ALGO=Ring torchrun --standalone --nproc_per_node=2 fit.py" in asked
    assert (
        "  NCCL_ALGO: (unset) -> Ring (NCCL documents it for debugging only; set because "
        "nccl_suggestions=True asked)" in asked
    )
    assert main(["show", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nccl_suggestions"]["NCCL_ALGO"]["value"] == "Ring" and "NCCL_ALGO" not in doc["env"]
    assert all(set(c) == {"name", "before", "after", "kind", "note"} for c in doc["changes"])


def test_show_gives_the_production_lines_for_decode_gpu(tmp_path, capsys):
    """decode=gpu: the loader reads bytes (collate_encoded) and the loop's one call decodes."""
    path = save_config(dataclasses.replace(KNOBS, decode="gpu"), tmp_path / "tuned.yaml")
    assert main(["show", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    loader = next(line for line in lines if line.startswith("DataLoader(dataset, "))
    assert loader.endswith(", collate_fn=workbench.engine.encoded.collate_encoded)")
    assert any(line.startswith("# data: decode=gpu: the workers read the stored bytes")
               for line in lines)  # fmt: skip
    start = lines.index("loader = cfg.dataloader(dataset, shuffle=True)  # dataset: yours, with "
                        "its training transform")  # fmt: skip
    assert lines[start + 1].startswith("for images, labels in cfg.device_batches(loader, device):")
    save_config(KNOBS, tmp_path / "cpu.yaml")
    assert main(["show", str(tmp_path / "cpu.yaml")]) == 0
    assert "device_batches" not in capsys.readouterr().out
