"""What a platform engineer relies on in every rendered overlay: probes, resources and
non-root control-plane pods, one planner, agents pinned to each cloud's spot nodes with a
grace period that covers their checkpoint, the cloud's preemption notice, KEDA scaling
to zero on the class's queue, and credentials only from Secrets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from manifests import OVERLAYS, ROOT, agents, flags, named, of_kind, parse_cli, render, spotsweep_workloads, workloads

from spotsweep.shared.quantity import cpu_cores, memory_bytes
from spotsweep.shared.secret_files import file_variable
from spotsweep.shared.settings import PROCESSES, Settings
from spotsweep.shared.settings_cli import load

CONTROL = ("planner", "collector", "reporter")
AGENT_SHARE = (0.5, 2**30)  # cores and bytes an agent pod requests for the agent itself (docs/deploy.md)
SPOT = {  # overlay -> (how its agents are pinned to spot nodes, the toleration of the cloud's spot taint, notice)
    "gke-spot": ({"cloud.google.com/gke-spot": "true"}, "cloud.google.com/gke-spot", "gcp"),
    "eks-spot": ({"eks.amazonaws.com/capacityType": "SPOT", "karpenter.sh/capacity-type": "spot"}, None, "aws"),
    "aks-spot": ({"kubernetes.azure.com/scalesetpriority": "spot"}, "kubernetes.azure.com/scalesetpriority", "azure"),
}
# What each cloud leaves a preempted pod, seconds: GKE's graceful node shutdown gives
# ordinary pods the first 15 s of the 30 s notice; EC2 warns 2 minutes ahead; Azure's
# Preempt event comes at least 30 s ahead. The pod's grace period must fit inside.
CLOUD_WINDOW = {"gke-spot": 15, "eks-spot": 120, "aks-spot": 30}


def agent_args(overlay: str) -> list[tuple[dict, list[str]]]:
    out = []
    for sj in agents(render(overlay)):
        spec = sj["spec"]["jobTargetRef"]["template"]["spec"]
        (container,) = spec["containers"]
        out.append((sj, container["args"]))
    return out


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_control_plane_runs_as_non_root_with_probes_and_resources(overlay: str) -> None:
    objects = render(overlay)
    for name in CONTROL:
        deployment = named(objects, "Deployment", name)
        spec = deployment["spec"]["template"]["spec"]
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] >= 1000
        assert spec["automountServiceAccountToken"] is False
        (c,) = spec["containers"]
        assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}}
        port = "http" if name == "reporter" else "metrics"
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
        assert {p["name"]: p["containerPort"] for p in c["ports"]}[port] == (8265 if name == "reporter" else 9100)
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and "memory" in c["resources"]["limits"]
        service = named(objects, "Service", name)
        assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    config = named(objects, "ConfigMap", "spotsweep-config")["data"]
    assert config["SPOTSWEEP_METRICS_PORT"] == "9100"  # what the probes above ask for


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_one_planner_replaced_never_doubled(overlay: str) -> None:
    planner = named(render(overlay), "Deployment", "planner")
    assert planner["spec"]["replicas"] == 1 and planner["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_agent_has_probes_resources_and_only_the_capabilities_trial_users_need(overlay: str) -> None:
    for sj, args in agent_args(overlay):
        spec = sj["spec"]["jobTargetRef"]["template"]["spec"]
        (c,) = spec["containers"]
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert {"cpu", "memory"} <= set(c["resources"]["requests"])
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert set(c["securityContext"]["capabilities"]["add"]) <= {"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"}
        f = flags(args)
        # root only to start trials as unprivileged users, one per slot (docs/security.md)
        assert spec["securityContext"]["runAsUser"] == 0 and f["--trial-user"]
        assert len(f["--trial-user"].split(",")) == int(f["--slots"])
        secret_volume = next(v for v in spec["volumes"] if "secret" in v)
        assert secret_volume["secret"]["defaultMode"] == 0o400  # root's alone: trials cannot read it


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_an_agent_pods_requests_are_what_it_offers_its_trials_and_its_own_share(overlay: str) -> None:
    """The scheduler reserves what the agent promises its slots (--cpus, --memory, which it never overcommits),
    plus AGENT_SHARE for the agent itself, and the memory limit leaves the trials all of theirs."""
    for sj, args in agent_args(overlay):
        f = flags(args)
        (c,) = sj["spec"]["jobTargetRef"]["template"]["spec"]["containers"]
        requests, limits = c["resources"]["requests"], c["resources"]["limits"]
        assert cpu_cores(requests["cpu"]) == cpu_cores(f["--cpus"]) + AGENT_SHARE[0], sj["metadata"]["name"]
        assert memory_bytes(requests["memory"]) == memory_bytes(f["--memory"]) + AGENT_SHARE[1], sj["metadata"]["name"]
        assert memory_bytes(limits["memory"]) >= memory_bytes(requests["memory"])


@pytest.mark.parametrize("overlay", sorted(SPOT))
def test_gpu_agents_are_pinned_to_the_clouds_spot_nodes(overlay: str) -> None:
    labels, taint, _ = SPOT[overlay]
    (sj, args), = agent_args(overlay)
    spec = sj["spec"]["jobTargetRef"]["template"]["spec"]
    c = spec["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1 == c["resources"]["requests"]["nvidia.com/gpu"]
    assert int(flags(args)["--gpus-per-slot"]) * int(flags(args)["--slots"]) == 1
    if len(labels) == 1:
        assert spec["nodeSelector"].items() >= labels.items()
    else:  # EKS: a managed node group's Spot nodes or Karpenter's, either one (OR-ed terms)
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        pinned = {e["key"]: e["values"] for t in terms for e in t["matchExpressions"] if e["operator"] == "In"}
        assert pinned == {k: [v] for k, v in labels.items()} and len(terms) == len(labels)
    tolerated = {t["key"] for t in spec["tolerations"]}
    assert "nvidia.com/gpu" in tolerated
    if taint:
        assert taint in tolerated
    annotations = sj["spec"]["jobTargetRef"]["template"]["metadata"]["annotations"]
    assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"  # a busy node is never scaled away
    assert annotations["karpenter.sh/do-not-disrupt"] == "true"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_an_agent_gets_its_grace_and_its_upload_before_the_kubelet_kills_it(overlay: str) -> None:
    for sj, args in agent_args(overlay):
        f = flags(args)
        period = sj["spec"]["jobTargetRef"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert period > float(f["--grace"]) + float(f["--after-grace"]), sj["metadata"]["name"]
        if overlay in CLOUD_WINDOW:  # and inside what the cloud leaves, the notice's poll included
            poll = float(f.get("--notice-interval", 5))
            assert float(f["--grace"]) + float(f["--after-grace"]) + poll <= CLOUD_WINDOW[overlay]
            assert period <= CLOUD_WINDOW[overlay]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_agents_watch_their_clouds_preemption_notice(overlay: str) -> None:
    wanted = SPOT[overlay][2] if overlay in SPOT else "signal"
    for _, args in agent_args(overlay):
        assert flags(args)["--preemption-notice"] == wanted


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_keda_starts_agents_per_ready_trial_of_their_class_and_scales_to_zero(overlay: str) -> None:
    objects = render(overlay)
    auth = named(objects, "TriggerAuthentication", "spotsweep-rabbitmq")
    assert {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]} == {
        "username": ("spotsweep-keda", "username"), "password": ("spotsweep-keda", "password")}
    found = agents(objects)
    assert found
    for sj, args in agent_args(overlay):
        f = flags(args)
        (trigger,) = sj["spec"]["triggers"]
        meta = trigger["metadata"]
        assert trigger["type"] == "rabbitmq" and trigger["authenticationRef"] == {"name": "spotsweep-rabbitmq"}
        assert meta["queueName"] == f"spotsweep.trials.{f['--class']}"
        assert meta["mode"] == "QueueLength" and meta["protocol"] == "http" and meta["excludeUnacknowledged"] == "true"
        assert float(meta["value"]) == int(f["--slots"])  # one agent per slots' worth of ready trials
        assert sj["metadata"]["labels"]["spotsweep.io/class"] == f["--class"]
        assert sj["spec"]["minReplicaCount"] == 0 and sj["spec"]["maxReplicaCount"] >= 1
        assert sj["spec"]["scalingStrategy"] == {"strategy": "accurate"}
        assert sj["spec"]["rollout"] == {"strategy": "gradual"}  # an update never deletes running agents
        assert float(f["--exit-when-idle"]) > 0  # the agent side of scaling down: it leaves when idle
        assert sj["spec"]["jobTargetRef"]["template"]["spec"]["restartPolicy"] == "Never"
    assert len({sj["metadata"]["labels"]["spotsweep.io/class"] for sj in found}) == len(found)  # one workload per class


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_credentials_come_only_from_secret_volumes_and_secret_refs(overlay: str) -> None:
    objects = render(overlay)
    for o, spec, c in spotsweep_workloads(objects):
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounted = {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}
        for env in c.get("env", []):
            name = env["name"]
            if name.endswith("_FILE"):
                folder = os.path.dirname(env["value"])
                assert "secret" in mounted[folder], f"{o['metadata']['name']}: {name} is not on a Secret volume"
                key = os.path.basename(env["value"])
                assert not mounted[folder]["secret"].get("items") or key in {i["key"] for i in mounted[folder]["secret"]["items"]}
            else:
                assert "value" not in env or not any(w in name for w in ("PASSWORD", "SECRET", "TOKEN", "_KEY", "_URL")), name
        for source in c.get("envFrom", []):
            assert "configMapRef" in source or "secretRef" in source
    config = named(objects, "ConfigMap", "spotsweep-config")["data"]
    assert not [k for k in config if any(w in k for w in ("PASSWORD", "SECRET", "TOKEN", "_KEY", "AMQP_URL", "DATABASE_URL"))]
    for o, spec in workloads(objects):  # the local overlay's backing services take theirs from secretKeyRef
        for env in (e for c in spec["containers"] for e in c.get("env", []) if not e["name"].endswith("_FILE")):
            if any(w in env["name"] for w in ("PASS", "SECRET", "ROOT_USER")):
                assert "secretKeyRef" in env.get("valueFrom", {}), f"{o['metadata']['name']}: {env['name']}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_spotsweep_command_and_environment_is_accepted_by_spotsweep(
        overlay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each container's args through the real parser and its environment (the ConfigMap's
    and its own, *_FILE pointing at files here) through the settings model it starts."""
    objects = render(overlay)
    config = named(objects, "ConfigMap", "spotsweep-config")["data"]
    for key in [k for k in os.environ if k.startswith("SPOTSWEEP_")]:
        monkeypatch.delenv(key)
    for o, _, c in spotsweep_workloads(objects):
        args = parse_cli(c["args"])
        model = PROCESSES.get(args.cmd, Settings)
        secrets = {file_variable(n) for n in model.model_fields}
        env = dict(config)
        for e in c.get("env", []):
            if e["name"].endswith("_FILE"):
                assert e["name"] in secrets, f"{o['metadata']['name']}: {e['name']} names no secret setting"
                path = tmp_path / e["name"]
                path.write_text("amqp://u:p@h:5672/%2F" if "URL" in e["name"] else "value")
                env[e["name"]] = str(path)
            else:
                env[e["name"]] = e["value"]
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            load(model, args)


def test_local_overlay_serves_the_example_class_and_the_brokers_settings_match_the_projects() -> None:
    objects = render("local")
    (sj,) = agents(objects)
    assert flags(sj["spec"]["jobTargetRef"]["template"]["spec"]["containers"][0]["args"])["--class"] == "cpu"
    assert "nvidia.com/gpu" not in str(sj)
    (conf,) = [o for o in of_kind(objects, "ConfigMap") if o["metadata"]["name"].startswith("rabbitmq-conf")]

    def settings(text: str) -> dict[str, str]:
        lines = [line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")]
        return {k.strip(): v.strip() for k, v in lines}

    assert settings(conf["data"]["rabbitmq.conf"]) == settings((ROOT / "deploy" / "rabbitmq.conf").read_text())
