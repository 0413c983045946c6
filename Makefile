# Two commands do everything on a fresh machine:
#   make lab    open the quickstart notebook in JupyterLab
#   make test   lint, run the whole test suite and build the documentation site (strict)
#   make docs   build the documentation site into site/ (strict: a broken link fails)
# Both create (or reuse) .venv and install what they need; the install reruns when
# pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: lab test docs lint format data bench gpu-check gpu-session gpu-rehearsal wheelhouse clean

# The docs extra installs MkDocs and its plugins: make test builds the site, strict.
# The dali extra installs NVIDIA DALI where it has wheels (Linux x86_64; its markers skip it
# elsewhere), so the DALI tests run on its CPU pipeline, GPU or not.
$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev,dali,docs]' 2>&1 | grep -v "^WARNING: Location" || true
	@$(PY) -c "import torch, torchvision, workbench" || (echo "install failed" >&2; exit 1)
	@touch $(STAMP)

lab: $(STAMP)
	$(PY) -m workbench lab

# The tests run in two passes. Those marked `concurrent` (notebooks, torchrun and multi-node
# jobs, the browser: they mostly wait on other processes) run two at a time; the rest, among
# them every test that compares timings, one at a time, with the machine to themselves. Both
# passes always run; either failing fails the target (and a pass that selects no test fails:
# pytest's exit code 5). `.venv/bin/python -m pytest` alone still runs everything, serially.
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	@status=0; \
	echo "$(PY) -m pytest -m concurrent -n 2 --dist loadgroup"; \
	$(PY) -m pytest -m concurrent -n 2 --dist loadgroup || status=$$?; \
	echo "$(PY) -m pytest -m 'not concurrent'"; \
	$(PY) -m pytest -m "not concurrent" || status=$$?; \
	exit $$status

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

data: $(STAMP)
	$(PY) -m workbench data

bench: $(STAMP)
	$(PY) benchmarks/engine_figures.py

gpu-check: $(STAMP)
	$(PY) benchmarks/gpu_check.py

# On a lent GPU box: the machine's own Python (no venv, no UI packages), call 1 (~9 minutes);
# without CUDA, its dry path. gpu-rehearsal: every call on this CPU under the box's conditions.
gpu-session:
	bash benchmarks/gpu_session.sh

gpu-rehearsal: $(STAMP)
	bash benchmarks/gpu_session.sh --rehearse

# What the lessons need on a lent GPU box beyond what it has (it has no network): wheels for
# CPython 3.12 x86_64 in .wheelhouse/, pinned in benchmarks/wheelhouse.txt, under 48 MiB.
# benchmarks/run_lessons.py names the two commands that install them there and run the lessons.
wheelhouse: $(STAMP)
	$(PY) benchmarks/wheelhouse.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site
