"""One ipywidgets control per knob, built from the Knobs field specs.

Sliders move on scales that make sense for the knob (batch size and accumulation in powers of
two, workers from 0 to the core count, world_size up to one rank per GPU or CPU core), choices
are dropdowns, switches are checkboxes, NCCL variables a text area. Every control carries the
knob's one-line doc as its tooltip. Text and number boxes report on Enter or leaving the box
(``continuous_update=False``): a burst per keystroke would measure half-typed values. Number
boxes are not bounded widgets, which clamp silently: an out-of-range value reaches ``Knobs``,
whose error names the knob, the value and what is allowed, shown beside the box. Controls
that cannot act on this device are shown disabled, with the reason beside them, rather than
hidden: a person should see that the knob exists and why it is grey.
"""

from __future__ import annotations

import os
from typing import Any

import ipywidgets as w
import torch

from workbench.core.knobs import KnobError, Knobs, KnobSpec, knob_specs
from workbench.core.numerics import tooltip_line
from workbench.engine.attention import uses_sdpa
from workbench.engine.fp8 import unavailable as fp8_unavailable
from workbench.engine.loaders.dali import dali_available
from workbench.engine.packing import has_documents, no_documents
from workbench.engine.workloads import Workload

POWERS_OF_TWO = tuple(2**i for i in range(13))  # 1 .. 4096
ACCUM_STEPS = (1, 2, 4, 8, 16, 32, 64)
PREFETCH = (0, 1, 2, 4, 8, 16)  # 0 stands for "unset": a SelectionSlider cannot hold None
_STYLE = {"description_width": "180px"}  # the longest name, activation_checkpointing, whole
_LAYOUT = {"width": "410px"}


def disabled_reasons(device_type: str, workload: Workload | None = None) -> dict[str, str]:
    """Knobs whose control is greyed out here (on this device, for this workload where one
    is given), with the reason shown beside it."""
    reasons = {}
    if workload is not None and uses_sdpa(workload) is False:
        reasons["attention"] = f"{workload.name} has no attention layers: no SDPA kernel to pick"
    if workload is not None and not has_documents(workload):
        reasons["packing"] = no_documents(workload).removeprefix("off for workload ")
    fp8_why = fp8_unavailable(torch.device(device_type), workload)
    if fp8_why is not None:
        reasons["fp8"] = fp8_why
    if device_type != "cuda":
        reasons["nccl"] = "NCCL acts only on GPUs: ranks on this CPU talk over gloo"
        reasons["pin_memory"] = "pinned memory speeds host-to-GPU copies: needs CUDA"
        reasons["cudnn_benchmark"] = "cuDNN runs only on NVIDIA GPUs"
        reasons["dali_hw_decoder_load"] = "the hardware JPEG decoder is on the GPU: needs CUDA"
        reasons["decode"] = "decode=gpu decodes with nvJPEG on the GPU: needs CUDA"
    no_nodes = nodes_unavailable(device_type)
    if no_nodes:
        reasons["nodes"] = no_nodes
    no_shards = sharding_unavailable(device_type)
    if no_shards:
        reasons["sharding"] = reasons["reshard_after_forward"] = no_shards
    no_dali = dali_available()  # loader=dali stays selectable: its burst error says the same
    if no_dali:
        reasons["dali_decode"] = reasons["dali_hw_decoder_load"] = no_dali
    return reasons


def max_ranks(device_type: str) -> int:
    """Ranks one machine can run: one per GPU, or one per CPU core."""
    if device_type == "cuda":
        return max(1, torch.cuda.device_count())
    return os.cpu_count() or 1


def in_slurm_allocation() -> bool:
    """Inside ``salloc``/``sbatch``: the slurm launcher can put an agent on every node."""
    return bool(os.environ.get("SLURM_JOB_ID"))


def max_nodes(device_type: str) -> int:
    """Nodes the panel's launcher can reach: the allocation's inside SLURM, else "nodes" on
    this machine (the local launcher), each needing at least one GPU or core of its own."""
    if in_slurm_allocation():
        return max(
            1, int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1)
        )
    return max_ranks(device_type)


def nodes_unavailable(device_type: str) -> str:
    """Why ``nodes`` cannot go above 1 here ("" when it can). The panel launches with the
    slurm launcher inside an allocation and the local one elsewhere (host lists for ssh are
    for ``run_burst``/the CLI); local nodes on a GPU need a GPU each."""
    if not torch.distributed.is_available():
        return "this torch was built without torch.distributed: no launcher can run ranks"
    if max_nodes(device_type) > 1:
        return ""
    if device_type == "cuda":
        return ("one GPU and no SLURM allocation: local nodes need a GPU each; run inside "
                "salloc, or run_burst(..., launcher='ssh', hosts=[...])")  # fmt: skip
    return "one CPU core: local nodes need a core each"


def sharding_unavailable(device_type: str) -> str:
    """Why ``sharding`` (and ``reshard_after_forward``) cannot act here ("" when it can): FSDP
    shards over the ranks of a job, and this machine runs one (one GPU, one core). Where it
    can, a burst at world_size=1 still says in ``no_effect`` that fsdp had nothing to do."""
    if not torch.distributed.is_available():
        return "this torch was built without torch.distributed: no ranks to shard the model over"
    if max_ranks(device_type) > 1:
        return ""
    one = "one GPU" if device_type == "cuda" else "one CPU core"
    return f"fsdp shards the model over the ranks of a job; {one} here runs one rank"


