"""The sweep spec: what a user writes to describe a sweep, and its validation.

A spec arrives as YAML or JSON text (the CLI) or as an already decoded mapping
(a message body, a row reloaded from PostgreSQL). Every way in ends in
:func:`parse_spec`, which returns a frozen :class:`SweepSpec` or raises
:class:`SpecError` with ``(field, message)`` pairs whose dotted paths are what
the user wrote, e.g. ``space.dropout.low: must be less than high (got low=0.3,
high=0.1)``: never a traceback, never pydantic's union tags in a path.

Defaults: metric mode ``min``; strategy ``grid``; max_concurrent 20; trial_name
``"{name}_{index:04d}"`` (sweep name and 0-based trial number: unique, and sorts
in trial order); repeats 1; retries.max_failures 3; resources 1 GPU of class
``gpu``; no extra env; priority 0; an empty space (one configuration).

``spec.to_json_dict()`` re-parses to an equal spec. The order of ``space``
keys is the grid order, so store the dump as ``json``/text, not ``jsonb``
(which reorders keys).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic import ValidationError, field_validator, model_validator

from spotsweep.shared.errors import SpecError
from spotsweep.shared.naming import check_template

BUILTINS = ("index", "name", "trial_name")  # fields every template may use; no parameter may take these names
GRID_CONTINUOUS = "{kind} range cannot be enumerated by strategy grid; use strategy random or list the values"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Problems(ValueError):
    """Errors found by a model validator, as (path relative to that model, message)."""

    def __init__(self, errors: list[tuple[tuple[str | int, ...], str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(m for _, m in errors))


class _Model(BaseModel):
    # strict: no "3" -> 3 or True -> 1 coercion; ints are still accepted for floats.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)


def _scalar(value: object) -> object:
    if not isinstance(value, (bool, int, float, str)):
        raise ValueError(f"must be a number, string or bool (got {value!r})")
    return value


# bool first: smart-mode unions keep the input's exact type (True stays bool, 1 stays int).
ChoiceValue = Annotated[Union[StrictBool, StrictInt, StrictFloat, StrictStr], BeforeValidator(_scalar)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class Metric(_Model):
    name: str = Field(min_length=1)
    mode: Literal["min", "max"] = "min"


class Choice(_Model):
    """A set of values; ``[a, b]`` in a spec is short for ``{type: choice, values: [a, b]}``."""

    type: Literal["choice"] = "choice"
    values: list[ChoiceValue]

    @field_validator("values")
    @classmethod
    def _not_empty(cls, values: list[Any]) -> list[Any]:
        if not values:
            raise ValueError("must not be empty")
        return values


class _Range(_Model):
    @model_validator(mode="after")
    def _ordered(self) -> _Range:
        low, high = self.low, self.high  # type: ignore[attr-defined]
        if low >= high:
            raise _Problems([(("low",), f"must be less than high (got low={low}, high={high})")])
        return self


class Uniform(_Range):
    type: Literal["uniform"] = "uniform"
    low: Finite
    high: Finite


class LogUniform(_Range):
    type: Literal["loguniform"] = "loguniform"
    low: Finite
    high: Finite

    @field_validator("low")
    @classmethod
    def _positive(cls, low: float) -> float:
        if low <= 0:
            raise ValueError(f"must be greater than 0 for loguniform (got {low})")
        return low


class IntRange(_Range):
    """Integers ``low, low+step, ...`` up to ``high`` inclusive."""

    type: Literal["int"] = "int"
    low: int
    high: int
    step: int = Field(default=1, ge=1)


def _short_form(value: object) -> object:
    if isinstance(value, list):
        if not value:
            raise ValueError("must list at least one value")
        return {"type": "choice", "values": value}
    if not isinstance(value, (Mapping, BaseModel)):
        raise ValueError(f"must be a list of values or a mapping with a type (got {value!r})")
    return value


Param = Annotated[Union[Choice, Uniform, LogUniform, IntRange], Field(discriminator="type"), BeforeValidator(_short_form)]
PARAM_TYPES = ("choice", "uniform", "loguniform", "int")


class GridStrategy(_Model):
    """Every combination in order (first space key slowest), the first ``max_trials`` of them."""

    type: Literal["grid"] = "grid"
    max_trials: int | None = Field(default=None, ge=1)


class RandomStrategy(_Model):
    """``trials`` independent samples; ``seed`` makes them reproducible."""

    type: Literal["random"] = "random"
    trials: int = Field(ge=1)
    seed: int = 0


Strategy = Annotated[Union[GridStrategy, RandomStrategy], Field(discriminator="type")]
STRATEGY_TYPES = ("grid", "random")


class Retries(_Model):
    max_failures: int = Field(default=3, ge=0)  # 3 means up to 4 attempts


class Resources(_Model):
    gpus: int = Field(default=1, ge=0)
    resource_class: str = Field(default="gpu", alias="class", min_length=1)  # routes trials to agents serving it


def _split_command(value: object) -> object:
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as e:
            raise ValueError(f"cannot split into arguments: {e} (got {value!r})") from e
    return value


class SweepSpec(_Model):
    name: str
    command: Annotated[list[str], BeforeValidator(_split_command)]
    metric: Metric
    space: dict[str, Param] = Field(default_factory=dict)
    strategy: Strategy = Field(default_factory=GridStrategy)
    max_concurrent: int = Field(default=20, ge=1)
    trial_name: str = "{name}_{index:04d}"
    repeats: int = Field(default=1, ge=1)
    retries: Retries = Field(default_factory=Retries)
    resources: Resources = Field(default_factory=Resources)
    env: dict[str, str] = Field(default_factory=dict)
    priority: int = Field(default=0, ge=0, le=9)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise ValueError(f"must be 1-100 letters, digits, '-', '_' or '.', starting with a letter or digit (got {name!r})")
        return name

    @field_validator("command")
    @classmethod
    def _not_empty(cls, command: list[str]) -> list[str]:
        if not command:
            raise ValueError("must not be empty")
        return command

    @model_validator(mode="after")
    def _consistent(self) -> SweepSpec:
        """Checks across fields: parameter names, templates, strategy against space."""
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for key, param in self.space.items():
            if key in BUILTINS:
                problems.append((("space", key), f"reserved name; {', '.join(BUILTINS)} are built in"))
            elif not _PARAM.fullmatch(key):
                problems.append((("space", key), f"must be letters, digits, '_' or '-', not starting with a digit (got {key!r})"))
            if key == "seed" and self.repeats > 1:
                problems.append((("space", "seed"), f"cannot be a parameter when repeats > 1 (got repeats={self.repeats}); each repeat sets seed"))
            if self.strategy.type == "grid" and isinstance(param, (Uniform, LogUniform)):
                problems.append((("space", key), GRID_CONTINUOUS.format(kind=param.type)))
        samples = self._samples()
        command_samples = {k: v for k, v in samples.items() if k != "name"}
        for i, arg in enumerate(self.command):
            problems += [(("command", i), m) for m in check_template(arg, command_samples)]
        name_samples = {k: v for k, v in samples.items() if k != "trial_name"}
        problems += [(("trial_name",), m) for m in check_template(self.trial_name, name_samples)]
        problems += [(("env", k), f"not a valid environment variable name (got {k!r})") for k in self.env if not _ENV.fullmatch(k)]
        if problems:
            raise _Problems(problems)
        return self

    def _samples(self) -> dict[str, list[Any]]:
        """Values each template field can take: every choice, range bounds, built-ins."""
        samples: dict[str, list[Any]] = {"index": [0], "name": [self.name], "trial_name": [self.name]}
        for key, param in self.space.items():
            samples[key] = list(param.values) if isinstance(param, Choice) else [param.low, param.high]
        if self.repeats > 1:
            samples["seed"] = [0]
        return samples

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-ready dict that :func:`parse_spec` turns back into an equal spec."""
        return self.model_dump(mode="json", by_alias=True)


