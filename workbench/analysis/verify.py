"""``verify``: does a saved config's figure hold on this machine, and if not, why?

A saved config carries a number measured on one machine; production runs on another (another
driver, CUDA, NCCL, torch, GPU model, core count). ``verify`` reruns the saved burst here (the
same workload, knobs and window, ``runs`` times), and compares:

- **samples/s**: the median here against the saved figure, allowed ``t_value`` standard
  errors of their difference (Student's t for the runs' degrees of freedom, ``Z`` past 30):
  the largest noise (the saved tune's runs' spread, ``UNMEASURED_NOISE`` for a single saved
  burst; here the runs' spread, or a window's own: the standard error of its mean step) times
  sqrt(1/saved runs + 1/runs here), between ``MIN_TOLERANCE`` and ``MAX_TOLERANCE``: within
  that it holds; faster holds too; slower by more is ``slower``, by how much;
- **peak memory**: on CUDA the highest allocated peak here against the saved one, allowed
  ``MEMORY_TOLERANCE``; more is ``more-memory`` (a config that fitted there may not here). On
  a CPU the peak is the whole process's: shown, not judged;
- **the environment** (``FIELDS``: GPU model, driver, CUDA, cuDNN, NCCL, torch, usable cores):
  each field that differs is named, and where the figure does not hold they are the likely
  causes.

The answer is one of ``holds``, ``slower``, ``more-memory`` or ``cannot-run`` (the saved
device kind is not here, the workload cannot be built, every burst failed), each with its
numbers and its reason. Bad input (no such file, a file without a measurement or without a
workload) raises an InputError naming it.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from workbench.config.saved import load_config
from workbench.config.tuned_config import TunedConfig
from workbench.core.errors import InputError
from workbench.core.results import BurstResult
from workbench.distributed.dispatch import run_burst
from workbench.engine import hardware
from workbench.engine.window import BurstWindow

VERDICTS = ("holds", "slower", "more-memory", "cannot-run")
FIELDS = ("gpu", "driver", "cuda", "cudnn", "nccl", "torch", "usable_cores")
Z = 1.96
"""Standard errors allowed either way before a difference counts, with the noise known (95%
of a normal spread); with the noise read off a few runs, Student's t for their degrees of
freedom (``t_value``), wider."""
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
        10: 2.23, 15: 2.13, 20: 2.09, 30: 2.04}  # fmt: skip
"""Student's t, two-sided 95%, by degrees of freedom (a table: no scipy on a bare GPU box)."""


def t_value(dof: int) -> float:
    """The two-sided 95% t for ``dof`` degrees of freedom (the nearest tabled below it; ``Z``
    past 30, and for none: the noise is then a stated stand-in, not an estimate)."""
    if dof < 1:
        return Z
    if dof > 30:
        return Z
    return _T95[max(d for d in _T95 if d <= dof)]


MIN_TOLERANCE = 0.03
"""The least relative difference that counts as slower (3%): a quiet machine's own spread."""
MEMORY_TOLERANCE = 0.10
"""Peak memory may be this much (10%) above the saved peak: allocator rounding, a process's
resident pages and workers' copy-on-write sharing move a peak this much between runs."""
UNMEASURED_NOISE = 0.05
"""The relative noise a single saved burst is given (its spread was never measured): the
tuner's own stand-in until a config has run twice (``tuning.noise.PRIOR_NOISE``)."""
MAX_TOLERANCE = 0.5
"""The most a difference may be and still hold (50%), however noisy the runs: past it the
answer says the runs were too noisy rather than hold a figure half as fast."""
DEFAULT_RUNS = 3


