"""The container runtime's side that needs no daemon: what the spec may say (image, network, resources.shm), the
argv an agent runs a trial with, and what the runtime's own exit codes mean. tests/integration/test_containers.py runs
trials in real Docker and Podman containers."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotsweep.services.agent.container import Mounts, Request, Runtime
from spotsweep.services.planner.outbox import trial_message
from spotsweep.shared.errors import SpecError
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
    assert args[:2] == ["/usr/bin/docker", "run"] and args[-3:] == ["img:2", "python3", "t.py"]
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


def test_the_runtimes_own_exit_codes_are_the_nodes_or_the_specs() -> None:
    assert [Runtime.failure(rc) for rc in (125, 126, 127, 1, 137, None)] == ["agent", "refused", "refused", None, None,
                                                                            None]
