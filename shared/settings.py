"""Settings: one pydantic-settings model per process, from flags and ``SPOTSWEEP_*``.

:class:`Settings` holds what every process reads (the broker, the database,
the artifact store); each process's model adds its own knobs, and those are
also its command-line flags (:mod:`spotsweep.shared.settings_cli` makes them
from the fields, so a knob's default, its flag, its variable and its line in
docs/architecture.md's table all come from the one field here). A flag wins
over its variable. Secrets are ``SecretStr`` so they never print, and are
never flags (a command line is visible to every user of the node); URLs are
logged only through :func:`redact_url`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from spotsweep.shared.quantity import cpu_cores, memory_bytes
from spotsweep.shared.secret_files import SecretFiles
from spotsweep.shared.redact import redact as redact_url  # noqa: F401 - URLs are logged only through it


def _flag(name: str) -> dict[str, Any]:
    """A field's flag when it is not ``--field-name``."""
    return {"flag": name}


class Settings(BaseSettings):
    """What every process reads: the CLI's commands use exactly this."""

    model_config = SettingsConfigDict(env_prefix="SPOTSWEEP_", extra="ignore", env_ignore_empty=True)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags, then variables, then ``SPOTSWEEP_<SECRET>_FILE`` files (:mod:`.secret_files`), then defaults."""
        return init_settings, env_settings, SecretFiles(settings_cls), dotenv_settings, file_secret_settings

    amqp_url: SecretStr = Field(default=SecretStr("amqp://guest:guest@127.0.0.1:5672/%2F"), description="RabbitMQ")
    amqp_ca_file: Path | None = Field(
        default=None, description="CA certificates that verify RabbitMQ's (amqps:// URLs); unset: the system's")
    amqp_cert_file: Path | None = Field(default=None, description="client certificate for RabbitMQ (PEM; may hold the key)")
    amqp_key_file: Path | None = Field(default=None, description="the client certificate's private key (PEM)")
    database_url: SecretStr | None = Field(
        default=None, description="PostgreSQL for results (planner, collector, readers); unset: local mode's embedded one")
    database_sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None = Field(
        default=None, description="libpq sslmode (verify-full: check the CA and the host name), added to the URL's; "
                                   "unset: the URL's, else libpq's prefer")
    database_sslrootcert: Path | None = Field(
        default=None, description="CA certificates that verify PostgreSQL's (libpq sslrootcert), added to the URL's")
    s3_endpoint: str | None = Field(default=None, description="S3/MinIO host:port or URL; unset: a local directory under home")
    s3_access_key: SecretStr | None = Field(default=None, description="S3 access key")
    s3_secret_key: SecretStr | None = Field(default=None, description="S3 secret key")
    s3_bucket: str = Field(default="spotsweep", description="S3 bucket of checkpoints and logs (created when missing)")
    s3_secure: bool | None = Field(default=None, description="TLS to S3; default: from the endpoint's scheme")
    s3_region: str | None = Field(default=None, description="S3 region")
    s3_ca_file: Path | None = Field(default=None, description="CA certificates that verify S3's over HTTPS; unset: certifi's")
    home: Path = Field(default=Path.home() / ".spotsweep", description="local mode: the embedded database and artifacts")
    heartbeat: int = Field(default=15, ge=1, description="AMQP heartbeat, seconds: a dead agent is noticed within about twice this")
    log_upload_seconds: float = Field(  # read where trials run: the agent, and local mode's
        default=15.0, gt=0, description="a running trial's logs are uploaded this often (spotsweep logs lags at most this)",
        json_schema_extra={"read_by": "agent, run"})
    workdir_limit_mib: float = Field(  # read by `spotsweep submit`, which packs a spec's workdir, and by agents, which unpack it
        default=100.0, gt=0, description="the most a sweep's workdir may hold (its files, before compression), MiB; "
        "agents refuse a code archive whose files come to more", json_schema_extra={"read_by": "submit, agent"})


class _Observed(Settings):
    """The ``--metrics-port`` server of a long-running process (shared/health.py)."""

    metrics_port: int | None = Field(
        default=None, ge=1, le=65535, description="serve /metrics (Prometheus), /healthz and /readyz on this port; "
                                                  "unset: no such server")
    # Every interface by default: the kubelet's probes and Prometheus reach a pod at its own IP, never its
    # loopback; the server shows counts and probe results only, never a secret.
    metrics_host: str = Field(default="0.0.0.0", description="address the --metrics-port server listens on "  # noqa: S104
                                                                "(0.0.0.0: every interface, as probes of a pod need)")


class _Service(_Observed):
    """What the planner, the collector and the agent share: how long they wait for their dependencies at start."""

    startup_timeout: float = Field(
        default=60.0, gt=0, description="seconds a service waits at start for RabbitMQ (and PostgreSQL) to answer "
                                        "before it exits 69 naming the setting; a refused login exits at once")


class _Launching(Settings):
    """The knobs of launching trials, shared by the planner and local mode."""

    # Few enough that sweeps of equal priority take turns on the agents, enough
    # that agents never wait on the planner between two trials.
    queue_window: int = Field(
        default=32, ge=1, description="trials of one sweep waiting in the queue at once (fair turns between sweeps)")


class PlannerSettings(_Launching, _Service):
    """``spotsweep planner``; its policy knobs are docs/security.md's."""

    submitters: str | None = Field(
        default=None, description="comma-separated broker users whose sweep commands the planner takes (by their "
                                  "validated AMQP user_id); unset: anyone who may post to spotsweep.sweeps")
    allowed_commands: str | None = Field(
        default=None, description="comma-separated globs a spec's command must match (e.g. 'python train.py*,spotsweep "
                                  "train *'); unset: any command")


