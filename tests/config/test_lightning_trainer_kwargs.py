"""TunedConfig.lightning_trainer_kwargs: the tuned knobs as a real lightning Trainer takes them."""

import lightning as L
import pytest

from workbench.config.tuned_config import TunedConfig
from workbench.core.knobs import PRECISIONS, Knobs

LIGHTNING_NAMES = {
    "default": "32-true",
    "fp32-strict": "32-true",
    "tf32": "32-true",
    "bf16": "bf16-mixed",
    "fp16": "16-mixed",
}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_each_precision_maps_to_lightnings_name_and_a_trainer_takes_it(precision):
    kwargs = TunedConfig(Knobs(precision=precision, grad_accum=3)).lightning_trainer_kwargs()
    assert kwargs["precision"] == LIGHTNING_NAMES[precision]
    assert kwargs["accumulate_grad_batches"] == 3 and kwargs["devices"] == 1
    if precision == "fp16":
        return  # on a CPU Lightning swaps 16-mixed for bf16-mixed (no fp16 AMP there)
    trainer = L.Trainer(**kwargs, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_checkpointing=False, enable_model_summary=False)  # fmt: skip
    assert trainer.precision == LIGHTNING_NAMES[precision]
    assert trainer.accumulate_grad_batches == 3


def test_every_known_precision_has_a_name():
    assert set(LIGHTNING_NAMES) == set(PRECISIONS)


def test_several_ranks_get_a_ddp_strategy_with_the_tuned_ddp_knobs():
    knobs = Knobs(world_size=4, nodes=2, bucket_cap_mb=50, gradient_as_bucket_view=True)
    kwargs = TunedConfig(knobs).lightning_trainer_kwargs()
    assert (kwargs["devices"], kwargs["num_nodes"]) == (2, 2)
    strategy = kwargs["strategy"]
    assert isinstance(strategy, L.pytorch.strategies.DDPStrategy)
    assert strategy._ddp_kwargs["bucket_cap_mb"] == 50
    assert strategy._ddp_kwargs["gradient_as_bucket_view"] is True


def test_the_loader_knobs_are_the_dataloaders_not_the_trainers():
    cfg = TunedConfig(Knobs(batch_size=48, num_workers=2))
    assert not {"batch_size", "num_workers"} & set(cfg.lightning_trainer_kwargs())
    assert cfg.dataloader_kwargs("cpu")["batch_size"] == 48


def test_fsdp_gets_lightnings_fsdp2_strategy_over_every_rank():
    kwargs = TunedConfig(Knobs(world_size=4, nodes=2, sharding="fsdp")).lightning_trainer_kwargs()
    strategy = kwargs["strategy"]
    assert isinstance(strategy, L.pytorch.strategies.ModelParallelStrategy)
    assert (strategy._data_parallel_size, strategy._tensor_parallel_size) == (4, 1)
