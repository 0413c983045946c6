"""The workshop's helpers: exercise checks that compare an answer with what was measured.

Each lesson notebook (``notebooks/02_...`` to ``08_...``) ends with one exercise. Its check
reads the learner's own measurement (a sweep, a diagnosis, a profile, a saved config), so the
right answer is whatever this machine showed, not a number from a GPU somewhere else. A check
returns a :class:`Check` (true when right, with a sentence saying why) and never raises on a
wrong answer; it raises ``ValueError`` only when the measurement itself cannot be checked
against (no successful burst, a knob the sweep did not vary).

Bursts are noisy, so "the best value" accepts any value within ``tolerance`` of the best
median: a short burst cannot tell those apart, and the check says so.
"""

from __future__ import annotations

import shlex
import statistics
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch
from torch.utils.data import DataLoader

from workbench.analysis.diagnosis import classify
from workbench.config.saved import load_config
from workbench.engine import hardware
from workbench.engine.workloads import resolve_workload

if TYPE_CHECKING:
    from workbench.analysis.diagnosis import Diagnosis
    from workbench.analysis.profiling import ProfileResult
    from workbench.config.tuned_config import TunedConfig
    from workbench.distributed.allreduce import CommResult

__all__ = [
    "Check",
    "ceilings",
    "check_best",
    "check_comm_peak",
    "check_format",
    "check_knee",
    "check_loader",
    "check_speedup",
    "check_top_operator",
    "check_verdict",
    "example_script",
    "on_gpu",
    "run_example",
    "sample_dataset",
    "start",
]


@dataclass(frozen=True, slots=True)
class Check:
    """The verdict on one answer: ``ok`` and a sentence that says why.

    It is true when the answer is right (``bool(check)``) and prints as its verdict. The other
    fields are for a class board (and for the learner's own record): which exercise it was, what
    the learner predicted before the burst ran, and what the measurement said (the right answer
    read from this machine). They default to empty so a check built by hand stays two fields.
    """

    ok: bool
    message: str
    exercise: str = ""
    """Which exercise this verdict is for, e.g. ``"03-precision"``; empty when not named."""
    prediction: Any = None
    """What the learner predicted before measuring (None: no prediction was made)."""
    measured: Any = None
    """What this machine measured: the value the answer is compared with (None: nothing)."""

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return f"{'Correct' if self.ok else 'Not yet'}: {self.message}"

    __repr__ = __str__


def _no_answer(what: str, variable: str = "answer") -> Check:
    return Check(False, f"set `{variable}` to {what}, then run this cell again")


# -- lesson set-up ---------------------------------------------------------------------------


def start() -> str:
    """Draw Altair charts as static SVG here (offline, by vl-convert) and say where we run.

    JupyterLab 4.6 renders Vega-Lite only up to v5 by itself; SVG output shows everywhere,
    also in a notebook saved with its outputs. Returns (and prints) one line about the device.
    """
    # Altair only for the lessons that draw
    import altair as alt

    alt.renderers.enable("svg")
    dev = hardware.resolve_device(None)
    info = hardware.device_info(dev)
    where = "a GPU" if dev.type == "cuda" else "a CPU: slower, same code path"
    line = f"This lesson runs on {info.name or dev.type} ({dev}), {where}."
    print(line)
    return line


def on_gpu() -> bool:
    """True where a CUDA device is available: the cells that need one check this."""
    return torch.cuda.is_available()


def sample_dataset(workload: str = "cnn") -> Any:
    """The training dataset of a built-in workload (the sample JPEGs for ``cnn``)."""
    return resolve_workload(workload).dataset()


def example_script() -> Path:
    """``examples/train.py``, the production script: the wheel's copy (``workbench/examples``,
    mapped from the repository's ``examples/`` by setup.py), else the checkout's."""
    package = Path(__file__).resolve().parents[1]
    for path in (package / "examples" / "train.py", package.parent / "examples" / "train.py"):
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"examples/train.py is in neither {package / 'examples'} nor {package.parent / 'examples'}:"
        " reinstall the package"
    )


