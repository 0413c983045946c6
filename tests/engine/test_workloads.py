"""Finding a user's workload by name: ``module:function``, its errors, and what may cross
into a distributed burst's fresh processes (ranks import a name; they never see objects)."""

from __future__ import annotations

import functools
import itertools
import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

import workbench as wb
from workbench.core.errors import InputError
from workbench.engine.workloads import (
    UnknownWorkload,
    import_factory,
    importable_name,
    name_for_ranks,
    resolve_workload,
)

_serial = itertools.count()

FACTORY = """
import torch
from torch.utils.data import TensorDataset
import workbench as wb


def make_model():
    x = torch.randn(64, 8)
    return wb.Workload(name="mine", model=lambda: torch.nn.Linear(8, 2),
                       dataset=lambda: TensorDataset(x, (x[:, 0] > 0).long()))
"""


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """A fresh current directory on the import path (as the CLI and a notebook have it)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _module(folder: Path, source: str, stem: str = "usermod") -> str:
    """Write ``source`` as a module of a name no test has imported yet; its name."""
    name = f"{stem}{next(_serial)}"
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    return name


def _in_main(source: str) -> types.FunctionType:
    """A function defined as a notebook cell or a script defines it: in module ``__main__``."""
    namespace: dict = {"__name__": "__main__"}
    exec(textwrap.dedent(source), namespace)
    return next(v for v in namespace.values() if isinstance(v, types.FunctionType))


def _as_notebook(monkeypatch) -> None:
    """``__main__`` as in a Jupyter kernel: no file of its own."""
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))


def _as_script(monkeypatch, path: Path) -> None:
    main = types.ModuleType("__main__")
    main.__file__ = str(path)
    main.__spec__ = None  # `python script.py`: no module spec
    monkeypatch.setitem(sys.modules, "__main__", main)


# --- a function in __main__ cannot cross; the refusal says where to move it, by name -----------


def test_a_notebook_function_is_refused_with_the_module_and_the_name_to_pass(here, monkeypatch):
    _as_notebook(monkeypatch)
    make_model = _in_main("def make_model():\n    pass\n")
    with pytest.raises(InputError) as caught:
        name_for_ranks(make_model)
    assert str(caught.value) == (
        "workload=<function make_model> is not allowed: a distributed burst runs in fresh "
        "processes, which import the workload by name, and make_model is defined in this "
        "notebook or session (__main__), which they cannot import: move make_model into "
        f"make_model.py next to your notebook ({here}) and pass workload='make_model:make_model'"
    )


def test_following_the_fix_gives_a_name_the_ranks_accept(here, monkeypatch):
    _as_notebook(monkeypatch)
    with pytest.raises(InputError, match="pass workload='make_model:make_model'"):
        name_for_ranks(_in_main(FACTORY))
    (here / "make_model.py").write_text(FACTORY)  # what the message said to do
    try:
        assert name_for_ranks("make_model:make_model") == "make_model:make_model"
        assert resolve_workload("make_model:make_model").name == "mine"
    finally:
        sys.modules.pop("make_model", None)


def test_a_script_function_is_told_to_move_next_to_the_script(here, monkeypatch):
    _as_script(monkeypatch, here / "train.py")
    with pytest.raises(InputError) as caught:
        name_for_ranks("__main__:make_mine")  # the name spelled out does not cross either
    assert str(caught.value).endswith(
        f"make_mine is defined in train.py (__main__), which they cannot import: move make_mine "
        f"into make_mine.py next to train.py ({here}) and pass workload='make_mine:make_mine'"
    )


def test_the_suggested_module_never_shadows_an_existing_one(here, monkeypatch):
    _as_notebook(monkeypatch)
    fix = r"move json into json_workload\.py .*'json_workload:json'"
    with pytest.raises(InputError, match=fix):
        name_for_ranks(_in_main("def json():\n    pass\n"))


@pytest.mark.parametrize(
    ("workload", "fix"),
    [
        (lambda: None, "def make_workload() -> Workload at the top of make_workload.py"),
        (functools.partial(print), "def make_workload() -> Workload at the top of"),
        (
            wb.Workload(name="mine", model=lambda: None, dataset=lambda: None),
            "def make_mine() -> Workload at the top of make_mine.py",
        ),
    ],
    ids=["lambda", "partial", "workload-object"],
)
def test_objects_without_an_importable_name_are_refused_with_a_function_to_write(
    workload, fix, here, monkeypatch
):
    _as_notebook(monkeypatch)
    with pytest.raises(InputError, match="fresh processes") as caught:
        name_for_ranks(workload)
    assert fix in str(caught.value) and "pass workload='make_" in str(caught.value)


def test_a_registered_name_crosses_as_its_function(here, monkeypatch):
    name = _module(here, FACTORY)
    wb.register_workload("mine-registered", import_factory(f"{name}:make_model"))
    try:
        assert name_for_ranks("mine-registered") == f"{name}:make_model"
        wl = resolve_workload(f"{name}:make_model")
        assert importable_name(wl) == name_for_ranks(wl) == f"{name}:make_model"
    finally:
        from workbench.engine.workloads import _REGISTRY

        _REGISTRY.pop("mine-registered")


def test_a_workload_made_from_a_module_function_remembers_it(here):
    name = _module(here, FACTORY)
    factory = import_factory(f"{name}:make_model")
    assert name_for_ranks(resolve_workload(factory)) == f"{name}:make_model"
    assert importable_name(functools.partial(factory)) is None
    assert importable_name(lambda: None) is None


def test_a_typo_is_refused_before_launch_too(here):
    name = _module(here, FACTORY)
    with pytest.raises(UnknownWorkload, match=f"module {name} .* has no 'make'; its functions"):
        name_for_ranks(f"{name}:make")


# --- module:function from the current directory, each failure said plainly ---------------------


def test_module_not_found_says_where_it_looked(here):
    with pytest.raises(UnknownWorkload) as caught:
        resolve_workload("nosuchmodule:make")
    assert str(caught.value) == (
        "workload='nosuchmodule:make' is not allowed: no module named 'nosuchmodule' on the "
        f"import path (which includes the current directory, {here}); one of cnn, resnet50, "
        "gpt, gpt:124m, hf:gpt2, or module:function that returns a Workload, importable from "
        "the current directory"
    )


@pytest.mark.parametrize(
    ("source", "function", "ending"),
    [
        ("import transformers_that_is_not_installed\n", "make",
         "importing {name} failed: it needs 'transformers_that_is_not_installed', not "
         "installed here"),
        (FACTORY + "\ndef make_other():\n    pass\n\ndef _private():\n    pass\n", "make_modle",
         "module {name} ({here}/{name}.py) has no 'make_modle'; its functions: make_model, "
         "make_other"),
    ],
    ids=["a missing dependency is not a missing module", "a missing function lists the rest"],
)  # fmt: skip
def test_what_a_module_lacks_is_named(here, source, function, ending):
    name = _module(here, source)
    with pytest.raises(UnknownWorkload) as caught:
        resolve_workload(f"{name}:{function}")
    assert str(caught.value).endswith(ending.format(name=name, here=here))


def test_a_module_that_fails_to_import_is_one_line_with_the_reason(here):
    name = _module(here, "def broken(:\n")
    with pytest.raises(UnknownWorkload, match=f"importing {name} failed: SyntaxError: .*line 1"):
        resolve_workload(f"{name}:make")


def test_a_function_that_returns_something_else_is_named(here):
    name = _module(here, "def make():\n    return {'model': None}\n")
    with pytest.raises(UnknownWorkload, match=f"{name}:make returned dict, not a Workload"):
        resolve_workload(f"{name}:make")


def test_a_module_name_without_its_function_lists_its_workload_functions(here):
    name = _module(here, FACTORY)
    with pytest.raises(UnknownWorkload, match=f"'{name}' is a module: name its function, one "
                                              f"of {name}:make_model$"):  # fmt: skip
        resolve_workload(name)
    typed = _module(here, FACTORY + "\ndef helper():\n    pass\n\n"
                    "def make_typed() -> wb.Workload:\n    return make_model()\n")  # fmt: skip
    with pytest.raises(UnknownWorkload, match=f"one of {typed}:make_typed$"):  # annotated first
        resolve_workload(typed)
    empty = _module(here, "X = 1\n")
    with pytest.raises(UnknownWorkload, match=f"'{empty}' is a module: .* e.g. '{empty}:make'"):
        resolve_workload(empty)


def test_data_dir_reaches_a_function_that_takes_it_and_is_never_dropped(here, tmp_path):
    takes = _module(here, FACTORY + "\ndef with_data(data_dir=None):\n    return make_model()\n")
    wl = resolve_workload(f"{takes}:with_data", data_dir=tmp_path)
    assert wl.extras["source_data_dir"] == str(tmp_path)
    with pytest.raises(InputError, match=rf"data_dir='.*' is not allowed: {takes}:make_model has "
                                        "no data_dir parameter"):  # fmt: skip
        resolve_workload(f"{takes}:make_model", data_dir=tmp_path)
    with pytest.raises(InputError, match="no data_dir parameter"):  # before launch, too
        name_for_ranks(f"{takes}:make_model", data_dir=tmp_path)


# --- the documentation's "Bring your own model" page runs as written ----------------------------

OWN_MODEL_PAGE = Path(__file__).resolve().parents[2] / "docs" / "own-model.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


@pytest.mark.concurrent  # a script and the command in fresh processes, a two-rank job
def test_the_page_on_your_own_model_runs(tmp_path):
    """Every block of the page, in order: modules (``# NAME.py`` first) written where the
    commands run, Python blocks as one script, shell lines through the installed command
    (with a shorter window); ``text`` blocks (what a command prints) are read, not run. Every
    burst they run must end ok."""
    blocks = _BLOCK.findall(OWN_MODEL_PAGE.read_text())
    script, commands = [], []
    for language, code in blocks:
        first = code.splitlines()[0]
        if language == "python" and re.match(r"# \w+\.py", first):
            (tmp_path / first.split()[1].rstrip(":")).write_text(code)
        elif language == "python":
            script.append(code)
        elif language in ("bash", "sh", "shell"):
            commands += [line.split("#")[0].split() for line in code.splitlines() if line]
    assert len(script) >= 4 and len(commands) >= 2 and (tmp_path / "mymodel.py").exists()
    script.append(  # what the last block promised: the saved collate_fn pads the batches
        "ids = next(iter(loader))[0]['ids']\n"
        "assert cfg.collate_fn == 'textmodel:pad' and ids.shape[1] < 40, ids.shape\n"
    )
    (tmp_path / "readme.py").write_text("\n".join(script))
    env = {**os.environ, "WORKBENCH_HOME": str(tmp_path / "home")}
    env.pop("PYTHONPATH", None)  # the modules are found where the code runs, nowhere else
    p = subprocess.run([sys.executable, "readme.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    workbench = Path(sys.executable).with_name("workbench")
    if not workbench.exists():
        pytest.skip("the workbench command is not installed next to this Python")
    for words in commands:
        assert words[0] == "workbench", words
        p = subprocess.run([str(workbench), *words[1:], "--seconds", "0.5"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
        assert p.returncode == 0, p.stderr[-3000:]
    rows = wb.open_store(str(tmp_path / "home" / "history.sqlite")).records()
    assert [r["status"] for r in rows] == ["ok"] * len(rows) and len(rows) >= 5 + len(commands)
