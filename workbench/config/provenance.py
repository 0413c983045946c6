"""Where a tuned config came from, and whether the machine loading it is the same kind.

A config records the burst that chose its knobs: device, software versions, what was
measured and when. Measurements are rounded (3 decimals) so that the file reads well and a
re-save gives the same text. A config tuned on an H200 is a starting point on an A100, not a
promise: :func:`differences` names what differs (GPU model, torch major version) so loading
can warn about it instead of failing, because the knobs remain a sound first guess.
"""

from __future__ import annotations

import importlib.metadata
import math
import statistics
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from workbench.config.yaml_text import ConfigError, check_keys

KEYS = ("source", "workload", "burst_id", "date", "device", "versions", "measured", "tune", "cost",
        "ambient_env", "trainer", "workload_importable", "parity")  # fmt: skip
PARITY_KEYS = ("steps", "verdict", "max_rel_dev", "mean_rel_dev", "band", "reference")
"""A tuned pick's loss parity against the start (``workbench.analysis.parity``): the optimizer
steps compared, the verdict, the largest and mean relative deviation of the loss, the noise
band, and the reference's knobs (the start's numerics at the pick's batch)."""
PARITY_VERDICTS = ("identical", "within-noise", "drifting", "diverged")
COST_KEYS = ("price_per_hour", "per_million_samples", "idle_share_pct", "epoch_samples",
             "per_epoch")  # fmt: skip
"""The price the knobs were judged at and what it made of the measurement (``workbench.core.cost``);
present only when a price was given."""
DEVICE_KEYS = ("type", "name", "memory_mib")
MEASURED_KEYS = (
    "status",
    "samples_per_s",
    "tokens_per_s",
    "step_ms_p50",
    "step_ms_iqr",
    "data_wait_pct",
    "peak_mem_mib",
    "peak_reserved_mib",
    "mfu_pct",
    "noisy",
    "seconds",
)
_NUMBERS = set(MEASURED_KEYS) - {"status", "noisy"}
TUNE_KEYS = ("runs", "samples_per_s_runs", "speedup", "speedup_low", "speedup_high",
             "speedup_uncertain", "start_runs", "noise_pct", "bursts")  # fmt: skip
"""A tuned config's claim: the median of ``runs`` (each listed), the speed-up over the start
with its interval and the start's runs (``speedup_uncertain``: the runs could not tell it, as
the tune said), the noise measured and the bursts the tune ran."""
_TUNE_COUNTS = ("runs", "start_runs", "bursts")


def from_result(result: Any) -> dict[str, Any]:
    """Provenance of a BurstResult: its workload (by ``module:function`` where it has one, a
    built-in name as it is, else the name it showed), device, versions, measurements, time."""
    r = result.to_dict()
    return {
        "source": "burst",
        "workload": (r.get("workload_source") or {}).get("workload") or r.get("workload") or None,
        "burst_id": r.get("id"),
        "date": r.get("created_at"),
        "device": {
            "type": r.get("device") or None,
            "name": r.get("device_name"),
            "memory_mib": _round(r.get("device_mem_mib")),
        },
        "versions": _versions(_with_machine(r.get("versions") or {}), "provenance.versions", None),
        "measured": {k: _measured_value(k, r.get(k)) for k in MEASURED_KEYS},
        "tune": None,
        **_cost_of(r.get("cost")),
        **_ambient_of(r.get("ambient_env")),
    }


def _with_machine(versions: Mapping[str, Any]) -> dict[str, Any]:
    """A burst's versions with what ``workbench verify`` also compares and a burst does not
    record: NCCL's version and the cores this process may use, read here, in the saving
    process (the tune's or the panel's, on the measuring machine)."""
    # torch only when a config is saved: load_config stays torch-free
    from workbench.engine.hardware import device_info, nccl_version

    extra = {"nccl": nccl_version(), "usable_cores": str(device_info("cpu").cpu_count)}
    return {**extra, **versions}


def _ambient_of(env: Any) -> dict[str, Any]:
    """``{"ambient_env": {...}}``: variables of the measuring process's environment that shaped
    the burst without being knobs (``workbench.core.ambient``); nothing when there were none."""
    if not isinstance(env, Mapping) or not env:
        return {}
    return {"ambient_env": {str(k): str(v) for k, v in sorted(env.items())}}


