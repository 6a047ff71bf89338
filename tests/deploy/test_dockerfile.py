"""deploy/Dockerfile without a Docker daemon: its two targets, what they run as, what
they check, what they install, and that the commands they start run as plain processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from manifests import ROOT, dockerfile_stages, dockerignored

TARGETS = ("control", "worker")
SECRETISH = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|_KEY\b|CREDENTIAL|AMQP_URL|DATABASE_URL", re.IGNORECASE)


def instructions(stage: str, name: str) -> list[str]:
    return [rest for ins, rest in dockerfile_stages()[stage] if ins == name]


def test_two_targets_from_one_file_the_slim_one_last() -> None:
    stages = dockerfile_stages()
    assert set(TARGETS) <= set(stages)
    assert list(stages)[-1] == "control"  # a plain `docker build` makes the slim image


@pytest.mark.parametrize("target", TARGETS)
def test_each_image_runs_as_an_unprivileged_user(target: str) -> None:
    users = instructions(target, "USER")
    assert users, f"{target}: no USER (it would run as root)"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0") and (not user.isdigit() or int(user) >= 1000)


@pytest.mark.parametrize("target", TARGETS)
def test_each_image_has_a_healthcheck_on_healthz_without_curl(target: str) -> None:
    (check,) = instructions(target, "HEALTHCHECK")
    command = json.loads(check[check.index("CMD") + 3:].strip())
    assert command[:2] == ["python", "-c"] and "/healthz" in command[2] and "urllib" in command[2]
    assert not re.search(r"\b(curl|wget)\b", check)
    assert instructions(target, "ENTRYPOINT") == ['["spotsweep"]']


def test_no_secret_is_baked_into_an_image() -> None:
    for stage, lines in dockerfile_stages().items():
        for ins, rest in lines:
            if ins in ("ENV", "ARG", "LABEL"):
                names = re.findall(r"(\w+)=", rest) or [rest.split()[0]]
                assert not [n for n in names if SECRETISH.search(n)], f"{stage}: {ins} {rest}"
            assert not re.search(r"://[^/\s:@]+:[^@\s]+@", rest), f"{stage}: a URL with a password: {rest}"


def test_worker_installs_the_pinned_torch_from_the_wheelhouse_or_an_extra_index() -> None:
    """--extra-index-url, not --index-url: a mirror named by TORCH_INDEX need not hold torch's
    dependencies; and torch alone in a layer before the code, so a code change never downloads it."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (pin,) = [d for d in pyproject["project"]["optional-dependencies"]["worker"] if d.startswith("torch")]
    args = dict(a.split("=", 1) for a in instructions("worker", "ARG") if "=" in a)
    assert f"torch=={args['TORCH_VERSION']}" == pin
    assert args["TORCH_INDEX"] == "https://download.pytorch.org/whl/${TORCH_VARIANT}"
    assert args["TORCH_VARIANT"].startswith("cu")  # the default is the GPU build; compose asks for cpu
    runs = instructions("worker", "RUN")
    torch = next(i for i, r in enumerate(runs) if '"torch==${TORCH_VERSION}"' in r)
    assert '--extra-index-url "$TORCH_INDEX" "torch==${TORCH_VERSION}"' in runs[torch] and "--index-url" not in \
        runs[torch].replace("--extra-index-url", "")
    assert "source=deploy/wheelhouse" in runs[torch] and "wheel" not in runs[torch].split("from=")[-1][:6]
    later = runs[torch + 1:]
    assert any("/requirements/worker.txt" in r for r in later)
    (code,) = [r for r in later if "/wheels/spotsweep-" in r]
    assert "--no-deps" in code and code is runs[-1]  # the code's layer is the last install


def test_control_image_has_no_torch() -> None:
    for install in instructions("control", "RUN"):
        assert "worker" not in install and "torch" not in install.replace('! python -c "import torch"', "")


def test_no_build_fetches_a_frontend_from_a_registry() -> None:
    """A `# syntax=` line makes BuildKit pull that frontend from Docker Hub before anything else."""
    first = (ROOT / "deploy" / "Dockerfile").read_text().splitlines()[0]
    assert not re.match(r"#\s*syntax\s*=", first, re.IGNORECASE), first


def test_the_package_index_ca_is_a_build_secret_never_a_layer() -> None:
    for stage, lines in dockerfile_stages().items():
        for ins, rest in lines:
            if ins == "RUN" and "pip install" in rest or "pip wheel" in rest:
                assert "--mount=type=secret,id=pip-cert" in rest or "--no-index" in rest, f"{stage}: {rest[:80]}"
            assert not (ins in ("COPY", "ADD") and "cert" in rest.lower()), f"{stage}: {ins} {rest}"


def test_dockerignore_keeps_the_virtualenv_and_git_out_but_lets_the_build_files_in() -> None:
    for kept in ("pyproject.toml", "setup.py", "README.md", "LICENSE", "spotsweep/cli.py", "shared/settings.py",
                 "services/agent/main.py", "trainer/__init__.py"):
        assert not dockerignored(kept), kept
    for dropped in (".venv/bin/python", ".git/config", "tests/conftest.py", "shared/__pycache__/x.pyc", ".spotsweep/db"):
        assert dockerignored(dropped), dropped


@pytest.mark.parametrize("command", ["planner", "collector", "dashboard", "agent", "submit"])
def test_the_commands_the_images_start_run_as_plain_processes(command: str) -> None:
    """The entrypoint `spotsweep` and each command compose and the manifests give it."""
    out = subprocess.run([sys.executable, "-m", "spotsweep", command, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"usage: spotsweep {command}" in out.stdout


def test_the_healthcheck_command_passes_on_a_live_service_and_fails_without_one(tmp_path: Path) -> None:
    """The images' HEALTHCHECK, run as Docker runs it, against a real collector whose broker
    is unreachable: alive (/healthz 200) while it waits for RabbitMQ, and failing once it is gone."""
    from servers import free_port
    from waiting import wait_until

    (check,) = instructions("control", "HEALTHCHECK")
    command = json.loads(check[check.index("CMD") + 3:].strip())
    command[0] = sys.executable
    port, dead = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env |= {"SPOTSWEEP_METRICS_PORT": str(port), "SPOTSWEEP_AMQP_URL": f"amqp://guest:guest@127.0.0.1:{dead}/%2F",
            "SPOTSWEEP_DATABASE_URL": f"postgresql://nobody@127.0.0.1:{dead}/none", "SPOTSWEEP_HOME": str(tmp_path)}
    service = subprocess.Popen([sys.executable, "-m", "spotsweep", "collector", "--startup-timeout", "60"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def healthy() -> bool:
            return subprocess.run(command, env=env, capture_output=True, timeout=30).returncode == 0

        assert wait_until(healthy, timeout=60)
    finally:
        service.terminate()
        service.wait(timeout=60)
    assert subprocess.run(command, env=env, capture_output=True, timeout=30).returncode != 0
