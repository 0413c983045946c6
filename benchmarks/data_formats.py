"""Every data format on this machine: cold and warm, loader-only and full burst, and raw reads.

Run: ``python benchmarks/data_formats.py [--data DIR] [--workload cnn] [--seconds 3]
[--repeats 3] [--batch-size 32] [--workers 2] [--json FILE]``.

Measures, on the sample dataset (built first if missing, in ``--data`` or a temporary folder):

1. the size on disk of each format beside the JPEG folder's, and the conversion rate;
2. the storage ceiling of each format (``storage_ceiling``: the bytes read raw and cold, one
   pass, no decode) - the "random LMDB vs sequential shards vs one file per image" question;
3. ``compare_formats``: loader alone and full burst, cold and warm, interleaved by repeat,
   medians - the "predecoded vs decode" question (loader alone) and what reaches training.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from workbench.engine.datasets import build_datasets, read_manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="data root (default: a temporary folder, built fresh)")
    p.add_argument("--workload", default="cnn")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--modes", default="loader,full", help="loader, full or both (default)")
    p.add_argument("--json", metavar="FILE", help="also write every row here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.data or tmp)
        if read_manifest(root) is None:
            build_datasets(root)
        return _run(root, args)


def _run(root: Path, args: argparse.Namespace) -> int:
    from workbench.analysis.format_bench import compare_formats, summary
    from workbench.analysis.storage_ceiling import storage_ceiling
    from workbench.core.knobs import Knobs
    from workbench.engine.convert import convert_dataset
    from workbench.engine.formats import image_size
    from workbench.engine.formats.predecoded import resolution_for
    from workbench.engine.storage import device_of
    from workbench.engine.workloads import resolve_workload

    wl = resolve_workload(args.workload, root)
    print(f"data: {wl.image_dir} on {device_of(wl.image_dir).describe()}")
    conversions = {}
    for fmt in ("shards", "lmdb", "predecoded"):
        res = resolution_for(image_size(wl, wl.dataset())) if fmt == "predecoded" else None
        for f in wl.image_dir.parent.glob(f"{wl.image_dir.name}.{fmt}*"):
            if f.is_dir():  # measure a fresh conversion, not a reused one
                shutil.rmtree(f)
        done = convert_dataset(fmt, wl.image_dir, resolution=res)
        conversions[fmt] = done.to_dict()
        print(" ", done.summary())
    knobs = Knobs(batch_size=args.batch_size, num_workers=args.workers)
    ceilings = {}
    for fmt in ("files", "shards", "lmdb", "predecoded"):
        runs = [storage_ceiling(wl, knobs.replace(data_format=fmt), seconds=args.seconds)
                for _ in range(args.repeats)]  # fmt: skip
        ok = sorted(r.samples_per_s for r in runs if r.ok)
        mb = sorted(r.mb_s for r in runs if r.ok)
        ceilings[fmt] = {"samples_per_s": ok[len(ok) // 2] if ok else None,
                         "mb_s": mb[len(mb) // 2] if mb else None,
                         "runs": [r.to_dict() for r in runs]}  # fmt: skip
        print(
            f"  storage ceiling {fmt:<11} {ceilings[fmt]['samples_per_s'] or 0:>9,.0f} samples/s"
            f" {ceilings[fmt]['mb_s'] or 0:>8,.0f} MB/s (raw, cold, {args.workers} threads)"
        )
    modes = tuple(m.strip() for m in args.modes.split(","))
    frame = compare_formats(wl, knobs, seconds=args.seconds, repeats=args.repeats, modes=modes,
                            progress=lambda m: print("   ", m, file=sys.stderr))  # fmt: skip
    table = summary(frame)
    print(table.round(1).to_string())
    for mode, drift in frame.attrs.get("drift", {}).items():  # a reading needs --repeats 2+
        if drift["sentence"]:
            print(f"  drift ({mode}): {drift['sentence']}")
    failed = frame[frame["status"] != "ok"]
    for row in failed.itertuples():
        print(f"  FAILED {row.data_format} {row.cache} {row.mode}: {row.error}")
    if args.json:
        doc = {"workload": wl.name, "knobs": knobs.changes(), "seconds": args.seconds,
               "repeats": args.repeats, "device": device_of(wl.image_dir).describe(),
               "conversions": conversions, "storage_ceilings": ceilings,
               "rows": frame.to_dict(orient="records")}  # fmt: skip
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
    return 0 if failed.empty else 1


if __name__ == "__main__":
    sys.exit(main())
