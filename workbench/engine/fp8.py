"""The ``fp8`` knob: float8 training of a model's Linear layers, through torchao.

What it changes: torchao's ``convert_to_float8_training`` swaps each chosen ``nn.Linear`` for
its ``Float8Linear``, whose forward and backward cast the input, the weight and the output's
gradient to float8 with scales computed on the fly (dynamic scaling) and multiply them with
``torch._scaled_mm`` on the GPU's float8 tensor cores. The weights themselves stay as they
were (fp32 masters here) and keep their ``Parameter`` objects, so the optimizer, a tied
embedding and the saved state are unchanged. The knob's value is the recipe
(``Float8LinearConfig.from_recipe_name``): ``tensorwise`` (one scale a tensor, cuBLAS: the
fastest), ``rowwise`` (a scale a row, CUTLASS, scales rounded to powers of two) or
``rowwise_with_gw_hp`` (rowwise with the weight gradient in high precision: the most
accurate). It needs ``precision=bf16`` (``Knobs`` says why): everything outside the converted
matmuls (attention, norms, the head) runs in bf16 autocast, and bf16 is what fp8 is measured
against.

Which layers (:func:`plan_linears`), as torchao's documentation filters them
(``module_filter_fn``):

- not a Linear with a dimension that is not a multiple of 16: the float8 matmul needs both;
- not the output head: its logits feed a softmax over the whole vocabulary, and torchao's
  example and torchtitan keep the last layer in high precision. The head is the model's
  ``get_output_embeddings()`` (Hugging Face models), else its last Linear in module order;
  a Linear whose weight is also an ``nn.Embedding``'s (a tied head) counts as one too.

Small matmuls can be slower in float8 (the casts and the scales cost memory traffic that a
short matmul does not earn back; torchao's README tabulates it on an H100): the burst measures
that rather than guessing it, so no size filter beyond the 16.

Where it cannot act, it says so, never silently:

- a CPU or a GPU below compute capability 8.9 (Ada, Hopper and Blackwell have float8 tensor
  cores): ``no_effect`` says so and the layers stay as they are. (PyTorch has a CPU
  ``_scaled_mm`` too, with no float8 units behind it: not what the knob is for.)
- torchao not installed where the knob could act: a KnobError in set-up, whose result is an
  error naming ``fp8``, with the pip command (:data:`INSTALL`);
- a model without an eligible Linear (a convnet whose only Linear is its classifier):
  ``no_effect`` names what was skipped and why.

torch.compile: without it, each cast and scale is a kernel of its own and float8 is often
slower than bf16; torchao's documentation pairs the conversion with ``torch.compile``, which
fuses them. A burst with ``compile=off`` says so in its notes.

MFU: an fp8 burst's is still against the bf16 peak (the ``precision`` knob's): the model's
FLOPs are the same, and only the converted matmuls run on float8 units, so a float8 peak
would be the ceiling of no part of the model.
"""

from __future__ import annotations

import importlib.util
import os
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from workbench.core.errors import KnobError
from workbench.core.knobs import Knobs
from workbench.engine.failures import describe_error

MIN_CAPABILITY = (8, 9)
"""Float8 tensor cores: Ada (8.9), Hopper (9.0), Blackwell (10.0, 12.0)."""
DIVISOR = 16
"""Both dimensions of a converted Linear are multiples of this (``torch._scaled_mm``)."""
INSTALL = "pip install 'throughput-workbench[fp8]' (or pip install 'torchao>=0.17', torch 2.11+)"
SPACE = ["off", "tensorwise", "rowwise"]
"""The tuner's values: the fastest recipe and the accurate one; ``rowwise_with_gw_hp`` is an
accuracy choice (its weight gradients run in bf16), left to a person."""
COMPILE_NOTE = (
    "fp8 ran without torch.compile: each float8 cast and scale is a kernel of its own, which "
    "torchao's documentation fuses with torch.compile; compare it with compile on"
)


