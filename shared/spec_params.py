"""The space's parameter types (choice, uniform, loguniform, int) and what one
parameter holds: its levels, the value at a level, a random draw.

A leaf of the spec: it builds on :mod:`.spec_base` only, so the strategy
plugins (:mod:`.spec_search`), the spec's models and :mod:`.space` all import
it and none of them imports back. Import the types from
:mod:`spotsweep.shared.spec`, the public face.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, Field, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic import field_validator, model_validator

from spotsweep.shared.errors import SpecError
from spotsweep.shared.spec_base import Finite, _Model, _Problems

GRID_CONTINUOUS = "{kind} range cannot be enumerated by strategy grid; use strategy random or list the values"


def _scalar(value: object) -> object:
    if not isinstance(value, (bool, int, float, str)):
        raise ValueError(f"must be a number, string or bool (got {value!r})")
    if isinstance(value, float) and not math.isfinite(value):
        # a param must survive JSON (PostgreSQL, argv, SPOTSWEEP_PARAMS)
        raise ValueError(f"must be a finite number (got {value!r})")
    return value


# bool first: smart-mode unions keep the input's exact type (True stays bool, 1 stays int).
ChoiceValue = Annotated[Union[StrictBool, StrictInt, StrictFloat, StrictStr], BeforeValidator(_scalar)]


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


def int_count(param: IntRange) -> int:
    """Integers in the range: ``low, low+step, ...`` up to ``high``."""
    return (param.high - param.low) // param.step + 1


def levels(key: str, param: Param) -> int:
    """Values a grid takes for ``param``; a continuous range has none: SpecError naming ``key``."""
    if isinstance(param, Choice):
        return len(param.values)
    if isinstance(param, IntRange):
        return int_count(param)
    raise SpecError([(f"space.{key}", GRID_CONTINUOUS.format(kind=param.type))])


def value_at(param: Param, level: int) -> Any:
    """The value at ``level`` (0-based) of a choice or an int range."""
    if isinstance(param, Choice):
        return param.values[level]
    assert isinstance(param, IntRange)  # levels() refused the continuous kinds
    return param.low + level * param.step


def grid_size(space: Mapping[str, Param]) -> int:
    """Number of grid points: the product of choice counts and int-range sizes.

    An empty space has one point (no parameters). A continuous parameter has
    no grid: SpecError naming it.
    """
    return math.prod(levels(key, param) for key, param in space.items())


def sample(rng: random.Random, param: Param) -> Any:
    """One independent draw from ``param`` (log-uniform on a log scale)."""
    if isinstance(param, Choice):
        return param.values[rng.randrange(len(param.values))]
    if isinstance(param, IntRange):
        return param.low + param.step * rng.randrange(int_count(param))
    if isinstance(param, LogUniform):
        value = math.exp(rng.uniform(math.log(param.low), math.log(param.high)))
        return min(max(value, param.low), param.high)  # exp(log(x)) can round past a bound
    assert isinstance(param, Uniform)
    return rng.uniform(param.low, param.high)