def ambient_warnings(prov: Mapping[str, Any]) -> list[str]:
    """One warning per variable in ``provenance.ambient_env``: the measurement had it, the
    knobs do not, so a production run reproduces it only if it exports it too."""
    return [f"provenance.ambient_env: measured with {name}={value} in the environment, not a "
            f"knob: export it to reproduce the measurement, or re-measure without it"
            for name, value in (prov.get("ambient_env") or {}).items()]  # fmt: skip


def _cost_of(cost: Any) -> dict[str, Any]:
    """``{"cost": {...}}`` from a result's cost (rounded), or nothing without a price."""
    if not isinstance(cost, Mapping) or cost.get("price_per_hour") is None:
        return {}
    return {"cost": {k: _round(cost.get(k)) for k in COST_KEYS}}


def from_tune(tuned: Any) -> dict[str, Any]:
    """Provenance of a TuneResult's best: what the tune *claimed*, not its luckiest burst.

    ``measured`` holds the medians over the best config's finished runs (samples/s, tokens/s,
    step time, data wait) and the highest peak among them; ``tune`` lists those runs and the
    speed-up with its interval. Device, versions, date and burst id come from the run closest
    to the median (``best_result``).
    """
    prov = from_result(tuned.best_result)
    runs = [r for r in tuned.bursts if r.knobs == tuned.best and r.ok and r.samples_per_s]
    measured = dict(prov["measured"])
    for key in ("samples_per_s", "tokens_per_s", "step_ms_p50", "step_ms_iqr", "data_wait_pct",
                "mfu_pct"):  # fmt: skip
        values = [getattr(r, key) for r in runs if getattr(r, key) is not None]
        measured[key] = _round(statistics.median(values)) if values else measured[key]
    for key in ("peak_mem_mib", "peak_reserved_mib"):
        values = [getattr(r, key) for r in runs if getattr(r, key) is not None]
        measured[key] = _round(max(values)) if values else measured[key]
    measured["noisy"] = any(r.noisy for r in runs) if runs else measured["noisy"]
    prov["measured"] = measured
    prov["source"] = "tune"
    prov["tune"] = {
        "runs": len(runs),
        "samples_per_s_runs": [_round(r.samples_per_s) for r in runs],
        "speedup": _round(tuned.speedup),
        "speedup_low": _round(tuned.speedup_low),
        "speedup_high": _round(tuned.speedup_high),
        "speedup_uncertain": getattr(tuned, "speedup_uncertain", None),
        "start_runs": tuned.start_runs,
        "noise_pct": _round(tuned.noise_pct),
        "bursts": len(tuned.bursts),
    }
    evidence = getattr(tuned, "parity", None)
    if evidence is not None:  # the pick's loss parity against the start (the tuner's check)
        prov["parity"] = _parity(evidence.evidence(), None)
    return prov


def from_knobs(device: Any = None) -> dict[str, Any]:
    """Provenance of knobs saved without a burst: when, on which device, with which software.

    Nothing was measured, but the device they were chosen on still matters: loading them on
    another GPU model warns, as it does for a measured config. ``device`` as in
    ``hardware.resolve_device`` (default: CUDA if present, else the CPU).
    """
    # torch only when a config is saved: load_config stays torch-free
    from workbench.engine.hardware import device_info, versions

    info = device_info(device)
    return {
        "source": "knobs",
        "workload": None,
        "burst_id": None,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": {
            "type": info.kind if info.index is None else f"{info.kind}:{info.index}",
            "name": info.name,
            "memory_mib": _round(info.total_mem_mib),
        },
        "versions": _versions(versions(), "provenance.versions", None),
        "measured": None,
        "tune": None,
    }


