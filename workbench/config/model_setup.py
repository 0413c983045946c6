"""What ``cfg.prepare_model(model)`` does: the model set up as the bursts trained it.

A burst builds its model in one order (``workbench.engine.training.build_train_state``): the
memory layout (``channels_last``, for a model with convolutions), activation checkpointing on
its blocks, the ranks' wrapper (DDP or FSDP2, only in a distributed job), then
``torch.compile``. A production script that loads the config and skips any of these trains
something else than was measured: NCHW on tensor cores, or eager where compile was tuned. So
the set-up is one call, in that order, and says what it changed, as :meth:`TunedConfig.apply`
does for the process.

:func:`planned` is the dry run (torch-free): what ``workbench show`` and the saved file's
header print. Gradient accumulation is listed beside it because it is the training loop's,
not the model's: the script steps its optimizer every ``grad_accum`` batches.

Light imports: torch inside :func:`prepare`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

from workbench.config.changes import Change

if TYPE_CHECKING:
    from workbench.core.knobs import Knobs


class SetsUpModels(Protocol):
    """What :func:`prepare` asks of a config (a ``TunedConfig``; named by what it does, so
    that this module, which ``tuned_config`` imports, imports nothing back)."""

    knobs: Knobs

    def apply_activation_checkpointing(self, model: Any) -> Any: ...

    def wrap_model(self, model: Any, device: Any = None) -> Any: ...


__all__ = ["planned", "prepare", "report", "summary"]

NCHW, NHWC = "contiguous (NCHW)", "channels_last (NHWC)"


def planned(knobs: Knobs) -> list[Change]:
    """What ``prepare_model`` changes on a model with convolutions and blocks to recompute,
    and the loop's accumulation: nothing listed where the knobs are at their defaults."""
    out = []
    if knobs.channels_last:
        out.append(Change("model memory format", NCHW, NHWC, "model",
                          "models with convolutions; the input batches too "
                          "(cfg.device_batches)"))  # fmt: skip
    if knobs.activation_checkpointing:
        out.append(Change("activation checkpointing", "off", "each block recomputed in backward",
                          "model"))  # fmt: skip
    if knobs.world_size > 1:
        out.append(Change("the ranks hold the model", "one process", knobs.sharding, "model",
                          "DDP or FSDP2 as tuned, once torch.distributed is "
                          "initialized"))  # fmt: skip
    if knobs.compile != "off":
        out.append(Change("torch.compile", "off", f"mode={knobs.compile}", "model"))
    if knobs.grad_accum > 1:
        out.append(Change("gradient accumulation", "1 batch a step",
                          f"{knobs.grad_accum} batches an optimizer step", "loop",
                          "the training loop's: step the optimizer every cfg.knobs.grad_accum "
                          "batches"))  # fmt: skip
    return out


def summary(knobs: Knobs) -> str:
    """The saved file's header lines for the model: the call and what it sets with these
    knobs, and the loop's accumulation where there is one."""
    short = {"model memory format": "channels_last", "activation checkpointing": "checkpointing",
             "the ranks hold the model": knobs.sharding,
             "torch.compile": f"compile={knobs.compile}"}  # fmt: skip
    what = [short[c.name] for c in planned(knobs) if c.kind == "model"]
    said = ", ".join(what) if what else "nothing to change with these knobs"
    line = f"  model = cfg.prepare_model(model)  # {said}"
    if knobs.grad_accum > 1:
        line += f"\n  # your loop: step the optimizer every {knobs.grad_accum} batches (grad_accum)"
    return line


def prepare(cfg: SetsUpModels, model: Any, device: Any = None) -> tuple[Any, list[Change]]:
    """``model`` set up as the bursts trained it, and what changed (:func:`planned`'s changes
    that acted on it, each with a note where one could not). The ranks' wrapper follows the
    running job: a process group of two or more ranks wraps the model (``cfg.wrap_model``),
    whatever ``world_size`` the knobs were tuned at."""
    # torch and the engine only when a script prepares a model: load_config stays torch-free
    import torch

    knobs, done = cfg.knobs, []
    steps = [c for c in planned(knobs) if c.kind == "model" and c.name != _RANKS]
    ranks = torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
    if ranks or knobs.world_size > 1:  # before compile, as the bursts wrapped it
        at = next((i for i, c in enumerate(steps) if c.name == "torch.compile"), len(steps))
        steps.insert(at, Change(_RANKS, "one process", knobs.sharding, "model"))
    for change in steps:
        if change.name == "model memory format":
            if not any(isinstance(m, torch.nn.Conv2d) for m in model.modules()):
                done.append(_skipped(change, "no convolution: left as it is, as in the bursts"))
                continue
            model = model.to(memory_format=torch.channels_last)
        elif change.name == "activation checkpointing":
            blocks = cfg.apply_activation_checkpointing(model)
            if not blocks:
                done.append(_skipped(change, "no blocks found (give the model "
                                             "checkpoint_blocks())"))  # fmt: skip
                continue
            change = Change(change.name, change.before, f"{blocks} blocks recomputed in "
                            "backward", "model")  # fmt: skip
        elif change.name == _RANKS:
            if not ranks:
                why = "one process: no process group of two or more ranks"
                done.append(_skipped(change, why))
                continue
            model = cfg.wrap_model(model, device)
        elif change.name == "torch.compile":
            mode = None if knobs.compile == "default" else knobs.compile
            model = torch.compile(model, mode=mode)
        done.append(change)
    return model, done


_RANKS = "the ranks hold the model"


def _skipped(change: Change, why: str) -> Change:
    return Change(change.name, change.before, change.before, change.kind, f"not changed: {why}")


def report(changes: list[Change], knobs: Knobs) -> None:
    """Print what ``prepare_model`` changed, once (rank 0), as ``cfg.apply()`` does, and the
    loop's part (gradient accumulation), which no model call can do."""
    if os.environ.get("RANK", "0") != "0":
        return
    if not changes:
        print("workbench: cfg.prepare_model(): nothing changed")
    else:
        print("workbench: cfg.prepare_model() changed:")
        for change in changes:
            print(f"  {change}")
    for change in planned(knobs):
        if change.kind == "loop":
            print(f"workbench: your loop: {change}")
