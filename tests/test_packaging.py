"""The package a stranger installs: sdist and wheel built, installed outside the checkout.

A fresh virtual environment, made with the base interpreter of the one running the tests, gets
the wheel (``pip install --no-deps``) and sees this environment's third-party packages through
a ``.pth`` path line (torch is gigabytes: it is not installed twice). A path line adds a folder
to ``sys.path`` without running the ``.pth`` files inside it, so the editable install of the
checkout stays out of sight: ``workbench`` must be the wheel's copy, and the checkout is
neither the working folder nor on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
from jupyterlab_driver import free_port, http_status, wait_for_status, workbench_lab

import workbench

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def _pep517(hook: str, source: Path, out: Path) -> Path:
    """Call setuptools' PEP 517 hook in ``source``, as a build front-end does (no isolation:
    this environment's setuptools), and return the file it made."""
    code = f"from setuptools import build_meta; print(build_meta.{hook}({str(out)!r}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=source, check=True,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The sdist, and the wheel built from the unpacked sdist (what ``pip install`` of an sdist
    does), so a file the sdist forgets is missing from the wheel too."""
    out = tmp_path_factory.mktemp("dist")
    sdist = _pep517("build_sdist", REPO, out)
    with tarfile.open(sdist) as tar:
        tar.extractall(out / "unpacked", filter="data")
    (source,) = (out / "unpacked").iterdir()
    wheel = _pep517("build_wheel", source, out)
    return {"wheel": wheel, "sdist": sdist}


@pytest.fixture(scope="module")
def venv(built, tmp_path_factory) -> dict:
    """A fresh venv outside the checkout with the wheel installed; its env and folder."""
    root = tmp_path_factory.mktemp("stranger")
    env_dir = root / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(env_dir)],
                   check=True, timeout=120)  # fmt: skip
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(  # before the .pth line: pip must not see this environment's packages
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(built["wheel"])],
        check=True, capture_output=True, timeout=300, env=env, cwd=root,
    )  # fmt: skip
    Path(purelib, "_dev_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    share = Path(sysconfig.get_paths()["data"], "share", "jupyter")  # JupyterLab's own assets
    env.update(
        WORKBENCH_HOME=str(root / "home"),
        JUPYTER_CONFIG_DIR=str(root / "jcfg"),
        JUPYTER_RUNTIME_DIR=str(root / "jrt"),
        JUPYTER_DATA_DIR=str(root / "jdata"),
        JUPYTER_PATH=str(share),
        JUPYTERLAB_DIR=str(share / "lab"),
    )
    work = root / "work"  # the stranger's working folder: not the checkout
    work.mkdir()
    return {"python": python, "bin": env_dir / "bin", "env": env, "cwd": work, "root": root}


def _run(venv: dict, *cmd: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(c) for c in cmd], cwd=venv["cwd"], env={**venv["env"], **env},
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_the_wheel_carries_every_lesson_and_the_sdist_the_folder_it_maps(built):
    notebooks = REPO / "notebooks"
    lessons = {p.relative_to(notebooks).as_posix() for p in notebooks.iterdir()
               if p.suffix in (".ipynb", ".md")}  # fmt: skip
    lessons |= {p.relative_to(notebooks).as_posix()
                for p in (notebooks / "reference").glob("*.json")}  # cited figures # fmt: skip
    in_wheel = {n.removeprefix("workbench/lessons/")
                for n in zipfile.ZipFile(built["wheel"]).namelist()
                if n.startswith("workbench/lessons/") and not n.endswith("/")}  # fmt: skip
    assert lessons == in_wheel and "01_quickstart.ipynb" in in_wheel
    assert "workbench/examples/train.py" in zipfile.ZipFile(built["wheel"]).namelist()  # lesson 08
    assert built["wheel"].name.startswith("throughput_workbench-")
    with tarfile.open(built["sdist"]) as sdist:
        in_sdist = {n.split("/", 1)[-1] for n in sdist.getnames()}
    wanted = {f"notebooks/{n}" for n in lessons} | {"examples/train.py", "setup.py"}
    assert wanted <= in_sdist


def test_the_installed_package_is_the_wheels_not_the_checkouts(venv):
    code = ("import workbench, torch; from workbench.workshop import checks as workshop; "
            "print(workbench.__file__); print(workshop.example_script())")  # fmt: skip
    p = _run(venv, venv["python"], "-c", code)
    assert p.returncode == 0, p.stderr
    package, example = p.stdout.split()
    assert Path(package).is_relative_to(venv["root"] / "venv")
    assert Path(example).is_relative_to(venv["root"] / "venv")  # lesson 08's script, shipped
    v = _run(venv, venv["bin"] / "workbench", "--version")
    assert v.stdout.startswith(f"throughput-workbench {workbench.__version__} (import workbench")
    assert str(venv["root"] / "venv") in v.stdout


def test_a_burst_runs_from_the_installed_command(venv, tiny_data):
    p = _run(venv, venv["bin"] / "workbench", "burst", "--json", "--seconds", "0.5",
             "--set", "batch_size=8", "--no-record", WORKBENCH_DATA=str(tiny_data))  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["status"] == "ok"


def test_a_missing_file_is_one_line_and_exit_2(venv):
    p = _run(venv, venv["bin"] / "workbench", "show", "no-such.yaml")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "no-such.yaml" in p.stderr


def test_the_panel_builds_from_the_installed_package(venv, tiny_data):
    code = "import workbench as wb; print(type(wb.Bench('cnn').panel(autorun=False)).__name__)"
    p = _run(venv, venv["python"], "-c", code, WORKBENCH_DATA=str(tiny_data))
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "VBox"


def test_the_lab_copies_the_lessons_and_answers_only_with_its_token(venv):
    port = free_port()
    mine = venv["root"] / "my-lessons"
    log = venv["root"] / "lab.log"
    command = [venv["bin"] / "workbench", "lab", "--no-browser", "--port", str(port),
               "--notebooks", str(mine)]  # fmt: skip
    with workbench_lab(command, log, cwd=venv["cwd"], env=venv["env"]) as token:
        assert (mine / "01_quickstart.ipynb").is_file() and (mine / "README.md").is_file()
        api = f"http://127.0.0.1:{port}/api/contents/my-lessons"
        assert wait_for_status(f"{api}?token={token}") == 200
        assert http_status(f"{api}/01_quickstart.ipynb?token={token}") == 200
        assert http_status(api) == 403
        assert http_status(f"{api}?token=not-{token}") == 403
        quickstart = f"http://127.0.0.1:{port}/lab/tree/my-lessons/01_quickstart.ipynb"
        assert f"{quickstart}?token={token}" in log.read_text()
        assert http_status(f"{quickstart}?token={token}") == 200
