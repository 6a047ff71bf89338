"""docker-compose.yml without Docker: valid for the Compose Specification's own schema
(what `docker compose config` checks first), and the points a user of the stack relies
on: start order by health, the agent's torch, secrets through files, nothing in a URL."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from manifests import ROOT, SCHEMAS, compose, flags, parse_cli, urls_with_password

from spotsweep.shared.secret_files import file_variable
from spotsweep.shared.settings import PROCESSES, Settings
from spotsweep.shared.settings_cli import load

SERVICES = {"rabbitmq", "postgres", "minio", "minio-init", "planner", "collector", "reporter", "agent", "cli"}
ONE_SHOT = {"minio-init", "cli"}


def secret_file(name: str) -> Path:
    return ROOT / compose()["secrets"][name]["file"]  # pip-cert, a build secret, names ${SPOTSWEEP_PIP_CERT:-/dev/null}


def test_valid_for_the_compose_specification() -> None:
    schema = json.loads((SCHEMAS / "compose-spec.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_whole_stack_is_there() -> None:
    assert set(compose()["services"]) == SERVICES
    rabbit = compose()["services"]["rabbitmq"]
    assert "./deploy/rabbitmq.conf:/etc/rabbitmq/conf.d/90-spotsweep.conf:ro" in rabbit["volumes"]
    assert "management" in rabbit["image"]


def test_every_long_running_service_has_a_healthcheck_and_starts_after_what_it_needs_is_healthy() -> None:
    services = compose()["services"]
    for name, service in services.items():
        if name not in ONE_SHOT:
            assert service.get("healthcheck", {}).get("test"), f"{name}: no healthcheck"
        for dep, cond in service.get("depends_on", {}).items():
            wanted = "service_completed_successfully" if dep in ONE_SHOT else "service_healthy"
            assert cond == {"condition": wanted}, f"{name} -> {dep}: {cond}"
    assert set(services["planner"]["depends_on"]) >= {"rabbitmq", "postgres"}
    assert set(services["agent"]["depends_on"]) >= {"rabbitmq", "minio-init", "planner"}
    assert services["minio-init"]["depends_on"] == {"minio": {"condition": "service_healthy"}}
    for name in ("planner", "collector", "agent"):  # h2's /healthz on the metrics port the services are given
        assert services[name]["environment"]["SPOTSWEEP_METRICS_PORT"] == "9100"
        assert "127.0.0.1:9100/healthz" in services[name]["healthcheck"]["test"][-1]
    assert "127.0.0.1:8265/healthz" in services["reporter"]["healthcheck"]["test"][-1]


def test_the_agent_is_the_worker_image_with_cpu_torch_and_serves_the_example_class() -> None:
    services = compose()["services"]
    agent = services["agent"]
    assert agent["build"]["target"] == "worker" and agent["build"]["args"]["TORCH_VARIANT"] == "cpu"
    for name in ("planner", "collector", "reporter", "cli"):
        assert services[name]["build"]["target"] == "control"
    example = yaml.safe_load((ROOT / "examples" / "deepseek-small.yaml").read_text())
    assert flags(agent["command"])["--class"] == example["resources"]["class"]
    assert example["command"][:2] == ["spotsweep", "train"]  # in the worker image, on the trial users' PATH


def test_the_agent_stops_after_a_trial_had_its_grace_and_its_upload() -> None:
    agent = compose()["services"]["agent"]
    f = flags(agent["command"])
    assert int(agent["stop_grace_period"].rstrip("s")) > float(f["--grace"]) + float(f["--after-grace"])


def test_the_agent_runs_trials_as_unprivileged_users_with_only_the_capabilities_that_needs() -> None:
    agent = compose()["services"]["agent"]
    users = flags(agent["command"])["--trial-user"].split(",")
    assert len(users) == int(flags(agent["command"])["--slots"])  # one user per slot (docs/security.md)
    assert agent["user"] == "0:0" and agent["cap_drop"] == ["ALL"]
    assert set(agent["cap_add"]) == {"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"}
    # its credentials live under /root (0700 in the image): no trial user can reach them
    assert all(s["target"].startswith("/root/") for s in agent["secrets"])


def test_the_cli_submits_the_example_from_the_mounted_folder() -> None:
    cli = compose()["services"]["cli"]
    assert cli["profiles"] == ["cli"] and cli["entrypoint"] == ["spotsweep"]
    assert "./examples:/work/examples:ro" in cli["volumes"] and cli["working_dir"] == "/work"
    parse_cli(["submit", "examples/deepseek-small.yaml", "--wait"])


def test_no_password_in_the_file_credentials_only_through_secret_files() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert not urls_with_password(text)
    for name, service in compose()["services"].items():
        env = service.get("environment", {})
        mounted = {s if isinstance(s, str) else s["source"]: (s if isinstance(s, str) else s["target"])
                   for s in service.get("secrets", [])}
        targets = {t if t.startswith("/") else f"/run/secrets/{t}" for t in mounted.values()}
        for key, value in env.items():
            assert not re.search(r"PASSWORD$|SECRET_KEY$|ACCESS_KEY$|_URL$", key) or key == "SPOTSWEEP_S3_ENDPOINT", \
                f"{name}: {key} set in the clear"
            if key.endswith("_FILE") and value:
                assert value in targets, f"{name}: {key}={value} is not one of its secrets"
    for name in compose()["secrets"]:
        assert name == "pip-cert" or secret_file(name).is_file(), name


def test_the_dev_secret_files_agree_with_each_other() -> None:
    """The broker's and the database's passwords, as the servers get them and as the URLs name them."""
    rabbit = dict(re.findall(r"^(\w+) = (.*)$", secret_file("rabbitmq-credentials").read_text(), re.MULTILINE))
    assert rabbit["load_definitions"] == "/etc/rabbitmq/definitions.json" and "default_user" not in rabbit
    users = {u["name"]: u["password"] for u in json.loads(secret_file("rabbitmq-definitions").read_text())["users"]}
    for role in ("planner", "collector", "agent", "submitter"):
        amqp = urlsplit(secret_file(f"amqp-url-{role}").read_text().strip())
        assert (amqp.password, amqp.hostname) == (users[amqp.username], "rabbitmq"), role
        assert amqp.username == f"spotsweep-{role}", role
    db = urlsplit(secret_file("database-url").read_text().strip())
    postgres = compose()["services"]["postgres"]["environment"]
    assert (db.username, db.password, db.hostname) == (postgres["POSTGRES_USER"],
                                                       secret_file("postgres-password").read_text().strip(), "postgres")
    assert len(secret_file("s3-secret-key").read_text().strip()) >= 8  # MinIO refuses a shorter root password


def test_each_role_uses_its_own_broker_user() -> None:
    """Issue 28: no shared broker user, so a forged trial message needs the planner's password;
    agents take trials only from the planner's user, the planner sweeps only from the CLI's."""
    services = compose()["services"]
    amqp = {name: next((s["source"] for s in service.get("secrets", []) if isinstance(s, dict)
                        and s["target"].endswith("amqp-url")), None) for name, service in services.items()}
    assert amqp == {**{n: None for n in services}, "planner": "amqp-url-planner", "collector": "amqp-url-collector",
                    "agent": "amqp-url-agent", "cli": "amqp-url-submitter"}
    assert services["agent"]["environment"]["SPOTSWEEP_PLANNER_USER"] == "spotsweep-planner"
    assert services["planner"]["environment"]["SPOTSWEEP_SUBMITTERS"] == "spotsweep-submitter"
    assert "/etc/rabbitmq/definitions.json" in [s["target"] for s in services["rabbitmq"]["secrets"]]


def test_the_secret_files_are_readable_by_the_services_uid() -> None:
    """Compose mounts file secrets with the host file's owner and mode: a 0600 file owned by
    the user who checked it out would be unreadable to the control services (uid 10001)."""
    for name in compose()["secrets"]:
        if name != "pip-cert":
            assert secret_file(name).stat().st_mode & 0o004, f"{name}: not readable by other uids"


def test_the_dashboard_listens_beyond_loopback_only_with_a_token() -> None:
    reporter = compose()["services"]["reporter"]
    assert flags(reporter["command"])["--host"] == "0.0.0.0" and "--insecure" not in reporter["command"]
    assert reporter["environment"]["SPOTSWEEP_DASHBOARD_TOKEN_FILE"] == "/run/secrets/dashboard-token"
    assert [p.split(":")[0] for p in reporter["ports"]] == ["127.0.0.1"]


@pytest.mark.parametrize("service", ["planner", "collector", "reporter", "agent"])
def test_each_service_command_and_environment_are_accepted_by_spotsweep(
        service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command through the real parser and the settings model, with the service's
    environment (its *_FILE secrets pointing at files here): what the container would start."""
    spec = compose()["services"][service]
    args = parse_cli(spec["command"])
    for key in [k for k in os.environ if k.startswith("SPOTSWEEP_")]:
        monkeypatch.delenv(key)
    model = PROCESSES.get(args.cmd, Settings)
    secret_names = {file_variable(n): n for n in model.model_fields}
    for key, value in spec["environment"].items():
        if key == "SPOTSWEEP_DASHBOARD_TOKEN_FILE" and key not in secret_names:
            continue  # the dashboard's token setting lands with issue 28 item 5
        if key.endswith("_FILE"):
            assert key in secret_names, f"{service}: {key} names no secret setting"
            path = tmp_path / key
            path.write_text("amqp://u:p@h:5672/%2F" if "URL" in key else "value")
            value = str(path)
        monkeypatch.setenv(key, value)
    settings = load(model, args)
    assert settings.amqp_url.get_secret_value().startswith("amqp://") or service == "reporter"
    assert "--metrics-port" not in spec["command"]  # the port comes from SPOTSWEEP_METRICS_PORT, as the healthcheck's
