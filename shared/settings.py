"""Settings from the environment (``SPOTSWEEP_*``), via pydantic-settings.

Secrets are ``SecretStr`` so they never print; URLs are logged only through
:func:`redact_url`.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPOTSWEEP_", extra="ignore", env_ignore_empty=True)

    amqp_url: SecretStr = SecretStr("amqp://guest:guest@127.0.0.1:5672/%2F")
    database_url: SecretStr | None = None
    s3_endpoint: str | None = None  # host:port or URL; unset means a local directory
    s3_access_key: SecretStr | None = None
    s3_secret_key: SecretStr | None = None
    s3_bucket: str = "spotsweep"
    s3_secure: bool | None = None  # default: from the endpoint's scheme
    s3_region: str | None = None
    home: Path = Path.home() / ".spotsweep"  # local mode: embedded DB and artifacts
    heartbeat: int = 15  # AMQP heartbeat, seconds: a dead agent is noticed within ~2x this
    log_upload_seconds: float = 15.0  # agent: a running trial's logs are uploaded this often (spotsweep logs lags at most this)
    queue_window: int = 32  # planner: trials of one sweep waiting in the queue at once (fair turns between sweeps)


_KV_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|[^\s&]+)", re.I)


def redact_url(url: str) -> str:
    """Mask passwords in a URL or a libpq conninfo string; safe to log.

    ``amqp://u:pw@h/v`` -> ``amqp://u:***@h/v``; ``...?password=pw`` and
    ``host=h password=pw`` get ``password=***``.
    """
    url = _KV_PASSWORD.sub(r"\1***", url)
    if "://" not in url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
