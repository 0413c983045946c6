"""Reference results: what a lesson's step does on a data-centre GPU, beside the learner's own.

A laptop measures the mechanics honestly but not the magnitudes: bf16 is *slower* than fp32 on
most CPUs and several times faster on a GPU with tensor cores. So each lesson shows, next to its
sweep, this project's own GPU figures (the kept H200 run, ``gpu_runs.json``) and published ones
(NVIDIA's ResNet-50 training tables, its datasheets), each with its provenance. The files live
in ``notebooks/reference/*.json`` (shipped in the wheel with the lessons); every entry names its
kind:

- ``published``: printed by a source; ``url`` and ``read_on`` (the date it was read) say where;
- ``measured``: measured by this project; ``command`` says how, ``url`` where it is written up;
  a GPU figure also names its ``run``, the kept file ``benchmarks/publish_gpu.py`` generated it
  from (``gpu_runs.json`` is generated whole; a run whose command was not kept says so in
  ``command``);
- ``derived``: computed here from other figures (``formula`` says how), e.g. MFU.

Loading refuses an entry that lacks its provenance: a number without a source is not shown.

Like with like: a kept GPU entry carries the ``knobs`` its burst ran with, so :func:`beside`
says which reference row was measured at the learner's own setting, which one is the nearest
(the kept run has no ``precision=default`` row: for a convnet, PyTorch's default runs cuDNN
convolutions in TF32, so the TF32 row stands in, and says so), and which are there for scale.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.core.knobs import Knobs, current_value
from workbench.engine import hardware
from workbench.workshop.lesson_plans import CONVNETS

__all__ = [
    "BESIDE_COLUMNS",
    "CEILING_ID",
    "CUDNN_ORDER",
    "DATASHEETS",
    "DATA_PATHS_WAITING",
    "KEPT_PRECISIONS",
    "KINDS",
    "LOADER_ID",
    "NEAREST_TO_DEFAULT",
    "PATH_ID",
    "RESNET50_TRAIN_FLOPS",
    "Reference",
    "beside",
    "cudnn_benchmark_note",
    "data_paths",
    "datasheets_of",
    "direction_note",
    "feeding_note",
    "find",
    "is_data_path",
    "likeness",
    "load",
    "mfu_note",
    "mfu_references",
    "parse",
    "precision_ratios",
    "ratio",
    "ratios",
    "reference_dir",
    "table",
]

KINDS = {"published": ("url", "read_on"), "measured": ("command", "url"), "derived": ("formula",)}
"""The provenance each kind of entry must carry, beside the common fields."""
_COMMON = ("id", "lessons", "kind", "workload", "what", "value", "units", "hardware",
           "precision", "batch_size", "source")  # fmt: skip
_MAY_BE_NULL = ("batch_size",)
"""Fields every entry names but that may be null: a datasheet's peak has no batch size."""

RESNET50_TRAIN_FLOPS = 24.29e9
"""Model FLOPs of one ResNet-50 training sample at 224 px (forward + backward), as
``count_train_flops`` counts them on the meta device (tests/workshop/test_reference.py
recounts): the numerator of MFU for the published throughputs."""


@dataclass(frozen=True, slots=True)
class Reference:
    """One reference figure and where it comes from."""

    id: str
    lessons: tuple[str, ...]
    kind: str
    workload: str
    what: str
    value: float
    units: str
    hardware: str
    precision: str
    batch_size: int | None
    source: str
    url: str = ""
    read_on: str = ""
    command: str = ""
    formula: str = ""
    notes: str = ""
    gpus: int | None = None
    device_name: str = ""
    run: str = ""
    """A GPU run's kept file (``benchmarks/results/gpu-*.json``) the figure was generated from."""
    published: str = ""
    """When the source published it, where the entry says (``read_on`` is when we read it)."""
    knobs: dict[str, Any] | None = None
    """A kept GPU burst's knobs (those it set; the rest were the defaults): what
    :func:`beside` matches a learner's setting against."""

    def cited(self) -> str:
        """The source in one line: what, where, when."""
        where = self.url or self.command or self.formula
        when = f", read {self.read_on}" if self.read_on else ""
        return f"{self.source} ({where}{when})"


