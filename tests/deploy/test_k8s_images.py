"""What each rendered workload will pull, and how its secrets reach it (issue 29): the
`local` overlay runs the images `make images` builds and kind loads, with no `REGISTRY/`
left (a base that renamed them first left it there: ErrImagePull on kind); every cloud
overlay sets the registry where its kustomization says it does; and no pod gets a
credential in its environment, only as a file of a Secret volume."""

from __future__ import annotations

import pytest
import yaml
from manifests import K8S, OVERLAYS, render, workloads

CLOUD = [o for o in OVERLAYS if o != "local"]


def images(overlay: str) -> dict[str, str]:
    """{workload/container: image} of every container and init container the overlay renders."""
    return {f"{o['metadata']['name']}/{c['name']}": c["image"] for o, spec in workloads(render(overlay))
            for c in spec.get("initContainers", []) + spec["containers"]}


def test_the_local_overlay_runs_the_images_make_images_builds() -> None:
    pulled = images("local")
    ours = {name: image for name, image in pulled.items() if "spotsweep-" in image}
    assert ours and not [i for i in pulled.values() if "REGISTRY" in i]
    assert set(ours.values()) == {"spotsweep-control:dev", "spotsweep-worker:cpu"}, ours
    assert {n.split("/")[0] for n, i in ours.items() if i == "spotsweep-control:dev"} >= {"planner", "collector", "reporter"}


@pytest.mark.parametrize("overlay", CLOUD)
def test_each_cloud_overlay_pulls_from_the_registry_its_kustomization_names(overlay: str) -> None:
    kustomization = yaml.safe_load((K8S / "overlays" / overlay / "kustomization.yaml").read_text())
    wanted = {i["name"]: f"{i['newName']}:{i['newTag']}" for i in kustomization["images"]}
    pulled = images(overlay)
    for name, image in pulled.items():
        base = image.rsplit(":", 1)[0].rsplit("/", 1)[-1]
        assert image == wanted[base], f"{overlay}: {name} pulls {image}, not {wanted[base]}"
    assert set(wanted.values()) <= set(pulled.values())


def test_the_base_renames_no_image() -> None:
    """Every overlay's `images:` matches the plain names only while nothing renamed them first."""
    assert "images" not in yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_secrets_reach_pods_as_files_only(overlay: str) -> None:
    for o, spec in workloads(render(overlay)):
        for c in spec.get("initContainers", []) + spec["containers"]:
            for env in c.get("env", []):
                ref = env.get("valueFrom", {})
                assert "secretKeyRef" not in ref, f"{overlay}: {o['metadata']['name']}/{c['name']} {env['name']}"
            assert not [e for e in c.get("envFrom", []) if "secretRef" in e], f"{overlay}: {o['metadata']['name']}"
        secrets = [v for v in spec.get("volumes", []) if "secret" in v]
        assert all(v["secret"].get("defaultMode", 0o644) & 0o002 == 0 for v in secrets)