def run_example(config: str | Path, *args: str) -> None:
    """Run ``examples/train.py --config CONFIG ARGS...`` with this Python and print its output.

    The command is printed first: it is what a training job would run."""
    command = [sys.executable, str(example_script()), "--config", str(config), *args]
    print("$", shlex.join(["python", *command[1:]]))
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    output = (done.stdout + done.stderr).strip()
    print(output)
    if done.returncode != 0:
        raise RuntimeError(f"examples/train.py exited with {done.returncode}")


# -- reading a sweep ---------------------------------------------------------------------------


def _read_answer(
    answer: Any, frame: pd.DataFrame, knob: str, metric: str, question: str
) -> Check | tuple[dict[Any, float], Any]:
    """The medians per value and the measured value the answer names; a Check instead when
    there is no answer or it names a value that was not measured."""
    if answer is None:
        return _no_answer(question)
    medians = _medians(frame, knob, metric)
    value = _measured_value(answer, medians, knob)
    return value if isinstance(value, Check) else (medians, value)


def _medians(frame: pd.DataFrame, knob: str, metric: str) -> dict[Any, float]:
    """Median ``metric`` of the successful bursts at each value of ``knob``."""
    for column in (knob, metric):
        if column not in frame.columns:
            raise ValueError(f"{column!r} is not a column of this frame: pass the sweep's frame")
    ok = frame[(frame["status"] == "ok") & frame[metric].notna()] if len(frame) else frame
    values: dict[Any, list[float]] = {}
    for value, measured in zip(ok[knob], ok[metric], strict=True):
        values.setdefault(_plain(value), []).append(float(measured))
    if not values:
        raise ValueError(f"no successful burst with {metric} to check against: run the sweep")
    return {value: statistics.median(runs) for value, runs in values.items()}


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _measured_value(answer: Any, medians: Mapping[Any, float], knob: str) -> Any | Check:
    """The answer as one of the measured values, or a Check saying it was not measured."""
    for value in medians:
        if answer == value or str(answer).strip().lower() == str(value).lower():
            return value
    listed = ", ".join(str(v) for v in medians)
    return Check(False, f"{knob}={answer!r} was not measured: the sweep has {listed}")


def check_best(
    answer: Any,
    frame: pd.DataFrame,
    knob: str,
    *,
    metric: str = "samples_per_s",
    tolerance: float = 0.05,
) -> Check:
    """Is ``answer`` the value of ``knob`` with the highest median ``metric`` in ``frame``?

    Values within ``tolerance`` of the best count as right: a short burst cannot rank them.
    """
    read = _read_answer(answer, frame, knob, metric, f"the {knob} value with the highest {metric}")
    if isinstance(read, Check):
        return read
    medians, value = read
    best = max(medians, key=medians.__getitem__)
    got, top = medians[value], medians[best]
    if value == best:
        return Check(True, f"{knob}={value} gave {got:,.1f} {metric}, the most in this sweep")
    if got >= top * (1 - tolerance):
        return Check(
            True,
            f"{knob}={value} gave {got:,.1f}, within {tolerance:.0%} of the best ({knob}={best}: "
            f"{top:,.1f}); a burst this short cannot tell them apart",
        )
    return Check(
        False,
        f"{knob}={value} gave {got:,.1f} {metric}, but {knob}={best} gave {top:,.1f} "
        f"({top / got - 1:.0%} more); compare the {metric} column",
    )


def check_format(
    answer: Any,
    frame: pd.DataFrame,
    *,
    mode: str = "loader",
    cache: str = "cold",
    tolerance: float = 0.05,
) -> Check:
    """Lesson 9: is ``answer`` the fastest ``data_format`` in ``compare_formats``'s frame, for
    one mode (loader alone or full burst) and one cache state?"""
    for column, value in (("mode", mode), ("cache", cache)):
        if column not in frame.columns or value not in set(frame[column]):
            raise ValueError(f"{column}={value!r} was not measured: pass compare_formats' frame")
    chosen = frame[(frame["mode"] == mode) & (frame["cache"] == cache)]
    return check_best(answer, chosen, "data_format", tolerance=tolerance)