def normalize(data: Any, path: str | Path | None) -> dict[str, Any]:
    """Validate a provenance mapping read from a file; every key present, in a fixed order."""
    if data is None:
        data = {}
    _expect_mapping(data, "provenance", path)
    check_keys(path, "provenance", data, KEYS)
    device = data.get("device") or {}
    _expect_mapping(device, "provenance.device", path)
    check_keys(path, "provenance.device", device, DEVICE_KEYS)
    measured = data.get("measured")
    if measured is not None:
        _expect_mapping(measured, "provenance.measured", path)
        check_keys(path, "provenance.measured", measured, MEASURED_KEYS)
        measured = {k: _checked_measure(k, measured.get(k), path) for k in MEASURED_KEYS}
    return {
        "source": _text(data.get("source"), "provenance.source", path),
        "workload": _text(data.get("workload"), "provenance.workload", path),
        "burst_id": _int(data.get("burst_id"), "provenance.burst_id", path),
        "date": _date(data.get("date"), path),
        "device": {
            "type": _text(device.get("type"), "provenance.device.type", path),
            "name": _text(device.get("name"), "provenance.device.name", path),
            "memory_mib": _number(device.get("memory_mib"), "provenance.device.memory_mib", path),
        },
        "versions": _versions(data.get("versions") or {}, "provenance.versions", path),
        "measured": measured,
        "tune": _tune(data.get("tune"), path),
        **_read_cost(data.get("cost"), path),
        **_read_ambient(data.get("ambient_env"), path),
        **_read_workload_marks(data, path),
        **({"parity": _parity(data["parity"], path)} if data.get("parity") is not None else {}),
    }


def _parity(data: Any, path: str | Path | None) -> dict[str, Any]:
    """``provenance.parity`` checked: every key of ``PARITY_KEYS``, a known verdict."""
    _expect_mapping(data, "provenance.parity", path)
    check_keys(path, "provenance.parity", data, PARITY_KEYS)
    verdict = data.get("verdict")
    if verdict not in PARITY_VERDICTS:
        allowed = f"{verdict!r} is not allowed: one of {', '.join(PARITY_VERDICTS)}"
        raise ConfigError(path, "provenance.parity.verdict", allowed)
    reference = data.get("reference") or {}
    _expect_mapping(reference, "provenance.parity.reference", path)
    return {
        "steps": _int(data.get("steps"), "provenance.parity.steps", path),
        "verdict": verdict,
        **{k: _float(data.get(k), f"provenance.parity.{k}", path)
           for k in ("max_rel_dev", "mean_rel_dev", "band")},
        "reference": {str(k): v for k, v in reference.items()},
    }  # fmt: skip


def _float(value: Any, key: str, path: str | Path | None) -> float | None:
    """A small number kept to 3 significant figures (a deviation of 1e-5 is not 0.0)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(path, key, f"expected a number or null, got {value!r}")
    return float(f"{float(value):.3g}") if math.isfinite(value) else None


def parity_line(prov: Mapping[str, Any]) -> str | None:
    """One line on the saved pick's loss parity, or None where none was measured."""
    p = prov.get("parity")
    if not p:
        return None
    ref = ", ".join(f"{k}={v}" for k, v in (p.get("reference") or {}).items()) or "defaults"
    return (f"loss parity against the start ({ref}): {p.get('verdict')} over {p.get('steps')} "
            f"steps, largest relative deviation {_sci(p.get('max_rel_dev'))}, mean "
            f"{_sci(p.get('mean_rel_dev'))}, band {_sci(p.get('band'))}")  # fmt: skip


def _sci(x: Any) -> str:
    return "n/a" if x is None else f"{x:.2e}"


def _read_workload_marks(data: Mapping[str, Any], path: str | Path | None) -> dict[str, Any]:
    """``trainer`` (``lightning``: the module's training_step and configure_optimizers
    trained, not a loss and an optimizer of the file's) and ``workload_importable`` (false:
    ``workload`` is a Workload object's display name, which no other process can rebuild);
    present only when so."""
    out: dict[str, Any] = {}
    if data.get("trainer") is not None:
        trainer = _text(data.get("trainer"), "provenance.trainer", path)
        if trainer != "lightning":
            raise ConfigError(path, "provenance.trainer", f"{trainer!r} is not allowed: lightning")
        out["trainer"] = trainer
    importable = data.get("workload_importable")
    if importable is not None:
        if importable is not False:
            problem = f"{importable!r} is not allowed: false (left out when it is importable)"
            raise ConfigError(path, "provenance.workload_importable", problem)
        out["workload_importable"] = False
    return out


