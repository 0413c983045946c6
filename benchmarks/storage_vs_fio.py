"""``workbench io`` side by side with fio on the same file: the ratio of each rate.

Run: ``python benchmarks/storage_vs_fio.py [--path DIR] [--size-mib 256] [--seconds 2]
[--repeats 3] [--json]``. Needs fio (Debian: ``apt-get install fio``).

Both read one test file with one thread of buffered ``pread`` (fio: ``ioengine=psync``,
``direct=0``, queue depth 1), each block at most once per test (fio's random map), time-boxed.
Cold: the file's pages dropped first (``POSIX_FADV_DONTNEED``; fio: ``invalidate=1``). Warm:
the file read once beforehand, no invalidation. Runs are interleaved (workbench, fio, ...)
and the median of each side is compared; the goal is a ratio within 0.9-1.1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

TESTS = {  # our field: (fio rw, block size, how fio's number becomes ours)
    "seq_read_mb_s": ("read", "1M", lambda job: job["read"]["bw_bytes"] / 1e6),
    "rand_4k_iops": ("randread", "4k", lambda job: job["read"]["iops"]),
    "rand_1m_mb_s": ("randread", "1M", lambda job: job["read"]["bw_bytes"] / 1e6),
}


def fio_rate(path: Path, field: str, *, cold: bool, seconds: float) -> float:
    """fio's rate for one of our tests on ``path``."""
    rw, bs, read = TESTS[field]
    if not cold:  # warm: the whole file in the page cache first
        with open(path, "rb") as handle:
            while handle.read(1 << 20):
                pass
    cmd = [
        "fio", "--name=wb", f"--filename={path}", "--readonly", f"--rw={rw}", f"--bs={bs}",
        "--ioengine=psync", "--direct=0", "--iodepth=1", "--numjobs=1",
        f"--invalidate={1 if cold else 0}", f"--runtime={max(1, round(seconds * 1000))}ms",
        "--output-format=json",
        f"--size={path.stat().st_size}",
        *([] if cold else ["--time_based"]),  # warm: round and round, as workbench io does
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=seconds + 60)
    return float(read(json.loads(out.stdout[out.stdout.index("{") :])["jobs"][0]))


def workbench_rate(path: Path, field: str, *, cold: bool, seconds: float) -> float:
    from workbench.engine.storage import measure_one

    return measure_one(path, field, cold=cold, seconds=seconds)


def compare(path: Path, seconds: float, repeats: int) -> dict[str, dict[str, float]]:
    """{"cold.seq_read_mb_s": {"workbench": .., "fio": .., "ratio": ..}, ...} (medians)."""
    rows: dict[str, dict[str, float]] = {}
    for cache in ("cold", "warm"):
        for field in TESTS:
            ours, theirs = [], []
            for _ in range(repeats):
                ours.append(workbench_rate(path, field, cold=cache == "cold", seconds=seconds))
                theirs.append(fio_rate(path, field, cold=cache == "cold", seconds=seconds))
            wb, fio = statistics.median(ours), statistics.median(theirs)
            rows[f"{cache}.{field}"] = {"workbench": wb, "fio": fio, "ratio": wb / fio}
    return rows


def write_test_file(folder: Path, size_mib: int) -> Path:
    path = folder / f".workbench-vs-fio-{os.getpid()}.bin"
    with open(path, "wb") as handle:
        for _ in range(size_mib):
            handle.write(os.urandom(1 << 20))
        handle.flush()
        os.fsync(handle.fileno())
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", default=".", help="folder on the disk to test (default: here)")
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if shutil.which("fio") is None:
        print("fio is not installed (apt-get install fio)", file=sys.stderr)
        return 2
    from workbench.engine.storage import device_of

    path = write_test_file(Path(args.path), args.size_mib)
    try:
        rows = compare(path, args.seconds, args.repeats)
    finally:
        path.unlink(missing_ok=True)
    doc = {"path": args.path, "device": device_of(args.path).describe(),
           "size_mib": args.size_mib, "seconds": args.seconds, "repeats": args.repeats,
           "tests": rows}  # fmt: skip
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"{doc['device']}; {args.size_mib} MiB file, {args.seconds} s per test, "
          f"median of {args.repeats}")  # fmt: skip
    print(f"{'test':<20} {'workbench':>12} {'fio':>12} {'ratio':>7}")
    for name, r in rows.items():
        print(f"{name:<20} {r['workbench']:>12,.1f} {r['fio']:>12,.1f} {r['ratio']:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
