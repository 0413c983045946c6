"""The ``workbench`` command.

Exit codes: 0 a result was produced (``ok``, and ``oom``: running out of memory is a
measurement, not a crash); 1 the burst failed (``status: error``); 2 bad input (one line on
stderr naming the knob, the value and what is allowed; no traceback); 130 interrupted.
With ``--json`` stdout holds exactly one JSON document; everything else goes to stderr.
``--debug`` (or ``WORKBENCH_DEBUG=1``, the same switch) shows tracebacks: bad input's instead
of its one line, and a failed burst's ``traceback``, which ``--json`` otherwise leaves null.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from workbench.core.cost import check_price
from workbench.core.errors import InputError, KnobError
from workbench.core.results import SHORT_EPOCH_BATCHES, short_epochs_line
from workbench.history.dsn import is_postgres_url, password_of
from workbench.history.store import StoreError, pending_results, retry_pending

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
WORKLOAD_HELP = (
    "a built-in name (cnn, resnet50, gpt, gpt:124m, hf:gpt2) or module:function that returns "
    "a Workload, importable from the current directory (default: cnn on CPU, resnet50 on GPU)"
)
_OPTION_OF = {
    "workload": "--workload",
    "data_dir": "--data",
    "price_per_hour": "--price-per-hour",
    "epoch_samples": "--epoch-samples",
    "hours_per_month": "--hours-per-month",
    "launcher": "--launcher",
    "hosts": "--hosts",
}
"""Arguments whose errors name them as the Python API does, shown as the CLI's options."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"workbench {self.prog.split()[-1]}: error: {message}\n")


