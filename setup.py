"""The package list, made from the tree so that a new subpackage can never be
left out of the wheel (and so of the images): an explicit list in
pyproject.toml silently dropped one while editable installs and tests were fine.

The repository keeps the design card's top-level layout (shared/, services/,
trainer/) but installs everything under the one ``spotsweep`` namespace, so no
generic top-level names like ``shared`` leak into site-packages. Everything
else is in pyproject.toml; tests/test_packaging.py builds the wheel and checks it.
"""

from setuptools import find_packages, setup

ROOTS = {"spotsweep": "spotsweep", "spotsweep.shared": "shared", "spotsweep.services": "services",
         "spotsweep.trainer": "trainer"}


def packages() -> list[str]:
    """Every package under the roots, named as installed (services/agent -> spotsweep.services.agent)."""
    out = []
    for name, root in ROOTS.items():
        out.append(name)
        out += [f"{name}.{sub}" for sub in find_packages(root)]
    return out


setup(packages=packages(), package_dir=ROOTS)
