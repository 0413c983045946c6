"""Tests for workbench.engine.nvml_record: the NVML record a GPU burst keeps (its layout, its
thinning, the sustained clock drop), on recorded H200 readings and through the sampler with a
scripted pynvml."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from nvml_errors import NotSupported
from nvml_readings import readings, recorded
from test_telemetry import fake_nvml, scripted_burst

from workbench.engine import telemetry
from workbench.engine.nvml_record import RECORD_POINTS, clock_drop, nvml_record
from workbench.engine.telemetry import Sampler, _Sample, _summarize

COLUMNS = ["t_s", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w", "throttle_mask"]
EDGE = ["t_s", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w", "throttle_reasons"]


@pytest.fixture(autouse=True)
def fresh_nvml() -> Iterator[None]:
    telemetry._NVML.reset()
    yield
    telemetry._NVML.reset()


@pytest.fixture
def no_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML's handle by index 0, as test_telemetry's scripted bursts take it."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(telemetry, "_pci_bus_id", lambda index: None)
    monkeypatch.setattr(telemetry, "_cuda_props", lambda index: None)


def test_record_keeps_the_edges_and_every_reading_of_a_short_window() -> None:
    samples, window = readings("thermal_partway")
    record = nvml_record(samples, window)
    raw = recorded()["cases"]["thermal_partway"]
    first, inside = recorded()["before"], recorded()["inside"]

    assert record is not None
    assert list(record) == ["start", "end", "window", "samples", "stride", "clock_drop"]
    assert list(record["start"]) == EDGE and list(record["end"]) == EDGE
    assert list(record["window"]) == COLUMNS
    assert (record["samples"], record["stride"]) == (inside, 1)
    cols = record["window"]
    assert all(len(cols[c]) == inside for c in COLUMNS)
    assert cols["sm_clock_mhz"] == raw["sm_clock"][first : first + inside]
    assert cols["throttle_mask"] == raw["reasons"][first : first + inside]
    assert cols["power_w"][0] == round(raw["power_mw"][first] / 1000, 1)
    assert cols["t_s"][0] == pytest.approx(0.01) and cols["t_s"][-1] == pytest.approx(1.96)
    # the readings nearest each edge: the window's first (no reason yet) and its last
    assert record["start"]["t_s"] == pytest.approx(0.01)
    assert record["start"]["throttle_reasons"] == []
    assert record["start"]["mem_clock_mhz"] == 3201.0
    assert record["end"]["throttle_reasons"] == ["sw_thermal_slowdown"]
    assert record["end"]["temp_c"] == raw["temp"][first + inside - 1]
    assert record["clock_drop"] == {"from_mhz": 1980.0, "to_mhz": 1830.0, "pct": 7.58}
    json.dumps(record, allow_nan=False)  # stored as it is


def test_a_long_window_is_thinned_to_at_most_100_points_and_keeps_every_reason() -> None:
    n = 250  # 12.5 s at 50 ms
    samples = [_Sample(t=i * 0.05, mem_clock=3201.0, temp_c=60.0, power_w=650.0) for i in range(n)]
    for i, s in enumerate(samples):
        s.sm_clock, s.throttle = (1980.0 if i < 200 else 1680.0), (0x40 if i == 130 else 0)
    record = nvml_record(samples, (0.0, samples[-1].t))
    assert record is not None
    cols = record["window"]
    assert (record["samples"], record["stride"]) == (n, 3)
    assert len(cols["t_s"]) == 84 <= RECORD_POINTS
    assert all(len(cols[c]) == 84 for c in COLUMNS)
    assert cols["throttle_mask"].count(0x40) == 1  # one reading's reason is not thinned away
    assert cols["sm_clock_mhz"][0] == 1980.0 and cols["sm_clock_mhz"][-1] == 1680.0
    assert cols["t_s"][:3] == [0.0, 0.15, 0.3]  # each point starts its stretch of 3
    assert record["clock_drop"]["pct"] == 15.15  # from every reading, not the thinned ones
    assert len(json.dumps(record)) < 6000


@pytest.mark.usefixtures("no_visible_devices")
def test_the_sampler_reads_the_memory_clock_and_keeps_the_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = fake_nvml(
        sm_clock=[1980] * 150 + [1680] * 150,
        mem_clock=[3201],
        reasons=[0] * 120 + [0x20] + [0] * 200,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    summary = scripted_burst(manual=250).stop()

    assert summary.mem_clock_mhz == 3201.0
    assert ("mem_clock", None) in fake.calls
    record = summary.nvml
    assert record is not None and record["samples"] == 250 and record["stride"] == 3
    assert len(record["window"]["sm_clock_mhz"]) <= RECORD_POINTS
    assert 0x20 in record["window"]["throttle_mask"]
    assert record["start"]["sm_clock_mhz"] == 1980.0 and record["end"]["sm_clock_mhz"] == 1680.0
    assert summary.clock_drop_pct == record["clock_drop"]["pct"] == 15.15


@pytest.mark.usefixtures("no_visible_devices")
def test_an_unsupported_memory_clock_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(mem_clock=[NotSupported()]))
    summary = scripted_burst().stop()
    assert summary.mem_clock_mhz is None and summary.sm_clock_mhz == 1980.0
    assert summary.nvml is not None and summary.nvml["window"]["mem_clock_mhz"] == [None] * 3
    assert summary.note is not None and "mem_clock: Not Supported" in summary.note


def test_a_cpu_burst_keeps_no_nvml_record() -> None:
    summary = Sampler("cpu", interval_s=0.01).start().stop()
    assert summary.nvml is None
    assert summary.mem_clock_mhz is None and summary.clock_drop_pct is None
    assert _summarize([_Sample(t=0.0, cpu_s=0.0)], None, "cpu", []).nvml is None


@pytest.mark.parametrize(
    ("clocks", "drop"),
    [
        ([1980, 1980, 1500, 1980, 1980], (1980, 1980, 0.0)),  # one 50 ms dip: not sustained
        ([1980, 1980, 1500, 1500, 1980], (1980, 1500, 24.24)),  # two readings: it held
        ([1680, 1680, 1980, 1980, 1980], (1680, 1680, 0.0)),  # a rise is no fall
        ([1980, 1980, 1830, 1830, 1980, 1680, 1680], (1980, 1680, 15.15)),  # the largest fall
        ([1980, 1500], None),  # too few to tell a level from a blip
    ],
)
def test_the_clock_drop_counts_only_sustained_falls(
    clocks: list[float], drop: tuple[float, float, float] | None
) -> None:
    got = clock_drop([float(c) for c in clocks])
    if drop is None:
        assert got is None
        return
    assert got is not None
    assert got[:2] == drop[:2] and got[2] == pytest.approx(drop[2], abs=0.01)


def test_the_recorded_readings_are_what_their_names_say() -> None:
    """The fixture itself: H200-like figures, and each case's figures as its name says."""
    data = recorded()
    for name, case in data["cases"].items():
        assert {len(case[k]) for k in ("sm_clock", "mem_clock", "temp", "power_mw", "reasons")} \
            == {data["before"] + data["inside"] + data["after"]}, name  # fmt: skip
        assert max(case["sm_clock"]) <= 1980 and set(case["mem_clock"]) == {3201}, name
        assert min(case["temp"]) >= 40 and max(case["temp"]) <= 70, name
        assert min(case["power_mw"]) >= 300_000 and max(case["power_mw"]) <= 700_999, name
