"""Every overlay renders with `kubectl kustomize`, and every object it renders is valid:
built-in kinds against Kubernetes' own schemas (kubernetes-validate, strict: an unknown
or misspelt field is an error), KEDA's against the schemas of KEDA's CRDs (v2.20.2)."""

from __future__ import annotations

import jsonschema
import kubernetes_validate
import pytest
import yaml
from manifests import K8S, OVERLAYS, keda_schema, render, strings, urls_with_password

# The oldest Kubernetes the overlays claim (GKE, EKS and AKS all still run it) and the newest the validator ships.
VERSIONS = ("1.31.0", kubernetes_validate.utils.latest_version())
KEDA_KINDS = {"ScaledJob", "TriggerAuthentication"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_builtin_object_is_valid_kubernetes(overlay: str) -> None:
    objects = render(overlay)
    assert objects
    for obj in objects:
        if obj["apiVersion"].startswith("keda.sh/"):
            continue
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                raise AssertionError(f"{overlay}: {obj['kind']}/{obj['metadata']['name']} on {version}: "
                                     f"{'.'.join(map(str, e.path))}: {e.message}") from None


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_keda_objects_are_valid_for_kedas_crds(overlay: str) -> None:
    objects = [o for o in render(overlay) if o["apiVersion"].startswith("keda.sh/")]
    assert {o["kind"] for o in objects} == KEDA_KINDS
    for obj in objects:
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        errors = list(jsonschema.Draft7Validator(keda_schema(obj["kind"])).iter_errors(obj))
        assert not errors, [f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_agent_jobs_are_valid_kubernetes_jobs(overlay: str) -> None:
    """A ScaledJob's jobTargetRef is the JobSpec of the Jobs KEDA creates: checked as one,
    strictly, since KEDA's own schema keeps unknown fields in a pod spec."""
    for sj in (o for o in render(overlay) if o["kind"] == "ScaledJob"):
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": sj["metadata"]["name"]},
               "spec": sj["spec"]["jobTargetRef"]}
        for version in VERSIONS:
            kubernetes_validate.validate(job, version, strict=True)


def test_the_strict_schemas_refuse_a_misspelt_field() -> None:
    """The check above would catch a typo in a ScaledJob, as kubectl apply --validate=strict does."""
    sj = next(o for o in render("gke-spot") if o["kind"] == "ScaledJob")
    bad = {**sj, "spec": {**sj["spec"], "maxReplicaCont": 3}}
    assert list(jsonschema.Draft7Validator(keda_schema("ScaledJob")).iter_errors(bad))
    wrong = {**sj, "spec": {**sj["spec"], "scalingStrategy": {"strategy": "fastest"}}}
    assert list(jsonschema.Draft7Validator(keda_schema("ScaledJob")).iter_errors(wrong))


def test_the_example_secrets_are_valid_and_hold_placeholders_only() -> None:
    secrets = [o for o in yaml.safe_load_all((K8S / "secrets.example.yaml").read_text()) if o]
    names = {s["metadata"]["name"] for s in secrets}
    assert names == {"spotsweep-planner", "spotsweep-collector", "spotsweep-reporter", "spotsweep-agent", "spotsweep-keda"}
    for secret in secrets:
        kubernetes_validate.validate(secret, VERSIONS[0], strict=True)
        for key, value in secret["stringData"].items():
            secretish = key != "username" and not key.endswith("url") or urls_with_password(value)
            assert not secretish or "<" in value, f"{secret['metadata']['name']}.{key} is not a placeholder"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_overlay_renders_a_secret_or_a_password(overlay: str) -> None:
    objects = render(overlay)
    assert not [o for o in objects if o["kind"] == "Secret"]  # credentials never live in git
    leaked = [u for o in objects for s in strings(o) for u in urls_with_password(s)]
    assert not leaked