def make_control(spec: KnobSpec, value: Any, device_type: str = "cpu") -> w.ValueWidget:
    """The widget for one knob, showing ``value``, with the knob's doc as tooltip (and its
    numeric class: what it may change in the loss, ``workbench.core.numerics``)."""
    tip = f"{spec.doc} {tooltip_line(spec.name)}".strip()
    common = {"description": spec.name, "tooltip": tip, "style": _STYLE, "layout": _LAYOUT}
    if spec.name in ("batch_size", "grad_accum", "prefetch_factor"):
        scale = {"batch_size": POWERS_OF_TWO, "grad_accum": ACCUM_STEPS}.get(spec.name, PREFETCH)
        value = value or 0  # prefetch_factor None -> the "unset" stop
        labeled = [("unset" if v == 0 else str(v), v) for v in sorted({*scale, value})]
        control = w.SelectionSlider(options=labeled, value=value, continuous_update=False, **common)
    elif spec.name == "world_size":
        top = max(max_ranks(device_type), value)
        control = w.IntSlider(value=value, min=1, max=top, continuous_update=False, **common)
    elif spec.name == "nodes":
        top = max(max_nodes(device_type), value)
        control = w.IntSlider(value=value, min=1, max=top, continuous_update=False, **common)
    elif spec.name == "num_workers":
        top = max(os.cpu_count() or 1, value)
        control = w.IntSlider(value=value, min=0, max=top, continuous_update=False, **common)
    elif spec.kind in ("int", "float"):  # unbounded: Knobs refuses out-of-range, by name
        text_box = w.IntText if spec.kind == "int" else w.FloatText
        control = text_box(value=value, continuous_update=False, **common)
    elif spec.kind == "bool":
        control = w.Checkbox(value=value, indent=False, **common)
    elif spec.kind == "choice":
        control = w.Dropdown(options=list(spec.choices or ()), value=value, **common)
    elif spec.kind == "text":  # alloc_conf: checked by Knobs, the refusal shown beside it
        control = w.Text(value=value, placeholder="expandable_segments:True",
                         continuous_update=False, **common)  # fmt: skip
    else:  # the NCCL mapping
        control = w.Textarea(value=nccl_to_text(value), placeholder="NCCL_ALGO=Ring",
                             continuous_update=False, **common)  # fmt: skip
    control.add_class(f"wb-knob-{spec.name}")
    return control


def nccl_to_text(mapping: Any) -> str:
    return "\n".join(f"{k}={v}" for k, v in dict(mapping or {}).items())


def nccl_from_text(text: str) -> dict[str, str]:
    """``NCCL_X=value`` lines (blank lines ignored); a bad line raises KnobError naming it."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep:
            raise KnobError("nccl", line.strip(), "one NCCL_NAME=value per line")
        out[name.strip()] = value.strip()
    return out


def control_value(spec: KnobSpec, control: w.ValueWidget) -> Any:
    if spec.kind == "mapping":
        return nccl_from_text(control.value)
    if spec.kind == "optional_int":
        return control.value or None
    return control.value


class KnobControls:
    """All knob controls, grouped, with a note beside each (reason it is disabled, or an error)."""

    def __init__(self, knobs: Knobs, device_type: str, workload: Workload | None = None):
        self.specs = {s.name: s for s in knob_specs()}
        self.controls = {
            n: make_control(s, getattr(knobs, n), device_type) for n, s in self.specs.items()
        }
        self.notes = {name: w.HTML(layout={"width": "auto"}) for name in self.specs}
        for name, reason in disabled_reasons(device_type, workload).items():
            self.controls[name].disabled = True
            self.note(name, reason, kind="disabled")

    def note(self, name: str, text: str, kind: str = "info") -> None:
        colour = {"error": "#b00020", "disabled": "#777"}.get(kind, "#555")
        html = f'<span style="color:{colour};font-size:90%">{_escape(text)}</span>' if text else ""
        self.notes[name].value = html
        if kind == "error":
            self.notes[name].add_class("wb-error")
        else:
            self.notes[name].remove_class("wb-error")

    def clear_errors(self, disabled: dict[str, str]) -> None:
        for name in self.specs:
            self.note(name, disabled.get(name, ""), kind="disabled" if name in disabled else "info")

    def values(self) -> dict[str, Any]:
        return {n: control_value(self.specs[n], c) for n, c in self.controls.items()}

    def show(self, knobs: Knobs) -> None:
        """Move every control to ``knobs`` (e.g. after a tune); observers see the changes."""
        for name, control in self.controls.items():
            value = getattr(knobs, name)
            kind = self.specs[name].kind
            if kind == "text":  # alloc_conf: "" is its unset value, not a number
                control.value = value
                continue
            control.value = nccl_to_text(value) if kind == "mapping" else value or 0
            if kind not in ("mapping", "optional_int"):
                control.value = value

    def box(self) -> w.Widget:
        groups = {"data": "Data loading", "compute": "Compute", "memory": "Memory",
                  "dist": "Distributed"}  # fmt: skip
        tabs = []
        for group in groups:
            rows = [
                w.HBox([self.controls[n], self.notes[n]])
                for n, s in self.specs.items()
                if s.group == group
            ]
            tabs.append(w.VBox(rows))
        accordion = w.Tab(children=tabs)
        for i, title in enumerate(groups.values()):
            accordion.set_title(i, title)
        return accordion


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
