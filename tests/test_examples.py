"""examples/train.py: a plain PyTorch script trains with a saved config, on the CPU too;
examples/huggingface.py: a Hugging Face model's pipeline tunes, in Python and through the CLI."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from workbench.config.saved import ConfigWarning, load_config, save_config
from workbench.core.knobs import Knobs

pytestmark = pytest.mark.concurrent  # scripts and torchrun lines in fresh processes

TRAIN = Path(__file__).resolve().parents[1] / "examples" / "train.py"
LINE = re.compile(
    r"train: ([\d.]+) samples/s \((\d+) process\(es\) on cpu, batch (\d+) x accum (\d+)"
)


def _run(command: list[str], extra_env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.update(extra_env or {})
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, **kw)


def test_train_example_runs_a_tuned_config(tmp_path):
    knobs = Knobs(batch_size=8, num_workers=1, prefetch_factor=2, persistent_workers=True,
                  grad_accum=2)  # fmt: skip
    path = save_config(knobs, tmp_path / "tuned.yaml")
    p = _run([sys.executable, str(TRAIN), "--config", str(path), "--steps", "2", "--warmup", "1",
              "--samples", "64", "--device", "cpu"])  # fmt: skip
    assert p.returncode == 0, p.stderr
    m = LINE.search(p.stdout)
    assert m, p.stdout
    assert float(m[1]) > 0 and m.group(2, 3, 4) == ("1", "8", "2")
    assert "workbench: cfg.prepare_model(): nothing changed" in p.stdout  # the model's set-up
    assert "your loop: gradient accumulation: 1 batch a step -> 2 batches" in p.stdout


def test_the_example_trains_a_decode_gpu_config_and_says_why_the_cpu_decoded(tmp_path, tiny_data):
    """decode=gpu on this CPU: the loader's workers decode (a warning says why) and
    cfg.device_batches hands the step its batches, NHWC with channels_last."""
    knobs = Knobs(batch_size=8, num_workers=1, decode="gpu", channels_last=True)
    path = save_config(knobs, tmp_path / "tuned.yaml")
    args = [sys.executable, str(TRAIN), "--config", str(path), "--steps", "2", "--warmup", "1",
            "--device", "cpu", "--size", "32"]  # fmt: skip
    p = _run([*args, "--data", str(tiny_data / "images")])
    assert p.returncode == 0, p.stderr[-3000:]
    assert "decode=gpu has no effect here: nvJPEG decodes on a CUDA device" in p.stderr
    m = LINE.search(p.stdout)
    assert m and m.group(2, 3) == ("1", "8"), p.stdout


def test_the_example_trains_an_fp8_config_unconverted_on_a_cpu_and_says_why(tmp_path):
    knobs = Knobs(batch_size=8, precision="bf16", fp8="tensorwise")
    path = save_config(knobs, tmp_path / "tuned.yaml")
    p = _run([sys.executable, str(TRAIN), "--config", str(path), "--steps", "1", "--warmup", "1",
              "--samples", "32", "--device", "cpu"])  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    assert "fp8=tensorwise: float8 training needs float8 tensor cores" in p.stderr
    assert "this is a CPU: the model is returned unconverted" in p.stderr
    assert LINE.search(p.stdout), p.stdout


@pytest.mark.slow
def test_the_example_reads_the_tuned_data_format_split_across_ranks(tmp_path, tiny_data):
    """data_format=shards saved: train.py reads the shards copy (cfg.dataset), each of two
    ranks its own shards, with no sampler; a copy not built stops it with the command."""
    import shutil

    from workbench.engine.convert import convert_dataset

    images = tmp_path / "images"
    shutil.copytree(tiny_data / "images", images)
    knobs = Knobs(batch_size=4, data_format="shards", world_size=2)
    path = save_config(knobs, tmp_path / "tuned.yaml")
    args = [str(TRAIN), "--config", str(path), "--data", str(images), "--steps", "2",
            "--warmup", "1", "--device", "cpu"]  # fmt: skip
    p = _run([sys.executable, *args], cwd=tmp_path)
    assert p.returncode != 0 and "workbench data --format shards --from" in p.stderr
    convert_dataset("shards", images, workers=1)
    p = _run(["torchrun", "--standalone", "--nproc_per_node=2", *args], cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    m = LINE.search(p.stdout)
    assert m and m.group(2, 3) == ("2", "4"), p.stdout


@pytest.mark.slow
def test_the_torchrun_line_launches_the_example_on_two_processes(tmp_path, tiny_data):
    """The config's own torchrun line, run as printed: DDP over gloo with every DDP knob set
    (gradient accumulation under no_sync included), fp16 with a GradScaler."""
    knobs = Knobs(batch_size=4, num_workers=1, precision="fp16", world_size=2, bucket_cap_mb=5,
                  gradient_as_bucket_view=True, static_graph=True, grad_accum=2,
                  nccl={"NCCL_DEBUG": "WARN"})  # fmt: skip
    path = save_config(knobs, tmp_path / "tuned.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        cfg = load_config(path)
    args = ["--config", str(path), "--data", str(tiny_data / "images"), "--steps", "2",
            "--warmup", "1", "--device", "cpu"]  # fmt: skip
    line = cfg.torchrun_command(str(TRAIN), script_args=args, with_env=True)
    assert line.startswith("NCCL_DEBUG=WARN torchrun --standalone --nproc_per_node=2 ")
    p = _run(["bash", "-c", line], cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    m = LINE.search(p.stdout)
    assert m, p.stdout
    assert m.group(2, 3, 4) == ("2", "4", "2") and "fp16" in p.stdout


@pytest.mark.slow
def test_the_example_shards_a_fsdp_config_over_two_processes(tmp_path, tiny_data):
    """sharding=fsdp saved: train.py's cfg.wrap_model shards SmallNet's checkpointed blocks,
    then the root, and trains two steps of two micro-batches on two gloo ranks."""
    knobs = Knobs(batch_size=4, world_size=2, sharding="fsdp", reshard_after_forward=False,
                  activation_checkpointing=True, grad_accum=2)  # fmt: skip
    path = save_config(knobs, tmp_path / "tuned.yaml")
    args = ["--config", str(path), "--data", str(tiny_data / "images"), "--steps", "2",
            "--warmup", "1", "--device", "cpu"]  # fmt: skip
    line = load_config(path).torchrun_command(str(TRAIN), script_args=args)
    p = _run(["bash", "-c", line], cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    m = LINE.search(p.stdout)
    assert m and m.group(2, 3, 4) == ("2", "4", "2"), p.stdout


# --- examples/huggingface.py: a real Hugging Face model, tokenized text, dynamic padding ---

ROOT = Path(__file__).resolve().parents[1]
HF_SPACE = {"batch_size": [8, 16], "num_workers": [0, 1]}


@pytest.fixture(scope="module")
def hf():
    """The example as a module under its own name (examples.huggingface), as the CLI finds it."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(ROOT))
    import examples.huggingface as module

    yield module
    sys.path.remove(str(ROOT))


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["workload", "dict_workload"])
def test_a_hugging_face_model_tunes_saves_and_trains_in_production(hf, tmp_path, factory):
    """Tune in Python, save with the workload's collate_fn, and a production DataLoader from
    the loaded config batches the tokenized reviews the way the bursts did."""
    import workbench as wb

    wl = getattr(hf, factory)()
    t = wb.tune(wl, space=HF_SPACE, budget=3, seconds=0.3, warmup_steps=1, device="cpu",
                record=False)  # fmt: skip
    assert t.best_result is not None and t.best_result.ok, t.summary()
    assert all(b.status == "ok" for b in t.bursts), [b.error for b in t.bursts]
    assert t.best_result.flops_per_sample > 0  # counted on the live model: BERT's masks call
    path = wb.save_config(t, tmp_path / "tuned.yaml", collate_fn=wl.collate_fn)  # .item()
    cfg = wb.load_config(path, check_machine=False)
    assert cfg.collate_fn == f"examples.huggingface:{wl.collate_fn.__name__}"
    loader = cfg.dataloader(wl.dataset(), num_workers=0)
    batch = next(iter(loader))
    ids = batch[0]["input_ids"] if isinstance(batch, tuple) else batch["input_ids"]
    assert ids.shape[0] == cfg.knobs.batch_size and ids.shape[1] < hf.MAX_TOKENS  # padded


