"""What a config costs: a price per device hour turned into dollars per sample, epoch and month.

The arithmetic, so that it can be checked by hand (``tests/core/test_cost.py`` does):

- The job pays ``price_per_hour`` for each device it holds: ``world_size`` GPUs on CUDA; on a
  CPU the ranks share one machine, so one "device" (the machine) is billed.
  ``hourly = price_per_hour x devices``.
- ``per_million_samples = hourly / 3600 / samples_per_s x 1e6`` (``samples_per_s`` counts
  every rank); ``per_million_tokens`` likewise from ``tokens_per_s`` for token workloads.
- ``per_epoch = hourly / 3600 x epoch_samples / samples_per_s``, for a dataset size the user
  gives (``epoch_samples``); None without one.
- ``idle_share_pct``: the share of the paid time the device did no training work. On a GPU
  with NVML it is ``100 - gpu_util_pct`` (the share of the window no kernel ran: data waits,
  host syncs and launch gaps together; NVML counts a kernel on any SM as busy, so this is a
  lower bound of the waste); elsewhere ``data_wait_pct`` (the share of the window the loop
  waited for data). ``idle_basis`` says which. ``idle_per_million_samples`` is that share of
  the money.
- A tune's saving against its start, for the same work: the tuned config does it in
  ``start_sps / best_sps`` of the time, so per epoch and per million samples the saving is the
  difference of the two costs, and per month, for ``hours_per_month`` hours of the *start*
  config's training, ``hourly x hours_per_month x (1 - start_sps / best_sps)``.

No price, no cost: ``price_per_hour`` is None by default and results then have ``cost: null``.
A price comes from ``price_per_hour=`` (Python), ``--price-per-hour`` (CLI) or the
``WORKBENCH_PRICE_PER_HOUR`` environment variable, in that order; a negative or non-numeric one
is refused naming it.
"""

from __future__ import annotations

import math
import os
from typing import Any

from workbench.core.errors import InputError

PRICE_ENV = "WORKBENCH_PRICE_PER_HOUR"
HOURS_PER_MONTH = 730.0
"""A device running around the clock: 24 x 365 / 12 hours. Give your own with
``hours_per_month=`` (``--hours-per-month``)."""


def check_price(value: Any, name: str = "price_per_hour") -> float | None:
    """A price per device hour as a float, None for none; refuses negative or non-numeric."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            raise InputError.not_allowed(name, value, _PRICE_WORDS) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError.not_allowed(name, value, _PRICE_WORDS)
    if not math.isfinite(value) or value < 0:
        raise InputError.not_allowed(name, value, _PRICE_WORDS)
    return float(value)


_PRICE_WORDS = "a number >= 0: dollars (or any currency) per device hour"


def resolve_price(price_per_hour: Any = None) -> float | None:
    """The price given, else ``WORKBENCH_PRICE_PER_HOUR``, else None; checked either way."""
    if price_per_hour is not None:
        return check_price(price_per_hour)
    return check_price(os.environ.get(PRICE_ENV), PRICE_ENV)


def check_count(value: Any, name: str) -> float | None:
    """A positive size (``epoch_samples``, ``hours_per_month``) or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InputError.not_allowed(name, value, "a number > 0, or none")
    if not math.isfinite(value):
        raise InputError.not_allowed(name, value, "a number > 0, or none")
    return float(value)


def devices_billed(result: Any) -> int:
    """GPUs the job held (one per rank on CUDA); 1 on a CPU (the ranks share one machine)."""
    return max(1, int(result.knobs.world_size)) if str(result.device).startswith("cuda") else 1


def idle_share(result: Any) -> tuple[float | None, str | None]:
    """(share of the window the device idled, in %, and what it rests on)."""
    if str(result.device).startswith("cuda") and result.gpu_util_pct is not None:
        return max(0.0, 100.0 - result.gpu_util_pct), "100 - gpu_util_pct"
    if result.data_wait_pct is not None:
        return result.data_wait_pct, "data_wait_pct"
    return None, None