class _Version(argparse.Action):
    """``--version``, printed as one line (argparse's own wraps it at the terminal's width)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any) -> NoReturn:
        print(version_line())
        parser.exit(EXIT_OK)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="workbench", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=_Version, help="print the distribution and version")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_burst(sub.add_parser("burst", help="run one measured training burst"))
    _add_history(sub.add_parser("history", help="list past bursts from the history store"))
    _add_data(sub.add_parser("data", help="build the sample datasets, or convert a folder"))
    _add_io(sub.add_parser("io", help="the data disk's read rates, cold and warm"))
    _add_lab(sub.add_parser("lab", help="open JupyterLab on the quickstart notebook"))
    _add_show(sub.add_parser("show", help="check a saved config; print env, DataLoader, torchrun"))
    _add_sweep(sub.add_parser("sweep", help="one burst per value of one knob"))
    _add_diagnose(sub.add_parser("diagnose", help="data-bound or compute-bound? with advice"))
    _add_tune(sub.add_parser("tune", help="search knobs for the best measured throughput"))
    _add_comm(sub.add_parser("comm", help="all-reduce benchmark: time, algbw, busbw by size"))
    _add_profile(sub.add_parser("profile", help="a burst under torch.profiler; writes a trace"))
    _add_class(sub.add_parser("class", help="set up the room's PostgreSQL store (instructor)"))
    for command in sub.choices.values():  # after the command too: workbench burst --debug
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help=_DEBUG_HELP)  # fmt: skip
    return parser


_DEBUG_HELP = (
    "show tracebacks: a failed burst's (in --json too) and bad input's (as WORKBENCH_DEBUG=1)"
)


def _add_burst(p: argparse.ArgumentParser) -> None:
    _add_run_args(p, seconds=3.0, set_help="set a knob (repeatable), e.g. --set batch_size=64")
    p.add_argument("--min-steps", type=int, default=5, help="minimum steps in the window")
    p.add_argument("--warmup-steps", type=int, default=3, help="steps before the window")
    p.add_argument("--timeout", type=float, help="stop a distributed job after S seconds")
    _add_launch_args(p)
    _add_money(p)


def _add_launch_args(p: argparse.ArgumentParser) -> None:
    """Where the agents of a multi-node job (nodes > 1) run: burst and comm."""
    p.add_argument(
        "--launcher", choices=["local", "slurm", "ssh"],
        help="with nodes > 1: one torchrun agent per node via srun (default inside a SLURM "
        "allocation), ssh (default with --hosts) or local (this machine's \"nodes\")",
    )  # fmt: skip
    p.add_argument("--hosts", metavar="H1,H2", type=_hosts,
                   help="with --launcher ssh: one host per node")  # fmt: skip


def _hosts(text: str) -> str:
    from workbench.distributed.launchers import parse_hosts  # only when --hosts is given

    try:
        parse_hosts(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: {exc.allowed}") from None
    return text


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: a whole number, 1 or more")
    return value


def _add_money(p: argparse.ArgumentParser, tune: bool = False) -> None:
    """Options that turn results into cost (``workbench.core.cost``): burst, sweep, tune."""
    p.add_argument(
        "--price-per-hour",
        metavar="P",
        type=_price,
        help="price of one device hour (default: $WORKBENCH_PRICE_PER_HOUR; none)",
    )
    p.add_argument(
        "--epoch-samples",
        metavar="N",
        type=_positive,
        help="samples in one epoch of your dataset: adds the cost per epoch",
    )
    if tune:
        p.add_argument(
            "--hours-per-month",
            metavar="H",
            type=_positive,
            help="device hours you train a month (default 730): the saving",
        )


def _price(text: str) -> float | None:
    try:
        return check_price(text)
    except ValueError as exc:
        allowed = getattr(exc, "allowed", str(exc))
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: {allowed}") from None


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: a number > 0")
    return value


def _add_comm(p: argparse.ArgumentParser) -> None:
    p.add_argument("--world-size", type=int, help="ranks (default: every GPU; 2 on a CPU)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NCCL_X=VALUE",
        help="an NCCL variable for the ranks (repeatable), e.g. NCCL_ALGO=Ring",
    )
    p.add_argument(
        "--sizes",
        metavar="S1,S2,...",
        help="message sizes, e.g. 8K,1M,256M (default: 8K-256M on GPU, 8K-8M on CPU)",
    )
    p.add_argument("--device", help="cpu or cuda (default: cuda if available)")
    p.add_argument("--timeout", type=float, default=300.0, help="stop the job after S seconds")
    p.add_argument("--nodes", type=_count, default=1,
                   help="nodes (world size divides by it): rows within, across nodes")  # fmt: skip
    _add_launch_args(p)
    p.add_argument("--plot", metavar="FILE", help="save the busbw chart (.html, .png, .svg)")
    p.add_argument("--json", action="store_true", help="print one JSON document")  # fmt: skip
    p.add_argument(
        "--sweep",
        metavar="NCCL_X=V1,V2,...",
        help="one benchmark per value: the winner per size range and bucket_cap_mb past the knee",
    )
    p.add_argument(
        "--save", metavar="FILE.yaml", help="with --sweep: save a config (knobs from --set) "
        "with the sweep's suggestions in its comm section",
    )  # fmt: skip


def _add_history(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", help="only bursts of this workload (its name, e.g. cnn)")
    p.add_argument("--status", choices=["ok", "oom", "error", "cancelled"])
    p.add_argument("--limit", type=int, help="only the newest N")
    p.add_argument(
        "--learner", help="only this learner's bursts (class mode; an instructor's view)"
    )
    p.add_argument(
        "--store",
        help="history file or postgresql:// URL (default: $WORKBENCH_STORE, $WORKBENCH_HISTORY, "
        "$WORKBENCH_HOME)",
    )
    p.add_argument(
        "--retry", action="store_true",
        help="first store the bursts kept while the store could not be reached",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print a JSON list of bursts")


def _add_data(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help="data root (default: $WORKBENCH_DATA, ./data, $WORKBENCH_HOME)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--images-per-class", type=int, help="images in each class (default 80)")
    size.add_argument(
        "--images",
        type=int,
        metavar="N",
        help="at least N images in all, spread over the classes (default 800)",
    )
    size.add_argument(
        "--for-batch",
        type=int,
        metavar="B",
        help=f"images enough for {SHORT_EPOCH_BATCHES} batches of B an epoch, so a burst "
        f"measures the loader rather than epoch restarts: --for-batch 256 is 12,800 images "
        f"(the same as --images 12800; 1.4 GB, 297 s on a busy 2-core machine, 195 s of CPU)",
    )
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--token-mb", type=float, default=4.0)
    p.add_argument(
        "--format",
        choices=["shards", "lmdb", "predecoded"],
        help="convert an ImageFolder to this format instead of building samples",
    )
    p.add_argument(
        "--from",
        dest="source",
        metavar="DIR",
        help="the ImageFolder to convert (default: the sample images)",
    )
    p.add_argument("--to", metavar="DIR", help="folder the copy goes under (default: beside it)")
    p.add_argument(
        "--resolution",
        type=int,
        metavar="PX",
        help="predecoded: stored side in pixels (default 73, for cnn; 256 for resnet50)",
    )
    p.add_argument("--workers", type=int, help="parallel readers (default: by CPU count)")
    p.add_argument("--json", action="store_true", help="print the dataset paths as JSON")


def _add_io(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--path",
        help="a folder on the disk to test (a test file is written there), or a file of 1 MiB "
        "or more to read as it is, e.g. on a read-only dataset (default: your own folder, "
        "$WORKBENCH_FORMATS, else $WORKBENCH_HOME)",
    )
    p.add_argument("--size-mib", type=float, default=256.0, help="test file size (default 256)")
    p.add_argument("--seconds", type=float, default=2.0, help="limit per test (default 2)")
    p.add_argument("--json", action="store_true", help="print one JSON document")


def _add_lab(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=None, help="port (default: Jupyter's choice)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.add_argument(
        "--notebooks",
        metavar="DIR",
        help="copy the lessons into DIR (your edits are kept) and open them there "
        "(default: a checkout's notebooks/, else $WORKBENCH_HOME/notebooks)",
    )


def _add_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a config written by save_config (the panel, workbench tune)")
    p.add_argument("--script", default="train.py", help="training script in the torchrun lines")
    p.add_argument(
        "--nccl-suggestions", action="store_true",
        help="put the NCCL variables NCCL documents for debugging only (saved as suggestions) "
        "in the exports and launch lines; left out by default",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON document")


def _add_sweep(p: argparse.ArgumentParser) -> None:
    p.add_argument("--knob", required=True, help="the knob to sweep, e.g. num_workers")
    p.add_argument("--values", required=True, metavar="V1,V2,...", help="e.g. 0,1,2")
    p.add_argument("--repeats", type=int, default=1, help="bursts per value, interleaved")
    p.add_argument(
        "--reference-every", type=int, default=None, metavar="N",
        help="run the first value again after every N bursts and at the end, to measure drift "
        "(default 5; 0: never)",
    )  # fmt: skip
    p.add_argument("--plot", metavar="FILE", help="save the charts (.html, .png, .svg, .json)")
    _add_run_args(p, seconds=3.0)
    _add_money(p)


def _add_diagnose(p: argparse.ArgumentParser) -> None:
    _add_run_args(p, seconds=3.0)


def _add_tune(p: argparse.ArgumentParser) -> None:
    from workbench.tuning.speedup import WIDE_FACTOR  # light: no torch

    p.description = "Search knobs for the highest measured throughput under a memory margin."
    p.epilog = (
        "--json: the best config, every candidate and burst, and the speed-up over the start: "
        "speedup, speedup_low and speedup_high (its 95% interval, widened by the start's "
        "drift), start_runs, drift_pct_per_burst (the start's trend; null when it finished "
        "fewer than two runs) and speedup_uncertain (true when the runs cannot tell the "
        "speed-up: no interval, one that holds 1 or spans more than "
        f"{WIDE_FACTOR:g}x, or drift larger than the speed-up; speedup_doubt says why, and "
        "the text summary then gives those words instead of the figures)"
    )
    p.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="KNOB=V1,V2,...",
        help="a knob and its values to search (repeatable; default: a space for this device)",
    )
    p.add_argument("--budget", type=int, default=16, help="most bursts to run (default 16)")
    p.add_argument("--margin", type=float, default=0.1, help="memory share kept free (0-0.9)")
    p.add_argument("--out", required=True, metavar="FILE.yaml", help="the tuned config")
    _add_run_args(p, seconds=3.0)
    _add_money(p, tune=True)


def _add_run_args(
    p: argparse.ArgumentParser,
    seconds: float,
    set_help: str = "a knob (repeatable): held by a sweep, the start of a tune",
) -> None:
    """The options every command that runs bursts shares: burst, sweep, diagnose, tune."""
    p.add_argument("--workload", metavar="NAME|MODULE:FUNCTION", help=WORKLOAD_HELP)
    p.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", help=set_help)
    p.add_argument("--seconds", type=float, default=seconds, help="measured window per burst")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available)")
    p.add_argument("--data", help="data folder (an ImageFolder, or a root with images/, tokens/)")
    _add_store_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")


def _add_store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        help="history file or postgresql:// URL (default: $WORKBENCH_STORE, $WORKBENCH_HISTORY, "
        "$WORKBENCH_HOME)",
    )
    p.add_argument("--no-record", action="store_true", help="do not append to the history")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error already printed as one line
        return int(exit_.code or 0)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="workbench: %(message)s")
    args.debug = args.debug or bool(os.environ.get("WORKBENCH_DEBUG"))
    _warn_password_in_argv(getattr(args, "store", None))
    import_from_here(add=bool(getattr(args, "workload", None)))
    try:
        return _COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("workbench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if _is_bad_input(exc) and not args.debug:
            if isinstance(exc, _MISSING_FILE):
                exc = InputError(_missing_file_words(exc))
            print(f"workbench {args.command}: error: {_as_options(exc)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise


def _warn_password_in_argv(store: str | None) -> None:
    """A password in ``--store`` is in the process list (``ps``: every user of the host) and
    in the shell's history: say so, and where it belongs instead. The URL is not shown."""
    if is_postgres_url(store) and password_of(str(store)):
        print("workbench: warning: the password in --store is visible to every user of this "
              "host in the process list, and stays in your shell history; leave it out of the "
              "URL and put it in ~/.pgpass (or the file PGPASSFILE names, mode 0600), or put "
              "the whole URL in a 0600 file named by WORKBENCH_STORE_FILE",
              file=sys.stderr)  # fmt: skip


