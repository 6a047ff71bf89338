"""A container trial's exit code is the trial's unless the runtime says its process never started; then a probe
container tells a broken runtime (node evidence, failure ``agent``) from a request it refuses (``refused``) (issue 39).
The runtime is a stand-in script: it answers the probe as a healthy or a broken one would."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from spotsweep.services.agent.container import Exited, Runtime
from spotsweep.services.agent.health import node_evidence
from spotsweep.services.agent.launch import Launch
from spotsweep.services.agent.supervise import Outcome
from spotsweep.services.agent.verdict import runtime_broken, verdict
from spotsweep.services.planner.outbox import trial_message
from spotsweep.shared.messages import TrialFinished
from spotsweep.shared.spec import load_spec

from tests.services.agent.conftest import Kit

SPEC = "name: s\ncommand: python3 t.py\nmetric: {name: loss}\nimage: img:1\n"
PRINTED = "docker: Error response from daemon: OCI runtime create failed: nvidia-container-cli: initialization error"


def runtime(tmp_path: Path, probe_rc: int) -> Runtime:
    """A runtime whose ``run`` (the probe) exits ``probe_rc``; 125 with the runtime's own words on stderr."""
    fake = tmp_path / "docker"
    fake.write_text(f"#!/bin/sh\necho 'docker: Error response from daemon: failed to create shim task: OCI runtime "
                    f"create failed: nvidia-container-cli: driver rpc error' >&2\nexit {probe_rc}\n")
    fake.chmod(0o755)
    return Runtime(str(fake), None, str(tmp_path))


def judged(tmp_path: Path, rc: int, exited: Exited, probe_rc: int = 127) -> tuple[str, str | None, str | None]:
    msg = trial_message({"sweep_id": "s", "trial_id": "s.0", "attempt": 1, "trial_name": "t", "idx": 0, "params": {}},
                        load_spec(SPEC))
    with tempfile.TemporaryFile() as err:
        err.write(f"Traceback\n{PRINTED}\n".encode())
        err.flush()
        return verdict(Outcome(), rc, err, msg, Launch({}, tmp_path, image=("img:1", "sha256:ab")),
                       runtime(tmp_path, probe_rc), exited)


def evidence(result: tuple[str, str | None, str | None]) -> str | None:
    final = TrialFinished(sweep_id="s", trial_id="s.0", attempt=1, outcome=result[0], failure=result[1],  # type: ignore[arg-type]
                          error=result[2])
    return node_evidence(final, lambda: None)


def test_a_container_that_ran_and_exited_125_is_the_trials_exit(tmp_path: Path) -> None:
    result = judged(tmp_path, 125, Exited(started=True), probe_rc=125)  # even on a runtime that is broken now
    assert result[:2] == ("failed", "exit") and PRINTED in (result[2] or "") and evidence(result) is None


def test_a_container_the_runtime_would_not_start_while_a_probe_starts_is_refused(tmp_path: Path) -> None:
    result = judged(tmp_path, 125, Exited(started=False), probe_rc=127)
    assert result[1] == "refused" and "a probe container starts here" in (result[2] or "") and evidence(result) is None


def test_a_runtime_that_cannot_start_a_probe_container_is_the_nodes(tmp_path: Path) -> None:
    result = judged(tmp_path, 125, Exited(started=False), probe_rc=125)
    assert result[1] == "agent"
    assert (evidence(result) or "").startswith("the container runtime cannot start containers here: a probe container "
                                               "failed to start (exit 125): docker: Error response from daemon: ")


@pytest.mark.parametrize(("rc", "failure"), [(126, "refused"), (127, "refused"), (1, "exit"), (137, "killed")])
def test_other_exit_codes_of_a_container_that_ran_keep_their_meaning(tmp_path: Path, rc: int, failure: str) -> None:
    assert judged(tmp_path, rc, Exited(started=True))[1] == failure


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/docker").exists(), reason="needs docker")
def test_the_real_runtime_records_whether_a_container_started(tmp_path: Path) -> None:
    """docker's own StartedAt: a command exiting 125 started; --cpus 0.001 (runc refuses it) never did."""
    docker = Runtime("/usr/bin/docker", None, str(tmp_path))
    image = "spotsweep-worker:cpu"
    if docker._run("image", "inspect", image).returncode != 0:  # noqa: SLF001
        pytest.skip(f"no {image} image (make images)")
    name = f"spotsweep-test-{os.getpid()}"
    ran = docker._run("run", "--name", name, "--entrypoint", "sh", image, "-c", "exit 125")  # noqa: SLF001
    assert ran.returncode == 125 and docker.finish(name) == Exited(oom=False, started=True)
    refused = docker._run("run", "--name", name, "--cpus", "0.001", "--entrypoint", "true", image)  # noqa: SLF001
    assert refused.returncode == 125 and docker.finish(name) == Exited(oom=False, started=False)
    image_id = docker.image_id(image)
    assert runtime_broken(docker, image_id, None) is None  # this node's docker starts the probe container


def test_a_command_too_long_to_start_is_the_specs_not_the_nodes(kit: Kit) -> None:
    """An argument over the kernel's 128 KiB per-argument limit (E2BIG) is a refusal: no submitter trips a node."""
    msg = kit.message("pass").model_copy(update={"argv": ["python3", "-c", "pass", "x" * 200_000]})
    final, _ = kit.run(msg)
    assert (final.outcome, final.failure) == ("failed", "refused") and "Argument list too long" in final.error
    assert node_evidence(final, lambda: "a node the agent sees as broken") is None