def _read_ambient(data: Any, path: str | Path | None) -> dict[str, Any]:
    if data is None:
        return {}
    _expect_mapping(data, "provenance.ambient_env", path)
    out = {}
    for name, value in data.items():
        where = f"provenance.ambient_env.{name}"
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ConfigError(path, where, f"{value!r} is not allowed: text (quote it in YAML)")
        out[str(name)] = str(value)
    return _ambient_of(out)


def _read_cost(data: Any, path: str | Path | None) -> dict[str, Any]:
    if data is None:
        return {}
    _expect_mapping(data, "provenance.cost", path)
    check_keys(path, "provenance.cost", data, COST_KEYS)
    return {"cost": {k: _number(data.get(k), f"provenance.cost.{k}", path) for k in COST_KEYS}}


def _tune(data: Any, path: str | Path | None) -> dict[str, Any] | None:
    if data is None:
        return None
    _expect_mapping(data, "provenance.tune", path)
    check_keys(path, "provenance.tune", data, TUNE_KEYS)
    out: dict[str, Any] = {}
    for key in TUNE_KEYS:
        where, value = f"provenance.tune.{key}", data.get(key)
        if key in _TUNE_COUNTS:
            out[key] = _int(value, where, path)
        elif key == "samples_per_s_runs":
            if not isinstance(value, list):
                raise ConfigError(path, where, f"expected a list of numbers, got {value!r}")
            out[key] = [_number(v, where, path) for v in value]
        elif key == "speedup_uncertain":  # absent from configs saved before it existed
            if value is not None and not isinstance(value, bool):
                raise ConfigError(path, where, f"expected true, false or null, got {value!r}")
            out[key] = value
        else:
            out[key] = _number(value, where, path)
    return out


# --------------------------------------------------------------------------- this machine


def current_machine() -> dict[str, Any]:
    """This machine's GPU models and torch version: what a config is compared against.

    Asked without importing torch (``load_config`` compares on load, and a training script
    loads its config first): ``gpus`` come from NVML ([] where no NVIDIA driver is loaded,
    None when unknown), or from torch only where the script has imported it and initialized
    CUDA already. Initializing CUDA here would create PyTorch's CUDA allocator, which reads
    PYTORCH_CUDA_ALLOC_CONF right then, before a script could export that variable from the
    very config it is loading. ``torch``: the imported module's version, else the installed
    package's (without its local ``+cu...`` part).
    """
    torch = sys.modules.get("torch")
    return {"gpus": _gpu_names(torch), "torch": _torch_version(torch)}


def _torch_version(torch: Any) -> str | None:
    if torch is not None:
        return str(torch.__version__)
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


_NO_DRIVER = ("Shared Library Not Found", "Driver Not Loaded")
"""NVML's own words when no NVIDIA driver is there: no CUDA GPU either."""


def _gpu_names(torch: Any) -> list[str] | None:
    if torch is not None and torch.cuda.is_initialized():
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    from workbench.engine.telemetry import nvml_status  # torch-free: NVML only

    why = nvml_status()
    if why is None:
        import pynvml  # NVML is optional: absent without an NVIDIA driver

        try:
            handles = [
                pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
            ]
            names = [pynvml.nvmlDeviceGetName(h) for h in handles]
            return [n.decode() if isinstance(n, bytes) else str(n) for n in names]
        except pynvml.NVMLError:
            return None
    if any(words in why for words in _NO_DRIVER):
        return []
    if torch is not None:
        return None if torch.cuda.is_available() else []  # device count only: no allocator yet
    return None


