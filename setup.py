"""The one thing pyproject.toml cannot say: ship ``notebooks/`` and ``examples/`` in the wheel.

The lessons live once, in ``notebooks/`` at the top of the repository (CI executes them there
and the documentation site renders them from there). The wheel carries them as the data-only
package ``workbench.lessons``, mapped onto that folder, so ``workbench lab`` outside a checkout
can copy them into a folder of the user's. ``examples/`` travels the same way, as
``workbench.examples``: lesson 08 runs ``examples/train.py``, the production example. An
editable install maps the same names onto the same folders, so there is no second copy to drift.
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["workbench", "workbench.*"]),
        "workbench.lessons",
        "workbench.examples",
    ],
    package_dir={"workbench.lessons": "notebooks", "workbench.examples": "examples"},
    package_data={"workbench.lessons": ["*.ipynb", "README.md", "reference/*.json"]},
)