def check_speedup(
    answer: float | None,
    frame: pd.DataFrame,
    knob: str,
    new: Any,
    old: Any,
    *,
    metric: str = "samples_per_s",
    rel_tol: float = 0.1,
) -> Check:
    """Is ``answer`` the ratio ``metric(new) / metric(old)`` of the medians, within ``rel_tol``?

    Above 1 means ``new`` is faster, below 1 slower (0.25: four times slower).
    """
    if answer is None:
        return _no_answer(f"{metric} at {knob}={new} divided by {metric} at {knob}={old}")
    if isinstance(answer, bool) or not isinstance(answer, (int, float)) or answer <= 0:
        return Check(False, f"the answer is a ratio (a number > 0), not {answer!r}")
    medians = _medians(frame, knob, metric)
    for value in (new, old):
        if value not in medians:
            raise ValueError(f"{knob}={value!r} has no successful burst in this frame")
    ratio = medians[new] / medians[old]
    words = f"{knob}={new} ran at {ratio:.2f}x the {metric} of {knob}={old}"
    words += f" ({medians[new]:,.1f} vs {medians[old]:,.1f})"
    if abs(answer / ratio - 1) <= rel_tol:
        return Check(True, words)
    return Check(False, f"{answer:g} is off: {words}")


def check_knee(
    answer: Any,
    frame: pd.DataFrame,
    knob: str = "batch_size",
    *,
    share: float = 0.9,
    metric: str = "samples_per_s",
    tolerance: float = 0.05,
) -> Check:
    """Is ``answer`` the smallest value of ``knob`` that reaches ``share`` of the best metric?

    Right when the answer reaches the bar within ``tolerance`` and no smaller value clearly
    clears it (by more than ``tolerance``): near the bar, noise decides, and both are accepted.
    """
    question = f"the smallest {knob} reaching {share:.0%} of the best {metric}"
    read = _read_answer(answer, frame, knob, metric, question)
    if isinstance(read, Check):
        return read
    medians, value = read
    bar = share * max(medians.values())
    ordered = sorted(medians)
    expected = next(v for v in ordered if medians[v] >= bar)
    got = medians[value]
    if got < bar * (1 - tolerance):
        return Check(
            False,
            f"{knob}={value} gave {got:,.1f} {metric}, under {share:.0%} of the best "
            f"({bar:,.1f}); try a larger {knob}",
        )
    smaller = [v for v in ordered if v < value and medians[v] > bar * (1 + tolerance)]
    if smaller:
        return Check(
            False,
            f"{knob}={smaller[0]} already reached {medians[smaller[0]]:,.1f} (the bar is "
            f"{bar:,.1f}); a smaller {knob} leaves more memory free",
        )
    note = "" if value == expected else f" (near the bar, like {knob}={expected})"
    return Check(True, f"{knob}={value} reached {got:,.1f} of the bar {bar:,.1f}{note}")


def check_comm_peak(answer: Any, result: CommResult, *, tolerance: float = 0.05) -> Check:
    """Is ``answer`` the message size (bytes) at which the all-reduce's bus bandwidth peaked?

    ``result`` is ``wb.comm_bench(...)``; sizes within ``tolerance`` of the peak count.
    """
    if answer is None:
        return _no_answer("the message size in bytes with the highest busbw_gbps")
    if not result.ok or not result.rows:
        raise ValueError(f"the benchmark has no rows ({result.status}: {result.error})")
    if result.world_size < 2:
        raise ValueError("one rank sends nothing: run the benchmark with 2 ranks or more")
    frame = result.frame().assign(status="ok")
    return check_best(answer, frame, "size_bytes", metric="busbw_gbps", tolerance=tolerance)


# -- diagnosis, profile, config ----------------------------------------------------------------

