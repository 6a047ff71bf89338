"""The built wheel holds every package of the tree and runs from a fresh
virtualenv: a subpackage missing from the wheel is missing from the images,
while editable installs and the rest of the suite never notice."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOTS = {"spotsweep": "spotsweep", "spotsweep.shared": "shared", "spotsweep.services": "services",
         "spotsweep.trainer": "trainer"}


def tree_packages() -> set[str]:
    """Every folder with an ``__init__.py`` under the roots, by its installed name."""
    out = set()
    for name, folder in ROOTS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            out.add(".".join((name, *rel)))
    return out


def dockerfile_context(into: Path) -> Path:
    """The files deploy/Dockerfile copies into the image, copied to ``into``: the
    wheel is built from them alone, as the image builds it (a file the build
    needs and the Dockerfile forgets, such as setup.py, fails here)."""
    into.mkdir()
    for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            *sources, _ = line.split()[1:]
            for source in sources:
                src = ROOT / source
                if src.is_dir():
                    shutil.copytree(src, into / source, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy2(src, into / source)
    return into


def test_the_wheel_holds_every_package_and_imports_from_a_fresh_virtualenv(tmp_path: Path) -> None:
    context = dockerfile_context(tmp_path / "context")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(context)],
                   check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("spotsweep-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    in_wheel = {n[: -len("/__init__.py")].replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert in_wheel == tree_packages()
    assert "spotsweep/shared/db/migrations/0001.initial.sql" in names  # package data travels too
    for data in ("static/echarts.min.js", "templates/sweep.html", "templates/report.html"):  # the dashboard's, vendored
        assert f"spotsweep/services/reporter/web/{data}" in names
    assert not [n for n in names if n.split("/")[0] in ("shared", "services", "trainer", "tests")]  # no generic top-level names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    target = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    with zipfile.ZipFile(wheel) as z:  # what pip does for a pure wheel, without another download of pip
        z.extractall(target)
    # The dependencies come from this interpreter's site-packages, after the fresh venv's own (which holds the wheel).
    deps = sysconfig.get_paths()["purelib"]
    modules = sorted(tree_packages())
    code = ("import importlib, spotsweep, sys\n"
            f"assert spotsweep.__file__.startswith({str(target)!r}), spotsweep.__file__\n"
            f"for m in {modules!r}:\n    importlib.import_module(m)\n"
            "import spotsweep.services.planner.handlers, spotsweep.services.agent.main, spotsweep.services.collector.main\n"
            "from importlib import resources\n"
            "from spotsweep.shared.db.migrator import migrations\n"
            "assert [m.id for m in migrations()][0] == '0001.initial'\n")
    run = subprocess.run([str(venv / "bin" / "python"), "-c", f"import sys; sys.path.append({deps!r})\n" + code],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
