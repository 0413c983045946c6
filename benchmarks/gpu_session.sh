#!/usr/bin/env bash
# The GPU session, one call to the box at a time (benchmarks/gpu_session.py says what it runs
# and why; docs/development.md the order of a window):
#   bash benchmarks/gpu_session.sh [OUT_DIR] [--call N | --steps a,b] [--budget-s 540] [--plan]
# Rehearse it on a CPU first (every call, the box's conditions, never published):
#   bash benchmarks/gpu_session.sh --rehearse [OUT_DIR] [--rehearse-fail STEP=timeout|segv]
# The lessons, each set a call of its own (what a call has no time for: a later session):
#   bash benchmarks/gpu_session.sh --steps lessons --budget-s 570   (then lessons-optional;
#   --lessons unmeasured: the lessons no kept run has run yet)
# gpt:124m's rows (bf16 eager, compiled, CUDA graphs, attention backends), a call of its own:
#   bash benchmarks/gpu_session.sh --steps transformer --budget-s 570
# OUT_DIR defaults to $OUT, else /tmp/gpu-session: three files, the kept run, summary.txt and
# logs.tar.gz (work folders go to --scratch, outside it). The kept run also goes to
# benchmarks/results/gpu-<date>-<device>.json (commit it; then
# `python benchmarks/publish_gpu.py` regenerates the published tables from it).
# Runs with $PYTHON, else this checkout's .venv where there is one (a dev machine), else the
# machine's own python3 (a lent box: torch, nvidia-ml-py, pyyaml, psutil, pandas; no UI
# packages, no DALI, no network). A copy of the tree without .git (a
# lent machine) records the commit from $WORKBENCH_COMMIT: start it with
#   WORKBENCH_COMMIT=<sha> WORKBENCH_DIRTY=0 bash benchmarks/gpu_session.sh
# Without CUDA it runs its dry path: the same steps on the CPU, short, never kept.
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export WORKBENCH_HOME="${WORKBENCH_HOME:-$(mktemp -d -t wb-gpu-XXXX)}"
export WORKBENCH_COMMAND="bash benchmarks/gpu_session.sh${*:+ $*}"
export PYTHONUNBUFFERED=1
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
exec "$PYTHON" benchmarks/gpu_session.py "$@"
