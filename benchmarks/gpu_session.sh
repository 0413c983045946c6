#!/usr/bin/env bash
# Everything to check on a lent CUDA machine, in one command that ends within 6 minutes:
#   bash benchmarks/gpu_session.sh [OUT_DIR]      (default: $OUT, else /tmp/gpu-session)
# Runs with the machine's own Python ($PYTHON, default python: torch, nvidia-ml-py, pyyaml,
# psutil, pandas, pytest; no UI packages, no DALI, no network). The plan, on paper:
#   ~10 s     nvidia-smi, the DALI probe (and listing DALI's gpu tests when it fails)
#   240 s     the GPU check's --budget-s: set-up and rows are 237 s on paper (the table:
#             `gpu_check.py --plan`); a row that would not fit what is left is skipped, and says so
#   +10 s     grace for the last row to run past its estimate, then `timeout` stops the check
#   90 s      the tests marked `gpu` (whatever time is left, at least this; 87 s measured)
#   +5 s      kill grace (timeout -k) of the last step: 355 s at most, under 6 minutes
# Each step has a timeout so one that hangs cannot spend the rest; the check rewrites its JSON
# after every row, so a timeout keeps what it measured. Logs and summary.txt go to OUT_DIR.
# DALI's gpu tests are not run where DALI cannot be imported, and are reported as not run
# (not as skipped, which would read as passed).
set -u
out=${1:-${OUT:-/tmp/gpu-session}}
mkdir -p "$out"
py=${PYTHON:-python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export WORKBENCH_HOME="${WORKBENCH_HOME:-$(mktemp -d -t wb-gpu-XXXX)}"
session_s=350 # the deadline: 10 s under 6 minutes, for the kill grace and this script
pytest_s=90   # pytest -m gpu: 87 s measured on the first H200 session
grace_s=10    # the check's last row may run this far past its estimate

timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 |
    tee "$out/gpu.txt"

# DALI's gpu tests: run only where DALI imports; otherwise named as not run.
dali_files=$(grep -l "pytest.mark.gpu" tests/engine/test_dali*.py 2>/dev/null)
if "$py" -c 'import nvidia.dali' >/dev/null 2>&1; then
    dali="DALI gpu tests: run with the others"
    ignore=""
else
    # shellcheck disable=SC2086  # one argument per file
    ids=$("$py" -m pytest --collect-only -q -m gpu -p no:cacheprovider $dali_files 2>/dev/null |
        grep "::")
    dali="DALI gpu tests: $(echo "$ids" | grep -c "::") not run: DALI not installed"
    ignore=$dali_files
fi
echo "$dali"
[ -n "${ids:-}" ] && echo "$ids" | sed 's/$/: not run: DALI not installed/'

check_timeout=$((session_s - pytest_s - SECONDS))
budget=$((check_timeout - grace_s))
echo "# session: check budget ${budget} s (timeout ${check_timeout} s), then pytest -m gpu"
timeout -k 5 "$check_timeout" "$py" benchmarks/gpu_check.py --budget-s "$budget" \
    --json "$out/gpu_check.json" 2>&1 | tee "$out/gpu_check.txt"
check_rc=${PIPESTATUS[0]}
# A crash (a signal other than timeout's: 139 is a segfault in a library) keeps the rows the
# JSON holds; the rest run in a fresh process with what is left of the check's time.
if [ "$check_rc" -gt 128 ] && [ "$check_rc" != 137 ]; then
    left=$((session_s - pytest_s - SECONDS))
    if [ "$left" -gt $((grace_s + 20)) ]; then
        echo "# gpu_check died (exit $check_rc): resuming with ${left} s"
        timeout -k 5 "$left" "$py" benchmarks/gpu_check.py --resume \
            --budget-s $((left - grace_s)) --json "$out/gpu_check.json" 2>&1 |
            tee -a "$out/gpu_check.txt"
        check_rc=${PIPESTATUS[0]}
    fi
fi

files=""
for f in $(grep -rl --include="test_*.py" "pytest.mark.gpu" tests); do
    case " $ignore " in *" $f "*) ;; *) files="$files $f" ;; esac
done
echo "# pytest -m gpu on:$files"
tests_timeout=$((session_s - SECONDS))
[ "$tests_timeout" -lt 10 ] && tests_timeout=10
# shellcheck disable=SC2086  # one argument per file
timeout -k 5 "$tests_timeout" "$py" -m pytest -m gpu -q -p no:cacheprovider $files 2>&1 |
    tee "$out/pytest_gpu.txt"
tests_rc=${PIPESTATUS[0]}

{
    echo "gpu_check exit $check_rc, pytest -m gpu exit $tests_rc"
    case $check_rc in 124 | 137) echo "gpu_check was stopped by its timeout: $out/gpu_check.json" \
        "holds the rows it finished, and 'running' names the row it was in" ;;
    esac
    echo "$dali"
    [ -n "${ids:-}" ] && echo "$ids" | sed 's/$/: not run: DALI not installed/'
    echo "session ${SECONDS} s; logs in $out"
} | tee "$out/summary.txt"
[ "$check_rc" = 0 ] && [ "$tests_rc" = 0 ]
