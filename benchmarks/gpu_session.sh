#!/usr/bin/env bash
# Everything to check on a lent CUDA machine, in one command that fits its minutes:
#   bash benchmarks/gpu_session.sh [OUT_DIR]      (default: $OUT, else /tmp/gpu-session)
# Runs with the machine's own Python (torch, nvidia-ml-py, pyyaml, psutil, pandas, pytest; no
# UI packages, no DALI, no network): the GPU check's table (under 5 minutes), then the tests
# marked `gpu` (collected from the files that hold them, which import no UI package). Each
# step has a timeout so one that hangs cannot spend the rest; the logs go to OUT_DIR.
set -u
out=${1:-${OUT:-/tmp/gpu-session}}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export WORKBENCH_HOME="${WORKBENCH_HOME:-$(mktemp -d -t wb-gpu-XXXX)}"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/gpu.txt"
timeout 330 python benchmarks/gpu_check.py --json "$out/gpu_check.json" 2>&1 | tee "$out/gpu_check.txt"
check_rc=${PIPESTATUS[0]}
files=$(grep -l "pytest.mark.gpu" tests/test_*.py)
# shellcheck disable=SC2086  # one argument per file
timeout 240 python -m pytest -m gpu -q -p no:cacheprovider $files 2>&1 | tee "$out/pytest_gpu.txt"
tests_rc=${PIPESTATUS[0]}
echo "gpu_check exit $check_rc, pytest -m gpu exit $tests_rc; logs in $out"
[ "$check_rc" = 0 ] && [ "$tests_rc" = 0 ]