@dataclass
class Fp8Plan:
    """Which Linear layers float8 training converts, and why the others stay."""

    converted: list[str] = field(default_factory=list)
    """Qualified names of the Linear layers converted (or to convert)."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Qualified name of each Linear left as it is, with the reason."""

    def no_effect(self, workload_name: str) -> str | None:
        """The reason the knob did nothing, where no layer was eligible; else None."""
        if self.converted:
            return None
        if not self.skipped:
            return f"{workload_name} has no Linear layer: float8 training converts only those"
        shown = "; ".join(f"{name}: {why}" for name, why in list(self.skipped.items())[:3])
        more = f" (and {len(self.skipped) - 3} more)" if len(self.skipped) > 3 else ""
        return f"no Linear layer of {workload_name} can train in float8 ({shown}{more})"


def device_refusal(device: torch.device) -> str | None:
    """Why float8 matmuls cannot run on ``device`` (None where they can)."""
    needs = (
        "float8 training needs float8 tensor cores (CUDA compute capability 8.9+: Ada, "
        "Hopper, Blackwell)"
    )
    if device.type != "cuda":
        return f"{needs}; this is a {device.type.upper()}"
    try:
        major, minor = torch.cuda.get_device_capability(device)
    except (AssertionError, RuntimeError) as exc:  # a panel asked about CUDA on a CPU box
        return f"{needs}; no CUDA device answers here ({str(exc).splitlines()[0]})"
    if (major, minor) < MIN_CAPABILITY:
        return f"{needs}; this GPU is {major}.{minor}"
    return None


def fp8_no_effect(knobs: Knobs, device: torch.device) -> dict[str, str]:
    """``{"fp8": reason}`` where the device has no float8 tensor cores (known before the
    model exists; a model without eligible layers is found in set-up)."""
    why = device_refusal(device) if knobs.fp8 != "off" else None
    return {"fp8": f"{why}: the Linear layers trained unconverted, in bf16"} if why else {}


def torchao_missing() -> str | None:
    """Why torchao cannot be imported (None when it looks importable; nothing imported)."""
    try:
        found = importlib.util.find_spec("torchao") is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"float8 training needs torchao, not installed here: {INSTALL}"


def plan_linears(model: nn.Module) -> Fp8Plan:
    """The Linear layers float8 training converts in ``model`` (module docstring: all but the
    output head and those with a dimension not a multiple of 16). Reads shapes only: works on
    a model built on the meta device."""
    plan = Fp8Plan()
    heads = _heads(model)
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        if id(module) in heads:
            plan.skipped[name] = "the output head stays in bf16"
        elif module.in_features % DIVISOR or module.out_features % DIVISOR:
            shape = f"{module.in_features}x{module.out_features}"
            plan.skipped[name] = f"{shape}: a dimension is not a multiple of {DIVISOR}"
        else:
            plan.converted.append(name)
    return plan