class LocalSettings(_Launching):
    """``spotsweep run``: planner, collector and agent in one process; the planner's launching knobs apply
    (not its policy: local mode runs your own commands as you)."""


class CollectorSettings(_Service):
    """``spotsweep collector``: the services' knobs only."""


class AgentSettings(_Service):
    """``spotsweep agent``."""

    slots: int | None = Field(default=None, ge=1, description="trials at once; default: one per GPU group, or 1 without GPUs")
    resource_class: str = Field(default="gpu", min_length=1, description="resource class served", json_schema_extra=_flag("--class"))
    gpus_per_slot: int = Field(default=1, ge=1, description="GPUs each trial gets")
    cpus: Annotated[float | None, BeforeValidator(cpu_cores)] = Field(
        default=None, description="cores the trials may reserve in all (resources.cpus: 8, 500m); unset: the CPUs "
                                  "the agent may run on")
    memory: Annotated[int | None, BeforeValidator(memory_bytes)] = Field(
        default=None, description="memory the trials may reserve in all (resources.memory: 64Gi, 512Mi); unset: the "
                                  "node's, or the agent's cgroup limit when lower")
    grace: float = Field(default=90.0, ge=0, description="seconds a preempted trial gets to write and upload its "
                                                          "checkpoint (an upload still going then is abandoned)")
    after_grace: float = Field(
        default=30.0, ge=0, description="seconds a drain may take past the grace (log uploads, reports, acks) before the "
                                "agent stops at once with 137")
    workdir: Path | None = Field(default=None, description="trial workspaces; default: spotsweep-agent in the temp folder")
    preemption_notice: Literal["signal", "aws", "azure", "gcp"] = Field(
        default="signal", description="drain on the cloud's preemption notice (instance metadata) ahead of SIGTERM; "
                              "signal: on SIGTERM only")
    metadata_url: str | None = Field(default=None, description="instance metadata endpoint for the notice; default: the cloud's")
    notice_interval: float = Field(default=5.0, gt=0, description="seconds between metadata polls")
    max_node_failures: int = Field(
        default=5, ge=0, description="stop taking trials after failures of this many different trials of at least 2 "
                             "sweeps blamed this node (agent errors, GPU/driver errors, a full disk; not plain exits; "
                             "0: never)")
    node_cooldown: float = Field(default=600.0, ge=0, description="seconds a node found broken takes no trials before it tries again")
    planner_user: str | None = Field(
        default=None, description="the broker user whose trials and control messages this agent runs (their validated "
                                  "AMQP user_id); unset: the agent's own broker user, as in a one-user setup")
    require_s3: bool = Field(
        default=False, description="refuse to start without SPOTSWEEP_S3_ENDPOINT (checkpoints on this node's disk cannot "
                                   "resume on another node)")
    trial_user: str | None = Field(
        default=None, description="run trials as this unprivileged user (the agent must be root); a comma-separated list "
                                  "gives trials running at once different users (docs/security.md)")
    allow_root_trials: bool = Field(
        default=False, description="an agent running as root without --trial-user runs trials as root, which can read "
                                   "every secret on the node (it warns at every start); unset, it refuses to start")
    trial_env_pass: str | None = Field(
        default=None, description="more of the agent's variables trials get: comma-separated names or globs (NAME,GLOB*); "
                                  "never the credentials")
    trial_env_deny: str | None = Field(
        default=None, description="variables trials never get, besides SPOTSWEEP_* and *_PASSWORD/_SECRET/_TOKEN/_KEY: "
                                  "comma-separated names or globs")
    pip_envs_gib: float = Field(
        default=20.0, gt=0, description="disk the setup.pip virtualenvs may fill on the node: past it the least recently "
                                        "used that no trial runs in are removed (uv's cache is not counted)")
    input_cache_size: float = Field(
        default=50.0, gt=0, description="GiB of staged spec inputs kept on the node; past it the least recently used "
                                        "versions no running trial holds are deleted")
    runtime: Literal["process", "docker", "podman"] = Field(
        default="process", description="run each trial as a process (the agent's environment) or in a container of its "
                                       "spec's image with this runtime's CLI (docs/trial-contract.md, Containers)")
    default_image: str | None = Field(
        default=None, description="the image trials without `image` run in under --runtime docker or podman; unset: "
                                  "such trials are refused (failure refused)")
    exit_when_idle: float | None = Field(
        default=None, gt=0, description="exit 0 after this many seconds with no trial running and none received "
                                        "(scale-to-zero: a busy agent never exits); unset: never")
    input_paths: str | None = Field(
        default=None, description="folders on the node a spec's inputs may link (from: /PATH), comma-separated; never "
                                  "a socket, a device, /dev, /proc, /sys or /run; unset: every node-path input is "
                                  "refused (failure refused)")
    pids_limit: int = Field(default=4096, ge=16, description="processes and threads a trial's container may hold at "
                                                             "once; a spec's limits.pids may ask fewer, never more")
    tmp_size: Annotated[int, BeforeValidator(memory_bytes)] = Field(
        default=2**30, description="size of a trial container's in-memory /tmp (1Gi, 256Mi); it counts against the "
                                   "trial's memory limit")
    allow_host_network: bool = Field(
        default=False, description="let specs say network: host (the trial shares the node's network, its loopback "
                                   "services and metadata address); unset: such trials are refused (failure refused)")
    allow_input_hosts: str | None = Field(
        default=None, description="hosts URL inputs may fetch from at loopback, private or link-local addresses "
                                  "(metadata services' too): comma-separated names, addresses or networks (CIDR); "
                                  "unset: public addresses only (docs/trial-contract.md, URL inputs)")
    max_input_bytes: Annotated[int, BeforeValidator(memory_bytes)] = Field(
        default=50 * 2**30, description="the most one URL input may download (50Gi, 512Mi; never more than "
                                        "--input-cache-size): a bigger one is cut off and refused")
    input_deadline: float = Field(default=3600.0, gt=0, description="seconds one URL input's download may take in "
                                                                    "all, redirects included, before it is refused")
    input_min_rate: float = Field(default=16.0, ge=0, description="KiB/s a URL input's server must send over every "
                                                                  "30 s of the download, else it is refused")


class DashboardSettings(_Observed):
    """``spotsweep dashboard``."""

    dashboard_host: str = Field(default="127.0.0.1", description="address to listen on (0.0.0.0: every interface)",
                                json_schema_extra=_flag("--host"))
    dashboard_port: int = Field(default=8265, ge=1, le=65535, description="port", json_schema_extra=_flag("--port"))
    dashboard_token: SecretStr | None = Field(
        default=None, description="the token the dashboard asks for (a bearer header, or its login form); required "
                                  "beyond loopback unless --insecure, enforced on loopback too when set")
    dashboard_insecure: bool = Field(
        default=False, description="serve beyond loopback without a token: anyone who reaches the port reads every "
                                   "sweep (a warning at each start)", json_schema_extra=_flag("--insecure"))


# The model of each command that has one of its own; every other command reads Settings.
PROCESSES: dict[str, type[Settings]] = {
    "agent": AgentSettings, "planner": PlannerSettings, "collector": CollectorSettings,
    "dashboard": DashboardSettings, "run": LocalSettings,
}


def default(model: type[Settings], name: str) -> Any:
    """A knob's one default (for code that needs it without reading the environment)."""
    return model.model_fields[name].default
