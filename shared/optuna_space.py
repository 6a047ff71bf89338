"""The spec's space as Optuna distributions, and Optuna's params back as the
spec's values, exactly.

* ``choice`` -> ``CategoricalDistribution`` over the value *positions*
  ``0..n-1``: Optuna finds a choice with ``list.index``, for which ``1``,
  ``1.0`` and ``True`` are one value; positions keep them apart, and the
  values keep their types (int, float, bool, str) on the way back.
* ``uniform`` / ``loguniform`` -> ``FloatDistribution`` (``log=True``).
* ``int`` with ``step`` -> ``IntDistribution(low, last reachable, step)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from spotsweep.shared.spec_params import Choice, IntRange, LogUniform, Param, Uniform


def distribution(param: Param) -> BaseDistribution:
    if isinstance(param, Choice):
        return CategoricalDistribution(list(range(len(param.values))))
    if isinstance(param, IntRange):
        last = param.low + (param.high - param.low) // param.step * param.step
        return IntDistribution(param.low, last, step=param.step)
    if isinstance(param, LogUniform):
        return FloatDistribution(param.low, param.high, log=True)
    assert isinstance(param, Uniform)
    return FloatDistribution(param.low, param.high)


def distributions(space: Mapping[str, Param]) -> dict[str, BaseDistribution]:
    return {key: distribution(param) for key, param in space.items()}


def _position(param: Choice, value: Any) -> int:
    for i, choice in enumerate(param.values):
        if type(choice) is type(value) and choice == value:
            return i
    raise ValueError(f"{value!r} is not one of the choices {param.values!r}")


def to_optuna(space: Mapping[str, Param], params: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's params (as stored) in Optuna's terms; keys outside ``space`` (seed, budget) dropped."""
    out: dict[str, Any] = {}
    for key, param in space.items():
        value = params[key]
        if isinstance(param, Choice):
            out[key] = _position(param, value)
        elif isinstance(param, IntRange):
            out[key] = int(value)
        else:
            out[key] = float(value)
    return out


def from_optuna(space: Mapping[str, Param], params: Mapping[str, Any]) -> dict[str, Any]:
    """Optuna's suggestion as the spec's values, in the space's order and types."""
    out: dict[str, Any] = {}
    for key, param in space.items():
        value = params[key]
        if isinstance(param, Choice):
            out[key] = param.values[int(value)]
        elif isinstance(param, IntRange):
            out[key] = int(value)
        else:
            out[key] = float(value)
    return out