_VERDICT_WORDS = {
    "data-bound": "data-bound",
    "data": "data-bound",
    "compute-bound": "compute-bound",
    "compute": "compute-bound",
    "balanced": "balanced",
}


def ceilings(diagnosis: Diagnosis) -> pd.DataFrame:
    """The diagnosis's three measurements, without its verdict: for reading them first."""
    rows = [
        ("full pipeline", diagnosis.full_sps, "loader and model together"),
        ("loader alone", diagnosis.loader_sps, "what the data pipeline can deliver"),
        ("compute alone", diagnosis.compute_sps, "what the model can consume"),
    ]
    return pd.DataFrame(rows, columns=["measurement", "samples_per_s", "what it is"])


def check_verdict(answer: str | None, diagnosis: Diagnosis) -> Check:
    """Is ``answer`` (data-bound, compute-bound or balanced) what the two ceilings say?"""
    if answer is None:
        return _no_answer('"data-bound", "compute-bound" or "balanced"')
    if diagnosis.verdict == "unknown":
        raise ValueError(f"the diagnosis could not decide ({diagnosis.reason}): run it again")
    key = str(answer).strip().lower().replace(" ", "-").replace("_", "-")
    said = _VERDICT_WORDS.get(key)
    if said is None:
        return Check(False, f'{answer!r} is not a verdict: "data-bound", "compute-bound" or '
                            '"balanced"')  # fmt: skip
    numbers = (
        f"loader alone {_num(diagnosis.loader_sps)} samples/s, compute alone "
        f"{_num(diagnosis.compute_sps)} samples/s"
    )
    if said == classify(diagnosis.loader_sps, diagnosis.compute_sps):
        return Check(True, f"{said}: {numbers}")
    return Check(False, f"the ceilings say otherwise: {numbers}; the slower side is the limit")


def check_top_operator(
    answer: str | None, profile: ProfileResult, *, tolerance: float = 0.1
) -> Check:
    """Is ``answer`` the operator that took the most time (or within ``tolerance`` of it)?

    ``aten::`` may be left out. Time is what the table is sorted by: device time on CUDA,
    host self time on a CPU.
    """
    if answer is None:
        return _no_answer("the name of the operator at the top of the table")
    ops = profile.operators
    if ops.empty:
        raise ValueError(f"this profile has no operators ({profile.status}: {profile.error})")
    column = str(ops.attrs.get("sort_by", "self_ms"))
    times = dict(zip(ops["operator"], ops[column], strict=True))
    name = str(answer).strip()
    match = name if name in times else f"aten::{name}" if f"aten::{name}" in times else None
    top = str(ops["operator"].iloc[0])
    if match is None:
        return Check(False, f"{name!r} is not in the table: copy a name from its operator column")
    if match == top or times[match] >= times[top] * (1 - tolerance):
        return Check(True, f"{match}: {times[match]:,.1f} ms of {column} in the window")
    return Check(
        False,
        f"{match} took {times[match]:,.1f} ms, but {top} took {times[top]:,.1f} ms ({column})",
    )


def check_loader(loader: Any, config: TunedConfig | str | Path) -> Check:
    """Does ``loader`` (a torch DataLoader) use the tuned arguments of ``config``?"""
    if loader is None:
        return _no_answer("a DataLoader built from the config", "loader")
    if not isinstance(loader, DataLoader):
        return Check(False, f"that is a {type(loader).__name__}, not a torch DataLoader")
    if isinstance(config, (str, Path)):
        config = load_config(config)
    wanted = config.dataloader_kwargs()
    wrong = [
        f"{name}={getattr(loader, name, None)!r} (tuned: {value!r})"
        for name, value in wanted.items()
        if getattr(loader, name, None) != value
    ]
    if wrong:
        return Check(False, "differs from the config: " + ", ".join(wrong))
    shown = ", ".join(f"{k}={v}" for k, v in wanted.items())
    return Check(True, f"the DataLoader runs as measured: {shown}")


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.1f}"
