"""The package list, made from the tree so that a new subpackage can never be
left out of the wheel (and so of the images): an explicit list in
pyproject.toml silently dropped one while editable installs and tests were fine.

The repository keeps the design card's top-level layout (shared/, services/,
trainer/) but installs everything under the one ``spotsweep`` namespace, so no
generic top-level names like ``shared`` leak into site-packages. Everything
else is in pyproject.toml; tests/test_packaging.py builds the wheel and checks it.

Folders of data files (the migrations, the dashboard's templates and static
files) are namespace packages, found like the others: setuptools ships package
data only from packages, and warns ("Package would be ignored", ~35 lines each)
about an importable folder missing from the list.
"""

from setuptools import find_namespace_packages, setup

ROOTS = {"spotsweep": "spotsweep", "spotsweep.shared": "shared", "spotsweep.services": "services",
         "spotsweep.trainer": "trainer"}


def packages() -> list[str]:
    """Every package and data folder under the roots, named as installed (services/agent -> spotsweep.services.agent)."""
    out = []
    for name, root in ROOTS.items():
        out.append(name)
        out += [f"{name}.{sub}" for sub in find_namespace_packages(root, exclude=["*__pycache__*"])]
    return out


setup(packages=packages(), package_dir=ROOTS)