def parse_spec(data: object) -> SweepSpec:
    """Validate decoded data (a dict from YAML, JSON or a message body) into a spec."""
    _require_mapping(data, "")
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as e:
        raise _translate(e) from e


def load_spec(text: str | bytes, source: str = "<spec>") -> SweepSpec:
    """Parse YAML or JSON text (JSON is YAML) into a spec; ``source`` names it in errors."""
    data = yaml_load(text, source)
    _require_mapping(data, f"{source}: ")
    return parse_spec(data)


def _require_mapping(data: object, prefix: str) -> None:
    if not isinstance(data, Mapping):
        got = "an empty document" if data is None else type(data).__name__
        raise SpecError([("", f"{prefix}top level must be a mapping (got {got})")])


def load_spec_file(path: str | Path) -> SweepSpec:
    """Read and parse a spec file; a missing or unreadable file is a SpecError naming it."""
    try:
        text = Path(path).read_bytes()
    except FileNotFoundError as e:
        raise SpecError([("", f"{path}: no such file")]) from e
    except OSError as e:
        raise SpecError([("", f"{path}: cannot read: {e.strerror or e}")]) from e
    return load_spec(text, source=str(path))


def spec_json_schema() -> dict[str, Any]:
    """JSON Schema of the spec's long form (a list is also accepted for a choice)."""
    return SweepSpec.model_json_schema(by_alias=True)


