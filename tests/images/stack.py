"""`make image-test`: the images as a user runs them, through docker-compose.yml.

Builds the images (deploy/images.sh, with the backing services of tests/images/compose.yml:
RabbitMQ and PostgreSQL from Debian's packages, S3 from moto), starts the stack with
`docker compose up --wait`, submits examples/deepseek-small.yaml from the cli service,
stops the agent container with `docker stop -t 20` once a running trial has a checkpoint,
starts another, and checks what a user relies on: the sweep completes; the preempted
trials resumed from their checkpoints; the dashboard serves the sweep's page; every
container was healthy; the control containers ran read-only as uid 10001 and the trials
as their own uids. Everything, volumes included, is torn down whatever happens.

Not a pytest test: it takes minutes and a Docker daemon, so `make test` never runs it;
.ci/run runs it after the suite. Exit status 0 only if every check held.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "spotsweep-image-test"
COMPOSE = ["docker", "compose", "-p", PROJECT, "-f", "docker-compose.yml", "-f", "tests/images/compose.yml"]
CONTROL = ("planner", "collector", "reporter")
LONG_RUNNING = ("rabbitmq", "postgres", "minio", *CONTROL, "agent")
TRIAL_UIDS = {20001, 20002}


def sh(*args: str, check: bool = True, timeout: float = 600) -> str:
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(args)} -> {out.returncode}\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out.stdout


def compose(*args: str, **kw: object) -> str:
    return sh(*COMPOSE, *args, **kw)  # type: ignore[arg-type]


def sql(query: str) -> list[list[str]]:
    out = compose("exec", "-T", "postgres", "psql", "-U", "spotsweep", "-d", "spotsweep", "-AtF", "\t", "-c", query)
    return [line.split("\t") for line in out.splitlines() if line]


def container(service: str) -> str:
    return compose("ps", "-q", service).strip()


def inspect(cid: str) -> dict:
    return json.loads(sh("docker", "inspect", cid))[0]


def wait_for(what: str, condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(2)


def check_control_containers() -> None:
    for service in CONTROL:
        info = inspect(container(service))
        assert info["HostConfig"]["ReadonlyRootfs"], f"{service}: root filesystem writable"
        status = sh("docker", "exec", info["Id"], "cat", "/proc/1/status")
        uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
        assert set(uids) == {"10001"}, f"{service}: runs as uids {uids}"
    print("image-test: planner, collector, dashboard: read-only root, uid 10001")


def trial_uids() -> set[int]:
    """The uids of the trial processes (`spotsweep train`) in the agent container."""
    out = sh("docker", "top", container("agent"), "-eo", "pid,uid,args", check=False)
    return {int(line.split()[1]) for line in out.splitlines()[1:] if " train " in line}


def check_healthy(services: tuple[str, ...]) -> None:
    for service in services:
        state = inspect(container(service))["State"]
        health = state.get("Health", {}).get("Status")
        assert state["Running"] and health == "healthy", f"{service}: {state['Status']}, health {health}"


def run() -> None:
    started = time.monotonic()
    build = subprocess.run(["deploy/images.sh", "tests/images/compose.yml", "rabbitmq", "postgres", "minio"], cwd=ROOT,
                           timeout=1500)  # its progress lines and image sizes go to the output
    assert build.returncode == 0, "deploy/images.sh failed"
    print(f"image-test: images built in {time.monotonic() - started:.0f} s")
    compose("up", "-d", "--no-build", "--wait", "--wait-timeout", "300", timeout=400)
    check_healthy(LONG_RUNNING)
    check_control_containers()
    print(f"image-test: stack up and healthy at {time.monotonic() - started:.0f} s")

    submit = subprocess.Popen([*COMPOSE, "run", "--rm", "-T", "cli", "submit", "examples/deepseek-small.yaml",
                               "--wait", "--timeout", "900"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert submit.stdout is not None
    sweep_id = submit.stdout.readline().strip()
    assert sweep_id, f"submit printed no sweep id: {submit.stderr.read() if submit.stderr else ''}"
    rest: list[str] = []
    reader = threading.Thread(target=lambda: rest.extend(submit.stdout.readlines() if submit.stdout else []))
    reader.start()
    print(f"image-test: submitted {sweep_id}")

    seen: set[int] = set()

    def checkpointed_and_running() -> bool:
        seen.update(trial_uids())
        rows = sql(f"SELECT count(*) FROM trial_journal j JOIN trials t USING (sweep_id, trial_id) "
                   f"WHERE j.sweep_id = '{sweep_id}' AND j.kind = 'trial.checkpoint' AND t.state = 'running'")
        return int(rows[0][0]) > 0 and bool(seen)

    wait_for("a running trial with a checkpoint", checkpointed_and_running, 600)
    assert seen and seen <= TRIAL_UIDS, f"trials ran as uids {seen}, not as the trial users {TRIAL_UIDS}"
    print(f"image-test: trials run as uids {sorted(seen)}; stopping the agent")
    old_agent = container("agent")
    sh("docker", "stop", "-t", "20", old_agent, timeout=60)
    compose("up", "-d", "--no-build", "--no-deps", "--force-recreate", "--wait", "--wait-timeout", "180", "agent",
            timeout=240)
    assert container("agent") != old_agent, "no new agent container"

    code = submit.wait(timeout=900)
    reader.join(timeout=10)
    errors = submit.stderr.read() if submit.stderr else ""
    assert code == 0, f"submit --wait exited {code}: {errors[-2000:]}"
    states = sql(f"SELECT state, count(*) FROM trials WHERE sweep_id = '{sweep_id}' GROUP BY state")
    assert states == [["completed", "6"]], f"trials: {states}"
    resumed = sql(f"SELECT trial_id, resume_step FROM trial_journal WHERE sweep_id = '{sweep_id}' "
                  f"AND kind = 'trial.started' AND resume_step > 0")
    assert resumed, "no trial resumed from a checkpoint after the agent was stopped"
    print(f"image-test: sweep completed; resumed from checkpoints: {resumed}")

    port = compose("port", "reporter", "8265").strip().rsplit(":", 1)[1]
    token = (ROOT / "deploy/compose/secrets/dashboard-token").read_text().strip()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/sweeps/{sweep_id}",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        page = response.read().decode()
    assert response.status == 200 and "deepseek-small" in page, "the dashboard's sweep page lacks the sweep"
    print("image-test: the dashboard serves the sweep page")
    check_healthy(LONG_RUNNING)
    check_control_containers()
    print(f"image-test: passed in {time.monotonic() - started:.0f} s")


def main() -> int:
    try:
        run()
        return 0
    except AssertionError as e:
        print(f"image-test: FAILED: {e}", file=sys.stderr)
        subprocess.run([*COMPOSE, "ps", "-a"], cwd=ROOT)
        subprocess.run([*COMPOSE, "logs", "--tail", "30"], cwd=ROOT)
        return 1
    finally:
        subprocess.run([*COMPOSE, "--profile", "cli", "down", "--volumes", "--remove-orphans", "--timeout", "10"],
                       cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