def burst_cost(result: Any, price_per_hour: float | None, epoch_samples: float | None = None):
    """The result's ``cost`` dict, or None without a price. Figures are None where the burst
    measured no throughput (a failure): a price alone is still recorded."""
    if price_per_hour is None:
        return None
    devices = devices_billed(result)
    hourly = price_per_hour * devices
    idle, basis = idle_share(result)
    out: dict[str, Any] = {
        "price_per_hour": price_per_hour,
        "devices": devices,
        "per_million_samples": None,
        "idle_share_pct": None if idle is None else round(idle, 3),
        "idle_basis": basis,
        "idle_per_million_samples": None,
        "per_million_tokens": None,
        "epoch_samples": epoch_samples,
        "per_epoch": None,
    }
    sps = result.samples_per_s
    if result.status != "ok" or not sps:
        return out
    per_million = hourly / 3600.0 / sps * 1e6
    out["per_million_samples"] = per_million
    if idle is not None:
        out["idle_per_million_samples"] = per_million * idle / 100.0
    if result.tokens_per_s:
        out["per_million_tokens"] = hourly / 3600.0 / result.tokens_per_s * 1e6
    if epoch_samples:
        out["per_epoch"] = hourly / 3600.0 * epoch_samples / sps
    return out


def tune_saving(
    start_sps: float | None,
    best_sps: float | None,
    price_per_hour: float | None,
    devices: int = 1,
    epoch_samples: float | None = None,
    hours_per_month: float | None = None,
) -> dict[str, Any] | None:
    """What the tuned config saves against the start for the same work (module docstring)."""
    if price_per_hour is None:
        return None
    hours = HOURS_PER_MONTH if hours_per_month is None else hours_per_month
    out: dict[str, Any] = {"price_per_hour": price_per_hour, "devices": devices,
                           "hours_per_month": hours, "epoch_samples": epoch_samples}  # fmt: skip
    if not start_sps or not best_sps:
        return {**out, "saving_pct": None, "per_million_samples": None, "per_epoch": None,
                "per_month": None}  # fmt: skip
    hourly = price_per_hour * devices
    start_m, best_m = (hourly / 3600.0 / s * 1e6 for s in (start_sps, best_sps))
    time_share = start_sps / best_sps  # of the start's hours, for the same work
    out["saving_pct"] = 100.0 * (1.0 - time_share)
    out["per_million_samples"] = {"start": start_m, "tuned": best_m, "saved": start_m - best_m}
    out["per_epoch"] = None
    if epoch_samples:
        start_e, best_e = (hourly / 3600.0 * epoch_samples / s for s in (start_sps, best_sps))
        out["per_epoch"] = {"start": start_e, "tuned": best_e, "saved": start_e - best_e}
    out["per_month"] = {"start": hourly * hours, "tuned": hourly * hours * time_share,
                        "saved": hourly * hours * (1.0 - time_share)}  # fmt: skip
    return out


def tune_result_saving(
    t: Any, price_per_hour: float | None, epoch_samples=None, hours_per_month=None
) -> dict[str, Any] | None:
    """``tune_saving`` for a TuneResult: medians of the best and of the start."""
    best = next((c for c in t.candidates if c.fits), None)
    start = next((c for c in t.candidates if c.knobs == t.start), None)
    ref = t.best_result or t.start_result
    devices = devices_billed(ref) if ref is not None else 1
    return tune_saving(start.samples_per_s if start else None,
                       best.samples_per_s if best else None, price_per_hour, devices,
                       epoch_samples, hours_per_month)  # fmt: skip


def saving_line(saving: dict[str, Any] | None) -> str | None:
    """One line for summaries: "saves 23.1%: $1.20 per epoch, $456 per month (730 h)"."""
    if not saving or saving.get("saving_pct") is None:
        return None
    parts = [f"saves {saving['saving_pct']:.1f}% of the cost"]
    if saving.get("per_epoch"):
        parts.append(f"{saving['per_epoch']['saved']:,.4g} per epoch")
    month = saving["per_month"]["saved"]
    parts.append(f"{month:,.2f} per month ({saving['hours_per_month']:,.0f} device hours)")
    return ", ".join(parts) + f" at {saving['price_per_hour']:g}/device hour"