def differences(prov: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    """What differs between the tuning machine and ``here``, one sentence each.

    Knobs saved without a burst say "saved (not measured) on": their device is where they were
    chosen, not where they were shown to run well.
    """
    notes = []
    device = prov.get("device") or {}
    kind, name = (device.get("type") or "").split(":")[0], device.get("name")
    did = "saved (not measured)" if prov.get("source") == "knobs" else "tuned"
    gpus = here.get("gpus")
    if kind == "cuda" and gpus is not None and not gpus:
        notes.append(f"{did} on {name or 'a CUDA GPU'}; this machine has no CUDA GPU")
    elif kind == "cuda" and gpus and name and name not in gpus:
        notes.append(f"{did} on {name}; this machine has {', '.join(sorted(set(gpus)))}")
    elif kind == "cpu" and gpus:
        notes.append(f"{did} on a CPU ({name or 'unknown model'}); this machine has {gpus[0]}")
    tuned_torch = (prov.get("versions") or {}).get("torch")
    if tuned_torch and _major(tuned_torch) != _major(here.get("torch") or ""):
        notes.append(f"{did} with torch {tuned_torch}; this machine has torch {here.get('torch')}")
    return notes


def summary(prov: Mapping[str, Any]) -> str:
    """One line: what was measured, where and when."""
    if prov.get("source") not in ("burst", "tune"):
        name = (prov.get("device") or {}).get("name")
        on = f" on {name}" if name else ""
        return f"saved {prov.get('date') or '(date unknown)'}{on} without a measurement"
    device = prov.get("device") or {}
    m = prov.get("measured") or {}
    parts = [f"{prov.get('workload')} on {device.get('name')} ({device.get('type')})"]
    tune = prov.get("tune") or {}
    of_runs = f" (median of {tune['runs']} runs)" if tune.get("runs") else ""
    parts.append(f"{_fmt(m.get('samples_per_s'))} samples/s{of_runs}")
    if tune.get("speedup_uncertain"):  # the tune's words, not a figure the runs cannot back
        parts.append(f"a speed-up over the start the runs could not tell "
                     f"({tune.get('start_runs')} start runs)")  # fmt: skip
    elif tune.get("speedup") is not None:
        low, high = tune.get("speedup_low"), tune.get("speedup_high")
        interval = f" ({low:.2f}-{high:.2f})" if low is not None and high is not None else ""
        parts.append(f"{tune['speedup']:.2f}x{interval} the start ({tune.get('start_runs')} runs)")
    parts.append(f"step {_fmt(m.get('step_ms_p50'))} ms")
    parts.append(f"peak {_fmt(m.get('peak_mem_mib'))} MiB")
    parts.append(f"torch {(prov.get('versions') or {}).get('torch')}")
    parts.append(f"measured {prov.get('date')}")
    parity = parity_line(prov)
    return ", ".join(parts) + (f"; {parity}" if parity else "")


# --------------------------------------------------------------------------- helpers


def _major(version: str) -> str:
    return version.split(".")[0]


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.1f}"


def _round(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return round(float(x), 3)


def _measured_value(key: str, value: Any) -> Any:
    if key in _NUMBERS:
        return _round(value)
    return value


def _expect_mapping(value: Any, key: str, path: str | Path | None) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(path, key, f"expected a mapping, got {type(value).__name__}")


def _text(value: Any, key: str, path: str | Path | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return str(value)  # a str subclass (torch's TorchVersion) cannot be dumped safely
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # e.g. an unquoted version number
    raise ConfigError(path, key, f"expected text, got {value!r}")


def _int(value: Any, key: str, path: str | Path | None) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ConfigError(path, key, f"expected an integer or null, got {value!r}")


def _number(value: Any, key: str, path: str | Path | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(path, key, f"expected a number or null, got {value!r}")
    return _round(value)


def _date(value: Any, path: str | Path | None) -> str | None:
    if isinstance(value, datetime):  # an unquoted timestamp, read by YAML as a datetime
        return value.isoformat()
    return _text(value, "provenance.date", path)


def _checked_measure(key: str, value: Any, path: str | Path | None) -> Any:
    where = f"provenance.measured.{key}"
    if key == "noisy":
        if value is None or isinstance(value, bool):
            return value
        raise ConfigError(path, where, f"expected true, false or null, got {value!r}")
    if key == "status":
        return _text(value, where, path)
    return _number(value, where, path)


def _versions(data: Any, key: str, path: str | Path | None) -> dict[str, str | None]:
    _expect_mapping(data, key, path)
    return {str(k): _text(v, f"{key}.{k}", path) for k, v in data.items()}
