"""The table of PyTorch's own math switches is what a fresh interpreter reads."""

import json
import subprocess
import sys

from workbench.core.torch_math import TORCH_DEFAULTS
from workbench.engine.training import torch_defaults

_READ = """
import json, torch
from workbench.engine.training import precision_state
print(json.dumps(precision_state()))
"""


def test_the_table_is_what_an_untouched_import_torch_reads():
    out = subprocess.run([sys.executable, "-c", _READ], capture_output=True, text=True,
                         check=True, timeout=120).stdout  # fmt: skip
    fresh = json.loads(out.splitlines()[-1])  # this process's switches: what tests left
    assert fresh == torch_defaults() and set(fresh) <= set(TORCH_DEFAULTS)
