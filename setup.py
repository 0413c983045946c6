"""The one thing pyproject.toml cannot say: ship ``notebooks/`` as package data.

The lessons live once, in ``notebooks/`` at the top of the repository (CI executes them there
and the documentation site renders them from there). The wheel carries them as the data-only
package ``workbench.lessons``, mapped onto that folder, so ``workbench lab`` outside a checkout
can copy them into a folder of the user's. An editable install maps the same name onto the same
folder, so there is no second copy to drift.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["workbench", "workbench.*"]), "workbench.lessons"],
    package_dir={"workbench.lessons": "notebooks"},
    package_data={"workbench.lessons": ["*.ipynb", "README.md"]},
)