def _heads(model: nn.Module) -> set[int]:
    """The output head: Hugging Face's ``get_output_embeddings()``, else the last Linear; and
    any Linear whose weight is an Embedding's (tied to the token table)."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    own = getattr(model, "get_output_embeddings", None)
    head = own() if callable(own) else None
    if not isinstance(head, nn.Linear):
        head = linears[-1] if linears else None
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    tied = {id(m) for m in linears if id(m.weight) in tables}
    return tied | ({id(head)} if head is not None else set())


def convert(model: nn.Module, recipe: str) -> tuple[nn.Module, Fp8Plan]:
    """Swap the planned Linear layers of ``model`` for torchao's ``Float8Linear`` with
    ``recipe`` (in place; the model is returned too, as torchao returns it). Converting needs
    no GPU; training the result at speed does. KnobError naming ``fp8`` without torchao."""
    missing = torchao_missing()
    if missing is not None:
        raise KnobError("fp8", recipe, f"off here: {missing}")
    # torchao: the fp8 extra's, imported only when a model is converted
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    plan = plan_linears(model)
    chosen = set(plan.converted)
    if chosen:
        config = Float8LinearConfig.from_recipe_name(recipe)
        model = convert_to_float8_training(
            model, module_filter_fn=lambda _m, fqn: fqn in chosen, config=config
        )
    return model, plan


def convert_for_burst(
    model: nn.Module, recipe: str | None, workload_name: str
) -> tuple[nn.Module, int | None, str | None]:
    """The burst's conversion with the recipe its plan chose (``engine.plan``: None where the
    knob is off or the device cannot run float8, which ``fp8_no_effect`` reports from the
    start): (the model, Linear layers converted, or None where the knob did not act, and the
    reason it found no layer to convert)."""
    if recipe is None:
        return model, None, None
    model, plan = convert(model, recipe)
    why = plan.no_effect(workload_name)
    return model, (len(plan.converted) if why is None else None), why


def refusal_of(exc: BaseException, recipe: str | None) -> KnobError | None:
    """A failure raised inside torchao's float8 code (a recipe this GPU's kernels refuse, a
    shape they cannot take) as the KnobError that names ``fp8``: the burst's set-up check then
    fails with ``bad_knob`` fp8, not as a batch the model cannot take. None for any other
    failure, or where no layer was converted (``recipe`` None)."""
    if recipe is None:
        return None
    where = (frame.filename for frame in traceback.extract_tb(exc.__traceback__))
    if not any(f"{os.sep}torchao{os.sep}" in name for name in where):
        return None
    said = f"off, or a recipe this model and GPU can train: {recipe} failed in set-up"
    return KnobError("fp8", recipe, f"{said} ({describe_error(exc)})")


def eligible_layers(workload: Any) -> int | None:
    """How many Linear layers float8 would convert in ``workload``'s model (``meta_plan``);
    None where the model cannot be built on the meta device."""
    plan = meta_plan(workload)
    return None if plan is None else len(plan.converted)


def meta_plan(workload: Any) -> Fp8Plan | None:
    """:func:`plan_linears` of ``workload``'s model built on the meta device (shapes only:
    nothing allocated, nothing initialised for real); None where it cannot be built there."""
    try:
        with torch.device("meta"):
            model = workload.model()
    except Exception:  # a user's model may not build on meta: unknown, not zero
        return None
    return plan_linears(model) if isinstance(model, nn.Module) else None


def unavailable(device: torch.device, workload: Any = None) -> str | None:
    """Why the knob cannot act here, for the panel's greyed control: the device, torchao, or
    (a workload given) a model with no eligible Linear layer."""
    why = device_refusal(device) or torchao_missing()
    if why is not None or workload is None:
        return why
    plan = meta_plan(workload)
    return None if plan is None else plan.no_effect(workload.name)


def fp8_space(workload: Any, device: torch.device) -> dict[str, list[str]]:
    """The tuner's values for ``fp8`` here (:data:`SPACE`): on a GPU with float8 tensor cores,
    torchao installed, for a model with a Linear layer to convert. Empty elsewhere. Values
    other than ``off`` are measured only at ``precision=bf16`` (``Knobs`` refuses the rest)."""
    if device_refusal(device) or torchao_missing() or not eligible_layers(workload):
        return {}  # eligible_layers: 0, or None for a model that does not build on meta
    return {"fp8": list(SPACE)}


def production_convert(model: nn.Module, knobs: Knobs, device: torch.device) -> nn.Module:
    """:func:`convert` for a production script (``TunedConfig.convert_fp8``): where the device
    cannot run float8, or no layer is eligible, a RuntimeWarning says so and the model comes
    back as it was, as the bursts reported it in ``no_effect``."""
    if knobs.fp8 == "off":
        return model
    why = device_refusal(device)
    if why is None:
        model, plan = convert(model, knobs.fp8)
        why = plan.no_effect(type(model).__name__)
    if why is not None:
        warnings.warn(f"fp8={knobs.fp8}: {why}: the model is returned unconverted",
                      RuntimeWarning, stacklevel=3)  # fmt: skip
    return model


__all__ = [
    "COMPILE_NOTE",
    "DIVISOR",
    "INSTALL",
    "MIN_CAPABILITY",
    "SPACE",
    "Fp8Plan",
    "convert",
    "convert_for_burst",
    "device_refusal",
    "eligible_layers",
    "fp8_no_effect",
    "fp8_space",
    "meta_plan",
    "plan_linears",
    "production_convert",
    "refusal_of",
    "torchao_missing",
    "unavailable",
]