class _Loader(yaml.SafeLoader):
    """safe_load, plus two fixes for specs: YAML 1.2 floats and no duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # PyYAML keeps the last of two equal keys; a repeated `lr:` in space is a mistake.
        seen: set[Any] = set()
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if not isinstance(key, (str, int, float, bool)):
                continue  # exotic keys: the model refuses them with a better message
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 reads 1e-4 and 1.0e4 (no dot, or unsigned exponent) as strings; 1.2 and JSON read floats.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def yaml_load(text: str | bytes, source: str = "<spec>") -> object:
    """Decode YAML (or JSON) text; a syntax error is a SpecError with line and column."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError([("", f"{source}: YAML syntax error{where}: {e.problem or e.context}")]) from e
    except yaml.YAMLError as e:  # reader errors: bad encoding, control characters
        raise SpecError([("", f"{source}: cannot read as YAML: {e}")]) from e


def _translate(error: ValidationError) -> SpecError:
    """pydantic's errors as (dotted path the user wrote, message naming the value)."""
    out: list[tuple[str, str]] = []
    for err in error.errors():
        loc, tag = _strip_tag(err["loc"])
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, _Problems):
            out += [(_path(loc + rel), msg) for rel, msg in cause.errors]
        else:
            extra, msg = _message(err, loc, tag)
            out.append((_path(loc + extra), msg))
    return SpecError(out)


def _strip_tag(loc: tuple[str | int, ...]) -> tuple[tuple[str | int, ...], str | None]:
    """Drop the union tag pydantic puts in paths: space.x.uniform.low -> space.x.low."""
    if len(loc) >= 3 and loc[0] == "space" and loc[2] in PARAM_TYPES:
        return loc[:2] + loc[3:], str(loc[2])
    if len(loc) >= 2 and loc[0] == "strategy" and loc[1] in STRATEGY_TYPES:
        return loc[:1] + loc[2:], str(loc[1])
    return loc, None


def _message(err: Any, loc: tuple[str | int, ...], tag: str | None) -> tuple[tuple[str, ...], str]:
    kind, value = err["type"], err.get("input")
    expected = ", ".join(STRATEGY_TYPES if loc[:1] == ("strategy",) else PARAM_TYPES)
    if kind == "extra_forbidden":
        return (), "unknown key"
    if kind == "missing":
        if tag is None:
            return (), "required"
        return (), f"required for strategy {tag}" if loc[0] == "strategy" else f"required for type {tag}"
    if kind == "union_tag_invalid":
        return ("type",), f"unknown type {err['ctx']['tag']!r} (expected one of: {expected})"
    if kind == "union_tag_not_found":
        return ("type",), f"required (one of: {expected})"
    if kind == "value_error":
        return (), str(err["ctx"]["error"])
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return (), f"must be a mapping (got {_short(value)})"
    return (), f"{err['msg']} (got {_short(value)})"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _path(loc: tuple[str | int, ...]) -> str:
    """('space', 'lr', 'values', 0) -> 'space.lr.values[0]'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
