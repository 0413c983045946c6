"""Reference results: what a lesson's step does on a data-centre GPU, beside the learner's own.

A laptop measures the mechanics honestly but not the magnitudes: bf16 is *slower* than fp32 on
most CPUs and 2.6x faster on an A100. So each lesson shows, next to its sweep, published figures
for the same step (NVIDIA's ResNet-50 training tables) and, once this project has measured on a
GPU, its own figures, each with its provenance. The files live in ``notebooks/reference/*.json``
(shipped in the wheel with the lessons); every entry names its kind:

- ``published``: printed by a source; ``url`` and ``read_on`` (the date it was read) say where;
- ``measured``: measured by this project; ``command`` says how, ``url`` where it is written up;
  a GPU figure also names its ``run``, the kept file ``benchmarks/publish_gpu.py`` generated it
  from (``gpu_runs.json`` is generated whole; a run whose command was not kept says so in
  ``command``);
- ``derived``: computed here from other figures (``formula`` says how), e.g. MFU.

Loading refuses an entry that lacks its provenance: a number without a source is not shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.engine import hardware

KINDS = {"published": ("url", "read_on"), "measured": ("command", "url"), "derived": ("formula",)}
"""The provenance each kind of entry must carry, beside the common fields."""
_COMMON = ("id", "lessons", "kind", "workload", "what", "value", "units", "hardware",
           "precision", "batch_size", "source")  # fmt: skip

RESNET50_TRAIN_FLOPS = 24.29e9
"""Model FLOPs of one ResNet-50 training sample at 224 px (forward + backward), as
``count_train_flops`` counts them on the meta device (tests/notebook/test_reference.py
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
    missing = [f for f in (*_COMMON, *KINDS[kind]) if entry.get(f) in (None, "", [])]
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
    extra runs of its first value for drift (``reference``) are left out of its median."""
    if "reference" in frame.columns:
        frame = frame[~frame["reference"].eq(True)]
    ok = frame[frame["status"] == "ok"] if "status" in frame.columns and len(frame) else frame
    mine = []
    if knob in ok.columns and metric in ok.columns:
        for value, group in ok.groupby(knob, sort=False):
            median = group[metric].median()
            mine.append({"where": device, "setting": f"{knob}={value}", "value": median,
                         "units": metric, "source": "your sweep"})  # fmt: skip
    ref_rows = [
        {"where": f"{r.hardware}", "setting": f"{r.precision}, batch {r.batch_size}",
         "value": r.value, "units": r.units, "source": r.cited()}
        for r in (load() if refs is None else refs) if lesson in r.lessons and not is_data_path(r)
    ]  # fmt: skip
    return pd.DataFrame(mine + ref_rows, columns=["where", "setting", "value", "units", "source"])


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


def direction_note(
    measured_ratio: float | None, new_id: str, old_id: str, what: str,
    refs: Iterable[Reference] | None = None,
) -> str:  # fmt: skip
    """A sentence that puts a ratio measured here beside the reference ratio ``new / old``,
    and says plainly when the two point opposite ways (a laptop must not leave with a GPU
    lesson turned upside down)."""
    refs = list(load() if refs is None else refs)
    new, old = find(new_id, refs), find(old_id, refs)
    gpu_ratio = new.value / old.value
    there = (f"on {new.hardware}, {new.source.split(',')[0]} measured {new.precision} at "
             f"{gpu_ratio:.2f}x {old.precision} ({new.value:,.0f} vs {old.value:,.0f} "
             f"{new.units}, batch {new.batch_size})")  # fmt: skip
    if measured_ratio is None or measured_ratio <= 0:
        return f"No ratio was measured here; {there}."
    here = f"Here {what} ran at {measured_ratio:.2f}x"
    if (measured_ratio >= 1) == (gpu_ratio >= 1):
        return f"{here}; {there}: the same direction, the size is the hardware's."
    return (f"{here}: the OPPOSITE of a GPU. {there[0].upper()}{there[1:]}. This machine lacks "
            "the hardware that makes it fast (tensor cores); carry the GPU's direction to a GPU, "
            "not this one.")  # fmt: skip