@dataclass(kw_only=True)
class VerifyResult:
    """The saved figures against this machine's, and the answer (module docstring)."""

    file: str | None
    verdict: str
    reason: str
    workload: str | None
    device: str | None
    saved_samples_per_s: float | None
    samples_per_s: float | None
    """The median of the runs here."""
    samples_per_s_runs: list[float]
    change_pct: float | None
    """Here against saved, in percent (negative: slower)."""
    tolerance_pct: float | None
    saved_noise_pct: float | None
    noise_pct: float | None
    """The spread of the runs here."""
    saved_peak_mem_mib: float | None
    peak_mem_mib: float | None
    mem_change_pct: float | None
    environment: dict[str, dict[str, Any]]
    """Each field of ``FIELDS``: ``saved``, ``here`` and ``differs``."""
    differs: list[str]
    """The fields that differ (a field the file does not hold is not counted)."""
    bursts: list[BurstResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        return self.verdict == "holds"

    def summary(self) -> str:
        lines = [f"verify {self.verdict}: {self.reason}"]
        for name in FIELDS:
            env = self.environment.get(name) or {}
            mark = "differs" if env.get("differs") else "same"
            if env.get("saved") is None and env.get("here") is not None:
                mark = "not in the file"
            lines.append(f"  {name:<13} saved {env.get('saved')!s:<22} here "
                         f"{env.get('here')!s:<22} {mark}")  # fmt: skip
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["bursts"] = [b.to_dict() for b in self.bursts]
        return out


def verify(
    config: str | Path | TunedConfig,
    *,
    runs: int = DEFAULT_RUNS,
    device: str | torch.device | None = None,
    data_dir: str | Path | None = None,
    workload: Any = None,
    seconds: float | None = None,
    record: bool = True,
    store: object = None,
    progress: Callable[[BurstResult], None] | None = None,
) -> VerifyResult:
    """Rerun a saved config's burst here and answer whether its figures hold (module
    docstring). ``workload`` replaces the file's (a Workload, a name, ``module:function``);
    ``seconds`` the saved window; ``device`` where to run (default: the saved kind, CUDA or
    the CPU)."""
    _check_runs(runs)
    cfg, path = _load(config)
    prov = cfg.provenance
    measured = prov.get("measured") or {}
    if prov.get("source") not in ("burst", "tune") or not measured.get("samples_per_s"):
        allowed = ("a config saved from a measured burst or a tune (this one holds knobs only: "
                   "nothing to compare)")  # fmt: skip
        raise InputError.not_allowed("file", path, allowed)
    name = workload or prov.get("workload")
    if name is None:
        raise InputError.not_allowed("workload", None, "the file names no workload: pass "
                                     "--workload (a built-in name or module:function)")  # fmt: skip
    saved_kind = ((prov.get("device") or {}).get("type") or "cpu").split(":")[0]
    here_kind = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device) if device is not None else torch.device(
        saved_kind if saved_kind == "cuda" and here_kind == "cuda" else "cpu")  # fmt: skip
    env = _environment(prov, dev)
    base = _base(path, prov, env, measured, dev)
    if saved_kind == "cuda" and dev.type != "cuda":
        gpu = (prov.get("device") or {}).get("name") or "a CUDA GPU"
        return _cannot(base, f"measured on {gpu}; this machine has no CUDA GPU to run it on")
    window = _window(prov, measured, seconds)
    bursts = []
    for _ in range(runs):
        r = run_burst(name, cfg.knobs, window=window.settled(cfg.knobs), device=dev,
                      data_dir=data_dir, record=record, store=store)  # fmt: skip
        bursts.append(r)
        if progress is not None:
            progress(r)
        if r.status != "ok":
            break
    base.bursts = bursts
    failed = [r for r in bursts if r.status != "ok"]
    if failed:
        what = "out of memory" if failed[0].status == "oom" else f"failed: {failed[0].error}"
        return _cannot(base, f"the saved burst ran {what}{_causes(base)}")
    return _judge(base, bursts, measured, prov)


def _check_runs(runs: Any) -> None:
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= 100:
        raise InputError.not_allowed("runs", runs, "an integer from 1 to 100 (bursts here)")


def _load(config: str | Path | TunedConfig) -> tuple[TunedConfig, str | None]:
    if isinstance(config, TunedConfig):
        return config, str(config.path) if config.path else None
    if not isinstance(config, (str, Path)):
        raise InputError.not_allowed("config", config, "a saved config's path or a TunedConfig")
    with warnings.catch_warnings():  # the machine's differences are this check's own answer
        warnings.simplefilter("ignore")
        return load_config(config, check_machine=False), str(config)


