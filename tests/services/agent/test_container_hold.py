"""What holds a trial in, with no daemon (issue 39): the flags every trial container runs with, the operator's
policy a spec cannot widen (network: host, limits.pids), node-path inputs only under --input-paths and never a
socket or a device, and a GPU request bigger than a slot refused by name. tests/hostile/test_containers_hold.py
runs the same through the real services and Docker."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from spotsweep.services.agent.capacity import Capacity, Request as Ask, fit, share
from spotsweep.services.agent.container import Mounts, Policy, Request, Runtime, image_for, refused
from spotsweep.services.agent.inputs import allowed_roots, node_path
from spotsweep.services.planner.outbox import trial_message
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.inputs import Input
from spotsweep.shared.spec import load_spec

SPEC = "name: s\ncommand: python3 t.py\nmetric: {name: loss}\nimage: img:1\n"
ROW = {"sweep_id": "s", "trial_id": "s.0", "attempt": 1, "trial_name": "t", "idx": 0, "params": {}}


def argv(policy: Policy | None = None, **request: object) -> list[str]:
    runtime = Runtime("/usr/bin/docker", "default:1", "/work", policy=policy or Policy())
    return runtime.command("spotsweep-abc", Request(**{"image": "img:2", **request}), ["python3", "t.py"],  # type: ignore[arg-type]
                           Path("/w/r/run"), {}, Mounts.of(Path("/w/r"), Path("/w/r/run"), []))


def pairs(args: list[str]) -> list[tuple[str, str]]:
    return list(zip(args, args[1:]))


def test_every_container_has_no_capabilities_no_setuid_gain_a_pids_limit_and_a_bounded_tmp() -> None:
    flags = pairs(argv())
    for pair in (("--security-opt", "no-new-privileges"), ("--cap-drop", "ALL"), ("--pids-limit", "4096"),
                 ("--tmpfs", f"/tmp:rw,exec,size={2**30}")):
        assert pair in flags, pair
    assert not any(a == "--cap-add" or a == "--privileged" for a, _ in flags)
    assert ("--pids-limit", "64") in pairs(argv(pids=64))  # the spec's limits.pids, within the agent's
    assert ("--tmpfs", "/tmp:rw,exec,size=1024") in pairs(argv(Policy(tmp_bytes=1024)))


def test_a_trial_without_a_memory_request_gets_its_slots_share_as_its_limit() -> None:
    capacity = Capacity(cpus=8, memory=8 * 2**30)
    assert share(capacity, 4) == 2 * 2**30
    flags = pairs(argv(Policy(memory=share(capacity, 4))))
    assert ("--memory", str(2 * 2**30)) in flags and ("--memory-swap", str(2 * 2**30)) in flags
    assert ("--memory", "1000000") in pairs(argv(Policy(memory=2**31), memory=1_000_000))  # the request wins


def test_network_host_and_more_pids_than_the_agent_allows_are_refused_naming_the_field_and_the_flag() -> None:
    host = trial_message(ROW, load_spec(SPEC + "network: host\n"))
    assert "--allow-host-network" in (refused(host, Policy()) or "")
    assert refused(host, Policy(host_network=True)) is None
    many = trial_message(ROW, load_spec(SPEC + "limits: {pids: 100000}\n"))
    assert refused(many, Policy()) == "limits.pids: 100000 asked, this agent allows at most 4096 (--pids-limit)"
    assert refused(trial_message(ROW, load_spec(SPEC + "limits: {pids: 100}\n")), Policy()) is None
    # Refused before any image is looked up (the binary is never run).
    with pytest.raises(PermanentError, match="network: host"):
        image_for(host, Runtime("/nonexistent/docker", None, "/w"))


def test_node_path_inputs_only_under_the_operators_folders(tmp_path: Path) -> None:
    data = tmp_path / "datasets"
    (data / "corpus").mkdir(parents=True)
    (data / "to-root").symlink_to("/root")
    allowed = (str(data),)
    assert node_path(Input.model_validate({"from": str(data / "corpus"), "to": "d"}), allowed) == data / "corpus"
    with pytest.raises(PermanentError, match=r"input /root: this agent links no node paths .*--input-paths"):
        node_path(Input.model_validate({"from": "/root", "to": "d"}), ())
    with pytest.raises(PermanentError, match=r"input /root: not under this agent's --input-paths"):
        node_path(Input.model_validate({"from": "/root", "to": "d"}), allowed)
    with pytest.raises(PermanentError, match=r"to-root \(resolves to /root\): not under"):  # after the link
        node_path(Input.model_validate({"from": str(data / "to-root"), "to": "d"}), allowed)


def test_a_socket_a_device_or_a_folder_holding_them_is_never_an_input(tmp_path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "api.sock"))
    try:
        with pytest.raises(PermanentError, match="api.sock: is a socket"):
            node_path(Input.model_validate({"from": str(tmp_path / "api.sock"), "to": "d"}), (str(tmp_path),))
    finally:
        sock.close()
    for path, why in (("/run/docker.sock", "is or holds /run"), ("/var/run/docker.sock", "is or holds /run"),
                      ("/dev/null", "is or holds /dev"), ("/", "is or holds /dev"), ("/proc/self/root", "is or holds /dev"),
                      ("/proc/1/root", "/proc/1/root")):
        with pytest.raises(PermanentError, match=why):
            node_path(Input.model_validate({"from": path, "to": "d"}), ("/",))  # even where / is allowed


def test_input_paths_must_be_absolute() -> None:
    assert allowed_roots(None) == () and allowed_roots(" /mnt/a, /srv/b ") == ("/mnt/a", "/srv/b")
    with pytest.raises(PermanentError, match="--input-paths: 'data' is not an absolute path"):
        allowed_roots("/mnt/a,data")


def test_more_gpus_than_a_slot_has_is_refused_by_name_and_the_default_runs_on_a_cpu_agent() -> None:
    cpu, gpu = Capacity(cpus=4, memory=2**30), Capacity(cpus=4, memory=2**30, gpus=2)
    never = fit(Ask(gpus=100000), cpu, [])
    assert never.verdict == "never" and never.reason.startswith("resources.gpus: 100000 requested, this agent's "
                                                                "slots have 0"), never
    assert fit(Ask(gpus=1), cpu, []).verdict == "take"  # resources.gpus' default, on a CPU agent as always
    assert [fit(Ask(gpus=n), gpu, []).verdict for n in (0, 1, 2, 3)] == ["take", "take", "take", "never"]
