"""The dashboard runs from the built wheel: ``spotsweep dashboard`` from a
fresh virtualenv serves its pages and its vendored ECharts (package data a
wheel can silently leave out, while editable installs never notice).

The wheel goes in with pip (``--no-deps --no-index``: its console script
too); its dependencies are this interpreter's, made visible through a
``.pth`` file after the fresh venv's own site-packages, so no network is
needed and the wheel's copy of spotsweep is the one that runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "services" / "reporter" / "web"))
from dashseed import HOSTILE, small_sweep  # noqa: E402
from servers import free_port, wait_port  # noqa: E402

from spotsweep.shared.db import Database  # noqa: E402

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]
ECHARTS = ROOT / "services" / "reporter" / "web" / "static" / "echarts.min.js"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel built from this tree installed in it."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    wheel = next((tmp / "dist").glob("spotsweep-*.whl"))
    env = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, timeout=300)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "zz_spotsweep_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env


@pytest.fixture()
def served(venv: Path, database_url: str) -> Iterator[str]:
    db = Database(database_url)
    db.migrate()
    small_sweep(db)
    db.close()
    port = free_port()
    env = {**os.environ, "SPOTSWEEP_DATABASE_URL": database_url, "PYTHONPATH": ""}
    proc = subprocess.Popen([str(venv / "bin" / "spotsweep"), "dashboard", "--port", str(port)], env=env, cwd=venv,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_port(port, timeout=60)
    except RuntimeError:
        proc.kill()
        pytest.fail(f"the wheel's dashboard did not listen: {proc.communicate(timeout=10)[0]}")
    yield f"http://127.0.0.1:{port}"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out


def test_the_wheels_dashboard_serves_its_pages_and_its_vendored_charts(venv: Path, served: str) -> None:
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import spotsweep; print(spotsweep.__file__)"],
                           check=True, capture_output=True, text=True, cwd=venv).stdout
    assert where.startswith(str(venv)), where  # the wheel's copy, not this tree's
    with httpx.Client(base_url=served, timeout=30) as client:
        index = client.get("/")
        assert index.status_code == 200 and "web-test" in index.text
        page = client.get("/sweeps/web-test-1")
        assert page.status_code == 200 and 'src="/static/echarts.min.js"' in page.text
        assert 'src="/static/panels.js"' in page.text and HOSTILE not in page.text
        charts = client.get("/static/echarts.min.js")
        assert charts.status_code == 200 and "javascript" in charts.headers["content-type"]
        assert charts.content == ECHARTS.read_bytes()
        for script in ("common.js", "sweep.js", "panels.js"):
            assert client.get(f"/static/{script}").status_code == 200, script
        assert client.get("/api/sweeps/web-test-1/trials").json()[0]["trial_name"] == HOSTILE  # the best, as text
