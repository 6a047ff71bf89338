"""Flags, errors and the documentation table, all made from the settings models.

A process's own knobs (the fields its model adds to :class:`Settings`) are
its flags: :func:`add_flags` declares them with no default of their own, so
a flag the user did not give leaves the variable or the model's default in
charge, and :func:`load` validates both in one place. A bad value is a
:class:`PermanentError` that names the flag or the variable it came from
(the CLI prints it and exits 2). :func:`table` renders every knob for
docs/architecture.md; a test checks the doc against it so the two cannot drift.
"""

from __future__ import annotations

import argparse
import typing
from typing import Any

from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo

from spotsweep.shared.errors import PermanentError
from spotsweep.shared.secret_files import is_secret
from spotsweep.shared.settings import PROCESSES, Settings

ENV_PREFIX = "SPOTSWEEP_"


def own_fields(model: type[Settings]) -> dict[str, FieldInfo]:
    """The knobs ``model`` adds to the shared :class:`Settings`: its flags."""
    return {name: f for name, f in model.model_fields.items() if name not in Settings.model_fields}


def _extra(field: FieldInfo) -> dict[str, Any]:
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def flag_of(name: str, field: FieldInfo) -> str:
    return str(_extra(field).get("flag") or "--" + name.replace("_", "-"))


def env_of(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _choices(field: FieldInfo) -> tuple[Any, ...] | None:
    return typing.get_args(field.annotation) if typing.get_origin(field.annotation) is typing.Literal else None


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def add_flags(parser: argparse.ArgumentParser, model: type[Settings]) -> None:
    """Declare ``model``'s own knobs on ``parser`` (values are checked by :func:`load`)."""
    for name, field in own_fields(model).items():
        if is_secret(field):  # never a flag: a command line is visible to every user of the node
            continue
        choices = _choices(field)
        shown = "" if field.default is None else f"default {_shown(field.default)}; "  # None: the description says
        helptext = f"{field.description} ({shown}env {env_of(name)})"
        if field.annotation is bool:  # a switch: --name / --no-name
            parser.add_argument(flag_of(name, field), dest=name, default=argparse.SUPPRESS,
                                action=argparse.BooleanOptionalAction, help=helptext)
            continue
        parser.add_argument(flag_of(name, field), dest=name, default=argparse.SUPPRESS, choices=choices,
                            metavar=None if choices else name.upper(), help=helptext)


def load(model: type[Settings], args: argparse.Namespace | None = None) -> Settings:
    """``model`` from the flags in ``args`` over the environment; a bad value names its source."""
    given = {name: getattr(args, name) for name in own_fields(model) if args is not None and hasattr(args, name)}
    try:
        return model(**given)
    except ValidationError as e:
        first = e.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else ""
        field = model.model_fields.get(name)
        if field is None:
            raise PermanentError(f"{ENV_PREFIX}*: {first['msg']}") from e
        source = flag_of(name, field) if name in given else env_of(name)
        secret = SecretStr in typing.get_args(field.annotation) or field.annotation is SecretStr
        value = "***" if secret else repr(first.get("input"))
        raise PermanentError(f"{source}={value}: {first['msg']}") from e


def table() -> str:
    """Every knob as a Markdown table: variable, flag, default, processes, meaning."""
    rows = ["| Variable | Flag | Default | Read by | What |", "|---|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = _shown(field.default)
        if isinstance(field.default, SecretStr):
            default = f"`{field.default.get_secret_value()}`"
        elif name == "home":  # not this machine's home folder
            default = "`~/.spotsweep`"
        read_by = _extra(field).get("read_by", "every process")
        rows.append(f"| `{env_of(name)}` | | {default} | {read_by} | {field.description} |")
    seen: dict[str, list[str]] = {}
    for process, model in PROCESSES.items():
        for name in own_fields(model):
            seen.setdefault(name, []).append(process)
    for name, processes in seen.items():
        model = PROCESSES[processes[0]]
        field = model.model_fields[name]
        choices = _choices(field)
        what = f"{field.description}{' (' + ', '.join(choices) + ')' if choices else ''}"
        flag = " " if is_secret(field) else f" `{flag_of(name, field)}` "
        rows.append(f"| `{env_of(name)}` |{flag}| {_shown(field.default)} | "
                    f"{', '.join(processes)} | {what} |")
    return "\n".join(rows) + "\n"