def reference_dir() -> Path:
    """``notebooks/reference`` in a checkout, ``workbench/lessons/reference`` in a wheel."""
    package = Path(__file__).resolve().parents[1]
    for path in (package / "lessons" / "reference", package.parent / "notebooks" / "reference"):
        if path.is_dir():
            return path
    raise FileNotFoundError(f"no reference folder under {package}: reinstall the package")


def parse(entry: Mapping[str, Any], origin: str = "") -> Reference:
    """One entry of a reference file, checked: ValueError naming the entry and the missing
    field when its provenance is incomplete."""
    name = entry.get("id", "?")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{origin} entry {name!r}: kind={kind!r}, allowed: {', '.join(KINDS)}")
    missing = [f for f in (*_COMMON, *KINDS[kind])
               if f not in entry or entry[f] in ("", []) or
               (entry[f] is None and f not in _MAY_BE_NULL)]  # fmt: skip
    if missing:
        raise ValueError(f"{origin} entry {name!r} ({kind}) lacks {', '.join(missing)}")
    fields = {f: entry[f] for f in Reference.__slots__ if f in entry}  # type: ignore[attr-defined]
    fields["lessons"] = tuple(str(x) for x in entry["lessons"])
    fields["value"] = float(entry["value"])
    return Reference(**fields)


def load(folder: Path | None = None) -> list[Reference]:
    """Every entry of every ``*.json`` in ``folder`` (the shipped references by default), with
    the derived MFU figures added."""
    folder = reference_dir() if folder is None else folder
    refs: list[Reference] = []
    for path in sorted(folder.glob("*.json")):
        refs += [parse(e, path.name) for e in json.loads(path.read_text())["entries"]]
    return refs + mfu_references(refs)


def mfu_references(refs: Iterable[Reference]) -> list[Reference]:
    """MFU of each published one-GPU ResNet-50 throughput whose GPU and precision have a
    datasheet peak (``hardware.peak_flops``): samples/s x FLOPs per sample / peak."""
    derived = []
    for r in refs:
        peak_key = _peak_precision(r.precision)
        if r.kind != "published" or r.workload != "resnet50" or r.gpus != 1 or not peak_key:
            continue
        if r.units != "images/s":
            continue
        peak = hardware.peak_flops(r.hardware, peak_key)
        mfu = hardware.estimate_mfu(RESNET50_TRAIN_FLOPS, r.value, peak)
        if mfu is None or peak is None:
            continue
        derived.append(Reference(
            id=f"{r.id}-mfu", lessons=("07",), kind="derived", workload=r.workload,
            what="MFU: model FLOPs achieved / datasheet dense peak", value=round(mfu, 1),
            units="% of peak", hardware=r.hardware, precision=r.precision,
            batch_size=r.batch_size, gpus=1, source=f"computed from {r.id}",
            formula=f"{r.value:,.0f} images/s x {RESNET50_TRAIN_FLOPS / 1e9:.1f} GFLOP / "
                    f"{peak / 1e12:,.0f} TFLOP/s ({peak_key} peak)",
        ))  # fmt: skip
    return derived


def _peak_precision(precision: str) -> str | None:
    text = precision.lower()
    for word, key in (("amp", "fp16"), ("tf32", "tf32"), ("bf16", "bf16"), ("fp32", "fp32")):
        if word in text:
            return key
    return None


def find(ref_id: str, refs: Iterable[Reference] | None = None) -> Reference:
    """The entry named ``ref_id``; KeyError listing the known ids otherwise."""
    refs = list(load() if refs is None else refs)
    for r in refs:
        if r.id == ref_id:
            return r
    raise KeyError(f"no reference {ref_id!r}; known: {', '.join(r.id for r in refs)}")


