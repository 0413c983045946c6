"""What the commands share: exit codes, the options of the commands that run bursts, values
read as ``--set`` reads them, the ``--json`` document, the figures' format, and bad input turned
into one line on stderr with exit code 2 (no traceback).

Imported by the dispatcher, so ``--version`` and ``--help`` load it: it stays light (no torch).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import workbench
from workbench.core.cost import check_price
from workbench.core.errors import InputError, KnobError
from workbench.core.knobs import parse_value
from workbench.history.dsn import is_postgres_url, password_of
from workbench.history.store import StoreError

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
    "parity_steps": "--parity-steps",
}
"""Arguments whose errors name them as the Python API does, shown as the CLI's options."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"workbench {self.prog.split()[-1]}: error: {message}\n")


def add_run_args(
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


def add_launch_args(p: argparse.ArgumentParser) -> None:
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


def add_money(p: argparse.ArgumentParser, tune: bool = False) -> None:
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


def parse_values(knob: str, text: str) -> list[Any]:
    """``V1,V2,...`` parsed for ``knob`` (each value as ``--set`` would read it). ``alloc_conf``
    values hold commas themselves: they are separated by ``;`` (``default`` for none)."""
    sep = ";" if knob == "alloc_conf" else ","
    items = [t.strip() for t in text.split(sep)]
    if not text.strip() or "" in items:
        if sep == ",":
            raise KnobError(knob, text, "comma-separated values, e.g. 16,32,64 (none may be empty)")
        example = "default;expandable_segments:True"
        raise KnobError(knob, text, f"values separated by ';', e.g. {example} (none may be empty)")
    return [parse_value(knob, t) for t in items]


def checked_path(option: str, path: str | None, suffixes: tuple[str, ...]) -> Any:
    """A file to write at the end, checked now: a long run must not fail at its last line."""
    if path is None:
        return None
    target = Path(path).expanduser()
    if target.suffix.lower() not in suffixes or not target.parent.is_dir() or target.is_dir():
        raise InputError.not_allowed(
            option, path, f"a {' or '.join(suffixes)} file in an existing directory"
        )
    return target


def json_doc(doc: Any, args: argparse.Namespace) -> str:
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


def fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"
    return str(v)


def burst_line(r: Any, knob: str | None = None) -> str:
    value = ""
    if knob is not None:
        knobs = r.knobs.to_dict()
        shown = knobs["nccl"].get(knob) if knob.startswith("NCCL_") else knobs.get(knob)
        value = f"{knob}={shown!s:<6} "
    if r.status != "ok":
        return f"{value}{r.status}: {r.error}"
    return (f"{value}{fmt(r.samples_per_s)} samples/s, step {fmt(r.step_ms_p50)} ms, data wait "
            f"{fmt(r.data_wait_pct)}%, peak {fmt(r.peak_mem_mib)} MiB")  # fmt: skip


def warn_password_in_argv(store: str | None) -> None:
    """A password in ``--store`` is in the process list (``ps``: every user of the host) and
    in the shell's history: say so, and where it belongs instead. The URL is not shown."""
    if is_postgres_url(store) and password_of(str(store)):
        print("workbench: warning: the password in --store is visible to every user of this "
              "host in the process list, and stays in your shell history; leave it out of the "
              "URL and put it in ~/.pgpass (or the file PGPASSFILE names, mode 0600), or put "
              "the whole URL in a 0600 file named by WORKBENCH_STORE_FILE",
              file=sys.stderr)  # fmt: skip


TRUST_CWD_HELP = (
    "put the current folder on the import path (and the ranks' PYTHONPATH) even when "
    "--workload names no module found there"
)


def workload_is_here(workload: str | None) -> bool:
    """Whether ``--workload`` names a module (``mymod:make``, ``pkg.mod:make``) that is a
    file or a package in the current folder, a plain folder included (``examples.train:make``
    with no ``__init__.py``: a namespace package): the one case the folder is put on the
    import path without ``--trust-cwd``."""
    if not workload:
        return False
    parts = workload.partition(":")[0].split(".")
    if not all(part.isidentifier() for part in parts):
        return False
    here = Path.cwd()
    top, named = here / parts[0], here.joinpath(*parts)
    candidates = (top.with_suffix(".py"), top / "__init__.py", named.with_suffix(".py"),
                  named / "__init__.py")  # fmt: skip
    return any(path.is_file() for path in candidates)


def import_from_here(add: bool = True) -> None:
    """Put the current directory *last* on the import path when ``add`` (the workload's
    module is here, or ``--trust-cwd``), so ``--workload mymod:make`` finds ``mymod.py``
    where the command is run, but a file there named like an installed package (a
    ``torch.py``) is never imported in its place; else take it off. Off by default because a
    folder on the path is searched by more than ``import``: torch's CUDA build loads
    ``nvidia/*/lib/*.so`` from every entry, so a shared folder would run others' libraries.
    ``python -m workbench`` puts it first (as ``python -m`` always does): it is moved or
    removed. A torchrun job's ranks get this path, in this order, through PYTHONPATH
    (``distributed.worker_env``) and run in the same directory."""
    here = os.getcwd()
    kept = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    sys.path[:] = [*kept, here] if add else kept


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
    where = os.path.dirname(os.path.abspath(workbench.__file__))
    return f"{workbench.DISTRIBUTION} {workbench.__version__} (import workbench from {where})"


def run_command(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command: its exit code, 130 when interrupted, and bad input (unless ``--debug``)
    as one line on stderr and exit code 2."""
    try:
        return command(args)
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
