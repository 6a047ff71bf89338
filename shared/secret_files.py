"""``SPOTSWEEP_<SECRET>_FILE``: a secret read from a file, the Kubernetes Secret-volume convention.

Every secret setting (a ``SecretStr`` field: ``amqp_url``, ``database_url``,
``s3_access_key``, ``s3_secret_key``, and any added later) can be given as
the path of a file holding it, ``SPOTSWEEP_AMQP_URL_FILE=/run/secrets/amqp``,
so the secret is in no process's environment (a trial's, ``ps e``,
``/proc/<pid>/environ``). The file's content, without its trailing newline,
is the value. The plain variable, when also set, wins (a person overriding a
mounted secret by hand). An unreadable file is a clear error naming the
variable and the path, never its content.
"""

from __future__ import annotations

import os
import typing
from typing import Any

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from spotsweep.shared.errors import PermanentError

PREFIX = "SPOTSWEEP_"
MAX_BYTES = 64 * 1024


def is_secret(field: FieldInfo) -> bool:
    return field.annotation is SecretStr or SecretStr in typing.get_args(field.annotation)


def file_variable(name: str) -> str:
    """The variable naming the file of secret field ``name``: ``SPOTSWEEP_AMQP_URL_FILE``."""
    return f"{PREFIX}{name.upper()}_FILE"


def read_secret(variable: str, path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise PermanentError(f"{variable}={path!r}: cannot read the file: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise PermanentError(f"{variable}={path!r}: over {MAX_BYTES} bytes, not a secret value")
    try:
        return data.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise PermanentError(f"{variable}={path!r}: not UTF-8 text") from None


class SecretFiles(PydanticBaseSettingsSource):
    """A settings source: each secret field whose ``*_FILE`` variable is set, read from its file."""

    def __init__(self, settings_cls: type[BaseSettings], environ: typing.Mapping[str, str] | None = None) -> None:
        super().__init__(settings_cls)
        self._environ = os.environ if environ is None else environ

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every field at once

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, field in self.settings_cls.model_fields.items():
            variable = file_variable(name)
            path = self._environ.get(variable)
            if path and is_secret(field):
                values[name] = read_secret(variable, path)
        return values