def table(lesson: str, refs: Iterable[Reference] | None = None) -> pd.DataFrame:
    """The reference figures of one lesson ("03"), with their sources: for showing beside a
    sweep. The data paths' figures are left to :func:`data_paths`, which tables them."""
    refs = load() if refs is None else refs
    rows = [
        {"what": r.what, "hardware": r.hardware, "precision": r.precision,
         "batch_size": r.batch_size, "value": r.value, "units": r.units, "kind": r.kind,
         "source": r.cited()}
        for r in refs if lesson in r.lessons and not is_data_path(r)
    ]  # fmt: skip
    columns = ["what", "hardware", "precision", "batch_size", "value", "units", "kind", "source"]
    return pd.DataFrame(rows, columns=columns)


def beside(
    frame: pd.DataFrame, knob: str, lesson: str, *, metric: str = "samples_per_s",
    device: str = "this machine", refs: Iterable[Reference] | None = None,
) -> pd.DataFrame:  # fmt: skip
    """The learner's sweep (median ``metric`` per value of ``knob``, successful bursts) on top,
    the lesson's reference figures below it, in one table with a ``where`` column. A sweep's
    extra runs of its first value for drift (``reference``) are left out of its median.

    ``like_yours`` says how each reference row stands to the sweep (:func:`likeness`): the same
    setting as one of its rows, the nearest one, or a figure for scale only (and why). Set a
    ratio beside yours only from rows of the first two kinds; those come first."""
    if "reference" in frame.columns:
        frame = frame[~frame["reference"].eq(True)]
    ok = frame[frame["status"] == "ok"] if "status" in frame.columns and len(frame) else frame
    mine, settings = [], []
    if knob in ok.columns and metric in ok.columns:
        for _, group in ok.groupby(knob, sort=False):
            row = group.iloc[0].to_dict()
            settings.append(row)
            mine.append({"where": device, "setting": _your_setting(row, knob),
                         "value": group[metric].median(), "units": metric, "like_yours": "",
                         "source": "your sweep"})  # fmt: skip
    ranked = []
    for r in load() if refs is None else refs:
        if lesson not in r.lessons or is_data_path(r):
            continue
        rank, words = likeness(r, settings, knob)
        ranked.append((rank, {"where": f"{r.hardware}", "setting": _ref_setting(r),
                              "value": r.value, "units": r.units, "like_yours": words,
                              "source": r.cited()}))  # fmt: skip
    ref_rows = [row for _, row in sorted(ranked, key=lambda pair: pair[0])]
    return pd.DataFrame(mine + ref_rows, columns=BESIDE_COLUMNS)


BESIDE_COLUMNS = ["where", "setting", "value", "units", "like_yours", "source"]
SAME, NEAREST, FOR_SCALE = 0, 1, 2
"""How a reference row stands to a learner's setting, best first (:func:`likeness`)."""
NEAREST_TO_DEFAULT = (
    "TF32 stands in for precision=default: the kept run has no default row, and for a "
    "convnet PyTorch's default runs cuDNN convolutions in TF32"
)
_SHOWN = ("workload", "batch_size", "precision", "channels_last", "loader")
"""The held knobs a learner's row names beside the swept one (what a reference is matched on
most often)."""