def import_from_here(add: bool = True) -> None:
    """Put the current directory *last* on the import path, so ``--workload mymod:make``
    finds ``mymod.py`` where the command is run, but a file there named like an installed
    package (a ``torch.py``) is never imported in its place. ``python -m workbench`` puts it
    first (as ``python -m`` always does): it is moved to the end, even without a workload
    (``add``). A torchrun job's ranks get this path, in this order, through PYTHONPATH
    (``distributed.worker_env``) and run in the same directory."""
    here = os.getcwd()
    kept = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    sys.path[:] = [*kept, here] if add or len(kept) < len(sys.path) else kept


def _as_options(exc: Exception) -> str:
    """An error about an argument that is a CLI option (``workload``), worded with the
    option (``--workload='x' is not allowed: ...``), as the user typed it."""
    option = _OPTION_OF.get(getattr(exc, "name", None) or "")
    if option is None:
        return str(exc)
    return f"{option}={exc.value!r} is not allowed: {exc.allowed}"  # type: ignore[attr-defined]


_MISSING_FILE = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
"""A path that names nothing usable: a clear line and exit 2, never a traceback."""


def _is_bad_input(exc: Exception) -> bool:
    """Input the user can correct (exit 2): an InputError, a history file that cannot be
    used (StoreError: the --store path, a newer schema, a corrupt file), or a missing file."""
    return isinstance(exc, (InputError, StoreError, *_MISSING_FILE))


def _missing_file_words(exc: OSError) -> str:
    what = {FileNotFoundError: "no such file or folder", IsADirectoryError: "is a folder",
            NotADirectoryError: "is not a folder"}[type(exc)]  # fmt: skip
    return f"{exc.filename}: {what}" if exc.filename else str(exc)


