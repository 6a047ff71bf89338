"""A trial's environment is an allow-list (issue 19 section 1): plain values, no process."""

from __future__ import annotations

import os

from spotsweep.services.agent.trial_env import names, passes, trial_environment
from spotsweep.shared.secret_files import SecretFiles, file_variable
from spotsweep.shared.settings import AgentSettings
from spotsweep.services.agent.insecure import forget_credentials

AGENT = {
    "PATH": "/usr/bin", "HOME": "/home/agent", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "TMPDIR": "/tmp",
    "USER": "agent", "PYTHONPATH": "/src", "VIRTUAL_ENV": "/venv", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    "CUDA_HOME": "/usr/local/cuda", "NVIDIA_DRIVER_CAPABILITIES": "compute", "NCCL_DEBUG": "WARN",
    "HIP_VISIBLE_DEVICES": "0", "SPOTSWEEP_AMQP_URL": "amqp://a:pw@h/", "SPOTSWEEP_DATABASE_URL": "postgresql://a:pw@h/d",
    "SPOTSWEEP_S3_ACCESS_KEY": "AK", "SPOTSWEEP_S3_SECRET_KEY": "SK", "SPOTSWEEP_S3_ENDPOINT": "http://s3",
    "SPOTSWEEP_AMQP_URL_FILE": "/run/secrets/amqp", "AWS_SECRET_ACCESS_KEY": "aws", "GITHUB_TOKEN": "gh",
    "PGPASSWORD": "pg", "DB_PASSWORD": "x", "WANDB_API_KEY": "w", "MY_SECRET": "s", "HTTP_PROXY": "http://proxy",
    "KUBERNETES_SERVICE_HOST": "10.0.0.1", "COMPANY_LICENSE": "lic", "HF_HOME": "/hf",
    "SPOTSWEEP_HOME": "/data/spotsweep",
}
SECRETS = {"SPOTSWEEP_AMQP_URL", "SPOTSWEEP_DATABASE_URL", "SPOTSWEEP_S3_ACCESS_KEY", "SPOTSWEEP_S3_SECRET_KEY",
           "SPOTSWEEP_AMQP_URL_FILE", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "WANDB_API_KEY", "MY_SECRET"}


def _env(extra: tuple[str, ...] = (), deny: tuple[str, ...] = (), spec: dict[str, str] | None = None) -> dict[str, str]:
    agent = {k.encode(): v.encode() for k, v in AGENT.items()}
    ours = {"SPOTSWEEP_PARAMS": "{}", "SPOTSWEEP_METRICS": "/w/metrics.jsonl", "SPOTSWEEP_AGENT_TOKEN": "tok"}
    env = trial_environment(agent, spec or {}, ours, extra, deny)
    return {k.decode(): v.decode() for k, v in env.items()}


def test_a_trial_gets_what_programs_and_gpus_need_and_the_contract() -> None:
    env = _env()
    for name in ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH",
                 "CUDA_HOME", "NVIDIA_DRIVER_CAPABILITIES", "NCCL_DEBUG", "HIP_VISIBLE_DEVICES", "SPOTSWEEP_HOME"):
        assert env[name] == AGENT[name], name
    assert env["SPOTSWEEP_PARAMS"] == "{}" and env["SPOTSWEEP_AGENT_TOKEN"] == "tok"  # the contract's, a _TOKEN of ours


def test_no_credential_and_nothing_unlisted_reaches_a_trial() -> None:
    env = _env()
    assert SECRETS.isdisjoint(env), SECRETS & set(env)
    for name in ("SPOTSWEEP_S3_ENDPOINT", "HTTP_PROXY", "KUBERNETES_SERVICE_HOST", "COMPANY_LICENSE", "HF_HOME", "PGPASSWORD"):
        assert name not in env, name


def test_the_operator_passes_more_but_never_a_credential_and_denies_some() -> None:
    env = _env(extra=names("HF_HOME, HTTP_*,SPOTSWEEP_*,*_PASSWORD,WANDB_API_KEY,PG*"), deny=names("NCCL_* TZ"))
    assert env["HF_HOME"] == "/hf" and env["HTTP_PROXY"] == "http://proxy" and env["PGPASSWORD"] == "pg"
    assert SECRETS.isdisjoint(env), SECRETS & set(env)  # SPOTSWEEP_*, *_PASSWORD, *_KEY never, whatever the pass list
    assert "NCCL_DEBUG" not in env and "TZ" not in env
    assert not passes("SPOTSWEEP_S3_SECRET_KEY", extra=("*",)) and passes("ANYTHING", extra=("*",))


def test_the_spec_env_is_the_authors_and_the_contract_wins() -> None:
    env = _env(spec={"WANDB_API_KEY": "mine", "SPOTSWEEP_METRICS": "/evil", "OMP_NUM_THREADS": "4"})
    assert env["WANDB_API_KEY"] == "mine" and env["OMP_NUM_THREADS"] == "4"
    assert env["SPOTSWEEP_METRICS"] == "/w/metrics.jsonl"


def test_secret_settings_from_files_and_the_agent_forgets_its_variables(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "amqp").write_text("amqp://u:from-file@h:5672/%2F\n")
    (tmp_path / "s3").write_text("sk-from-file")
    monkeypatch.setenv(file_variable("amqp_url"), str(tmp_path / "amqp"))
    monkeypatch.setenv("SPOTSWEEP_S3_SECRET_KEY_FILE", str(tmp_path / "s3"))
    monkeypatch.setenv("SPOTSWEEP_S3_ACCESS_KEY", "ak-plain")
    settings = AgentSettings()
    assert settings.amqp_url.get_secret_value() == "amqp://u:from-file@h:5672/%2F"
    assert settings.s3_secret_key is not None and settings.s3_secret_key.get_secret_value() == "sk-from-file"
    monkeypatch.setenv("SPOTSWEEP_S3_SECRET_KEY", "sk-plain")  # the plain variable wins
    assert AgentSettings().s3_secret_key.get_secret_value() == "sk-plain"  # type: ignore[union-attr]
    env = dict(os.environ)
    gone = forget_credentials(env)
    assert {"SPOTSWEEP_AMQP_URL_FILE", "SPOTSWEEP_S3_SECRET_KEY_FILE", "SPOTSWEEP_S3_ACCESS_KEY"} <= set(gone)
    assert not set(gone) & set(env)


def test_an_unreadable_secret_file_names_the_variable_not_a_value(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from spotsweep.shared.errors import PermanentError

    with pytest.raises(PermanentError, match="SPOTSWEEP_DATABASE_URL_FILE='/nonexistent'"):
        SecretFiles(AgentSettings, {"SPOTSWEEP_DATABASE_URL_FILE": "/nonexistent"})()