def likeness(ref: Reference, settings: Sequence[Mapping[str, Any]], knob: str) -> tuple[int, str]:
    """How ``ref`` stands to the learner's rows (one mapping of knob values per swept value):
    ``SAME`` when it ran the same workload with every knob its burst set at the value of a row,
    ``NEAREST`` when only precision differs, TF32 against ``default`` on a convnet
    (``NEAREST_TO_DEFAULT``; a TF32 row can be both: the same as your tf32 row, the nearest to
    your default one), else ``FOR_SCALE``, with the knobs that differ from the closest row. A
    published figure carries no knobs: another GPU and recipe, for scale."""
    if not ref.knobs:
        return FOR_SCALE, "for scale: a published figure (other GPU, data and recipe)"
    mine = [s for s in settings if s.get("workload") == ref.workload]
    if not mine:
        theirs = sorted({str(s.get("workload")) for s in settings if s.get("workload")})
        yours = f", yours ran {', '.join(theirs)}" if theirs else ""
        return FOR_SCALE, f"for scale: {ref.workload}{yours}"
    differs = [(s, _differs(ref.knobs, s)) for s in mine]
    same = [f"{knob}={_plain(s.get(knob))}" for s, d in differs if not d]
    near = [f"{knob}={_plain(s.get(knob))}" for s, d in differs if _stands_in(ref, s, d)]
    words = ([f"same setting as yours at {', '.join(same)}"] if same else []) + (
        [f"nearest to yours at {', '.join(near)}: {NEAREST_TO_DEFAULT}"] if near else []
    )
    if words:
        return (SAME if same else NEAREST), "; ".join(words)
    _, fewest = min(differs, key=lambda pair: len(pair[1]))
    return FOR_SCALE, "for scale: differs from yours in " + ", ".join(
        f"{k}={ref.knobs[k]}" for k in fewest)  # fmt: skip


def _stands_in(ref: Reference, setting: Mapping[str, Any], differs: list[str]) -> bool:
    """The TF32 row standing in for a convnet's ``precision=default`` row: the kept run has no
    default row, and PyTorch's default runs cuDNN convolutions in TF32."""
    pair = (_plain(setting.get("precision")), (ref.knobs or {}).get("precision"))
    return differs == ["precision"] and ref.workload in CONVNETS and pair == ("default", "tf32")


def _differs(ref_knobs: Mapping[str, Any], setting: Mapping[str, Any]) -> list[str]:
    """The knobs ``ref_knobs`` set to another value than ``setting`` holds (a knob the learner's
    frame lacks is at its default)."""
    defaults = Knobs()
    out = []
    for name, value in ref_knobs.items():
        theirs = setting.get(name, getattr(defaults, name, None))
        if _plain(current_value(name, theirs)[0]) != _plain(current_value(name, value)[0]):
            out.append(name)
    return out


def _plain(value: Any) -> Any:
    """A frame's numpy scalar as the Python value a knob holds (1.0 and 1 compare equal)."""
    return value.item() if hasattr(value, "item") else value


def _your_setting(row: Mapping[str, Any], knob: str) -> str:
    held = [
        f"{k}={_plain(row[k])}" for k in _SHOWN if k != knob and k in row and row[k] is not None
    ]
    return f"{knob}={_plain(row.get(knob))}" + (f" ({', '.join(held)})" if held else "")


def _ref_setting(ref: Reference) -> str:
    layout = ", channels_last" if (ref.knobs or {}).get("channels_last") else ""
    batch = f", batch {ref.batch_size}" if ref.batch_size else ""
    return f"{ref.precision}{batch}{layout}"


PATH_ID = "wb-gpu-path-"
LOADER_ID = "wb-gpu-loader-"
CEILING_ID = f"{PATH_ID}ceiling"
DATA_PATHS_WAITING = (
    "waiting for the first GPU session (the loader step of benchmarks/gpu_session.sh "
    "measures each path)"
)
_PATH_COLUMNS = ["path", "loader_alone_images_per_s", "loader_alone_per", "training_images_per_s",
                 "of_ceiling_pct", "hardware", "source"]  # fmt: skip


def is_data_path(ref: Reference) -> bool:
    """An entry of the data-path table (generated by ``benchmarks/publish_gpu.py`` from the GPU
    session's loader step)."""
    return ref.id.startswith((PATH_ID, LOADER_ID))