def test_a_hugging_face_batch_the_model_cannot_take_says_how_to_pass_it(hf):
    import workbench as wb

    wl = dataclasses.replace(hf.workload(), forward=None)
    r = wb.run_burst(wl, Knobs(batch_size=8), seconds=0.3, device="cpu", record=False)
    assert r.status == "error" and r.steps == 0
    assert "(dict {input_ids: int64[8, " in r.error and "attention_mask: int64[8, " in r.error
    assert r.error.endswith("pass forward=lambda model, batch: model(**batch)")


@pytest.mark.slow
def test_the_cli_tunes_the_hugging_face_example_by_module_name(hf, tmp_path):
    out = tmp_path / "tuned.yaml"
    spec = "examples.huggingface:workload"
    p = _run([sys.executable, "-m", "workbench", "tune", "--workload", spec,
              "--space", "batch_size=8,16", "--budget", "2", "--seconds", "0.3", "--device", "cpu",
              "--no-record", "--out", str(out), "--json"],
             cwd=ROOT, extra_env={"PYTHONPATH": str(ROOT)})  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["best"] is not None and doc["out"] == str(out) and out.exists()
    cfg = load_config(out, check_machine=False)
    assert cfg.knobs.batch_size in (8, 16, 32)  # the start (32) or one of the space's
    assert cfg.collate_fn == "examples.huggingface:pad_batch"


@pytest.mark.slow
def test_the_example_script_saves_its_collate_by_module_name(hf, tmp_path):
    out = tmp_path / "tuned.yaml"
    p = _run([sys.executable, str(ROOT / "examples" / "huggingface.py"), "--budget", "2",
              "--seconds", "0.3", "--out", str(out)], cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    cfg = load_config(out, check_machine=False)
    assert cfg.collate_fn == "examples.huggingface:pad_batch"


# --- examples/lightning_example.py: a LightningModule and DataModule, unchanged ---

LIGHTNING_LINE = re.compile(
    r"lightning: burst ([\d.]+) samples/s at batch (\d+); Trainer.fit ([\d.]+) samples/s"
)


def test_the_lightning_example_tunes_and_fits_with_the_tuned_config(tmp_path):
    """Bursts of the module's own training_step, a saved config, and Trainer.fit from
    cfg.lightning_trainer_kwargs() with the DataModule's loader built from the tuned kwargs."""
    pytest.importorskip("lightning")
    out = tmp_path / "tuned.yaml"
    p = _run([sys.executable, str(ROOT / "examples" / "lightning_example.py"), "--seconds",
              "0.3", "--steps", "3", "--out", str(out)], cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr
    m = LIGHTNING_LINE.search(p.stdout)
    assert m, p.stdout
    assert float(m[1]) > 0 and float(m[3]) > 0 and m[2] in ("32", "64")
    assert load_config(out).knobs.batch_size == int(m[2])
