"""What the lent GPU box lacks, in one place: the GPU session's rehearsal blocks these imports
in every process it starts, and the test suite's blocked-import runs block the same list
(``tests/blocked_imports.py``), so "runs on the box" means one thing everywhere.

The box has torch, torchvision, nvidia-ml-py, pyyaml and pandas (the device tool's KINDS.md),
no network, and none of the notebook's UI packages nor DALI: the engine, the production config
loader and the GPU session's scripts must import and run without them.
"""

BLOCKED_ON_THE_BOX = ("ipywidgets", "altair", "anywidget", "vl_convert", "jupyterlab",
                      "nvidia.dali")  # fmt: skip
"""The packages the box does not have (a name blocks its submodules too)."""