def data_paths(refs: Iterable[Reference] | None = None) -> pd.DataFrame:
    """The ways to feed resnet50 on a GPU as this project measured them (lessons 2 and 5): per
    data path the loader alone (images/s, and per worker or per GPU), training through it, and
    its share of the resident-batch ceiling measured in the same GPU run. Every figure is a
    generated entry of ``gpu_runs.json`` (its ``source`` names the kept run); until a GPU
    session has measured them the table is one row that says so."""
    refs = [r for r in (load() if refs is None else refs) if is_data_path(r)]
    ceiling = next((r for r in refs if r.id == CEILING_ID), None)
    if ceiling is None:
        return pd.DataFrame([{"path": DATA_PATHS_WAITING}], columns=_PATH_COLUMNS)
    trained = {r.id.removeprefix(PATH_ID): r for r in refs if r.id.startswith(PATH_ID)}
    alone = {r.id.removeprefix(LOADER_ID): r for r in refs if r.id.startswith(LOADER_ID)}
    rows = []
    for key in dict.fromkeys([*trained, *alone]):  # the generated order, the ceiling first
        train, loader = trained.get(key), alone.get(key)
        either = train or loader
        rows.append({
            "path": either.what.split(": ", 1)[-1],
            "loader_alone_images_per_s": loader.value if loader else None,
            "loader_alone_per": loader.notes if loader else None,
            "training_images_per_s": train.value if train else None,
            "of_ceiling_pct": (round(100 * train.value / ceiling.value, 1)
                               if train and key != "ceiling" else None),
            "hardware": either.hardware, "source": either.cited(),
        })  # fmt: skip
    return pd.DataFrame(rows, columns=_PATH_COLUMNS)


def ratio(new_id: str, old_id: str, refs: Iterable[Reference] | None = None) -> float:
    """The reference ratio ``new / old`` of two entries' values (computed, never typed)."""
    refs = list(load() if refs is None else refs)
    return find(new_id, refs).value / find(old_id, refs).value


def direction_note(
    measured_ratio: float | None, new_id: str, old_id: str, what: str,
    refs: Iterable[Reference] | None = None, *, old_stands_for: str | None = None,
) -> str:  # fmt: skip
    """A sentence that puts a ratio measured here beside the reference ratio ``new / old``,
    and says plainly when the two point opposite ways (a laptop must not leave with a GPU
    lesson turned upside down). ``old_stands_for="default"``: the learner's ratio is over
    ``precision=default`` and ``old_id`` is the TF32 row standing in for it
    (``NEAREST_TO_DEFAULT``); the sentence says so."""
    refs = list(load() if refs is None else refs)
    new, old = find(new_id, refs), find(old_id, refs)
    gpu_ratio = new.value / old.value
    who = "the kept run" if new.run else new.source.split(",")[0]
    there = (f"on {new.device_name or new.hardware}, {who} measured {new.precision} at "
             f"{gpu_ratio:.2f}x {old.precision} ({new.value:,.0f} vs {old.value:,.0f} "
             f"{new.units}, batch {new.batch_size}{', channels_last' if _nhwc(new) else ''}; "
             f"{new.id} / {old.id})")  # fmt: skip
    if old_stands_for == "default":
        there += f"; {NEAREST_TO_DEFAULT}"
    if measured_ratio is None or measured_ratio <= 0:
        return f"No ratio was measured here; {there}."
    here = f"Here {what} ran at {measured_ratio:.2f}x"
    if (measured_ratio >= 1) == (gpu_ratio >= 1):
        return f"{here}; {there}: the same direction, the size is the hardware's."
    return (f"{here}: the OPPOSITE of a GPU. {there[0].upper()}{there[1:]}. This machine lacks "
            "the hardware that makes it fast (tensor cores); carry the GPU's direction to a GPU, "
            "not this one.")  # fmt: skip


def _nhwc(ref: Reference) -> bool:
    return bool((ref.knobs or {}).get("channels_last"))


def ratios(ids: Sequence[str], over: Sequence[str],
           refs: Iterable[Reference] | None = None) -> pd.DataFrame:  # fmt: skip
    """One row per entry of ``ids`` (its precision, value and units) with its ratio to each
    entry of ``over`` (a column ``x <id>`` each): e.g. the kept run's precisions over IEEE fp32
    and over TF32, computed from the entries."""
    refs = list(load() if refs is None else refs)
    rows = []
    for ref_id in ids:
        r = find(ref_id, refs)
        row = {"id": r.id, "precision": r.precision, "value": r.value, "units": r.units}
        row.update({f"x {o}": round(r.value / find(o, refs).value, 2) for o in over})
        rows.append(row)
    return pd.DataFrame(rows)


