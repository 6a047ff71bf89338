"""The container runtime's side that needs no daemon: what the spec may say (image, network, resources.shm), the
argv an agent runs a trial with, and what the runtime's own exit codes mean. tests/integration/test_containers.py runs
trials in real Docker and Podman containers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spotsweep.services.agent.container import Mounts, Request, Runtime, alive, hold, image_for
from spotsweep.services.planner.outbox import trial_message
from spotsweep.shared.errors import PermanentError, SpecError
from spotsweep.shared.spec import load_spec

SPEC = "name: s\ncommand: python3 t.py\nmetric: {name: loss}\n"
DOCKER = Runtime("/usr/bin/docker", "default:1", "/work")


def argv(runtime: Runtime = DOCKER, **request: object) -> list[str]:
    env = {b"SPOTSWEEP_METRICS": b"/w/r/metrics.jsonl", b"PATH": b"/host/bin", b"HOME": b"/root", b"API_KEY": b"k"}
    mounts = Mounts.of(Path("/w/r"), Path("/w/r/run"), [])
    return runtime.command("spotsweep-abc", Request(**{"image": "img:2", **request}), ["python3", "t.py"],  # type: ignore[arg-type]
                           Path("/w/r/run"), env, mounts)


def test_the_spec_names_an_image_its_network_and_shm_and_the_field_of_a_bad_one() -> None:
    spec = load_spec(SPEC + "image: registry.example.com/train:2026-12\nnetwork: host\nresources: {shm: 8Gi}\n")
    assert (spec.image, spec.network, spec.resources.shm) == ("registry.example.com/train:2026-12", "host", 8 * 2**30)
    for bad, field in (("image: 'two words'", "image"), ("network: wide", "network"), ("resources: {shm: lots}", "shm")):
        with pytest.raises(SpecError, match=field):
            load_spec(SPEC + bad + "\n")
    with pytest.raises(SpecError, match="setup.*install the packages in the image"):
        load_spec(SPEC + "image: img:1\nsetup: {pip: requirements.txt}\n")


def test_a_trial_message_carries_the_image_network_and_shm() -> None:
    spec = load_spec(SPEC + "image: img:3\nnetwork: none\nresources: {shm: 1Gi, gpus: 0}\n")
    row = {"sweep_id": "s", "trial_id": "s.0", "attempt": 1, "trial_name": "t", "idx": 0, "params": {}}
    msg = trial_message(row, spec)
    assert (msg.image, msg.network, msg.shm) == ("img:3", "none", 2**30)


def test_the_trial_runs_in_its_image_with_its_limits_its_files_and_its_variables_by_name_only() -> None:
    args = argv(cpus=2.5, memory=256 * 2**20, shm=2**30, user=(1001, 1002), network="none")
    assert args[:2] == ["/usr/bin/docker", "run"] and args[-2:] == ["img:2", "t.py"]
    flags = list(zip(args, args[1:]))
    for pair in (("--cpus", "2.5"), ("--memory", str(256 * 2**20)), ("--memory-swap", str(256 * 2**20)),
                 ("--shm-size", str(2**30)), ("--user", "1001:1002"), ("--network", "none"), ("--workdir", "/w/r/run"),
                 ("--volume", "/w/r:/w/r"), ("--env", "SPOTSWEEP_METRICS"), ("--env", "API_KEY"), ("--env", "HOME=/tmp")):
        assert pair in flags, pair
    assert "--read-only" in args and "--init" in args
    assert not any(a.startswith("SPOTSWEEP_METRICS=") or a == "PATH" for a in args)  # values never in the argv
    assert ("--env", "PATH") not in flags and ("--env", "HOME") not in flags  # the image's own


def test_inputs_are_mounted_read_only_at_the_paths_their_links_name(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "v1"
    cache.mkdir(parents=True)
    run = tmp_path / "run"
    run.mkdir()
    (run / "data").symlink_to(cache)
    mounts = Mounts.of(tmp_path, run, [run / "data"])
    assert mounts.paths == ((str(tmp_path), False), (str(cache), True))


def test_gpus_go_through_dockers_gpus_flag_or_podmans_cdi_devices() -> None:
    assert ("--gpus", '"device=2,3"') in list(zip(argv(gpus="2,3"), argv(gpus="2,3")[1:]))
    podman = argv(Runtime("/usr/bin/podman", "d", "/w"), gpus="2,3")
    assert [b for a, b in zip(podman, podman[1:]) if a == "--device"] == ["nvidia.com/gpu=2", "nvidia.com/gpu=3"]
    assert "--gpus" not in argv()


def test_the_runtimes_own_exit_codes_are_the_specs_and_125_is_left_to_the_probe() -> None:
    """126/127: the command cannot run in the image; 125 may be the trial's own exit (verdict.py's probe decides)."""
    assert [Runtime.failure(rc) for rc in (125, 126, 127, 1, 137, None)] == [None, "refused", "refused", None, None,
                                                                            None]


def test_the_specs_command_overrides_the_images_entrypoint_and_healthcheck_and_a_root_trial_runs_as_the_agent() -> None:
    args = argv()
    flags = list(zip(args, args[1:]))
    assert ("--entrypoint", "python3") in flags and "--no-healthcheck" in args
    assert ("--user", f"{os.getuid()}:{os.getgid()}") in flags  # whatever the image's USER
    assert ("--label", "io.spotsweep.instance=test") in flags


def test_a_spec_without_image_on_an_agent_without_default_image_is_refused_naming_both() -> None:
    spec = load_spec(SPEC)
    row = {"sweep_id": "s", "trial_id": "s.0", "attempt": 1, "trial_name": "t", "idx": 0, "params": {}}
    with pytest.raises(PermanentError, match="image.*--default-image"):
        image_for(trial_message(row, spec), Runtime("/usr/bin/docker", None, "/w"))


def test_a_container_is_removed_only_when_its_owning_agent_is_gone(tmp_path: Path) -> None:
    hold(tmp_path, "live")
    assert alive(tmp_path, "live")
    dead = tmp_path / "agents" / "dead.lock"
    dead.touch()  # a lock file no process holds: its agent died
    assert not alive(tmp_path, "dead") and not dead.exists() and not alive(tmp_path, "never")
    held = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
                             "fcntl.flock(f, fcntl.LOCK_EX); print(flush=True); time.sleep(60)", str(tmp_path / "agents" / "other.lock")],
                            stdout=subprocess.PIPE)
    try:
        held.stdout.readline()  # type: ignore[union-attr]
        assert alive(tmp_path, "other")  # another live agent's: never removed
    finally:
        held.kill()
        held.wait()
    assert not alive(tmp_path, "other")


def test_a_sigkill_without_oom_evidence_is_killed_not_oom() -> None:
    from spotsweep.services.agent.supervise import Outcome
    from spotsweep.services.agent.verdict import classify
    spec = load_spec(SPEC + "resources: {memory: 1Gi}\n")
    row = {"sweep_id": "s", "trial_id": "s.0", "attempt": 1, "trial_name": "t", "idx": 0, "params": {}}
    msg = trial_message(row, spec)
    result, failure, error = classify(Outcome(), 137, lambda: "", msg, over_memory=False, in_container=True)
    assert (result, failure) == ("failed", "killed") and "killed by signal 9, not by the agent" in (error or "")
    assert classify(Outcome(), 137, lambda: "", msg, over_memory=True, in_container=True)[1] == "oom"  # OOMKilled
    assert classify(Outcome(), -9, lambda: "", msg)[1] == "killed"
