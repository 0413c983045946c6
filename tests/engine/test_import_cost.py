"""What ``import workbench; workbench.run_burst(...)`` loads on a CPU: the library a user
imports, none of the tiers on top of it (issue 39).

Run in a fresh interpreter (the test process has imported everything already): a tiny burst of
a user's own model on random tensors, nothing recorded. None of the workshop tier (the lessons'
helpers, the class board, under ``workbench.workshop`` or its old ``notebook.workshop*`` and
``board*`` paths), the notebook UI, the tuner or the class store may be among the modules it
loaded, and the count of the package's modules stays below what it was when this was measured
first (86 before the burst's torchrun machinery became a job's own import: 80 after).
"""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = (
    "workbench.workshop",
    "workbench.notebook",  # the UI, and the old workshop*/board* paths under it
    "workbench.tuning",
    "workbench.history.classroom",
    "workbench.analysis.board",
)
BEFORE = 86
"""``workbench.*`` modules a CPU ``run_burst`` loaded when issue 39 counted them."""

_BURST = """
import json, sys
import torch
from torch.utils.data import TensorDataset
import workbench
wl = workbench.Workload(name="tiny", model=lambda: torch.nn.Linear(8, 2),
    dataset=lambda: TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))))
r = workbench.run_burst(wl, workbench.Knobs(batch_size=8), seconds=0.05, min_steps=2,
    warmup_steps=1, device="cpu", record=False)
loaded = sorted(m for m in sys.modules if m == "workbench" or m.startswith("workbench."))
print(json.dumps({"status": r.status, "error": r.error, "plan": r.plan, "loaded": loaded}))
"""


def test_a_cpu_burst_loads_no_module_of_the_tiers_above_the_library(tmp_path):
    done = subprocess.run([sys.executable, "-c", _BURST], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["status"] == "ok", out["error"]
    assert out["plan"]["processes"] is False and out["plan"]["device"] == "cpu"
    loaded = out["loaded"]
    above = [m for m in loaded if m.startswith(FORBIDDEN)]
    assert above == [], f"a CPU burst loaded {above}"
    print(f"run_burst on a CPU loaded {len(loaded)} workbench modules (issue 39: {BEFORE})")
    assert len(loaded) < BEFORE, loaded