def version_line() -> str:
    """``throughput-workbench 0.1.0 (import workbench from /path)``: tells ours apart from
    the unrelated ``workbench`` distribution on the package index, which has the same
    import name."""
    import workbench  # the package itself, for its version and path (cli is inside it)

    where = os.path.dirname(os.path.abspath(workbench.__file__))
    return f"{workbench.DISTRIBUTION} {workbench.__version__} (import workbench from {where})"


def _cmd_burst(args: argparse.Namespace) -> int:
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.core.knobs import Knobs
    from workbench.distributed.dispatch import run_burst

    knobs = Knobs().with_text(args.set)
    result = run_burst(
        args.workload,
        knobs,
        seconds=args.seconds,
        min_steps=args.min_steps,
        warmup_steps=args.warmup_steps,
        device=args.device,
        data_dir=args.data,
        record=not args.no_record,
        store=args.store,
        progress=None if args.json else _progress_to_stderr,
        timeout_s=args.timeout,
        price_per_hour=args.price_per_hour,
        epoch_samples=args.epoch_samples,
        launcher=args.launcher,
        hosts=args.hosts,
    )
    if result.bad_knob:  # a knob that does not suit this workload's data: as for --set
        print(f"workbench burst: error: {result.bad_knob_message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    doc = result.to_dict()
    print(_json(doc, args) if args.json else _format_result(doc, debug=args.debug))
    return EXIT_FAILED if result.status == "error" else EXIT_OK


def _json(doc: Any, args: argparse.Namespace) -> str:
    """The one JSON document of ``--json``. A failed burst's ``traceback`` (at any depth: a
    sweep's bursts, a diagnosis's parts, history rows) is null unless ``--debug``: it is tens
    of lines a script rarely wants, and the key stays so the document's shape does not change."""
    return json.dumps(doc if args.debug else _no_tracebacks(doc))


def _no_tracebacks(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: None if k == "traceback" else _no_tracebacks(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_no_tracebacks(v) for v in doc]
    return doc


def _progress_to_stderr(p: Any) -> None:
    if p.phase in ("setup", "warmup") or p.phase == "done":
        print(f"  {p.phase:<9} {p.elapsed_s:6.1f} s  steps {p.steps}", file=sys.stderr)


_SHOWN = [
    ("status", ""), ("error", ""), ("workload", ""), ("device", ""), ("device_name", ""),
    ("samples_per_s", "samples/s"), ("tokens_per_s", "tokens/s"), ("pad_share_pct", "%"),
    ("step_ms_p50", "ms"),
    ("step_ms_iqr", "ms"), ("step_ms_mean", "ms"), ("noisy", ""), ("steps", ""),
    ("samples_from", ""),
    ("measured_s", "s"), ("warmup_s", "s"),
    ("compile_s", "s"), ("compile_graphs", ""), ("data_wait_pct", "%"), ("peak_mem_mib", "MiB"),
    ("peak_reserved_mib", "MiB"), ("setup_peak_mem_mib", "MiB"),
    ("loader_device_mem_mib", "MiB"), ("decode", ""),
    ("attention_backend", ""), ("fp8_linears", ""), ("h2d_bytes_per_sample", "B"),
    ("gpu_util_pct", "%"),
    ("power_w", "W"), ("temp_c", "C"),
    ("achieved_tflops", "TFLOP/s"), ("mfu_pct", "%"), ("fragmentation_pct", "%"),
    ("telemetry", ""),
]  # fmt: skip


def _held_per_rank_lines(d: dict[str, Any]) -> list[str]:
    """A job's memory at rest on its fullest rank (``param_mib_per_rank`` and the others):
    the whole model with ddp, the rank's shards with sharding=fsdp. None for one process,
    whose breakdown already says it."""
    held = [d.get(f"{part}_mib_per_rank") for part in ("param", "grad", "optimizer_state")]
    if len(d.get("ranks") or []) < 2 or None in held:
        return []
    knobs = d.get("knobs") or {}
    how = "shards" if knobs.get("sharding") == "fsdp" else "whole replica"
    text = ", ".join(f"{name} {_fmt(v)}" for name, v in zip(("params", "grads", "optimizer"),
                                                            held, strict=True))  # fmt: skip
    return [f"{'held per rank':<18} {text} MiB ({how}, {len(d['ranks'])} ranks)"]


def _format_result(d: dict[str, Any], debug: bool = False) -> str:
    """A burst as text: every figure of a finished burst (``n/a`` where unknown); of a
    failed one only what is known, the error first, and its traceback with ``--debug``."""
    failed = d.get("status") != "ok"
    shown = [(n, u) for n, u in _SHOWN if not failed or d.get(n) is not None]
    lines = [f"{name:<18} {_fmt(d.get(name))} {unit}".rstrip() for name, unit in shown]
    changed = {k: v for k, v in d["knobs"].items() if v not in (None, {}, False)}
    lines.append(f"{'knobs':<18} {changed}")
    for name, value in (d.get("memory_breakdown") or {}).items():
        if failed and value is None:
            continue
        lines.append(f"{'memory ' + name[:-4]:<18} {_fmt(value)} MiB")
    lines += _held_per_rank_lines(d)
    for name, value in (d.get("cost") or {}).items():
        if name in _COST_SHOWN and value is not None:
            lines.append(f"{'cost ' + name:<18} {_fmt(value)}")
    if d.get("oom_report"):
        lines.append(d["oom_report"]["summary"])
    for knob, why in (d.get("no_effect") or {}).items():
        lines.append(f"{'no effect':<18} {knob}: {why}")
    for problem in d.get("suspect") or []:
        lines.append(f"{'SUSPECT':<18} {problem}")
    for note in d.get("notes") or []:
        lines.append(f"{'NOTE':<18} {note}")
    lines += _short_epoch_lines(d)
    for name, why in (d.get("nccl_flags") or {}).items():
        lines.append(f"{'note':<18} {name}: {why}")
    for note in d.get("ambient_notes") or []:
        lines.append(f"{'ENVIRONMENT':<18} {note}")
    for row in d.get("ranks") or []:
        lines.append(
            f"{'rank ' + str(row['rank']):<18} step {_fmt(row['step_ms_p50'])} ms, data wait "
            f"{_fmt(row['data_wait_pct'])}%, peak mem {_fmt(row['peak_mem_mib'])} MiB"
            + (f", node {row['node']}" if d.get("nodes") and row.get("node") else "")
        )
    return "\n".join(lines + _node_table(d.get("nodes") or []) + _traceback_lines(d, debug))


def _short_epoch_lines(d: dict[str, Any]) -> list[str]:
    """A short epoch (``short_epochs``): how it was run, and for restarts the window measured,
    the summary's line (median against mean step, what to do)."""
    short = d.get("short_epochs")
    if not short:
        return []
    n = short["restarts_in_window"]
    lines = [f"{'short epochs':<18} {short['handling']}: {short['batches_per_epoch']} batches an "
             f"epoch, {n} restart{'' if n == 1 else 's'} in the window"]  # fmt: skip
    warning = short_epochs_line(short, d["knobs"])
    return lines + ([warning] if warning else [])


def _traceback_lines(d: dict[str, Any], debug: bool) -> list[str]:
    trace = d.get("traceback")
    if not trace:
        return []
    if not debug:
        return [f"{'traceback':<18} kept: --debug prints it (Python: result.traceback)"]
    return ["traceback:", trace.rstrip()]


def _node_table(nodes: list[dict[str, Any]]) -> list[str]:
    """A multi-node burst's row per node: a slow node shows beside the others."""
    if not nodes:
        return []
    head = f"{'node':<18} {'ranks':<8} {'samples/s':>10} {'step p50 ms':>12} {'data wait %':>12} "
    lines = [head + f"{'peak MiB':>10}"]
    for n in nodes:
        ranks = ",".join(str(r) for r in n.get("ranks", []))
        lines.append(
            f"{n.get('node')!s:<18} {ranks:<8} {_fmt(n.get('samples_per_s')):>10} "
            f"{_fmt(n.get('step_ms_p50')):>12} {_fmt(n.get('data_wait_pct')):>12} "
            f"{_fmt(n.get('peak_mem_mib')):>10}"
        )
    return lines


_COST_SHOWN = ("price_per_hour", "per_million_samples", "per_million_tokens", "per_epoch",
               "idle_share_pct", "idle_per_million_samples")  # fmt: skip


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"
    return str(v)


def _cmd_history(args: argparse.Namespace) -> int:
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.history.store import open_store

    if args.limit is not None and args.limit < 1:
        raise InputError.not_allowed("limit", args.limit, "an integer >= 1")
    store = open_store(args.store)
    if args.retry:
        print(f"workbench history: stored {retry_pending(store)} kept burst(s)", file=sys.stderr)
    _note_pending(store)
    rows = store.records(
        workload=args.workload, status=args.status, learner=args.learner, limit=args.limit
    )
    if args.json:
        print(_json(rows, args))
        return EXIT_OK
    room = len({r.get("learner") for r in rows}) > 1  # an instructor's view: say whose row
    who = f" {'learner':<12}" if room else ""
    print(
        f"{'id':>5} {'created_at':<25}{who} {'workload':<9} {'status':<9} {'samples/s':>10} knobs"
    )
    for r in rows:
        knobs = {k: v for k, v in (r.get("knobs") or {}).items() if v not in (None, {}, False)}
        sps = _fmt(r.get("samples_per_s"))
        who = f" {r.get('learner') or '-':<12}" if room else ""
        print(f"{r['id']:>5} {r['created_at']:<25}{who} {r['workload']:<9} {r['status']:<9} "
              f"{sps:>10} {knobs}")  # fmt: skip
    return EXIT_OK


def _note_pending(store: Any) -> None:
    """One line on stderr when bursts kept for this store wait for ``--retry``."""
    kept = pending_results(store)
    if kept:
        print(f"workbench history: {len(kept)} burst(s) measured while this store could not "
              f"record them are not listed yet (newest error: {kept[-1]['error']}); "
              "'workbench history --retry' stores them", file=sys.stderr)  # fmt: skip


def _cmd_data(args: argparse.Namespace) -> int:
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.engine import datasets as data
    from workbench.engine.workloads.base import say_progress

    if args.format:
        for option in ("images_per_class", "images", "for_batch"):
            if getattr(args, option) is not None:
                name = "--" + option.replace("_", "-")
                raise InputError(f"{name} is not allowed with --format: it sizes a sample build")
        return _convert(args)
    for option in ("source", "to", "resolution", "workers"):
        if getattr(args, option) is not None:
            name = "--from" if option == "source" else f"--{option}"
            raise InputError(f"{name} is not allowed without --format: it names the conversion")

    if args.classes < 1:
        raise InputError.not_allowed("--classes", args.classes, "an integer >= 1")
    paths = data.ensure_datasets(
        data.data_root(args.out),
        images_per_class=_images_per_class(args),
        classes=args.classes,
        token_mb=args.token_mb,
        progress=say_progress,
    )
    doc = {"root": str(paths.root), "images": str(paths.images), "tokens": str(paths.tokens)}
    print(json.dumps(doc) if args.json else "\n".join(f"{k:<7} {v}" for k, v in doc.items()))
    return EXIT_OK


def _images_per_class(args: argparse.Namespace) -> int:
    """Images in each class from ``--images-per-class``, ``--images`` or ``--for-batch``."""
    from workbench.engine.datasets import images_for_batch  # torch, PIL, numpy: data only

    if args.for_batch is not None:
        if args.for_batch < 1:
            raise InputError.not_allowed("--for-batch", args.for_batch, "a batch size >= 1")
        return images_for_batch(args.for_batch, args.classes)
    if args.images is not None:
        if args.images < args.classes:
            raise InputError.not_allowed(
                "--images", args.images, f"an integer >= --classes ({args.classes}): one "
                f"image in each class at least"
            )  # fmt: skip
        return -(-args.images // args.classes)
    per_class = 80 if args.images_per_class is None else args.images_per_class
    if per_class < 1:
        raise InputError.not_allowed("--images-per-class", per_class, "an integer >= 1")
    return per_class


def _convert(args: argparse.Namespace) -> int:
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.engine.convert import convert_dataset
    from workbench.engine.workloads.base import say_progress

    if args.workers is not None and args.workers < 1:
        raise InputError.not_allowed("workers", args.workers, "an integer >= 1")
    result = convert_dataset(args.format, args.source, args.to, resolution=args.resolution,
                             workers=args.workers, progress=say_progress)  # fmt: skip
    print(json.dumps(result.to_dict()) if args.json else result.summary())
    return EXIT_OK


def _cmd_io(args: argparse.Namespace) -> int:
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.engine.storage import storage_check

    check = storage_check(args.path, size_mib=args.size_mib, seconds=args.seconds)
    print(json.dumps(check.to_dict()) if args.json else check.summary())
    return EXIT_OK


def _cmd_lab(args: argparse.Namespace) -> int:
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.notebook.lab import open_lab

    return open_lab(port=args.port, open_browser=not args.no_browser, notebooks=args.notebooks)


def _cmd_show(args: argparse.Namespace) -> int:
    """Validate a saved config and print what to paste; warnings go to stderr, one per line."""
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.config.saved import load_config
    from workbench.core.nccl import flags as nccl_flags

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(args.file)
    notes = [str(w.message) for w in caught]
    for note in notes:
        print(f"workbench show: warning: {note}", file=sys.stderr)
    asked = args.nccl_suggestions
    if not args.json:
        print(cfg.describe(args.script, nccl_suggestions=asked))
        return EXIT_OK
    changes = cfg.fresh_process_changes(nccl_suggestions=asked)
    doc = {
        "file": args.file,
        "env": cfg.env(nccl_suggestions=asked),
        "changes": [c.to_dict() for c in changes],
        "nccl_suggestions": {name: dict(s) for name, s in cfg.nccl_suggestions.items()},
        "dataloader": cfg.dataloader_kwargs("cuda"),
        "collate_fn": cfg.collate_fn,
        "training": dict(cfg.training) if cfg.training is not None else None,
        "torchrun": cfg.launch_lines(args.script, nccl_suggestions=asked),
        "knobs": cfg.knobs.to_dict(),
        "provenance": dict(cfg.provenance),
        "nccl_flags": nccl_flags(cfg.knobs.nccl),
        "comm": dict(cfg.comm) if cfg.comm else None,
        "warnings": notes,
    }
    print(json.dumps(doc))
    return EXIT_OK


def _cmd_sweep(args: argparse.Namespace) -> int:
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.analysis.drift import check_every, with_references
    from workbench.analysis.sweeps import REFERENCE_EVERY, sweep
    from workbench.core.knobs import Knobs

    base, values = Knobs().with_text(args.set), _parse_values(args.knob, args.values)
    plot = _checked_path("plot", args.plot, (".html", ".png", ".svg", ".json"))
    every = REFERENCE_EVERY if args.reference_every is None else args.reference_every or None
    extra = [x for _, x in with_references(values * max(1, args.repeats), check_every(every))]
    results: list[Any] = []

    def landed(r: Any) -> None:  # each row once, as it lands (not again at the end)
        results.append(r)
        if not args.json:
            again = extra[len(results) - 1] if len(results) <= len(extra) else False
            print(_burst_line(r, args.knob) + ("  (again, for drift)" if again else ""),
                  flush=True)  # fmt: skip

    df = sweep(args.workload, args.knob, values, base, seconds=args.seconds,
               repeats=args.repeats, reference_every=every, device=args.device,
               data_dir=args.data, record=not args.no_record, store=args.store, progress=landed,
               price_per_hour=args.price_per_hour, epoch_samples=args.epoch_samples)  # fmt: skip
    if plot is not None:
        from workbench.notebook import plots  # Altair: only when a chart file is asked for

        plots.save(plots.sweep(df, args.knob), plot)
    drift = df.attrs["drift"]
    if args.json:
        columns = ("reference", "drift_factor", "samples_per_s_corrected")
        bursts = [{**r.to_dict(), **{c: _plain(row[c]) for c in columns}}
                  for r, (_, row) in zip(results, df.iterrows(), strict=True)]  # fmt: skip
        print(_json({"knob": args.knob, "values": values, "bursts": bursts, "drift": drift},
                    args))  # fmt: skip
    elif drift["drift_pct"] is not None:
        print(f"drift: {drift['sentence'] or _held(drift['drift_pct'])}")
    return EXIT_FAILED if results and all(r.status == "error" for r in results) else EXIT_OK


def _cmd_diagnose(args: argparse.Namespace) -> int:
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.analysis.diagnosis import diagnose
    from workbench.core.knobs import Knobs

    def landed(stage: str, r: Any) -> None:
        if not args.json:
            print(f"  {stage:<8} {r.status:<9} {_fmt(r.samples_per_s)} samples/s", file=sys.stderr)

    d = diagnose(args.workload, Knobs().with_text(args.set), seconds=args.seconds,
                 device=args.device, data_dir=args.data, record=not args.no_record,
                 store=args.store, progress=landed)  # fmt: skip
    print(_json(d.to_dict(), args) if args.json else d.summary())
    parts = (d.full, d.loader, d.compute)
    return EXIT_FAILED if any(p is not None and p.status == "error" for p in parts) else EXIT_OK


def _cmd_tune(args: argparse.Namespace) -> int:
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.config.saved import collate_fn_name, save_config
    from workbench.core.knobs import Knobs
    from workbench.engine.hardware import resolve_device
    from workbench.engine.workloads import default_workload_name, resolve_workload
    from workbench.tuning.tuner import tune

    out = _checked_path("out", args.out, (".yaml", ".yml"))
    start, space = Knobs().with_text(args.set), _parse_space(args.space)
    dev = resolve_device(args.device)
    wl = resolve_workload(args.workload or default_workload_name(dev.type), args.data)
    if (
        wl.collate_fn is not None
    ):  # one production cannot import by name: bad input, before the tune
        collate_fn_name(wl.collate_fn, out)

    def landed(p: Any) -> None:
        if not args.json:
            print(f"  [{p.bursts}/{p.budget}] {p.stage:<28} {_burst_line(p.result)}",
                  file=sys.stderr)  # fmt: skip

    t = tune(wl, space, budget=args.budget, memory_margin=args.margin, base=start,
             seconds=args.seconds, device=dev, data_dir=args.data,
             record=not args.no_record, store=args.store, progress=landed,
             price_per_hour=args.price_per_hour, epoch_samples=args.epoch_samples,
             hours_per_month=args.hours_per_month)  # fmt: skip
    # the median claimed, and the collate function every burst batched with
    saved = t.best_result is not None
    written = save_config(t, out, collate_fn=wl.collate_fn) if saved else None
    if args.json:
        print(_json({**t.to_dict(), "out": str(written) if written else None}, args))
    else:
        print(t.summary() + (f"\nwrote {written}" if written else "\nnothing written"))
    if t.stopped == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if written else EXIT_FAILED


def _add_profile(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", metavar="NAME|MODULE:FUNCTION", help=WORKLOAD_HELP)
    p.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", help="a knob")
    p.add_argument("--seconds", type=float, default=1.0, help="measured (profiled) window")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available)")
    p.add_argument("--data", help="data folder (an ImageFolder, or a root with images/, tokens/)")
    p.add_argument("--trace", help="trace file (.json) or folder (default: $WORKBENCH_HOME/traces)")
    p.add_argument("--top", type=int, default=15, help="operators in the table (default 15)")
    p.add_argument("--json", action="store_true", help="print one JSON document")


def _cmd_profile(args: argparse.Namespace) -> int:
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.analysis.profiling import profile_burst
    from workbench.core.knobs import Knobs

    p = profile_burst(
        args.workload,
        Knobs().with_text(args.set),
        seconds=args.seconds,
        device=args.device,
        data_dir=args.data,
        trace=args.trace,
        top=args.top,
    )
    print(_json(p.to_dict(), args) if args.json else p.summary())
    return EXIT_FAILED if p.status == "error" else EXIT_OK


def _add_class(p: argparse.ArgumentParser) -> None:
    """``workbench class init``: roles, grants and row-level security (history/roles.py)."""
    p.add_argument("action", choices=["init"], help="init: create or extend the class's roles")
    p.add_argument("--store", required=True, metavar="postgresql://ADMIN@HOST:PORT/DB",
                   help="the class database, as the server's administrator (password from "
                   "PGPASSFILE, never in the URL)")  # fmt: skip
    names = p.add_mutually_exclusive_group(required=True)
    names.add_argument("--learners", metavar="A,B,...", help="the learners' login names")
    names.add_argument("--learners-file", metavar="FILE", help="learner names, one a line")
    p.add_argument("--instructor", help="the instructor's login (default: <db>_instructor)")
    p.add_argument("--logins", default="class-logins.pgpass", metavar="FILE",
                   help="a new 0600 file for the new logins' passwords (PGPASSFILE format; "
                   "default class-logins.pgpass)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON document")


def _cmd_class(args: argparse.Namespace) -> int:
    # the class store's set-up: only this command needs it (psycopg, the class extra)
    from workbench.history.roles import init_class, read_learners

    text = args.learners if args.learners is not None else Path(args.learners_file).read_text()
    setup = init_class(args.store, read_learners(text), logins=args.logins,
                       instructor=args.instructor)  # fmt: skip
    print(_json(setup.to_dict(), args) if args.json else setup.summary())
    return EXIT_OK


def _parse_values(knob: str, text: str) -> list[Any]:
    """``V1,V2,...`` parsed for ``knob`` (each value as ``--set`` would read it). ``alloc_conf``
    values hold commas themselves: they are separated by ``;`` (``default`` for none)."""
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.core.knobs import parse_value

    sep = ";" if knob == "alloc_conf" else ","
    items = [t.strip() for t in text.split(sep)]
    if not text.strip() or "" in items:
        if sep == ",":
            raise KnobError(knob, text, "comma-separated values, e.g. 16,32,64 (none may be empty)")
        example = "default;expandable_segments:True"
        raise KnobError(knob, text, f"values separated by ';', e.g. {example} (none may be empty)")
    return [parse_value(knob, t) for t in items]


def _parse_space(items: Sequence[str]) -> dict[str, list[Any]] | None:
    """``--space KNOB=V1,V2`` options as a space; None when none were given (the default)."""
    space: dict[str, list[Any]] = {}
    for item in items:
        name, sep, text = (part.strip() for part in item.partition("="))
        if not sep or not name:
            raise KnobError(name or "space", item, "KNOB=V1,V2,..., e.g. batch_size=32,64")
        if name in space:
            raise KnobError(name, item, "one --space per knob (this one is given twice)")
        space[name] = _parse_values(name, text)
    return space or None


def _checked_path(option: str, path: str | None, suffixes: tuple[str, ...]) -> Any:
    """A file to write at the end, checked now: a long run must not fail at its last line."""
    if path is None:
        return None
    target = Path(path).expanduser()
    if target.suffix.lower() not in suffixes or not target.parent.is_dir() or target.is_dir():
        raise InputError.not_allowed(
            option, path, f"a {' or '.join(suffixes)} file in an existing directory"
        )
    return target


def _held(drift_pct: float) -> str:
    return f"the first value held within {drift_pct:.1f}% over the sweep"


def _plain(value: Any) -> Any:
    """A frame cell as JSON: numpy scalars as Python ones, NaN as null."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and value != value else value


def _burst_line(r: Any, knob: str | None = None) -> str:
    value = ""
    if knob is not None:
        knobs = r.knobs.to_dict()
        shown = knobs["nccl"].get(knob) if knob.startswith("NCCL_") else knobs.get(knob)
        value = f"{knob}={shown!s:<6} "
    if r.status != "ok":
        return f"{value}{r.status}: {r.error}"
    return (f"{value}{_fmt(r.samples_per_s)} samples/s, step {_fmt(r.step_ms_p50)} ms, data wait "
            f"{_fmt(r.data_wait_pct)}%, peak {_fmt(r.peak_mem_mib)} MiB")  # fmt: skip


def _cmd_comm(args: argparse.Namespace) -> int:
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.core.knobs import Knobs
    from workbench.distributed.allreduce import parse_sizes
    from workbench.distributed.jobs import comm_bench

    not_nccl = [item for item in args.set if not item.strip().startswith("NCCL_")]
    if not_nccl:
        raise InputError.not_allowed("--set", not_nccl[0], "comm takes NCCL_* variables")
    knobs = Knobs().with_text(args.set)
    sizes = parse_sizes(args.sizes) if args.sizes else None
    if args.sweep or args.save:
        return _comm_sweep(args, knobs, sizes)
    res = comm_bench(args.world_size, sizes=sizes, knobs=knobs, device=args.device,
                     timeout_s=args.timeout, nodes=args.nodes, launcher=args.launcher,
                     hosts=args.hosts)  # fmt: skip
    if args.plot and res.ok:
        from workbench.notebook import plots  # Altair: only when a chart file is asked for

        plots.save(plots.comm(res.frame()), args.plot)
    print(json.dumps(res.to_dict()) if args.json else res.table())
    return EXIT_OK if res.ok and not res.suspect else EXIT_FAILED  # a wrong sum is a failure


def _comm_sweep(args: argparse.Namespace, knobs: Any, sizes: list[int] | None) -> int:
    # here, not at the top: light commands (history, show, --help) never load torch
    from workbench.analysis.comm_sweep import comm_sweep
    from workbench.config.saved import save_config

    variable, eq, values = (args.sweep or "").partition("=")
    if not eq or not variable.strip().startswith("NCCL_") or not values.strip():
        raise InputError.not_allowed(
            "--sweep", args.sweep, "NCCL_X=V1,V2,... (e.g. NCCL_ALGO=Ring,Tree)"
        )
    sweep = comm_sweep(variable.strip(), values.split(","), knobs=knobs, world_size=args.world_size,
                       sizes=sizes, device=args.device, timeout_s=args.timeout,
                       nodes=args.nodes, launcher=args.launcher, hosts=args.hosts)  # fmt: skip
    if args.save:
        save_config(knobs, args.save, comm=sweep.suggestions())
    if args.json:
        results = {v: r.to_dict() for v, r in sweep.results.items()}
        print(json.dumps({"suggestions": sweep.suggestions(), "results": results}))
    else:
        print(sweep.table())
    ok = all(r.ok and not r.suspect for r in sweep.results.values())
    return EXIT_OK if ok else EXIT_FAILED


_COMMANDS = {
    "burst": _cmd_burst,
    "history": _cmd_history,
    "data": _cmd_data,
    "io": _cmd_io,
    "lab": _cmd_lab,
    "show": _cmd_show,
    "sweep": _cmd_sweep,
    "diagnose": _cmd_diagnose,
    "tune": _cmd_tune,
    "comm": _cmd_comm,
    "profile": _cmd_profile,
    "class": _cmd_class,
}