def _window(prov: Mapping[str, Any], measured: Mapping[str, Any], seconds: float | None):
    """The saved burst's window: its seconds (configs saved before they were kept: the
    standard window's)."""
    saved = measured.get("seconds")
    return BurstWindow.of(seconds=seconds if seconds is not None else saved)


def environment_here(dev: torch.device) -> dict[str, Any]:
    """This machine's values of ``FIELDS``, for ``dev``."""
    v = hardware.versions()
    info = hardware.device_info(dev)
    cores = str(hardware.device_info("cpu").cpu_count)
    return {"gpu": info.name if dev.type == "cuda" else None, "driver": v.get("driver"),
            "cuda": v.get("cuda"), "cudnn": v.get("cudnn"), "nccl": hardware.nccl_version(),
            "torch": v.get("torch"), "usable_cores": cores}  # fmt: skip


def _environment(prov: Mapping[str, Any], dev: torch.device) -> dict[str, dict[str, Any]]:
    versions = prov.get("versions") or {}
    device = prov.get("device") or {}
    cuda_saved = (device.get("type") or "").startswith("cuda")
    saved = {"gpu": device.get("name") if cuda_saved else None,
             **{k: versions.get(k) for k in FIELDS if k != "gpu"}}  # fmt: skip
    here = environment_here(dev)
    return {k: {"saved": saved[k], "here": here[k],
                "differs": saved[k] is not None and str(saved[k]) != str(here[k])}
            for k in FIELDS}  # fmt: skip


def _base(path, prov, env, measured, dev) -> VerifyResult:
    return VerifyResult(
        file=path, verdict="", reason="", workload=prov.get("workload"), device=str(dev),
        saved_samples_per_s=measured.get("samples_per_s"), samples_per_s=None,
        samples_per_s_runs=[], change_pct=None, tolerance_pct=None,
        saved_noise_pct=_saved_noise(prov, measured), noise_pct=None,
        saved_peak_mem_mib=measured.get("peak_mem_mib"), peak_mem_mib=None,
        mem_change_pct=None, environment=env,
        differs=[k for k in FIELDS if env[k]["differs"]],
    )  # fmt: skip


def _cannot(r: VerifyResult, why: str) -> VerifyResult:
    r.verdict, r.reason = "cannot-run", why
    return r


def _saved_noise(prov: Mapping[str, Any], measured: Mapping[str, Any]) -> float | None:
    """The saved figure's noise in percent: its tune's runs' spread, else the tune's noise;
    None for a single burst (its steps' spread is not the spread of its mean: the runs here
    measure the noise then)."""
    tune = prov.get("tune") or {}
    runs = [x for x in tune.get("samples_per_s_runs") or [] if x]
    if len(runs) >= 2:
        return 100.0 * statistics.stdev(runs) / statistics.median(runs)
    return float(tune["noise_pct"]) if tune.get("noise_pct") is not None else None


