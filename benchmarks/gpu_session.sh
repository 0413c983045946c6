#!/usr/bin/env bash
# The GPU session, in one command (benchmarks/gpu_session.py says what it runs and why):
#   bash benchmarks/gpu_session.sh [OUT_DIR] [--budget-s 480] [--steps a,b] [--dry] [--plan]
# The lessons, each set a call of its own (what a call has no time for: a later session):
#   bash benchmarks/gpu_session.sh --steps lessons --budget-s 570   (then lessons-optional;
#   --lessons unmeasured: the lessons no kept run has run yet)
# gpt:124m's rows (bf16 eager, compiled, CUDA graphs, attention backends), a call of its own:
#   bash benchmarks/gpu_session.sh --steps transformer --budget-s 570
# OUT_DIR defaults to $OUT, else /tmp/gpu-session: logs, summary.txt and a copy of the kept
# run, which goes to benchmarks/results/gpu-<date>-<device>.json (commit it; then
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