KEPT_PRECISIONS = ("wb-gpu-r50-fp32", "wb-gpu-r50-tf32", "wb-gpu-r50-bf16", "wb-gpu-r50-fp16")
"""The kept run's resnet50 precision rows (batch 128, channels_last, resident batch)."""


def precision_ratios(refs: Iterable[Reference] | None = None) -> pd.DataFrame:
    """The kept run's precisions over IEEE fp32 and over TF32 (lesson 3): :func:`ratios`."""
    return ratios(KEPT_PRECISIONS, over=KEPT_PRECISIONS[:2], refs=refs)


CUDNN_ORDER = ("wb-gpu-r50-cudnn-off-1", "wb-gpu-r50-cudnn-on-1", "wb-gpu-r50-cudnn-on-2",
               "wb-gpu-r50-cudnn-off-2")  # fmt: skip
"""The kept run's cudnn_benchmark bursts, in the order they ran: off, on, on, off."""


def cudnn_benchmark_note(band: float = 0.05, refs: Iterable[Reference] | None = None) -> str:
    """What the kept run says about ``cudnn_benchmark``: the knob's effect (the mean of the two
    "on" bursts over the mean of the two "off" ones: run off, on, on, off, a drift steady in
    time cancels) beside the order's (the two "off" bursts, identical knobs, first and last:
    their gap over their mean), and both beside the lessons' ``band``."""
    refs = list(load() if refs is None else refs)
    off1, on1, on2, off2 = (find(i, refs) for i in CUDNN_ORDER)
    effect = (on1.value + on2.value) / (off1.value + off2.value)
    order = abs(off1.value - off2.value) / ((off1.value + off2.value) / 2)
    said = ", ".join(f"{r.value:,.0f}" for r in (off1, on1, on2, off2))
    knob = ("no gain that the run can tell from the order's own effect" if abs(effect - 1) < order
            else f"{effect - 1:+.0%} from the knob, beyond the order's effect")  # fmt: skip
    than = "more" if order > band else "less"
    return (f"The kept run ({off1.device_name or off1.hardware}, resnet50 {off1.precision}, "
            f"batch {off1.batch_size}, channels_last) measured cudnn_benchmark off, on, on, off: "
            f"{said} {off1.units} ({CUDNN_ORDER[0]} ... {CUDNN_ORDER[-1]}). On over off: "
            f"{effect:.2f}x. The two 'off' bursts, identical knobs, first and last: {order:.0%} "
            f"apart, the order alone, {than} than the lessons' {band:.0%} band. So: {knob}; "
            "measure the knob in both orders on your GPU before you keep it.")  # fmt: skip


DATASHEETS = (
    (r"\bH200\b(?!.*\bNVL\b)", "nvidia-h200-bf16-dense", "nvidia-h200-sxm-bandwidth"),
    (r"\bH100\b.*(SXM|HBM3)", "nvidia-h100-bf16-dense", "nvidia-h100-sxm-bandwidth"),
)
"""A measured GPU's datasheet entries (dense bf16 peak, memory bandwidth) by its name: the H200
SXM's or the H100 SXM's (an H100 PCIe or NVL part has lower figures, not these)."""


def datasheets_of(
    device_name: str, refs: Iterable[Reference] | None = None
) -> tuple[Reference, Reference] | None:
    """The (dense bf16 peak, memory bandwidth) entries of the GPU named ``device_name``, or None
    where the reference files have none for it."""
    refs = list(load() if refs is None else refs)
    for pattern, peak, bandwidth in DATASHEETS:
        if re.search(pattern, device_name or "", re.IGNORECASE):
            return find(peak, refs), find(bandwidth, refs)
    return None


