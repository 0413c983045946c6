"""Saved configs say how to rebuild the run: the workload's ``module:function``, its collate_fn,
its loss and optimizer (``cfg.loss()``, ``cfg.optimizer(params)``); older files still load; a
CPU config asks for no GPU and lists no DALI knob that did not act."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
import yaml
from rebuild_for_tests import BasketNet, Baskets, bce, pad_items
from workloads_for_tests import dict_items_workload

from workbench.config.saved import ConfigError, ConfigWarning, load_config, save_config
from workbench.core.knobs import Knobs
from workbench.core.results import BurstResult
from workbench.distributed.dispatch import run_burst
from workbench.engine import hardware
from workbench.engine.workloads import resolve_workload, source_names

BASKETS = "rebuild_for_tests:make_baskets"
NAMES = source_names(resolve_workload(BASKETS))


@pytest.fixture(scope="module")
def burst() -> BurstResult:
    """One real CPU burst of a user's module workload (padding collate, BCE, AdamW)."""
    r = run_burst(BASKETS, Knobs(batch_size=8, optimizer_impl="for-loop"), seconds=0.2,
                  warmup_steps=1, record=False)  # fmt: skip
    assert r.ok, r.error
    return r


def _cpu_result(knobs: Knobs | None = None, **changes) -> BurstResult:
    """A BurstResult as a CPU burst of the baskets workload gives it (no burst run)."""
    fields = dict(workload="baskets", device="cpu", device_name="Some CPU", knobs=knobs or Knobs(),
                  samples_per_s=500.0, step_ms_p50=16.0, created_at="2026-12-05T00:00:00+00:00",
                  versions={"torch": torch.__version__}, workload_source=dict(NAMES))  # fmt: skip
    fields.update(changes)
    return BurstResult(**fields)


def _doc(path) -> dict:
    return yaml.safe_load(path.read_text())