def _judge(
    r: VerifyResult, bursts: list[BurstResult], measured: Mapping[str, Any], prov: Any
) -> VerifyResult:
    sps = [b.samples_per_s for b in bursts if b.samples_per_s]
    r.samples_per_s_runs = sps
    r.samples_per_s = statistics.median(sps) if sps else None
    spread = 100.0 * statistics.stdev(sps) / statistics.median(sps) if len(sps) >= 2 else None
    r.noise_pct = max((x for x in (spread, _window_noise(bursts)) if x is not None), default=None)
    noise = max(x for x in (r.noise_pct, r.saved_noise_pct, 0.0) if x is not None) / 100.0
    saved_runs = len((prov.get("tune") or {}).get("samples_per_s_runs") or []) or 1
    if r.saved_noise_pct is None:  # one saved burst: its own spread was never measured
        noise = max(noise, UNMEASURED_NOISE)
        r.notes.append(f"the saved figure is one burst, its noise unmeasured: taken as at "
                       f"least {UNMEASURED_NOISE:.0%} (a tune's saved config lists its "
                       "runs)")  # fmt: skip
    spread = noise * math.sqrt(1 / saved_runs + 1 / max(1, len(sps)))  # a median's error
    z = t_value(saved_runs + len(sps) - 2)  # few runs: the noise itself is uncertain
    tolerance = min(max(z * spread, MIN_TOLERANCE), MAX_TOLERANCE)
    if Z * noise > MAX_TOLERANCE:
        r.notes.append(f"the runs spread by {100 * noise:.0f}%: too noisy to tell a "
                       f"difference under {MAX_TOLERANCE:.0%} (a busy machine?); rerun on a "
                       "quiet one")  # fmt: skip
    r.tolerance_pct = 100.0 * tolerance
    saved = r.saved_samples_per_s
    r.change_pct = 100.0 * (r.samples_per_s / saved - 1.0) if r.samples_per_s and saved else None
    peaks = [b.peak_mem_mib for b in bursts if b.peak_mem_mib is not None]
    r.peak_mem_mib = max(peaks) if peaks else None
    if r.peak_mem_mib is not None and r.saved_peak_mem_mib:
        r.mem_change_pct = 100.0 * (r.peak_mem_mib / r.saved_peak_mem_mib - 1.0)
    figures = (f"{_n(r.samples_per_s)} samples/s here (median of {len(sps)}) against "
               f"{_n(saved)} saved ({_pct(r.change_pct)}; the noise allows "
               f"±{r.tolerance_pct:.1f}%)")  # fmt: skip
    memory = (f"peak {_n(r.peak_mem_mib)} MiB against {_n(r.saved_peak_mem_mib)} MiB "
              f"({_pct(r.mem_change_pct)})")  # fmt: skip
    if r.change_pct is not None and r.change_pct < -r.tolerance_pct:
        r.verdict = "slower"
        r.reason = f"slower by {-r.change_pct:.1f}%: {figures}; {memory}{_causes(r)}"
    elif _gpu_peak(bursts) and (r.mem_change_pct or 0.0) > 100.0 * MEMORY_TOLERANCE:
        r.verdict = "more-memory"
        r.reason = (f"{memory}: more than the {MEMORY_TOLERANCE:.0%} allowed; "
                    f"{figures}{_causes(r)}")  # fmt: skip
    else:
        r.verdict = "holds"
        differs = f"; the environment differs in {_fields(r)}" if r.differs else ""
        r.reason = f"{figures}; {memory}{differs}"
    if not _gpu_peak(bursts) and r.peak_mem_mib is not None:
        r.notes.append("on a CPU the peak is the whole process's (Python, torch, the data): a "
                       "kernel and a fresh command differ by more than the config does, so it "
                       "is shown, not judged")  # fmt: skip
    if r.differs and r.verdict == "holds":
        r.notes.append(f"it holds on another environment ({_fields(r)}): the figures carry over")
    return r


def _window_noise(bursts: list[BurstResult]) -> float | None:
    """The median burst's own noise, in percent: the standard error of its window's mean step
    time (its steps' standard deviation over their mean, over the square root of their count).
    Two or three runs can agree by chance on a busy machine whose steps stall at random; a
    window's own steps say how far its mean could move."""
    errors = []
    for b in bursts:
        steps = b.step_ms or []
        mean = statistics.fmean(steps) if len(steps) >= 2 else 0.0
        if mean > 0:
            errors.append(statistics.stdev(steps) / mean / math.sqrt(len(steps)))
    return 100.0 * statistics.median(errors) if errors else None


def _gpu_peak(bursts: list[BurstResult]) -> bool:
    """Whether the peaks are CUDA's allocated bytes (a figure of the config), not a process's
    resident memory."""
    return any(b.peak_mem_kind == "allocated" for b in bursts)


def _causes(r: VerifyResult) -> str:
    if r.differs:
        return f"; likely causes, the environment differs in: {_fields(r)}"
    return (
        "; no environment field differs: the machine's load, clocks or temperature, or "
        "its data disk"
    )


def _fields(r: VerifyResult) -> str:
    return ", ".join(f"{k} ({r.environment[k]['saved']} saved, {r.environment[k]['here']} here)"
                     for k in r.differs)  # fmt: skip


def _n(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.1f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1f}%"


__all__ = ["FIELDS", "VERDICTS", "VerifyResult", "environment_here", "verify"]
