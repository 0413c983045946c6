"""NVIDIA DALI loader backend (GPU-side JPEG decode).

DALI is optional (the ``dali`` extra) and imported only here, only when ``loader="dali"``.
"""

from __future__ import annotations

import importlib.util

import torch

from workbench.knobs import Knobs
from workbench.loaders import LoaderUnavailable
from workbench.workloads import Workload


def dali_available() -> str | None:
    """None when DALI can be imported, else the reason it cannot."""
    if (
        importlib.util.find_spec("nvidia") is None
        or importlib.util.find_spec("nvidia.dali") is None
    ):
        return (
            "NVIDIA DALI is not installed: install the `dali` extra (pip install 'workbench[dali]')"
        )
    return None


def build_dali_stream(workload: Workload, knobs: Knobs, device: torch.device):
    reason = dali_available()
    if reason:
        raise LoaderUnavailable(f"loader='dali' cannot run here: {reason}")
    if workload.image_dir is None:
        raise LoaderUnavailable(
            f"loader='dali' cannot run workload {workload.name!r}: DALI reads image folders, "
            "and this workload has none"
        )
    raise LoaderUnavailable(
        "loader='dali' cannot run here: the DALI pipeline is not part of this version yet "
        "(tracked as its own issue); use loader='torch'"
    )