def _quietly(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return load_config(path)


# --------------------------------------------------------------------------- save and load


def test_a_burst_saved_from_python_keeps_the_collate_the_workload_the_loss_and_the_optimizer(
    burst, tmp_path
):
    path = save_config(burst, tmp_path / "t.yaml")
    doc = _doc(path)
    assert doc["dataloader"]["collate_fn"] == "rebuild_for_tests:pad_items"
    assert doc["provenance"]["workload"] == BASKETS  # not its display name, "baskets"
    assert doc["provenance"]["versions"]["workbench"] == hardware.workbench_version() is not None
    assert doc["training"] == {"loss": "rebuild_for_tests:bce",
                               "optimizer": "rebuild_for_tests:adamw"}  # fmt: skip
    cfg = load_config(path)  # same machine: no warning
    features, target = next(iter(cfg.dataloader(Baskets())))  # varied lengths: padded
    assert features["items"].shape[0] == 8 == target.shape[0]
    assert cfg.loss() is bce
    model = BasketNet()
    opt = cfg.optimizer(model.parameters())
    assert isinstance(opt, torch.optim.AdamW)
    assert opt.defaults["lr"] == 3e-3 and opt.defaults["weight_decay"] == 0.05  # adamw's own
    assert opt.defaults["foreach"] is False  # optimizer_impl=for-loop, as the burst ran it
    cfg.loss()(model(features), target).backward()  # production trains with them
    opt.step()
    assert save_config(cfg, tmp_path / "again.yaml").read_text() == path.read_text()


def test_a_tune_result_and_its_best_knobs_save_the_same_workload(burst, tmp_path):
    class Tuned:  # the shape of workbench.tuning.result.TuneResult that matters here
        best = burst.knobs
        best_result = burst

    from_tune = _doc(save_config(Tuned(), tmp_path / "tune.yaml"))
    from_knobs = _doc(save_config(burst.knobs, tmp_path / "k.yaml", workload=BASKETS))
    for doc in (from_tune, from_knobs):
        assert doc["dataloader"]["collate_fn"] == "rebuild_for_tests:pad_items"
        assert doc["training"]["loss"] == "rebuild_for_tests:bce"
        assert doc["provenance"]["workload"] == BASKETS
    alone = _doc(save_config(burst.knobs, tmp_path / "alone.yaml"))
    assert "training" not in alone and "collate_fn" not in alone["dataloader"]


def test_built_in_names_stay_as_they_are(tmp_path):
    doc = _doc(save_config(Knobs(), tmp_path / "t.yaml", workload="gpt"))
    assert doc["provenance"]["workload"] == "gpt"
    assert doc["training"] == {"loss": "workbench.engine.workloads.gpt:token_loss",
                               "optimizer": "workbench.engine.workloads.gpt:_adamw"}  # fmt: skip
    cfg = _quietly(tmp_path / "t.yaml")
    assert cfg.loss().__name__ == "token_loss"
    params = [torch.nn.Parameter(torch.zeros(2, 2))]
    assert isinstance(cfg.optimizer(params), torch.optim.AdamW)


def test_a_lambda_collate_is_refused_naming_it_and_the_fix(tmp_path):
    with_lambda = dict(NAMES, collate_fn="recmodel:make_rec.<locals>.<lambda>")
    with pytest.raises(ConfigError) as err:
        save_config(_cpu_result(workload_source=with_lambda), tmp_path / "t.yaml")
    said = str(err.value)
    assert err.value.key == "dataloader.collate_fn"
    assert "the workload's collate_fn: a lambda (recmodel:make_rec.<locals>.<lambda>)" in said
    assert "define it at the top level of an importable module" in said
    assert "save_config(result.knobs, path)" in said  # the way out that keeps no collate
    in_main = dict(NAMES, collate_fn="__main__:collate")
    with pytest.raises(ConfigError, match=r"collate is defined in __main__.*move it into a mod"):
        save_config(_cpu_result(workload_source=in_main), tmp_path / "t.yaml")
    wl = dict_items_workload(collate_fn=lambda rows: pad_items(rows))  # a Workload, as given
    with pytest.raises(ConfigError, match=r"dataloader\.collate_fn: .*a lambda"):
        save_config(Knobs(), tmp_path / "t.yaml", workload=wl)
    assert not (tmp_path / "t.yaml").exists()


def test_a_loss_without_an_importable_name_is_left_out_with_a_warning(tmp_path):
    wl = dict_items_workload()  # its loss and forward are lambdas; its collate is importable
    with pytest.warns(ConfigWarning, match=r"training\.loss: left out \(null\).*a lambda"):
        path = save_config(Knobs(), tmp_path / "t.yaml", workload=wl)
    doc = _doc(path)
    assert doc["training"]["loss"] is None
    assert doc["training"]["optimizer"] == "workbench.engine.workloads.base:default_optimizer"
    assert doc["provenance"]["workload"] == "dict-items"  # built by hand: its display name
    with pytest.raises(ConfigError, match=r"training\.loss: not saved: the workload's loss had "
                                          r"no name another process can import"):  # fmt: skip
        _quietly(path).loss()


def test_loss_and_optimizer_errors_name_the_key_and_the_name(tmp_path):
    path = save_config(_cpu_result(), tmp_path / "t.yaml")
    text = path.read_text()
    path.write_text(text.replace("rebuild_for_tests:bce", "nowhere_module:bce"))
    cfg = _quietly(path)  # a name is checked for its form on load, imported when asked for
    with pytest.raises(ConfigError, match=r"training\.loss: 'nowhere_module:bce' cannot be "
                                          r"imported here"):  # fmt: skip
        cfg.loss()
    path.write_text(text.replace("rebuild_for_tests:adamw", "rebuild_for_tests:Baskets.x"))
    with pytest.raises(ConfigError, match=r"training\.optimizer: 'rebuild_for_tests:Baskets\.x'"):
        _quietly(path).optimizer([])
    path.write_text(text.replace("rebuild_for_tests:adamw", "'adam w'"))
    with pytest.raises(ConfigError, match=r"training\.optimizer: 'adam w' is not allowed: a "
                                          r"'package\.module:function' name"):  # fmt: skip
        load_config(path)
    path.write_text(text.replace("  loss: rebuild_for_tests:bce", "  loss: x:y\n  scheduler: z:w"))
    with pytest.raises(ConfigError, match=r"training\.scheduler: unknown key"):
        load_config(path)
    knobs_only = _quietly(save_config(Knobs(), tmp_path / "k.yaml"))
    with pytest.raises(ConfigError, match=r"training\.optimizer: not saved: this config was "
                                          r"saved without its workload"):  # fmt: skip
        knobs_only.optimizer([])


# --------------------------------------------------------------------------- older files


def _as_schema_2(text: str) -> str:
    """A file as workbench wrote it before schema 3: no training section, and a CPU config's
    sbatch script asking for a GPU."""
    text = text.replace("schema_version: 3", "schema_version: 2")
    text = re.sub(r"(?m)^# The workload's loss(.*\n)+?training:\n(  .*\n)+\n", "", text)
    return text.replace(
        "  - '#SBATCH --ntasks-per-node=1'\n",
        "  - '#SBATCH --ntasks-per-node=1'\n  - '#SBATCH --gpus-per-node=1'\n",
    )


def test_a_schema_2_file_still_loads_with_its_gpu_line(tmp_path):
    path = save_config(_cpu_result(), tmp_path / "t.yaml")
    old = _as_schema_2(path.read_text())
    assert "training:" not in old and "--gpus-per-node=1" in old
    path.write_text(old)
    cfg = _quietly(path)
    assert cfg.training is None and cfg.collate_fn == "rebuild_for_tests:pad_items"
    with pytest.raises(ConfigError, match=r"training\.loss: not saved: .*before schema 3"):
        cfg.loss()
    new = _doc(save_config(cfg, tmp_path / "new.yaml"))  # re-saved: schema 3, no GPU line
    assert new["schema_version"] == 3 and not any("gpus" in x for x in new["launch"]["sbatch"])
    # the same GPU line in a schema 3 file is an edited copy, as any other edit of launch
    path.write_text(old.replace("schema_version: 2", "schema_version: 3"))
    with pytest.raises(ConfigError, match=r"launch\.sbatch: .* disagrees with the knobs"):
        load_config(path)


# --------------------------------------------------------------------------- a CPU config


def test_a_cpu_config_asks_for_no_gpu_and_lists_no_dali_knob(tmp_path):
    path = save_config(_cpu_result(Knobs(world_size=2)), tmp_path / "t.yaml")
    doc, text = _doc(path), path.read_text()
    assert not any(k.startswith("dali_") for k in doc["knobs"])
    assert "gpus-per-node" not in text
    cfg = _quietly(path)
    assert cfg.knobs == Knobs(world_size=2)  # a knob left out loads as its default
    assert "gpus-per-node" not in cfg.describe() and cfg.from_cpu()
    assert "#SBATCH --gpus-per-node=2" in cfg.sbatch_lines(gpu_line=True)  # asked for: given
    gpu = dict(device="cuda:0", device_name="NVIDIA H200")
    gpu_doc = _doc(save_config(_cpu_result(Knobs(world_size=2), **gpu), tmp_path / "g.yaml"))
    assert "#SBATCH --gpus-per-node=2" in gpu_doc["launch"]["sbatch"]


def test_a_dali_knob_set_for_another_loader_is_kept_and_marked(tmp_path):
    knobs = Knobs(dali_decode="cpu")  # loader stays torch: the knob did not act
    path = save_config(_cpu_result(knobs), tmp_path / "t.yaml")
    text = path.read_text()
    assert _doc(path)["knobs"]["dali_decode"] == "cpu"
    assert "dali_hw_decoder_load" not in _doc(path)["knobs"]  # at its default: left out
    note = text.split("  dali_decode: cpu")[0].rsplit("\n  # ", 1)[-1]  # the line above it
    assert note.strip() == "No effect: loader is torch, and this knob acts only with loader=dali."
    assert _quietly(path).knobs == knobs
    dali = Knobs(loader="dali")
    assert {"dali_decode", "dali_hw_decoder_load"} <= set(
        _doc(save_config(_cpu_result(dali), tmp_path / "d.yaml"))["knobs"]
    )
