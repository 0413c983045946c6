"""Follow the knobs through one burst: which modules ("rooms") are handed them, in what order.

Issue 39 counted, from ``distributed/dispatch.py:run_burst`` on, every function of the package
that is handed the burst's ``Knobs`` (as an argument, or as the ``knobs`` of an argument such as
the train state): 88 stays in 35 rooms, 53 of them returns to a room already left, 8 climbs back
up a layer, ``engine/training.py`` entered 9 times. This script measures the same on a real CPU
burst, so the figure is a measurement, not a reading:

- a **stay** is a run of consecutive knob-handed calls in one module;
- a **return** is a stay in a module the route had already left;
- a **climb** is a stay in a higher layer than the one before it (the layers of
  docs/development.md: core < history < engine < distributed, config < analysis < tuning <
  notebook < cli), i.e. control went back up and the knobs were read again there.

Why handed knobs, not read attributes: a module that is handed the raw knobs can decide
anything from them; one that is handed only the plan's answer cannot decide again. That is
what "each knob decided once" means to a reader of the code.

Usage: python benchmarks/knob_route.py [--workload cnn] [--knobs JSON] [--json] [--route]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"
LAYERS = {"core": 0, "history": 1, "engine": 2, "distributed": 3, "config": 3, "analysis": 4,
          "tuning": 5, "notebook": 6, "cli": 7}  # fmt: skip


@dataclass(frozen=True)
class Route:
    """The knobs' route through one burst, counted (module docstring)."""

    stays: int
    rooms: int
    returns: int
    climbs: int
    entries: dict[str, int]
    """Stays per module, most first."""
    path: list[str]
    """The modules, one per stay, in order."""
    calls: list[str]
    """Every knob-handed call, ``room:function``, in order."""


@functools.cache
def room_of(filename: str) -> str | None:
    """The package-relative module path of a code file, or None outside the package (cached:
    the profiler asks for every Python call of the burst, torch's own included)."""
    try:
        return Path(filename).resolve().relative_to(PACKAGE).as_posix()
    except ValueError:
        return None


def holds_knobs(frame: FrameType, knobs_type: type) -> bool:
    """True when a call's arguments include the Knobs, or an object whose ``knobs`` is one."""
    code = frame.f_code
    n_args = code.co_argcount + code.co_kwonlyargcount
    for name in code.co_varnames[:n_args]:
        value = frame.f_locals.get(name)
        if isinstance(value, knobs_type):
            return True
        if isinstance(getattr(value, "knobs", None), knobs_type):
            return True
    return False


@contextmanager
def recording(knobs_type: type) -> Iterator[list[str]]:
    """Record, while the block runs, the room of every package call handed the knobs (on any
    thread the burst starts: the loader's and telemetry's threads run package code too)."""
    calls: list[str] = []

    def on_event(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        room = room_of(frame.f_code.co_filename)
        if room is not None and holds_knobs(frame, knobs_type):
            calls.append(f"{room}:{frame.f_code.co_name}")

    import threading

    sys.setprofile(on_event)
    threading.setprofile(on_event)
    try:
        yield calls
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def layer_of(room: str) -> int:
    """The room's layer (its top folder); the package's top-level modules count as the top."""
    return LAYERS.get(room.split("/", 1)[0], max(LAYERS.values()))


def count(calls: list[str]) -> Route:
    """Collapse calls (``room:function``) into stays and count rooms, returns and climbs
    (module docstring)."""
    path: list[str] = []
    for room in (call.split(":", 1)[0] for call in calls):
        if not path or path[-1] != room:
            path.append(room)
    seen: set[str] = set()
    returns = climbs = 0
    for i, room in enumerate(path):
        returns += room in seen
        seen.add(room)
        climbs += i > 0 and layer_of(room) > layer_of(path[i - 1])
    entries: dict[str, int] = {}
    for room in path:
        entries[room] = entries.get(room, 0) + 1
    ordered = dict(sorted(entries.items(), key=lambda kv: (-kv[1], kv[0])))
    return Route(len(path), len(seen), returns, climbs, ordered, path, list(calls))


def follow(workload: str, knobs: dict[str, Any]) -> Route:
    """Run one short CPU burst from ``run_burst`` and count its knobs' route."""
    import workbench
    from workbench.core.knobs import Knobs

    chosen = Knobs(**knobs)  # built outside: its own validation is not the route
    with recording(Knobs) as calls:
        result = workbench.run_burst(workload, chosen, seconds=0.3, min_steps=2,
                                     warmup_steps=1, device="cpu", record=False)  # fmt: skip
    if result.status != "ok":
        raise SystemExit(f"the burst did not run: {result.status}: {result.error}")
    return count(calls)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="cnn")
    ap.add_argument("--knobs", default="{}", help="JSON, e.g. '{\"num_workers\": 2}'")
    ap.add_argument("--json", action="store_true", help="print the Route as JSON")
    ap.add_argument("--route", action="store_true", help="print the rooms in order")
    args = ap.parse_args(argv)
    route = follow(args.workload, json.loads(args.knobs))
    if args.json:
        print(json.dumps(asdict(route), indent=2))
        return 0
    print(f"{route.stays} stays in {route.rooms} rooms, {route.returns} returns to a room "
          f"already left, {route.climbs} climbs back up")  # fmt: skip
    for room, n in route.entries.items():
        print(f"  {n:3d}  {room}")
    if args.route:
        print("calls: " + " > ".join(route.calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