def mfu_note(refs: Iterable[Reference] | None = None) -> str:
    """The kept run's ResNet-50 MFU beside NVIDIA's A100 figure, and the datasheets' reason a
    convnet's MFU falls on a newer GPU: the peak grew faster than the memory bandwidth that
    paces a convnet's normalisations, activations and small convolutions. The newer GPU is the
    one the kept run measured (an H100 or an H200, by its name)."""
    refs = list(load() if refs is None else refs)
    kept, a100 = find("wb-gpu-r50-bf16-mfu", refs), find("dle-a100-amp-1gpu-mfu", refs)
    peak_a = find("nvidia-a100-bf16-dense", refs)
    bw_a = find("nvidia-a100-80gb-sxm-bandwidth", refs)
    said = (f"The kept run's resnet50 {kept.precision}, batch {kept.batch_size}, channels_last, "
            f"used {kept.value:.1f}% of the {kept.device_name} dense bf16 peak ({kept.id}); "
            f"NVIDIA's A100 AMP figure works out at {a100.value:.1f}% ({a100.id}: fp16, batch "
            f"{a100.batch_size}).")  # fmt: skip
    sheets = datasheets_of(kept.device_name, refs)
    if sheets is None:
        return (f"{said} The reference files hold no datasheet entries for the "
                f"{kept.device_name}: compare MFU within one GPU generation.")  # fmt: skip
    peak_h, bw_h = sheets
    gpu = peak_h.hardware.removeprefix("NVIDIA ").removesuffix(" SXM")
    return (f"{said} From the A100 to the {gpu} the datasheets' dense bf16 peak grew "
            f"{peak_h.value / peak_a.value:.1f}x ({peak_a.value:,.0f} to {peak_h.value:,.1f} "
            f"TFLOP/s) and memory bandwidth {bw_h.value / bw_a.value:.1f}x ({bw_a.value:,.0f} to "
            f"{bw_h.value:,.0f} GB/s): the parts of a convnet's step that memory paces "
            "(normalisations, activations, small convolutions) gained less than the peak MFU is "
            "measured against, so the same model sits lower on the newer GPU (the batch and the "
            "recipe differ too). Compare MFU within one GPU generation.")  # fmt: skip


def feeding_note(rate_id: str = "wb-gpu-r50-bf16", workers_id: str = "wb-gpu-r50-jpeg-8workers",
                 per_core_id: str = "wb-cpu-decode-1worker",
                 refs: Iterable[Reference] | None = None) -> str:  # fmt: skip
    """How many CPU cores decoding JPEGs it takes to feed a GPU's training rate (``rate_id``),
    read first at the rate the same kept run's own loader workers delivered (``workers_id``:
    its images/s over its ``num_workers``, on the GPU box's cores, epoch restarts included),
    then at one core's decode rate on this project's test VM (``per_core_id``): the first is
    what that box would need, the second a lower bound from a faster core. Both entries."""
    refs = list(load() if refs is None else refs)
    rate, fed, core = find(rate_id, refs), find(workers_id, refs), find(per_core_id, refs)
    workers = int((fed.knobs or {}).get("num_workers") or 1)
    per_worker = fed.value / workers
    return (f"Feeding {rate.value:,.0f} {rate.units} ({rate_id}: {rate.workload} "
            f"{rate.precision} on {rate.device_name or rate.hardware}) from JPEGs: its own box's "
            f"loader delivered {fed.value:,.0f} {fed.units} with {workers} workers "
            f"({workers_id}), {per_worker:,.0f} a worker, so about "
            f"{rate.value / per_worker:.0f} cores for that one GPU; at the test VM's "
            f"{core.value:,.0f} {core.units} a core ({per_core_id}) still about "
            f"{rate.value / core.value:.0f}. Count the cores your machine gives each GPU: "
            "past them, move the decode instead: decode=gpu, predecoded bytes or DALI (the "
            "data-path table).")  # fmt: skip
